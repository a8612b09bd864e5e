//! [`WakeQueue`] on SQS: a standard queue with a redrive policy to a dead-letter queue.
//!
//! Every wake-up carries its tenant as `MessageGroupId`, which makes the standard queue
//! a *fair queue*: while one tenant has a backlog, SQS hands out the messages of quiet
//! tenants first (see `docs/queue.md`). An endpoint that refuses a group id on a
//! standard queue (an emulator older than the feature) is sent plain messages instead,
//! once it has said so.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_sqs::Client;
use aws_sdk_sqs::types::{Message, MessageSystemAttributeName};
use siesta::ports::*;
use siesta::{RunId, TenantId};

use crate::error::{code, sdk};

/// Wake-ups on SQS.
pub(crate) struct SqsQueue {
    client: Client,
    queue_url: String,
    dead_letter_queue_url: String,
    /// Whether sends carry the tenant as `MessageGroupId` (until the endpoint refuses).
    fair: AtomicBool,
}

impl SqsQueue {
    pub(crate) fn new(client: Client, queue_url: String, dead_letter_queue_url: String) -> Self {
        SqsQueue {
            client,
            queue_url,
            dead_letter_queue_url,
            fair: AtomicBool::new(true),
        }
    }

    /// Whether sends still carry the tenant as `MessageGroupId` (the endpoint has not
    /// refused it).
    pub(crate) fn is_fair(&self) -> bool {
        self.fair.load(Ordering::Relaxed)
    }

    /// Up to `max` messages (SQS gives ten at most) of the queue at `url`, hidden for
    /// `visibility` (a second at least), with their receive counts if `counted`: the
    /// wake-up queue's and the dead-letter queue's receive.
    async fn receive_from(
        &self,
        url: &str,
        max: usize,
        visibility: Duration,
        counted: bool,
        what: &str,
    ) -> Result<Vec<Message>, StoreError> {
        if max == 0 {
            return Ok(Vec::new());
        }
        let out = self
            .client
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(max.min(10) as i32)
            .visibility_timeout(seconds(visibility, MAX_VISIBILITY).max(1))
            .set_message_system_attribute_names(
                counted.then(|| vec![MessageSystemAttributeName::ApproximateReceiveCount]),
            )
            .send()
            .await
            .map_err(|e| sdk(what, e))?;
        Ok(out.messages.unwrap_or_default())
    }

    /// Deletes the message `receipt` names from the queue at `url`: a receipt already
    /// gone ([`GONE_RECEIPT_CODES`]) is what the caller wanted, not an error.
    async fn delete_from(&self, url: &str, receipt: &str, what: &str) -> Result<(), StoreError> {
        match self
            .client
            .delete_message()
            .queue_url(url)
            .receipt_handle(receipt)
            .send()
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if code(&e).is_some_and(|c| GONE_RECEIPT_CODES.contains(&c)) => Ok(()),
            Err(e) => Err(sdk(what, e)),
        }
    }
}

/// Whether an error refuses the `MessageGroupId` of a message to a standard queue.
fn refuses_group_id(code: Option<&str>, message: Option<&str>) -> bool {
    matches!(
        code,
        Some("InvalidParameterValue" | "InvalidParameterCombination" | "UnsupportedOperation")
    ) && message.is_some_and(|m| m.contains("MessageGroupId"))
}

/// Whole seconds, rounded up (a wake-up a little late is fine; early is a wasted read),
/// capped at SQS's limits.
fn seconds(d: Duration, cap: Duration) -> i32 {
    let d = d.min(cap);
    (d.as_secs() + u64::from(d.subsec_nanos() > 0)) as i32
}

/// SQS's longest visibility timeout.
const MAX_VISIBILITY: Duration = Duration::from_secs(12 * 3600);

/// Error codes SQS answers for a receipt handle that is stale or malformed: the message
/// is gone (acknowledged, or moved on), which is what the caller wanted.
const GONE_RECEIPT_CODES: &[&str] = &[
    "ReceiptHandleIsInvalid",
    "AWS.SimpleQueueService.ReceiptHandleIsInvalid",
    "InvalidParameterValue",
    "MessageNotInflight",
    "AWS.SimpleQueueService.MessageNotInflight",
];

fn decode(body: Option<&str>) -> Result<WakeUp, StoreError> {
    serde_json::from_str(body.unwrap_or_default())
        .map_err(|e| StoreError::Invalid(format!("a wake-up message that is not one: {e}")))
}

#[async_trait]
impl WakeQueue for SqsQueue {
    async fn send(&self, wake: &WakeUp, delay: Duration) -> Result<(), StoreError> {
        let body = serde_json::to_string(wake).map_err(|e| StoreError::Invalid(e.to_string()))?;
        let send = || {
            self.client
                .send_message()
                .queue_url(&self.queue_url)
                .message_body(body.clone())
                .delay_seconds(seconds(delay, MAX_QUEUE_DELAY))
        };
        if self.is_fair() {
            match send().message_group_id(wake.tenant.as_str()).send().await {
                Ok(_) => return Ok(()),
                Err(e) => {
                    let refused = match &e {
                        aws_sdk_sqs::error::SdkError::ServiceError(ctx) => {
                            use aws_sdk_sqs::error::ProvideErrorMetadata;
                            refuses_group_id(ctx.err().code(), ctx.err().message())
                        }
                        _ => false,
                    };
                    if !refused {
                        return Err(sdk("send wake-up", e));
                    }
                    if self.fair.swap(false, Ordering::Relaxed) {
                        tracing::warn!(error = %code(&e).unwrap_or_default(), "the queue refuses MessageGroupId on a standard queue: sending without it (no fair queueing across tenants)");
                    }
                }
            }
        }
        send().send().await.map_err(|e| sdk("send wake-up", e))?;
        Ok(())
    }

    async fn receive(
        &self,
        max: usize,
        visibility: Duration,
    ) -> Result<Vec<ReceivedWakeUp>, StoreError> {
        let messages = self
            .receive_from(&self.queue_url, max, visibility, true, "receive wake-ups")
            .await?;
        let mut received = Vec::new();
        for message in messages {
            let receipt = message.receipt_handle().unwrap_or_default().to_owned();
            let wake = match decode(message.body()) {
                Ok(wake) => wake,
                Err(e) => {
                    // Not ours to handle; left to the redrive policy and the DLQ.
                    tracing::warn!(error = %e, "skipping a malformed wake-up message");
                    continue;
                }
            };
            let receive_count = message
                .attributes()
                .and_then(|a| a.get(&MessageSystemAttributeName::ApproximateReceiveCount))
                .and_then(|c| c.parse().ok())
                .unwrap_or(1);
            received.push(ReceivedWakeUp {
                wake,
                receipt,
                receive_count,
            });
        }
        Ok(received)
    }

    async fn ack(&self, receipt: &str) -> Result<(), StoreError> {
        self.delete_from(&self.queue_url, receipt, "ack wake-up")
            .await
    }

    async fn extend_visibility(
        &self,
        receipt: &str,
        visibility: Duration,
    ) -> Result<(), StoreError> {
        self.client
            .change_message_visibility()
            .queue_url(&self.queue_url)
            .receipt_handle(receipt)
            .visibility_timeout(seconds(visibility, MAX_VISIBILITY))
            .send()
            .await
            .map_err(|e| sdk("extend visibility", e))?;
        Ok(())
    }

    async fn dead_letters(
        &self,
        max: usize,
        visibility: Duration,
    ) -> Result<Vec<DeadLetter>, StoreError> {
        // A receive that hides what it returns: the next call gets the next ones, so a
        // caller pages through however many there are (a zero-visibility peek returns
        // the same few every time).
        let messages = self
            .receive_from(
                &self.dead_letter_queue_url,
                max,
                visibility,
                false,
                "read dead letters",
            )
            .await?;
        let mut dead = Vec::new();
        for message in messages {
            let receipt = message.receipt_handle().unwrap_or_default().to_owned();
            match decode(message.body()) {
                Ok(wake) => dead.push(DeadLetter { wake, receipt }),
                Err(e) => {
                    // Nothing can act on it; it stays for an operator until the
                    // queue's retention drops it.
                    tracing::warn!(error = %e, message_id = ?message.message_id(), "a dead letter that is not a wake-up");
                }
            }
        }
        Ok(dead)
    }

    async fn holds(
        &self,
        _tenant: &TenantId,
        _run_id: &RunId,
        _due_at: siesta::Timestamp,
    ) -> Result<Option<bool>, StoreError> {
        // SQS cannot be searched by run.
        Ok(None)
    }

    async fn delete_dead_letter(&self, receipt: &str) -> Result<(), StoreError> {
        self.delete_from(&self.dead_letter_queue_url, receipt, "delete dead letter")
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_refused_group_id_turns_fair_sends_off() {
        let m = Some(
            "Value for parameter MessageGroupId is invalid. Reason: The request include parameter that is not valid for this queue type.",
        );
        assert!(refuses_group_id(Some("InvalidParameterValue"), m));
        assert!(!refuses_group_id(
            Some("InvalidParameterValue"),
            Some("DelaySeconds")
        ));
        assert!(!refuses_group_id(Some("ThrottlingException"), m));
        assert!(!refuses_group_id(None, None));
    }

    #[test]
    fn delays_round_up_to_whole_seconds_within_the_cap() {
        assert_eq!(seconds(Duration::ZERO, MAX_QUEUE_DELAY), 0);
        assert_eq!(seconds(Duration::from_millis(1), MAX_QUEUE_DELAY), 1);
        assert_eq!(seconds(Duration::from_millis(1500), MAX_QUEUE_DELAY), 2);
        assert_eq!(seconds(Duration::from_secs(3600), MAX_QUEUE_DELAY), 900);
    }
}
