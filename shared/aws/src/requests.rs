//! Counting AWS requests by service and operation: an SDK interceptor, so every attempt
//! (retries included, as AWS bills them) is counted where it leaves the client.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::context::BeforeTransmitInterceptorContextRef;
use aws_smithy_runtime_api::client::interceptors::{Intercept, SharedInterceptor};
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::config_bag::ConfigBag;

/// Requests sent, by `(service, operation)`: `("dynamodb", "TransactWriteItems")`,
/// `("sqs", "SendMessage")`, `("s3", "PUT")`.
pub type RequestCounts = BTreeMap<(String, String), u64>;

/// An interceptor that counts requests; clone it freely, the counts are shared.
#[derive(Debug, Clone, Default)]
pub struct RequestCounter {
    counts: Arc<Mutex<RequestCounts>>,
}

impl RequestCounter {
    /// A counter starting at zero.
    pub fn new() -> Self {
        Self::default()
    }

    /// The counter as an interceptor for [`crate::AwsOptions::interceptors`].
    pub fn interceptor(&self) -> SharedInterceptor {
        SharedInterceptor::new(self.clone())
    }

    /// The counts so far.
    pub fn snapshot(&self) -> RequestCounts {
        self.counts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Requests to `service` so far, optionally only those of one `operation`.
    pub fn total(&self, service: &str, operation: Option<&str>) -> u64 {
        self.snapshot()
            .iter()
            .filter(|((s, o), _)| s == service && operation.is_none_or(|op| op == o))
            .map(|(_, n)| n)
            .sum()
    }

    /// Start again from zero.
    pub fn reset(&self) {
        self.counts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }
}

/// The service and operation of a request: JSON protocols name it in `X-Amz-Target`
/// (`DynamoDB_20120810.PutItem`, `AmazonSQS.SendMessage`); S3 is REST, counted by
/// method, which is how S3 prices it (PUT/POST/LIST vs GET).
fn classify(target: Option<&str>, method: &str) -> (String, String) {
    match target.and_then(|t| t.split_once('.')) {
        Some((service, op)) if service.starts_with("DynamoDB") => ("dynamodb".into(), op.into()),
        Some((service, op)) if service.starts_with("AmazonSQS") => ("sqs".into(), op.into()),
        Some((service, op)) => (service.to_lowercase(), op.into()),
        None => ("s3".into(), method.to_uppercase()),
    }
}

impl Intercept for RequestCounter {
    fn name(&self) -> &'static str {
        "siesta-request-counter"
    }

    fn read_before_transmit(
        &self,
        context: &BeforeTransmitInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let request = context.request();
        let key = classify(request.headers().get("x-amz-target"), request.method());
        *self
            .counts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(key)
            .or_default() += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_classified_by_service_and_operation() {
        let c = |t, m| classify(t, m);
        assert_eq!(
            c(Some("DynamoDB_20120810.TransactWriteItems"), "POST"),
            ("dynamodb".into(), "TransactWriteItems".into())
        );
        assert_eq!(
            c(Some("AmazonSQS.SendMessage"), "POST"),
            ("sqs".into(), "SendMessage".into())
        );
        assert_eq!(c(None, "put"), ("s3".into(), "PUT".into()));
    }
}
