//! Errors a workflow sees and returns.
//!
//! [`StepError`] is what a step's closure returns: retryable unless said otherwise
//! (so `?` on any error just works and is retried), or fatal. [`Error`] is what a
//! durable operation hands back to the workflow and what a workflow returns; it
//! round-trips through the journal unchanged, so a replayed failure is the same value
//! as the original one.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::model::ErrorInfo;

/// An error returned by a step's closure, classified retryable or fatal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepError(pub(crate) ErrorInfo);

impl StepError {
    /// An error of a named `kind`; `retryable` says whether another attempt may help.
    pub fn new(kind: impl Into<String>, message: impl Into<String>, retryable: bool) -> Self {
        StepError(ErrorInfo::new(kind, message, retryable))
    }

    /// A transient error (a timeout, a 429, a 5xx): retried by the step's policy.
    pub fn retryable(message: impl Into<String>) -> Self {
        StepError::new("retryable", message, true)
    }

    /// A permanent error (validation, permission, not found): never retried.
    pub fn fatal(message: impl Into<String>) -> Self {
        StepError::new("fatal", message, false)
    }

    /// A timeout: retryable.
    pub fn timeout(message: impl Into<String>) -> Self {
        StepError::new("timeout", message, true)
    }

    /// Classify an HTTP status: 408, 429 and 5xx are retryable, other 4xx fatal.
    pub fn from_http_status(status: u16, message: impl Into<String>) -> Self {
        let retryable = status == 408 || status == 429 || (500..600).contains(&status);
        StepError::new(format!("http_{status}"), message, retryable)
    }

    /// The error's kind.
    pub fn kind(&self) -> &str {
        &self.0.kind
    }

    /// Whether another attempt may succeed.
    pub fn is_retryable(&self) -> bool {
        self.0.retryable
    }

    /// The error as recorded in the journal.
    pub fn info(&self) -> &ErrorInfo {
        &self.0
    }
}

impl fmt::Display for StepError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Any standard error becomes a retryable step error, so `?` works in steps.
impl<E: std::error::Error + Send + Sync + 'static> From<E> for StepError {
    fn from(e: E) -> Self {
        StepError::new("error", e.to_string(), true)
    }
}

/// What went wrong, as a workflow can match on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ErrorKind {
    /// A step failed for good (fatal error or retries exhausted).
    StepFailed,
    /// A callback was completed with a failure.
    CallbackFailed,
    /// A callback's timeout or heartbeat timeout passed.
    CallbackTimedOut,
    /// A named event did not arrive before its timeout.
    EventTimedOut,
    /// A `wait_for_condition` ran out of checks.
    ConditionNotMet,
    /// A child context returned an error.
    ChildFailed,
    /// A run started with `invoke` failed.
    InvokeFailed,
    /// A `parallel` or `map` did not meet its completion rule.
    BatchFailed,
    /// A value could not be serialized or deserialized.
    Serialization,
    /// A backend call failed in a way the workflow must hear about (an artifact is
    /// missing).
    Storage,
    /// The workflow's own error.
    Workflow,
}

impl ErrorKind {
    /// The kind's stable name.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::StepFailed => "StepFailed",
            ErrorKind::CallbackFailed => "CallbackFailed",
            ErrorKind::CallbackTimedOut => "CallbackTimedOut",
            ErrorKind::EventTimedOut => "EventTimedOut",
            ErrorKind::ConditionNotMet => "ConditionNotMet",
            ErrorKind::ChildFailed => "ChildFailed",
            ErrorKind::InvokeFailed => "InvokeFailed",
            ErrorKind::BatchFailed => "BatchFailed",
            ErrorKind::Serialization => "Serialization",
            ErrorKind::Storage => "Storage",
            ErrorKind::Workflow => "Workflow",
        }
    }

    fn parse(s: &str) -> Option<ErrorKind> {
        [
            ErrorKind::StepFailed,
            ErrorKind::CallbackFailed,
            ErrorKind::CallbackTimedOut,
            ErrorKind::EventTimedOut,
            ErrorKind::ConditionNotMet,
            ErrorKind::ChildFailed,
            ErrorKind::InvokeFailed,
            ErrorKind::BatchFailed,
            ErrorKind::Serialization,
            ErrorKind::Storage,
            ErrorKind::Workflow,
        ]
        .into_iter()
        .find(|k| k.as_str() == s)
    }
}

/// The error of a durable operation, or of a workflow.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Error {
    kind: ErrorKind,
    message: String,
    cause: Option<ErrorInfo>,
}

impl Error {
    /// An error of `kind`; `cause` is the error underneath, when there is one.
    pub fn new(kind: ErrorKind, message: impl Into<String>, cause: Option<ErrorInfo>) -> Self {
        Error {
            kind,
            message: message.into(),
            cause,
        }
    }

    /// The workflow's own error.
    pub fn msg(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::Workflow, message, None)
    }

    /// What went wrong.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The error underneath (the last attempt's error of a failed step, the error a
    /// callback was failed with...).
    pub fn cause(&self) -> Option<&ErrorInfo> {
        self.cause.as_ref()
    }

    /// The error as recorded in the journal and shown by the API.
    pub fn to_info(&self) -> ErrorInfo {
        ErrorInfo {
            kind: self.kind.as_str().to_owned(),
            message: self.message.clone(),
            retryable: false,
            cause: self.cause.clone().map(Box::new),
        }
    }

    /// The error recorded as `info`; the inverse of [`Error::to_info`].
    pub fn from_info(info: &ErrorInfo) -> Self {
        match ErrorKind::parse(&info.kind) {
            Some(kind) => Error {
                kind,
                message: info.message.clone(),
                cause: info.cause.as_deref().cloned(),
            },
            None => Error {
                kind: ErrorKind::Workflow,
                message: info.to_string(),
                cause: Some(info.clone()),
            },
        }
    }

    pub(crate) fn serde(e: impl fmt::Display) -> Self {
        Error::new(ErrorKind::Serialization, e.to_string(), None)
    }
}

impl From<serde_json::Error> for Error {
    fn from(e: serde_json::Error) -> Self {
        Error::serde(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_statuses_are_classified() {
        for s in [408, 429, 500, 502, 503, 599] {
            assert!(StepError::from_http_status(s, "x").is_retryable(), "{s}");
        }
        for s in [400, 401, 403, 404, 409, 422] {
            assert!(!StepError::from_http_status(s, "x").is_retryable(), "{s}");
        }
    }

    #[test]
    fn standard_errors_are_retryable_by_default() {
        let e: StepError = std::io::Error::other("boom").into();
        assert!(e.is_retryable());
        assert!(!StepError::fatal("no").is_retryable());
    }

    #[test]
    fn error_round_trips_through_its_journal_form() {
        let cause = ErrorInfo::new("http_503", "unavailable", true);
        let e = Error::new(ErrorKind::StepFailed, "step charge failed", Some(cause));
        assert_eq!(Error::from_info(&e.to_info()), e);
        let foreign = ErrorInfo::new("validation", "bad input", false);
        assert_eq!(Error::from_info(&foreign).kind(), ErrorKind::Workflow);
    }
}
