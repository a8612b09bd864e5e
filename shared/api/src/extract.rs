//! What the handlers take from a request, each refusing bad input with our JSON error:
//! the body (bounded in size and in the time it may take to arrive), JSON, the path and
//! query, and the headers the API defines (`Idempotency-Key`, `If-Match`, `Prefer`).

use std::time::Duration;

use axum::extract::{FromRequest, FromRequestParts, Request};
use bytes::Bytes;
use http::StatusCode;
use http::request::Parts;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use serde::de::DeserializeOwned;
use utoipa::IntoParams;
use utoipa::openapi::Required;
use utoipa::openapi::path::{Parameter, ParameterBuilder, ParameterIn};
use utoipa::openapi::schema::{ObjectBuilder, SchemaType, Type};

use crate::ApiError;
use crate::auth::Tenant;
use crate::server::BodyTimedOut;
use crate::state::AppState;

/// The longest `Prefer: wait=N` honoured.
pub const MAX_WAIT: Duration = Duration::from_secs(60);

/// Read a body of at most `limit` bytes. A body the transport gave up waiting for
/// ([`BodyTimedOut`]) is a 408.
pub(crate) async fn read_body(body: axum::body::Body, limit: usize) -> Result<Bytes, ApiError> {
    match Limited::new(body, limit).collect().await {
        Ok(c) => Ok(c.to_bytes()),
        Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => Err(too_large(limit)),
        Err(e) => {
            let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e.as_ref());
            while let Some(c) = cause {
                if let Some(timed_out) = c.downcast_ref::<BodyTimedOut>() {
                    return Err(ApiError::new(
                        StatusCode::REQUEST_TIMEOUT,
                        "request_timeout",
                        timed_out.to_string(),
                    ));
                }
                cause = c.source();
            }
            Err(ApiError::bad_request(format!(
                "the body could not be read: {e}"
            )))
        }
    }
}

pub(crate) fn too_large(limit: usize) -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "payload_too_large",
        format!("the body is over the limit of {limit} bytes"),
    )
}

/// The raw body of a control-API request, within the API's size and time limits.
pub(crate) struct ApiBody(pub Bytes);

impl FromRequest<AppState> for ApiBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        read_body(req.into_body(), state.max_body)
            .await
            .map(ApiBody)
    }
}

/// A JSON body; an empty body is `T::default()` when `OPTIONAL`, a 400 otherwise.
pub(crate) struct JsonBody<T, const OPTIONAL: bool = false>(pub T);

impl<T: DeserializeOwned + Default, const OPTIONAL: bool> FromRequest<AppState>
    for JsonBody<T, OPTIONAL>
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        let ApiBody(bytes) = ApiBody::from_request(req, state).await?;
        if OPTIONAL && bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(JsonBody(T::default()));
        }
        json(&bytes).map(JsonBody)
    }
}

/// A JSON object body read into `T`: anything but an object (`OPTIONAL`: or `null`, or
/// empty, which are `T::default()`) is a 400. serde reads a struct from an array too
/// (`["chain", 0]` as `{"workflow": "chain", "input": 0}`), which the document does
/// not allow and a client never means.
pub(crate) struct JsonObject<T, const OPTIONAL: bool = false>(pub T);

impl<T: DeserializeOwned + Default, const OPTIONAL: bool> FromRequest<AppState>
    for JsonObject<T, OPTIONAL>
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        let JsonBody(value) =
            JsonBody::<serde_json::Value, OPTIONAL>::from_request(req, state).await?;
        object(value, OPTIONAL).map(JsonObject)
    }
}

/// `value` as `T` when it is an object (or, when `optional`, null: `T::default()`).
pub(crate) fn object<T: DeserializeOwned + Default>(
    value: serde_json::Value,
    optional: bool,
) -> Result<T, ApiError> {
    match value {
        serde_json::Value::Null if optional => Ok(T::default()),
        value @ serde_json::Value::Object(_) => serde_json::from_value(value)
            .map_err(|e| ApiError::bad_request(format!("malformed JSON body: {e}"))),
        _ => Err(ApiError::bad_request("the body must be a JSON object")),
    }
}

/// The `after` of a timeline page: a sequence number, which the stores keep as a signed
/// 64-bit integer (the document's `int64`).
pub(crate) fn sequence_after(after: Option<u64>) -> Result<u64, ApiError> {
    match after {
        Some(a) if a > i64::MAX as u64 => Err(ApiError::bad_request(format!(
            "after must be at most {}",
            i64::MAX
        ))),
        a => Ok(a.unwrap_or(0)),
    }
}

pub(crate) fn json<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("malformed JSON body: {e}")))
}

/// Path parameters, a 400 (not axum's plain text) when they do not parse.
pub(crate) struct ApiPath<T>(pub T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for ApiPath<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|p| ApiPath(p.0))
            .map_err(|e| ApiError::bad_request(e.body_text()))
    }
}

/// Query parameters, a 400 naming the parameter when one does not parse.
pub(crate) struct ApiQuery<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|q| ApiQuery(q.0))
            .map_err(|e| ApiError::bad_request(e.body_text()))
    }
}

/// A page size from `limit`: `default` when absent, a 400 outside `1..=max` (what the
/// document says), rather than quietly clamped.
pub(crate) fn page_size(limit: Option<u32>, default: u32, max: u32) -> Result<usize, ApiError> {
    match limit {
        None => Ok(default as usize),
        Some(l) if (1..=max).contains(&l) => Ok(l as usize),
        Some(l) => Err(ApiError::bad_request(format!(
            "limit must be 1 to {max}, not {l}"
        ))),
    }
}

fn header<'a>(parts: &'a Parts, name: &str) -> Result<Option<&'a str>, ApiError> {
    parts
        .headers
        .get(name)
        .map(|v| {
            v.to_str()
                .map_err(|_| ApiError::bad_request(format!("{name} is not valid text")))
        })
        .transpose()
}

/// `Idempotency-Key`, if sent.
pub(crate) struct IdempotencyKey(pub Option<String>);

impl<S: Send + Sync> FromRequestParts<S> for IdempotencyKey {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        Ok(IdempotencyKey(
            header(parts, "idempotency-key")?.map(str::to_owned),
        ))
    }
}

/// The run version named by `If-Match` (its ETag), if sent.
pub(crate) struct IfMatch(pub Option<u64>);

impl<S: Send + Sync> FromRequestParts<S> for IfMatch {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        header(parts, "if-match")?
            .map(|v| {
                v.trim()
                    .trim_start_matches("W/")
                    .trim_matches('"')
                    .parse::<u64>()
                    .map_err(|_| ApiError::bad_request("If-Match must be a run version (its ETag)"))
            })
            .transpose()
            .map(IfMatch)
    }
}

/// The header as the OpenAPI document describes it, once for every route that reads it.
impl IntoParams for IfMatch {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        vec![
            ParameterBuilder::new()
                .name("If-Match")
                .parameter_in(ParameterIn::Header)
                .required(Required::False)
                .description(Some("The run's ETag; 412 when it changed since"))
                .schema(Some(
                    ObjectBuilder::new()
                        .schema_type(SchemaType::from_iter([Type::String, Type::Null])),
                ))
                .build(),
        ]
    }
}

/// `Prefer: wait=N` (RFC 7240), capped at [`MAX_WAIT`]; `None` without it.
pub(crate) struct PreferWait(pub Option<Duration>);

impl<S: Send + Sync> FromRequestParts<S> for PreferWait {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        header(parts, "prefer")?
            .map_or(Ok(None), parse_prefer_wait)
            .map(PreferWait)
    }
}

fn parse_prefer_wait(prefer: &str) -> Result<Option<Duration>, ApiError> {
    for pref in prefer.split(',') {
        if let Some(n) = pref.trim().strip_prefix("wait=") {
            let secs: u64 = n
                .trim()
                .parse()
                .map_err(|_| ApiError::bad_request("Prefer: wait=N takes whole seconds"))?;
            return Ok(Some(Duration::from_secs(secs).min(MAX_WAIT)));
        }
    }
    Ok(None)
}

impl FromRequestParts<AppState> for Tenant {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let tenant = state.auth.authenticate(parts)?;
        tracing::Span::current().record("tenant", tracing::field::display(&tenant));
        Ok(Tenant(tenant))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_size_outside_the_documented_range_is_refused_not_clamped() {
        assert_eq!(page_size(None, 50, 200).unwrap(), 50);
        assert_eq!(page_size(Some(200), 50, 200).unwrap(), 200);
        for bad in [0, 201] {
            let e = page_size(Some(bad), 50, 200).unwrap_err();
            assert_eq!(e.status, StatusCode::BAD_REQUEST, "{bad}");
        }
    }

    #[test]
    fn only_an_object_is_read_into_a_struct_body() {
        #[derive(Debug, Default, serde::Deserialize, PartialEq)]
        struct Body {
            #[serde(default)]
            code: Option<String>,
        }
        let body: Body = object(serde_json::json!({"code": "x"}), false).unwrap();
        assert_eq!(body.code.as_deref(), Some("x"));
        assert_eq!(
            object::<Body>(serde_json::Value::Null, true).unwrap(),
            Body::default()
        );
        for bad in [
            serde_json::json!([]),
            serde_json::json!(["x"]),
            serde_json::json!(1),
        ] {
            let e = object::<Body>(bad.clone(), true).unwrap_err();
            assert_eq!(e.status, StatusCode::BAD_REQUEST, "{bad}");
        }
        assert!(object::<Body>(serde_json::Value::Null, false).is_err());
    }

    #[test]
    fn a_timeline_position_past_the_stores_range_is_refused() {
        assert_eq!(sequence_after(None).unwrap(), 0);
        assert_eq!(sequence_after(Some(7)).unwrap(), 7);
        assert!(sequence_after(Some(i64::MAX as u64 + 1)).is_err());
    }

    #[test]
    fn prefer_wait_is_read_among_other_preferences_and_capped() {
        assert_eq!(
            parse_prefer_wait("respond-async, wait=5").unwrap(),
            Some(Duration::from_secs(5))
        );
        assert_eq!(parse_prefer_wait("wait=3600").unwrap(), Some(MAX_WAIT));
        assert_eq!(parse_prefer_wait("return=minimal").unwrap(), None);
        assert!(parse_prefer_wait("wait=soon").is_err());
    }
}
