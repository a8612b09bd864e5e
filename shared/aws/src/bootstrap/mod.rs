//! Create the backend's resources — table, bucket, queue and dead-letter queue — from
//! their description in Rust ([`Plan::declared`], `resources.rs`), so that `siesta
//! bootstrap` and the test suite build what a CloudFormation deployment of
//! `infra/template.yaml` builds (`tests/template.rs` checks the template declares the
//! same table, indexes, TTL, queues and bucket settings). The CloudWatch alarm on the
//! dead-letter queue exists only in a CloudFormation deployment.
//!
//! Every step is idempotent: a table or bucket that exists already is kept (a table
//! made by an earlier release is given the indexes it lacks; TTL, point-in-time recovery
//! and the bucket's settings are applied again, which changes nothing when they are in
//! place); an existing queue gets the declared attributes. What an emulator does not
//! implement (DynamoDB Local has no continuous backups, so no point-in-time recovery) is
//! skipped with a warning; on AWS it is an error.

mod bucket;
mod queues;
mod resources;
mod table;

pub use resources::{BucketSpec, IndexSpec, Plan, PublicAccessBlockSpec, QueueSpec, TableSpec};

use crate::ResourceNames;

/// Why the resources could not be created.
#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    /// The description lacks what is needed (a plan changed by hand).
    #[error("the declared resources: {0}")]
    Declaration(String),
    /// An AWS call failed.
    #[error("creating {resource}: {message}")]
    Aws {
        /// What was being created.
        resource: String,
        /// What the service said.
        message: String,
    },
}

fn declaration_error(what: impl Into<String>) -> BootstrapError {
    BootstrapError::Declaration(what.into())
}

/// Names to create the resources under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewResources {
    /// The table's name.
    pub table: String,
    /// The bucket's name.
    pub bucket: String,
    /// The queue's name.
    pub queue: String,
    /// The dead-letter queue's name.
    pub dead_letter_queue: String,
}

impl NewResources {
    /// Names derived from one prefix: `<prefix>-runs`, `<prefix>-artifacts`,
    /// `<prefix>-wakeups`, `<prefix>-wakeups-dlq`.
    pub fn with_prefix(prefix: &str) -> Self {
        NewResources {
            table: format!("{prefix}-runs"),
            bucket: format!("{prefix}-artifacts"),
            queue: format!("{prefix}-wakeups"),
            dead_letter_queue: format!("{prefix}-wakeups-dlq"),
        }
    }
}

impl Plan {
    /// Create every resource under `names` (idempotently) and return where they are.
    /// With an endpoint override (`AWS_ENDPOINT_URL`, `AWS_ENDPOINT_URL_S3`) the bucket is
    /// addressed by path, as emulators need.
    pub async fn create(
        &self,
        sdk: &aws_config::SdkConfig,
        names: &NewResources,
    ) -> Result<ResourceNames, BootstrapError> {
        self.create_table(&aws_sdk_dynamodb::Client::new(sdk), &names.table)
            .await?;
        self.create_bucket(&crate::s3_client(sdk, &[]), &names.bucket, sdk)
            .await?;
        let (queue_url, dead_letter_queue_url) = self
            .create_queues(
                &aws_sdk_sqs::Client::new(sdk),
                &names.queue,
                &names.dead_letter_queue,
                None,
            )
            .await?;
        Ok(ResourceNames {
            table: names.table.clone(),
            bucket: names.bucket.clone(),
            queue_url,
            dead_letter_queue_url,
        })
    }
}
