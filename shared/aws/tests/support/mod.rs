//! Shared set-up of the AWS tests: find the emulators, create resources once.

#![allow(dead_code, unreachable_pub)]

pub mod faults;

use std::collections::HashMap;

use aws_sdk_sqs::types::QueueAttributeName;
use siesta_aws::{AwsBackend, AwsOptions, ResourceNames};
use tokio::sync::OnceCell;

/// The emulators' SDK configuration and the shared table and bucket.
pub struct Emulators {
    pub sdk: aws_config::SdkConfig,
    pub table: String,
    pub bucket: String,
}

static SHARED: OnceCell<(String, String)> = OnceCell::const_new();

/// The emulators, or `None` (with instructions) when they are not running and the
/// test command did not require them.
pub async fn emulators() -> Option<Emulators> {
    if std::env::var_os("AWS_ENDPOINT_URL_DYNAMODB").is_none() {
        if std::env::var("SIESTA_AWS_TESTS").as_deref() == Ok("required") {
            panic!("SIESTA_AWS_TESTS=required but AWS_ENDPOINT_URL_DYNAMODB is not set");
        }
        eprintln!(
            "skipped: the AWS emulators are not running; start them with \
             `scripts/emulators start && eval \"$(scripts/emulators env)\"` \
             (or run ./scripts/test, which does)"
        );
        return None;
    }
    let sdk = siesta_aws::sdk_config_from_env().await;
    let (table, bucket) = SHARED
        .get_or_init(|| async {
            (
                std::env::var("SIESTA_TEST_TABLE").unwrap_or_else(|_| "siesta-dev".into()),
                std::env::var("SIESTA_TEST_BUCKET").unwrap_or_else(|_| "siesta-dev".into()),
            )
        })
        .await
        .clone();
    Some(Emulators { sdk, table, bucket })
}

impl Emulators {
    /// A backend on the shared table and bucket with a fresh queue pair.
    pub async fn backend(&self, max_receives: u32) -> AwsBackend {
        self.backend_with(max_receives, AwsOptions::default()).await
    }

    /// Like [`Emulators::backend`], with `options`.
    pub async fn backend_with(&self, max_receives: u32, options: AwsOptions) -> AwsBackend {
        let sqs = aws_sdk_sqs::Client::new(&self.sdk);
        let name = format!("siesta-test-{}", uuid::Uuid::new_v4().simple());
        let dlq = sqs
            .create_queue()
            .queue_name(format!("{name}-dlq"))
            .send()
            .await
            .expect("create the dead-letter queue");
        let dlq_url = dlq.queue_url().unwrap().to_owned();
        let arn = sqs
            .get_queue_attributes()
            .queue_url(&dlq_url)
            .attribute_names(QueueAttributeName::QueueArn)
            .send()
            .await
            .expect("dead-letter queue arn")
            .attributes()
            .unwrap()[&QueueAttributeName::QueueArn]
            .clone();
        let redrive =
            format!(r#"{{"deadLetterTargetArn":"{arn}","maxReceiveCount":"{max_receives}"}}"#);
        let queue = sqs
            .create_queue()
            .queue_name(&name)
            .set_attributes(Some(HashMap::from([(
                QueueAttributeName::RedrivePolicy,
                redrive,
            )])))
            .send()
            .await
            .expect("create the queue");
        let names = ResourceNames {
            table: self.table.clone(),
            bucket: self.bucket.clone(),
            queue_url: queue.queue_url().unwrap().to_owned(),
            dead_letter_queue_url: dlq_url,
        };
        AwsBackend::with_options(&self.sdk, names, options)
    }
}

impl Emulators {
    /// A backend whose clients use `sdk` (a faulty HTTP client, short timeouts) on the
    /// shared table and bucket, with a fresh queue pair.
    pub async fn backend_on(
        &self,
        sdk: &aws_config::SdkConfig,
        max_receives: u32,
        options: AwsOptions,
    ) -> AwsBackend {
        let fresh = Emulators {
            sdk: sdk.clone(),
            table: self.table.clone(),
            bucket: self.bucket.clone(),
        };
        fresh.backend_with(max_receives, options).await
    }
}
