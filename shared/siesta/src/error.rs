//! Errors a workflow sees and returns.
//!
//! [`StepError`] is what a step's closure returns: retryable unless said otherwise
//! (so `?` on any error — a `std::error::Error`, an `anyhow::Error` — just works and is
//! retried), or fatal when the step says so ([`StepResultExt::fatal`],
//! [`StepError::fatal`], [`StepError::from_http_status`]). A step that panics is a
//! failed attempt of kind [`PANICKED`], retried by its policy like any other.
//!
//! [`Error`] is what a durable operation hands back to the workflow and what a workflow
//! returns; `?` on any other error in a workflow body makes it an
//! [`ErrorKind::Workflow`] error. It round-trips through the journal unchanged, so a
//! replayed failure is the same value as the original one.
//!
//! Neither type implements `std::error::Error` itself: that is what lets each accept
//! every error through `?` (the same choice as Restate's `HandlerError`). Both are
//! `Display` and `Debug`; [`Error::into_anyhow`] hands one to code that wants an
//! `anyhow::Error`.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::model::ErrorInfo;

/// The longest wait a `Retry-After` may impose on a step's next attempt: a server that
/// asks for more is waited on this long, then asked again.
pub const MAX_RETRY_AFTER: std::time::Duration = std::time::Duration::from_secs(3600);

/// An error returned by a step's closure, classified retryable or fatal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepError(pub(crate) ErrorInfo);

impl StepError {
    /// An error of a named `kind`; `retryable` says whether another attempt may help.
    pub fn new(kind: impl Into<String>, message: impl Into<String>, retryable: bool) -> Self {
        StepError(ErrorInfo::new(kind, message, retryable))
    }

    /// A transient error (a timeout, a 429, a 5xx): retried by the step's policy.
    /// Takes a message or an error (`StepError::retryable(e)`).
    pub fn retryable(message: impl fmt::Display) -> Self {
        StepError::new("retryable", message.to_string(), true)
    }

    /// A permanent error (validation, permission, not found): never retried. Takes a
    /// message or an error (`StepError::fatal(e)`); on a `Result`, see
    /// [`StepResultExt::fatal`].
    pub fn fatal(message: impl fmt::Display) -> Self {
        StepError::new("fatal", message.to_string(), false)
    }

    /// The same error, never retried.
    pub fn into_fatal(mut self) -> Self {
        self.0.retryable = false;
        self
    }

    /// A panic caught in a step's closure: a failed attempt, retried by the policy.
    pub(crate) fn panicked(payload: &(dyn std::any::Any + Send)) -> Self {
        StepError::new(
            PANICKED,
            format!("the step panicked: {}", panic_message(payload)),
            true,
        )
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

    /// The far side asked to be left alone for `delay` (an HTTP `Retry-After`): if
    /// the step's policy retries this error, the next attempt waits `delay` (at most
    /// [`MAX_RETRY_AFTER`]) instead of the policy's backoff. It still counts as an
    /// attempt.
    pub fn retry_after(mut self, delay: std::time::Duration) -> Self {
        let ms = delay.min(MAX_RETRY_AFTER).as_millis();
        self.0.retry_after_ms = Some(u64::try_from(ms).unwrap_or(u64::MAX));
        self
    }

    /// The delay the far side asked for, if any ([`StepError::retry_after`]).
    pub fn retry_after_hint(&self) -> Option<std::time::Duration> {
        self.0.retry_after_ms.map(std::time::Duration::from_millis)
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

/// Any error — a `std::error::Error + Send + Sync + 'static`, an `anyhow::Error` —
/// becomes a retryable step error, so `?` works in steps. The message keeps the
/// error's chain of causes.
impl<E: Into<anyhow::Error>> From<E> for StepError {
    fn from(e: E) -> Self {
        StepError::new("error", format!("{:#}", e.into()), true)
    }
}

/// The kind of a failed attempt whose step panicked.
pub const PANICKED: &str = "Panicked";

/// What a panic said, when it said it with a string.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "(a panic without a message)".to_owned()
    }
}

/// Classify a step's `Result` in place: `parse(&s).fatal()?` fails the step at once.
pub trait StepResultExt<T> {
    /// The error, if any, as a fatal step error: never retried.
    fn fatal(self) -> Result<T, StepError>;
    /// The error, if any, as a retryable step error (what `?` does already).
    fn retryable(self) -> Result<T, StepError>;
}

impl<T, E: Into<StepError>> StepResultExt<T> for Result<T, E> {
    fn fatal(self) -> Result<T, StepError> {
        self.map_err(|e| e.into().into_fatal())
    }

    fn retryable(self) -> Result<T, StepError> {
        self.map_err(|e| {
            let mut e = e.into();
            e.0.retryable = true;
            e
        })
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
    /// A combinator over durable futures failed: `try_join_all`'s first failure, a
    /// `race` won by a failure, `select_ok` with every future failed, or no futures
    /// (AWS: `CombinatorError`). The deciding failure is its cause.
    CombinatorFailed,
    /// A value could not be serialized or deserialized.
    Serialization,
    /// An operation was configured with options that cannot hold (`max_concurrency(0)`,
    /// more required successes than items...).
    InvalidConfig,
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
            ErrorKind::CombinatorFailed => "CombinatorFailed",
            ErrorKind::Serialization => "Serialization",
            ErrorKind::InvalidConfig => "InvalidConfig",
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
            ErrorKind::CombinatorFailed,
            ErrorKind::Serialization,
            ErrorKind::InvalidConfig,
            ErrorKind::Storage,
            ErrorKind::Workflow,
        ]
        .into_iter()
        .find(|k| k.as_str() == s)
    }
}

/// The error of a durable operation, or of a workflow.
#[derive(Debug, Clone, PartialEq, Eq)]
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
            retry_after_ms: None,
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

    /// This error as an `anyhow::Error` (it can be downcast back to [`Error`]).
    pub fn into_anyhow(self) -> anyhow::Error {
        anyhow::Error::msg(self)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// Any error — a `std::error::Error + Send + Sync + 'static`, an `anyhow::Error` —
/// becomes the workflow's own error ([`ErrorKind::Workflow`]; a JSON error is
/// [`ErrorKind::Serialization`]), so `?` works in workflow bodies. An [`Error`] that
/// went through `anyhow` comes back as it was.
impl<E: Into<anyhow::Error>> From<E> for Error {
    fn from(e: E) -> Self {
        let e: anyhow::Error = e.into();
        if let Some(inner) = e.downcast_ref::<Error>() {
            return inner.clone();
        }
        if let Some(json) = e.downcast_ref::<serde_json::Error>() {
            return Error::serde(json);
        }
        Error::msg(format!("{e:#}"))
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

    fn parse_in_a_step(s: &str) -> Result<u32, StepError> {
        Ok(s.parse::<u32>()?)
    }

    fn anyhow_in_a_step() -> Result<u32, StepError> {
        let r: anyhow::Result<u32> = Err(anyhow::anyhow!("root cause").context("calling the PSP"));
        Ok(r?)
    }

    fn fatal_in_a_step(s: &str) -> Result<u32, StepError> {
        let n = s.parse::<u32>().fatal()?;
        Ok(n)
    }

    #[test]
    fn question_mark_works_in_steps_on_std_and_anyhow_errors_and_retries() {
        let e = parse_in_a_step("x").unwrap_err();
        assert!(e.is_retryable());
        assert_eq!(e.info().message, "invalid digit found in string");
        let e = anyhow_in_a_step().unwrap_err();
        assert!(e.is_retryable());
        assert_eq!(
            e.info().message,
            "calling the PSP: root cause",
            "the chain is kept"
        );
    }

    #[test]
    fn an_error_marked_fatal_is_not_retried() {
        assert!(!fatal_in_a_step("x").unwrap_err().is_retryable());
        assert_eq!(fatal_in_a_step("7"), Ok(7));
        assert!(!StepError::fatal(std::io::Error::other("denied")).is_retryable());
        let e: Result<(), StepError> = Err(StepError::fatal("no"));
        assert!(e.retryable().unwrap_err().is_retryable());
    }

    fn workflow_body(s: &str) -> Result<u32, Error> {
        let n: u32 = s.parse()?;
        let checked: anyhow::Result<u32> = if n > 10 {
            Err(anyhow::anyhow!("too big"))
        } else {
            Ok(n)
        };
        Ok(checked?)
    }

    #[test]
    fn question_mark_works_in_workflow_bodies_on_std_and_anyhow_errors() {
        let e = workflow_body("x").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Workflow);
        assert_eq!(e.to_string(), "invalid digit found in string");
        assert_eq!(workflow_body("11").unwrap_err().to_string(), "too big");
        assert_eq!(workflow_body("3"), Ok(3));
        let json: Error = serde_json::from_str::<u32>("{").unwrap_err().into();
        assert_eq!(json.kind(), ErrorKind::Serialization);
    }

    #[test]
    fn an_error_through_anyhow_keeps_its_kind() {
        let e = Error::new(ErrorKind::StepFailed, "step x failed", None);
        let back: Error = e.clone().into_anyhow().into();
        assert_eq!(back, e);
    }

    #[test]
    fn a_panic_payload_becomes_a_retryable_attempt_error() {
        let e = StepError::panicked(&"index out of bounds");
        assert_eq!(e.kind(), PANICKED);
        assert!(e.is_retryable());
        assert!(e.info().message.contains("index out of bounds"));
        let owned: Box<dyn std::any::Any + Send> = Box::new(String::from("owned"));
        assert!(
            StepError::panicked(owned.as_ref())
                .info()
                .message
                .contains("owned")
        );
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
