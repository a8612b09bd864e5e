//! The wake-up queue and its dead-letter queue, with the redrive policy between them.

use std::collections::HashMap;

use aws_sdk_sqs::types::QueueAttributeName;

use super::{BootstrapError, Plan, QueueSpec, declaration_error};

impl Plan {
    /// Create the dead-letter queue, then the queue with its redrive policy; the receive
    /// limit is the declared one unless `max_receive_count` overrides it (tests that count
    /// receptions use a small one; the other attributes stay as declared). A queue
    /// that exists with other attributes is given the declared ones. Returns (queue URL,
    /// dead-letter queue URL).
    pub async fn create_queues(
        &self,
        client: &aws_sdk_sqs::Client,
        queue: &str,
        dead_letter_queue: &str,
        max_receive_count: Option<u32>,
    ) -> Result<(String, String), BootstrapError> {
        let attributes = |spec: &QueueSpec| -> HashMap<QueueAttributeName, String> {
            spec.attributes
                .iter()
                .map(|(k, v)| (QueueAttributeName::from(k.as_str()), v.clone()))
                .collect()
        };
        let dlq_url = create_queue(
            client,
            dead_letter_queue,
            attributes(&self.dead_letter_queue),
        )
        .await?;
        let arn = client
            .get_queue_attributes()
            .queue_url(&dlq_url)
            .attribute_names(QueueAttributeName::QueueArn)
            .send()
            .await
            .map_err(|e| {
                queue_error(
                    dead_letter_queue,
                    crate::error::sdk("GetQueueAttributes", e).to_string(),
                )
            })?
            .attributes
            .and_then(|mut a| a.remove(&QueueAttributeName::QueueArn))
            .ok_or_else(|| queue_error(dead_letter_queue, "no queue ARN".into()))?;
        let limit = max_receive_count
            .or(self.queue.max_receive_count)
            .ok_or_else(|| declaration_error("the wake-up queue has no max_receive_count"))?;
        let mut attrs = attributes(&self.queue);
        attrs.insert(
            QueueAttributeName::RedrivePolicy,
            serde_json::json!({"deadLetterTargetArn": arn, "maxReceiveCount": limit.to_string()})
                .to_string(),
        );
        let url = create_queue(client, queue, attrs).await?;
        Ok((url, dlq_url))
    }
}

fn queue_error(name: &str, message: String) -> BootstrapError {
    BootstrapError::Aws {
        resource: format!("queue {name}"),
        message,
    }
}

/// Create a queue with `attributes`; if it exists with others, set them on it.
async fn create_queue(
    client: &aws_sdk_sqs::Client,
    name: &str,
    attributes: HashMap<QueueAttributeName, String>,
) -> Result<String, BootstrapError> {
    let created = client
        .create_queue()
        .queue_name(name)
        .set_attributes(Some(attributes.clone()))
        .send()
        .await;
    let url = match created {
        Ok(out) => {
            return out
                .queue_url
                .ok_or_else(|| queue_error(name, "no queue URL".into()));
        }
        Err(e)
            if e.as_service_error()
                .is_some_and(|e| e.is_queue_name_exists()) =>
        {
            client
                .get_queue_url()
                .queue_name(name)
                .send()
                .await
                .map_err(|e| queue_error(name, crate::error::sdk("GetQueueUrl", e).to_string()))?
                .queue_url
                .ok_or_else(|| queue_error(name, "no queue URL".into()))?
        }
        Err(e) => {
            return Err(queue_error(
                name,
                crate::error::sdk("CreateQueue", e).to_string(),
            ));
        }
    };
    client
        .set_queue_attributes()
        .queue_url(&url)
        .set_attributes(Some(attributes))
        .send()
        .await
        .map_err(|e| queue_error(name, crate::error::sdk("SetQueueAttributes", e).to_string()))?;
    Ok(url)
}
