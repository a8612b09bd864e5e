//! One error type for the API, mapped to a status and `{"error": {"code", "message"}}`
//! in one place.

use http::StatusCode;
use siesta::EngineError;
use siesta::ports::StoreError;

/// An API error: what the caller did wrong, or what went wrong here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// Stable machine-readable code.
    pub code: &'static str,
    /// What happened, for a person.
    pub message: String,
}

impl ApiError {
    /// An error with this status, code and message.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
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

    /// The JSON body of this error.
    pub fn body(&self) -> serde_json::Value {
        serde_json::json!({"error": {"code": self.code, "message": self.message}})
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
                format!("only a parked run can be resumed; this one is {status}"),
            ),
            EngineError::NothingToResolve(m) => {
                ApiError::new(StatusCode::CONFLICT, "nothing_to_resolve", m)
            }
            EngineError::Store(StoreError::NotFound) => ApiError::not_found("run"),
            EngineError::Store(e) if e.is_retryable() => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                e.to_string(),
            ),
            EngineError::Store(e) => {
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string())
            }
        }
    }
}
