//! `GET /runs/{id}/values/{sha256}`: a large value of the run, served from the
//! artifact store to the run's own tenant when the run refers to it (see
//! [`crate::ValueRef`]).

use axum::body::Body;
use axum::extract::State;
use axum::response::Response;
use http::{HeaderValue, StatusCode, header};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use siesta::ports::StoreError;
use siesta::*;

use crate::auth::Tenant;
use crate::error::ApiError;
use crate::extract::ApiPath;
use crate::state::AppState;
use crate::values::as_artifact;

/// Timeline pages read while looking for a reference (1 000 events each).
const TIMELINE_PAGE: usize = 1000;

/// The reference to the run's own artifact `expected` (its digest and the location
/// the artifact store gives it) inside `v`. Inline values (`{"inline": ...}`, a run's
/// input, an event's body, an operator's value) are the caller's own JSON and are not
/// searched, and a reference elsewhere at any other location is ignored: a caller who
/// writes a reference-shaped object must not choose what the store reads.
fn find_artifact(v: &serde_json::Value, expected: &Expected) -> Option<ArtifactRef> {
    if let Some(a) = as_artifact(v) {
        return (a.sha256 == expected.sha256 && a.location == expected.location).then_some(a);
    }
    match v {
        serde_json::Value::Object(o) if is_inline(o) => None,
        serde_json::Value::Object(o) => o.values().find_map(|v| find_artifact(v, expected)),
        serde_json::Value::Array(a) => a.iter().find_map(|v| find_artifact(v, expected)),
        _ => None,
    }
}

/// `{"inline": value}`: a [`Payload::Inline`] as it serializes (also capitalised, as
/// the timeline's details name it).
fn is_inline(o: &serde_json::Map<String, serde_json::Value>) -> bool {
    o.len() == 1 && (o.contains_key("inline") || o.contains_key("Inline"))
}

/// The reference a run may serve: its digest, at the location the artifact store mints
/// for the caller's tenant, the run and that digest.
struct Expected {
    sha256: String,
    location: String,
}

fn in_json<T: Serialize>(item: &T, expected: &Expected) -> Option<ArtifactRef> {
    serde_json::to_value(item)
        .ok()
        .and_then(|v| find_artifact(&v, expected))
}

impl AppState {
    /// The reference with digest `sha256` that `run` makes: in the run itself (input,
    /// output), its journal and deliveries, or its timeline (artifacts it put).
    async fn run_artifact(
        &self,
        tenant: &TenantId,
        run: &Run,
        sha256: &str,
    ) -> Result<Option<ArtifactRef>, ApiError> {
        let backend = self.engine.backend();
        let expected = Expected {
            sha256: sha256.to_owned(),
            location: backend.artifacts.location(tenant, &run.id, sha256),
        };
        if let Some(a) = in_json(run, &expected) {
            return Ok(Some(a));
        }
        let store = &backend.store;
        let input = store.load_replay_input(tenant, &run.id).await?;
        let found = input
            .journal
            .iter()
            .find_map(|e| in_json(e, &expected))
            .or_else(|| input.deliveries.iter().find_map(|d| in_json(d, &expected)));
        if found.is_some() {
            return Ok(found);
        }
        let mut after = 0;
        loop {
            let events = store
                .timeline(tenant, &run.id, after, TIMELINE_PAGE)
                .await?;
            if let Some(a) = events
                .iter()
                .find_map(|e| find_artifact(&e.details, &expected))
            {
                return Ok(Some(a));
            }
            match events.last() {
                Some(last) if events.len() == TIMELINE_PAGE => after = last.seq,
                _ => return Ok(None),
            }
        }
    }
}

/// The run's id and the value's digest.
#[derive(Debug, Deserialize)]
pub(crate) struct ValuePath {
    id: String,
    sha256: String,
}

/// A large value of the run (an input, output, step result or delivery kept in the
/// artifact store; also an artifact the run put), fetched from the artifact store. The
/// run view and the timeline refer to it as `{"value_ref": {"sha256", "size",
/// "media_type", "href"}}`.
#[utoipa::path(
    get, path = "/runs/{id}/values/{sha256}", operation_id = "getRunValue", tag = "runs",
    security(("bearer" = [])),
    params(
        ("id" = String, Path, description = "The run's id"),
        ("sha256" = String, Path, description = "The value's digest (its `value_ref.sha256`)"),
    ),
    responses(
        (status = 200, description = "The value's bytes, in its media type (`application/json` for values)",
            body = serde_json::Value, content_type = "application/json",
            headers(("ETag" = String, description = "The digest: the content never changes"))),
        crate::responses::ValueErrors,
    )
)]
pub(crate) async fn get_run_value(
    State(app): State<AppState>,
    Tenant(tenant): Tenant,
    ApiPath(path): ApiPath<ValuePath>,
) -> Result<Response, ApiError> {
    if path.sha256.len() != 64
        || !path
            .sha256
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    {
        return Err(ApiError::bad_request(
            "a value is named by its SHA-256: 64 lower-case hex digits",
        ));
    }
    let run = app
        .engine
        .get_run(&tenant, &RunId::from(path.id.as_str()))
        .await?;
    let artifact = app
        .run_artifact(&tenant, &run, &path.sha256)
        .await?
        .ok_or_else(|| ApiError::not_found("value"))?;
    let bytes = app
        .engine
        .backend()
        .artifacts
        .get(&artifact)
        .await
        .map_err(|e| match e {
            StoreError::NotFound => ApiError::not_found("value"),
            other => other.into(),
        })?;
    if hex::encode(Sha256::digest(&bytes)) != artifact.sha256 {
        return Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "the artifact store holds other content under this digest",
        ));
    }
    let mut response = Response::new(Body::from(bytes));
    let headers = response.headers_mut();
    let media_type = HeaderValue::from_str(&artifact.media_type)
        .unwrap_or(HeaderValue::from_static("application/octet-stream"));
    headers.insert(header::CONTENT_TYPE, media_type);
    if let Ok(etag) = HeaderValue::from_str(&format!("\"{}\"", artifact.sha256)) {
        headers.insert(header::ETAG, etag);
    }
    // Content-addressed: the bytes under this digest never change.
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("private, max-age=31536000, immutable"),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    Ok(response)
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::values::show_refs;
    use serde_json::json;

    fn artifact(sha: &str) -> serde_json::Value {
        json!({"sha256": sha, "size": 40000, "media_type": "application/json", "location": "t/r/x"})
    }

    #[test]
    fn an_object_with_other_keys_is_not_a_reference() {
        let mut details =
            json!({"sha256": "aa", "size": 1, "media_type": "x", "location": "y", "more": 1});
        let before = details.clone();
        show_refs("r", &mut details);
        assert_eq!(details, before);
        assert!(find_artifact(&before, &expected("aa", "y")).is_none());
    }

    fn expected(sha256: &str, location: &str) -> Expected {
        Expected {
            sha256: sha256.into(),
            location: location.into(),
        }
    }

    #[test]
    fn a_reference_is_found_by_its_digest_at_the_run_s_own_location_only() {
        let v = json!({"journal": [{"state": {"artifact": artifact("aa")}}, artifact("bb")]});
        assert_eq!(
            find_artifact(&v, &expected("bb", "t/r/x")).unwrap().sha256,
            "bb"
        );
        assert_eq!(
            find_artifact(&v, &expected("aa", "t/r/x"))
                .unwrap()
                .location,
            "t/r/x"
        );
        assert!(find_artifact(&v, &expected("cc", "t/r/x")).is_none());
        // Same digest, another run's or tenant's location (also one that merely starts
        // with the expected one): not this run's.
        assert!(find_artifact(&v, &expected("aa", "t/r/x/")).is_none());
        assert!(find_artifact(&v, &expected("aa", "t/r")).is_none());
    }

    #[test]
    fn references_inside_inline_values_are_not_searched() {
        let v = json!({"input": {"inline": {"x": artifact("aa")}}, "Body": {"Inline": [artifact("aa")]}});
        assert!(find_artifact(&v, &expected("aa", "t/r/x")).is_none());
    }
}
