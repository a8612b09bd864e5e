//! [`WakeQueue`] on SQS: a standard queue with a redrive policy to a dead-letter queue.

use std::collections::HashSet;
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_sqs::Client;
use aws_sdk_sqs::types::MessageSystemAttributeName;
use siesta::ports::*;

use crate::error::{code, sdk};

/// Wake-ups on SQS.
pub(crate) struct SqsQueue {
    client: Client,
    queue_url: String,
    dead_letter_queue_url: String,
}

impl SqsQueue {
    pub(crate) fn new(client: Client, queue_url: String, dead_letter_queue_url: String) -> Self {
        SqsQueue {
            client,
            queue_url,
            dead_letter_queue_url,
        }
    }
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
        self.client
            .send_message()
            .queue_url(&self.queue_url)
            .message_body(body)
            .delay_seconds(seconds(delay, MAX_QUEUE_DELAY))
            .send()
            .await
            .map_err(|e| sdk("send wake-up", e))?;
        Ok(())
    }

    async fn receive(
        &self,
        max: usize,
        visibility: Duration,
    ) -> Result<Vec<ReceivedWakeUp>, StoreError> {
        if max == 0 {
            return Ok(Vec::new());
        }
        let out = self
            .client
            .receive_message()
            .queue_url(&self.queue_url)
            .max_number_of_messages(max.min(10) as i32)
            .visibility_timeout(seconds(visibility, MAX_VISIBILITY).max(1))
            .message_system_attribute_names(MessageSystemAttributeName::ApproximateReceiveCount)
            .send()
            .await
            .map_err(|e| sdk("receive wake-ups", e))?;
        let mut received = Vec::new();
        for message in out.messages.unwrap_or_default() {
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
        match self
            .client
            .delete_message()
            .queue_url(&self.queue_url)
            .receipt_handle(receipt)
            .send()
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if code(&e).is_some_and(|c| GONE_RECEIPT_CODES.contains(&c)) => Ok(()),
            Err(e) => Err(sdk("ack wake-up", e)),
        }
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

    async fn dead_letters(&self, limit: usize) -> Result<Vec<WakeUp>, StoreError> {
        // A peek: messages are received with a zero visibility timeout, so they stay
        // in the dead-letter queue for an operator to inspect and redrive.
        let mut seen = HashSet::new();
        let mut dead = Vec::new();
        while dead.len() < limit {
            let out = self
                .client
                .receive_message()
                .queue_url(&self.dead_letter_queue_url)
                .max_number_of_messages(10)
                .visibility_timeout(0)
                .send()
                .await
                .map_err(|e| sdk("read dead letters", e))?;
            let mut fresh = 0;
            for message in out.messages.unwrap_or_default() {
                let id = message.message_id().unwrap_or_default().to_owned();
                if seen.insert(id) {
                    fresh += 1;
                    if let Ok(wake) = decode(message.body()) {
                        dead.push(wake);
                    }
                }
            }
            if fresh == 0 {
                break;
            }
        }
        dead.truncate(limit);
        Ok(dead)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_round_up_to_whole_seconds_within_the_cap() {
        assert_eq!(seconds(Duration::ZERO, MAX_QUEUE_DELAY), 0);
        assert_eq!(seconds(Duration::from_millis(1), MAX_QUEUE_DELAY), 1);
        assert_eq!(seconds(Duration::from_millis(1500), MAX_QUEUE_DELAY), 2);
        assert_eq!(seconds(Duration::from_secs(3600), MAX_QUEUE_DELAY), 900);
    }
}
