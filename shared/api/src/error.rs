//! One error type for the API, mapped to a status and `{"error": {"code", "message"}}`
//! in one place. Only the caller's own mistakes are 4xx; storage that is exhausted,
//! failing or too slow is 503 with `Retry-After`, so a client retries instead of giving
//! up on a request that was fine.

use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode, header};
use siesta::EngineError;
use siesta::ports::StoreError;

/// Seconds a client is asked to wait before retrying a 503.
pub const RETRY_AFTER_SECS: u64 = 1;

/// An API error: what the caller did wrong, or what went wrong here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// Stable machine-readable code.
    pub code: &'static str,
    /// What happened, for a person.
    pub message: String,
    /// Seconds to wait before trying again (`Retry-After`), when the answer says (a
    /// 429 over a quota; every 503 says [`RETRY_AFTER_SECS`]).
    pub retry_after: Option<u64>,
    /// Where the run's journal and this build's code part ways (a 409 `diverged`).
    pub divergence: Option<siesta::Divergence>,
}

impl ApiError {
    /// An error with this status, code and message.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
            retry_after: (status == StatusCode::SERVICE_UNAVAILABLE).then_some(RETRY_AFTER_SECS),
            divergence: None,
        }
    }

    /// 429: the caller's tenant reached `quota`; nothing was recorded. The message
    /// names the limit, `Retry-After` says when trying again may succeed.
    pub fn over_quota(quota: &siesta::QuotaExceeded) -> Self {
        ApiError {
            retry_after: Some(quota.retry_after.as_millis().div_ceil(1000).max(1) as u64),
            ..ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "quota_exceeded",
                quota.to_string(),
            )
        }
    }

    /// 400: the request is malformed.
    pub fn bad_request(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }

    /// 404: no such thing for this caller.
    pub fn not_found(what: &str) -> Self {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("{what} not found"),
        )
    }

    /// `e` from an operation on a callback: [`EngineError::NotFound`] names the
    /// callback, not a run.
    pub(crate) fn on_callback(e: EngineError) -> Self {
        match e {
            EngineError::NotFound => ApiError::not_found("callback"),
            other => other.into(),
        }
    }

    /// 401: no credentials, or not valid ones.
    pub fn unauthorized(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
    }

    /// 503: not the caller's fault; trying again later may work.
    pub fn unavailable(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", message)
    }

    /// The JSON body of this error.
    pub fn body(&self) -> serde_json::Value {
        let mut error = serde_json::json!({"code": self.code, "message": self.message});
        if let Some(divergence) = &self.divergence {
            error["divergence"] = serde_json::json!(divergence);
        }
        serde_json::json!({ "error": error })
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, axum::Json(self.body())).into_response();
        if let Some(seconds) = self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        if self.status == StatusCode::REQUEST_TIMEOUT {
            // The body was not read to its end; the connection cannot be reused.
            response
                .headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        response
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound => ApiError::not_found("run"),
            // A record this side cannot read: not the caller's doing (a route where the
            // caller names the value, like a list cursor, maps it to 400 itself).
            StoreError::Invalid(m) => {
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", m)
            }
            StoreError::Gone(m) => ApiError::new(StatusCode::GONE, "gone", m),
            StoreError::Unavailable(_) => ApiError::unavailable(e.to_string()),
            // A conflict or duplicate the engine did not turn into an answer of its own:
            // the state moved under this request, which a retry re-reads.
            StoreError::Conflict(_) | StoreError::AlreadyExists => {
                ApiError::unavailable(format!("{e}; try again"))
            }
            StoreError::Unsupported(m) => {
                ApiError::new(StatusCode::NOT_IMPLEMENTED, "not_implemented", m)
            }
            StoreError::OverQuota(m) => ApiError::over_quota(&siesta::QuotaExceeded::new(
                siesta::QuotaLimit::UnfinishedRuns,
                m,
            )),
        }
    }
}

impl From<EngineError> for ApiError {
    fn from(e: EngineError) -> Self {
        match e {
            EngineError::NotFound => ApiError::not_found("run"),
            EngineError::UnknownWorkflow(w) => ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "unknown_workflow",
                format!("no workflow is registered as '{w}'"),
            ),
            EngineError::InvalidInput(m) => {
                ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_input", m)
            }
            EngineError::AlreadyExists => ApiError::new(
                StatusCode::CONFLICT,
                "already_exists",
                "a run with this id exists already",
            ),
            EngineError::VersionMismatch { current } => ApiError::new(
                StatusCode::PRECONDITION_FAILED,
                "version_mismatch",
                format!("If-Match does not match; the run is at version {current}"),
            ),
            EngineError::AlreadyFinished(status) => ApiError::new(
                StatusCode::CONFLICT,
                "already_finished",
                format!("the run is already {status}"),
            ),
            EngineError::DeliveryRejected(m) => {
                ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "delivery_rejected", m)
            }
            EngineError::Gone(m) => ApiError::new(StatusCode::GONE, "gone", m),
            EngineError::NotParked(status) => ApiError::new(
                StatusCode::CONFLICT,
                "not_parked",
                format!("only a parked or paused run can be resumed; this one is {status}"),
            ),
            EngineError::NothingToResolve(m) => {
                ApiError::new(StatusCode::CONFLICT, "nothing_to_resolve", m)
            }
            EngineError::QuotaExceeded(q) => ApiError::over_quota(&q),
            EngineError::Diverged(divergence) => ApiError {
                divergence: Some(divergence.clone()),
                ..ApiError::new(
                    StatusCode::CONFLICT,
                    "diverged",
                    format!("the run's journal does not replay on this build {divergence}"),
                )
            },
            EngineError::Leased => ApiError::new(
                StatusCode::CONFLICT,
                "busy",
                "the run is being worked on right now; try again when it waits",
            ),
            EngineError::WorkflowPaused(w) => ApiError::new(
                StatusCode::CONFLICT,
                "workflow_paused",
                format!("workflow {w} is paused: it takes no new start until resumed"),
            ),
            EngineError::Store(e) => e.into(),
        }
    }
}

/// The stable code of an error answer made by a layer below the handlers (body limit,
/// method filter), which speaks in statuses only.
pub(crate) fn code_of(status: StatusCode) -> &'static str {
    match status {
        StatusCode::BAD_REQUEST => "bad_request",
        StatusCode::UNAUTHORIZED => "unauthorized",
        StatusCode::NOT_FOUND => "not_found",
        StatusCode::METHOD_NOT_ALLOWED => "method_not_allowed",
        StatusCode::REQUEST_TIMEOUT => "request_timeout",
        StatusCode::PAYLOAD_TOO_LARGE => "payload_too_large",
        StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
        StatusCode::UNPROCESSABLE_ENTITY => "invalid_input",
        StatusCode::TOO_MANY_REQUESTS => "too_many_requests",
        StatusCode::SERVICE_UNAVAILABLE => "unavailable",
        s if s.is_client_error() => "bad_request",
        _ => "internal",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storage_that_is_unavailable_is_a_503_with_retry_after_never_a_4xx() {
        let e: ApiError =
            EngineError::Store(StoreError::Unavailable("database or disk is full".into())).into();
        assert_eq!(e.status, StatusCode::SERVICE_UNAVAILABLE);
        let response = e.into_response();
        assert_eq!(response.headers()[header::RETRY_AFTER], "1");
    }

    #[test]
    fn over_a_quota_is_a_429_naming_the_limit_with_when_to_retry() {
        let e: ApiError = EngineError::QuotaExceeded(siesta::QuotaExceeded {
            limit: siesta::QuotaLimit::StartRate,
            message: "tenant t may start 6 runs a minute".into(),
            retry_after: std::time::Duration::from_millis(9_200),
        })
        .into();
        assert_eq!(
            (e.status, e.code),
            (StatusCode::TOO_MANY_REQUESTS, "quota_exceeded")
        );
        assert!(e.message.contains("starts_per_minute"), "{}", e.message);
        let response = e.into_response();
        assert_eq!(response.headers()[header::RETRY_AFTER], "10");
    }

    #[test]
    fn a_write_that_lost_a_race_inside_the_store_is_retryable_not_the_callers_fault() {
        for e in [StoreError::Conflict(None), StoreError::AlreadyExists] {
            let name = format!("{e:?}");
            let status = ApiError::from(EngineError::Store(e)).status;
            assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{name}");
        }
    }
}
