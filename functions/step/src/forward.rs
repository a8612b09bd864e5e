//! Forwarding: a wake-up for a run of another build is handled by that build's version
//! of this function, never replayed on code the run did not start on.
//!
//! Each published version records itself in the build registry once per cold start
//! ([`Forwarder::register`]). When the engine answers a wake-up with
//! [`WakeOutcome::OtherBuild`](siesta::WakeOutcome::OtherBuild), the record is sent to
//! the version serving that build in a synchronous `Invoke` (an SQS event of that one
//! record, marked [`FORWARDED`]); the record is reported failed — so SQS redelivers it —
//! unless that version handled it.

use std::time::Duration;

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent, SqsMessage, SqsMessageAttribute};
use siesta_aws::builds::BuildRegistry;

/// The message attribute marking a record forwarded from another build's version: the
/// version that receives it never forwards it again.
pub const FORWARDED: &str = "siesta-forwarded";

/// What became of a forwarded record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Forwarded {
    /// The build's version handled it.
    Handled,
    /// No version serves the build (never published, its registry item removed, or its
    /// version deleted — then its item is removed too): nothing to forward to. Reported
    /// handled; the sweep re-sends the wake-up later.
    Unserved,
    /// The invoke failed, timed out, or the version reported the record failed: SQS
    /// must redeliver it.
    Failed(String),
}

/// Forwards records to the step version of their run's build.
#[derive(Clone)]
pub struct Forwarder {
    builds: BuildRegistry,
    lambda: aws_sdk_lambda::Client,
}

impl Forwarder {
    /// A forwarder over `builds`, invoking through a Lambda client configured from `sdk`
    /// (`AWS_ENDPOINT_URL_LAMBDA` honoured). The SDK's per-attempt timeouts are lifted
    /// for `Invoke`: the other version may work up to its own timeout, and the caller
    /// bounds the wait by its deadline instead.
    pub fn new(sdk: &aws_config::SdkConfig, builds: BuildRegistry) -> Self {
        let timeouts = aws_config::timeout::TimeoutConfig::builder()
            .connect_timeout(Duration::from_secs(3))
            .build();
        let conf = aws_sdk_lambda::config::Builder::from(sdk)
            .timeout_config(timeouts)
            // A retried Invoke would run the batch twice: the record's redelivery retries.
            .retry_config(aws_config::retry::RetryConfig::disabled())
            .build();
        Forwarder {
            builds,
            lambda: aws_sdk_lambda::Client::from_conf(conf),
        }
    }

    /// Record that this version (from the Lambda environment) serves `build_id`: one
    /// `UpdateItem` per cold start. Unpublished (`$LATEST`) there is nothing to forward
    /// to, so nothing is recorded.
    pub async fn register(&self, build_id: &str) {
        match siesta_aws::builds::own_version_from_env() {
            None => tracing::warn!(
                build_id,
                "running as $LATEST (no published version): this build is not registered, so wake-ups for its runs cannot be forwarded to it after the next deploy"
            ),
            Some(version) => {
                match self
                    .builds
                    .register(build_id, &version, siesta_lambda::now_ms())
                    .await
                {
                    Ok(()) => tracing::info!(build_id, version, "build registered"),
                    // The next cold start registers it; meanwhile forwards to this
                    // build find an older registration of the same version, or none.
                    Err(e) => {
                        tracing::error!(build_id, version, error = %e, "registering the build failed")
                    }
                }
            }
        }
    }

    /// Send `record` to the step version serving `build_id`, waiting at most `wait`.
    pub async fn forward(&self, build_id: &str, record: &SqsMessage, wait: Duration) -> Forwarded {
        let version = match self.builds.step_version(build_id).await {
            Ok(Some(v)) => v,
            Ok(None) => return Forwarded::Unserved,
            Err(e) => return Forwarded::Failed(format!("looking up build {build_id}: {e}")),
        };
        let mut record = record.clone();
        let mut mark = SqsMessageAttribute::default();
        mark.data_type = Some("String".into());
        mark.string_value = Some("true".into());
        record.message_attributes.insert(FORWARDED.into(), mark);
        let id = record.message_id.clone().unwrap_or_default();
        let mut event = SqsEvent::default();
        event.records = vec![record];
        let payload = match serde_json::to_vec(&event) {
            Ok(p) => p,
            Err(e) => return Forwarded::Failed(format!("encoding the event: {e}")),
        };
        let call = self
            .lambda
            .invoke()
            .function_name(&version)
            .invocation_type(aws_sdk_lambda::types::InvocationType::RequestResponse)
            .payload(aws_sdk_lambda::primitives::Blob::new(payload))
            .send();
        let out = match tokio::time::timeout(wait, call).await {
            Err(_) => {
                return Forwarded::Failed(format!("invoking {version}: no answer in {wait:?}"));
            }
            Ok(Err(e))
                if e.as_service_error()
                    .is_some_and(|e| e.is_resource_not_found_exception()) =>
            {
                // The version was deleted (by hand: `builds prune` keeps every version
                // with an unfinished run): the build is no longer deployed. Its item
                // goes, so `GET /builds` and the drain check say so, unless the build
                // registered another version since.
                if let Err(e) = self.builds.remove(build_id, &version).await {
                    tracing::warn!(build_id, version, error = %e, "removing the registry item of a deleted version failed");
                }
                return Forwarded::Unserved;
            }
            Ok(Err(e)) => {
                return Forwarded::Failed(format!(
                    "invoking {version}: {}",
                    aws_sdk_lambda::error::DisplayErrorContext(e)
                ));
            }
            Ok(Ok(out)) => out,
        };
        let body = out.payload().map(|b| b.as_ref()).unwrap_or_default();
        if let Some(kind) = out.function_error() {
            return Forwarded::Failed(format!(
                "{version} returned a function error ({kind}): {}",
                String::from_utf8_lossy(body)
            ));
        }
        match serde_json::from_slice::<SqsBatchResponse>(body) {
            Err(e) => Forwarded::Failed(format!("{version} answered no batch response: {e}")),
            Ok(r)
                if r.batch_item_failures
                    .iter()
                    .any(|f| f.item_identifier == id) =>
            {
                Forwarded::Failed(format!("{version} reported the record failed"))
            }
            Ok(_) => Forwarded::Handled,
        }
    }
}

/// Whether `record` was forwarded from another build's version.
pub fn is_forwarded(record: &SqsMessage) -> bool {
    record
        .message_attributes
        .get(FORWARDED)
        .and_then(|a| a.string_value.as_deref())
        == Some("true")
}
