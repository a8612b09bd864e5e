//! Siesta's AWS backend: every port on DynamoDB, S3 and SQS.
//!
//! - [`RunStore`](siesta::ports::RunStore) on one DynamoDB table (single-table design,
//!   see `docs/dynamodb.md`): each atomic port operation is one conditional write or one
//!   `TransactWriteItems`, conditioned on the run's version and fencing epoch.
//! - [`ArtifactStore`](siesta::ports::ArtifactStore) on S3: content-addressed keys under
//!   the tenant's prefix, created with `If-None-Match: *`, encrypted at rest.
//! - [`WakeQueue`](siesta::ports::WakeQueue) on SQS with a redrive policy to a
//!   dead-letter queue.
//! - [`StreamStore`](siesta::ports::StreamStore) on the same table: a chunk is an item
//!   in its run's partition, put conditioned on its offset being free.
//! - [`retention::Reaper`]: finished runs past their retention removed, items and
//!   objects, in bounded pages (the sweep function runs it).
//!
//! The engine cannot tell this backend from the embedded one; the conformance suite
//! runs unchanged against both. No SDK type leaves this crate: every SDK error is mapped
//! to a [`StoreError`](siesta::ports::StoreError) here.
//!
//! ```no_run
//! # async fn f() -> Result<(), siesta::ports::StoreError> {
//! let sdk = aws_config::load_from_env().await;
//! // What `siesta bootstrap` prints; the Lambda functions and `siesta dev --backend aws`
//! // read them from SIESTA_TABLE, SIESTA_BUCKET, SIESTA_QUEUE_URL and SIESTA_DLQ_URL.
//! let names = siesta_aws::ResourceNames {
//!     table: "siesta-runs".into(),
//!     bucket: "siesta-artifacts".into(),
//!     queue_url: "https://sqs.us-east-1.amazonaws.com/123456789012/siesta-wakeups".into(),
//!     dead_letter_queue_url: "https://sqs.us-east-1.amazonaws.com/123456789012/siesta-dlq".into(),
//! };
//! let backend = siesta_aws::AwsBackend::new(&sdk, names).backend();
//! # Ok(()) }
//! ```

use std::sync::Arc;
use std::time::Duration;

use aws_smithy_runtime_api::client::interceptors::SharedInterceptor;
use siesta::ports::Backend;

mod artifacts;
pub mod bootstrap;
pub mod builds;
mod callback_state;
mod checkpoint_item;
mod error;
pub mod index_writes;
mod item;
pub mod keys;
mod layout;
pub mod prune;
mod queue;
mod requests;
pub mod retention;
mod store;
mod streams;
#[cfg(feature = "test-util")]
pub mod testing;

pub use requests::{RequestCounter, RequestCounts};
pub use store::WrittenItems;

/// Where the backend's resources are: the table, the bucket and the queues.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceNames {
    /// The DynamoDB table of runs.
    pub table: String,
    /// The S3 bucket of artifacts and large values.
    pub bucket: String,
    /// The URL of the SQS queue of wake-ups.
    pub queue_url: String,
    /// The URL of its dead-letter queue.
    pub dead_letter_queue_url: String,
}

/// Tuning of the AWS backend.
#[derive(Debug, Clone)]
pub struct AwsOptions {
    /// How long after it finished the reaper first looks at a finished run — the
    /// shortest retention the deployment has ([`retention::RetentionRules::shortest`];
    /// the reaper then keeps each run for its own) — and how long closed callback
    /// records and finished tool-call records are kept before DynamoDB's TTL removes
    /// them.
    pub retention: Duration,
    /// Interceptors added to all three clients (request counting, fault injection).
    pub interceptors: Vec<SharedInterceptor>,
}

impl Default for AwsOptions {
    fn default() -> Self {
        AwsOptions {
            retention: Duration::from_secs(30 * 24 * 3600),
            interceptors: Vec::new(),
        }
    }
}

/// DynamoDB capacity this backend has consumed, as DynamoDB reported it
/// (`ReturnConsumedCapacity: TOTAL` on every request).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ConsumedCapacity {
    /// Write capacity units (transactional writes count double, as DynamoDB bills them).
    pub write_units: f64,
    /// Read capacity units.
    pub read_units: f64,
}

/// The SDK configuration from the environment, the way every AWS tool reads it (the
/// default credential chain, `AWS_REGION`, `AWS_ENDPOINT_URL`,
/// `AWS_ENDPOINT_URL_<SERVICE>`), with timeouts so that a hung connection becomes a
/// retryable error instead of a stuck invocation.
pub async fn sdk_config_from_env() -> aws_config::SdkConfig {
    let timeouts = aws_config::timeout::TimeoutConfig::builder()
        .connect_timeout(Duration::from_secs(3))
        .operation_attempt_timeout(Duration::from_secs(10))
        .operation_timeout(Duration::from_secs(30))
        .build();
    aws_config::defaults(aws_config::BehaviorVersion::latest())
        .timeout_config(timeouts)
        .load()
        .await
}

/// The AWS backend: clients built once (per Lambda container) and shared.
#[derive(Clone)]
pub struct AwsBackend {
    store: Arc<store::DynamoStore>,
    artifacts: Arc<artifacts::S3Artifacts>,
    queue: Arc<queue::SqsQueue>,
    streams: Arc<streams::DynamoStreams>,
    builds: builds::BuildRegistry,
    /// What the reaper is made of: the clients and where it removes from.
    reaping: (aws_sdk_dynamodb::Client, aws_sdk_s3::Client, ResourceNames),
}

impl AwsBackend {
    /// A backend over `names`, with clients configured from `sdk` (credentials, region,
    /// `AWS_ENDPOINT_URL_<SERVICE>` overrides).
    pub fn new(sdk: &aws_config::SdkConfig, names: ResourceNames) -> Self {
        Self::with_options(sdk, names, AwsOptions::default())
    }

    /// Like [`AwsBackend::new`], with `options`.
    pub fn with_options(
        sdk: &aws_config::SdkConfig,
        names: ResourceNames,
        options: AwsOptions,
    ) -> Self {
        let mut dynamodb = aws_sdk_dynamodb::config::Builder::from(sdk);
        let mut sqs = aws_sdk_sqs::config::Builder::from(sdk);
        for interceptor in &options.interceptors {
            dynamodb.push_interceptor(interceptor.clone());
            sqs.push_interceptor(interceptor.clone());
        }
        let dynamodb = aws_sdk_dynamodb::Client::from_conf(dynamodb.build());
        let s3 = s3_client(sdk, &options.interceptors);
        let sqs = aws_sdk_sqs::Client::from_conf(sqs.build());
        let store = Arc::new(store::DynamoStore::new(
            dynamodb.clone(),
            names.table.clone(),
            options.retention,
        ));
        AwsBackend {
            reaping: (dynamodb.clone(), s3.clone(), names.clone()),
            builds: builds::BuildRegistry::new(dynamodb.clone(), names.table.clone()),
            streams: Arc::new(streams::DynamoStreams::new(
                dynamodb,
                names.table,
                store.capacity.clone(),
            )),
            store,
            artifacts: Arc::new(artifacts::S3Artifacts::new(s3, names.bucket)),
            queue: Arc::new(queue::SqsQueue::new(
                sqs,
                names.queue_url,
                names.dead_letter_queue_url,
            )),
        }
    }

    /// The DynamoDB capacity consumed so far.
    pub fn consumed_capacity(&self) -> ConsumedCapacity {
        let (write_units, read_units) = self.store.capacity.totals();
        ConsumedCapacity {
            write_units,
            read_units,
        }
    }

    /// The items this backend's run store has written so far, by request and item
    /// kind ("checkpoint: Run (transactional)"), with their bytes and estimated write
    /// units: where the write capacity goes.
    pub fn written_items(&self) -> std::collections::BTreeMap<String, WrittenItems> {
        self.store.capacity.written()
    }

    /// The build registry on the runs table (which step version serves each build).
    pub fn builds(&self) -> builds::BuildRegistry {
        self.builds.clone()
    }

    /// The reaper of this backend's finished runs under `rules`, on the same clients
    /// (its capacity counts in [`AwsBackend::consumed_capacity`]).
    pub fn reaper(&self, rules: retention::RetentionRules) -> retention::Reaper {
        let (dynamodb, s3, names) = &self.reaping;
        retention::Reaper::new(
            dynamodb.clone(),
            s3.clone(),
            names.table.clone(),
            names.bucket.clone(),
            rules,
            self.store.capacity.clone(),
        )
    }

    /// The four ports over these resources.
    pub fn backend(&self) -> Backend {
        Backend {
            store: self.store.clone(),
            artifacts: self.artifacts.clone(),
            queue: self.queue.clone(),
            streams: self.streams.clone(),
            schedules: self.store.clone(),
        }
    }
}

/// An S3 client; with an endpoint override (an emulator) buckets are addressed by path,
/// not by virtual host.
fn s3_client(
    sdk: &aws_config::SdkConfig,
    interceptors: &[SharedInterceptor],
) -> aws_sdk_s3::Client {
    let overridden =
        sdk.endpoint_url().is_some() || std::env::var_os("AWS_ENDPOINT_URL_S3").is_some();
    let mut s3 = aws_sdk_s3::config::Builder::from(sdk).force_path_style(overridden);
    for interceptor in interceptors {
        s3.push_interceptor(interceptor.clone());
    }
    aws_sdk_s3::Client::from_conf(s3.build())
}
