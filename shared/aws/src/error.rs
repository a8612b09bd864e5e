//! Mapping of SDK errors to the ports' [`StoreError`]: no SDK type leaves this crate.

use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use siesta::ports::StoreError;

/// Error codes that mean "the request was fine, the service could not take it now":
/// throttling, capacity, contention and server faults. Anything else with a 4xx status
/// is the request's own fault.
const RETRYABLE_CODES: &[&str] = &[
    "ProvisionedThroughputExceededException",
    "ThrottlingException",
    "Throttling",
    "RequestLimitExceeded",
    "TransactionConflictException",
    "TransactionInProgressException",
    "InternalServerError",
    "ServiceUnavailable",
    "SlowDown",
    "RequestThrottled",
    "OverLimit",
    "KMSThrottlingException",
];

/// The error code of a service error, if the service answered with one.
pub(crate) fn code<E: ProvideErrorMetadata>(e: &SdkError<E, HttpResponse>) -> Option<&str> {
    match e {
        SdkError::ServiceError(ctx) => ctx.err().code(),
        _ => None,
    }
}

/// Map an SDK error of operation `op` to a [`StoreError`]: throttling, 5xx, timeouts and
/// connection failures are [`StoreError::Unavailable`] (the write may or may not have
/// been applied); other service errors are [`StoreError::Invalid`].
pub(crate) fn sdk<E>(op: &str, e: SdkError<E, HttpResponse>) -> StoreError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    match &e {
        SdkError::ServiceError(ctx) => {
            let status = ctx.raw().status().as_u16();
            let code = ctx.err().code().unwrap_or("Unknown");
            let message = ctx.err().message().unwrap_or("");
            if status >= 500 || RETRYABLE_CODES.contains(&code) {
                StoreError::Unavailable(format!("{op}: {code} ({status}) {message}"))
            } else {
                StoreError::Invalid(format!("{op}: {code} ({status}) {message}"))
            }
        }
        SdkError::ConstructionFailure(_) => StoreError::Invalid(format!(
            "{op}: could not build the request: {}",
            display_chain(&e)
        )),
        _ => StoreError::Unavailable(format!("{op}: {}", display_chain(&e))),
    }
}

fn display_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

/// A stored item that cannot be read back.
pub(crate) fn corrupt(what: &str, why: impl std::fmt::Display) -> StoreError {
    StoreError::Invalid(format!("corrupt {what} item: {why}"))
}
