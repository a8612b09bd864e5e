//! What the backend needs, described in Rust: the runs table (keys, indexes, TTL,
//! backups, encryption, deletion protection), the artifacts bucket and the wake-up queue
//! with its dead-letter queue. `siesta bootstrap` and the tests create from this;
//! `infra/template.yaml` declares the same for a CloudFormation deployment, and
//! `tests/template.rs` checks that the two agree.

use crate::keys::{
    BUILD_KEY, CREATED_KEY, DUE_SHARD, EXPIRES_AT, INDEXES, PK, REAP_AT, REAP_SHARD, SK, SWEEP_AT,
    TENANT,
};

/// A global secondary index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexSpec {
    /// Its name.
    pub name: String,
    /// (attribute, `HASH` | `RANGE`).
    pub keys: Vec<(String, String)>,
    /// `ALL`, `KEYS_ONLY` or `INCLUDE`.
    pub projection: String,
    /// The projected attributes of an `INCLUDE` projection.
    pub non_key_attributes: Vec<String>,
}

/// The runs table (billing is always on demand).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableSpec {
    /// (attribute, `S` | `N` | `B`).
    pub attributes: Vec<(String, String)>,
    /// (attribute, `HASH` | `RANGE`).
    pub keys: Vec<(String, String)>,
    /// The global secondary indexes.
    pub indexes: Vec<IndexSpec>,
    /// The TTL attribute, when TTL is enabled.
    pub ttl_attribute: Option<String>,
    /// Point-in-time recovery (continuous backups).
    pub point_in_time_recovery: bool,
    /// Encryption at rest with a KMS key (`SSESpecification.SSEEnabled`).
    pub sse_enabled: bool,
    /// Deletion protection (the template's `DeletionProtection` parameter defaults to
    /// it). Tests that delete their tables turn it off in their copy of the plan.
    pub deletion_protection: bool,
}

/// A queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueSpec {
    /// Its attributes, as SQS names them (`VisibilityTimeout`, `MessageRetentionPeriod`,
    /// `SqsManagedSseEnabled`).
    pub attributes: Vec<(String, String)>,
    /// The redrive limit, for a queue with a dead-letter queue.
    pub max_receive_count: Option<u32>,
}

/// S3 Block Public Access settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PublicAccessBlockSpec {
    /// `BlockPublicAcls`.
    pub block_public_acls: bool,
    /// `BlockPublicPolicy`.
    pub block_public_policy: bool,
    /// `IgnorePublicAcls`.
    pub ignore_public_acls: bool,
    /// `RestrictPublicBuckets`.
    pub restrict_public_buckets: bool,
}

/// The artifacts bucket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BucketSpec {
    /// The default server-side encryption algorithm.
    pub sse_algorithm: Option<String>,
    /// Days after which objects expire (none: a run's objects go with the run, see
    /// `crate::retention`).
    pub expiration_days: Option<i32>,
    /// Days after which an incomplete multipart upload is aborted.
    pub abort_incomplete_upload_days: Option<i32>,
    /// The public access block.
    pub public_access_block: Option<PublicAccessBlockSpec>,
    /// The object ownership rule (`BucketOwnerEnforced`: no ACLs).
    pub object_ownership: Option<String>,
    /// The bucket policy as JSON, with `${ArtifactsBucket.Arn}`, `${ArtifactsBucket}` and
    /// `${AWS::Partition}` standing for the bucket's ARN, its name and the partition,
    /// filled in when the bucket is created.
    pub policy: Option<String>,
}

/// Everything the backend needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The runs table (`RunsTable` in the template).
    pub table: TableSpec,
    /// The artifacts bucket (`ArtifactsBucket` and `ArtifactsBucketPolicy`).
    pub bucket: BucketSpec,
    /// The wake-up queue (`WakeUpQueue`).
    pub queue: QueueSpec,
    /// Its dead-letter queue (`WakeUpDeadLetterQueue`).
    pub dead_letter_queue: QueueSpec,
}

fn pairs(items: &[(&str, &str)]) -> Vec<(String, String)> {
    items
        .iter()
        .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
        .collect()
}

/// An index on (`hash`, `range`): keys only, or with the `include`d attributes.
fn index(name: &str, hash: &str, range: &str, include: &[&str]) -> IndexSpec {
    IndexSpec {
        name: name.to_owned(),
        keys: pairs(&[(hash, "HASH"), (range, "RANGE")]),
        projection: if include.is_empty() {
            "KEYS_ONLY"
        } else {
            "INCLUDE"
        }
        .to_owned(),
        non_key_attributes: include.iter().map(|a| (*a).to_owned()).collect(),
    }
}

impl Plan {
    /// The resources the backend needs, as `infra/template.yaml` declares them too.
    pub fn declared() -> Plan {
        Plan {
            table: TableSpec {
                attributes: pairs(&[
                    (PK, "S"),
                    (SK, "S"),
                    (DUE_SHARD, "S"),
                    (SWEEP_AT, "N"),
                    (TENANT, "S"),
                    (CREATED_KEY, "S"),
                    (BUILD_KEY, "S"),
                    (REAP_SHARD, "S"),
                    (REAP_AT, "N"),
                ]),
                keys: pairs(&[(PK, "HASH"), (SK, "RANGE")]),
                indexes: INDEXES
                    .iter()
                    .map(|i| index(i.name, i.hash, i.range, i.include))
                    .collect(),
                ttl_attribute: Some(EXPIRES_AT.to_owned()),
                point_in_time_recovery: true,
                sse_enabled: true,
                deletion_protection: true,
            },
            bucket: BucketSpec {
                sse_algorithm: Some("AES256".to_owned()),
                // No expiry by age: S3 counts it from an object's creation, and a run
                // that waits longer than the retention still needs what it offloaded.
                expiration_days: None,
                abort_incomplete_upload_days: Some(1),
                public_access_block: Some(PublicAccessBlockSpec {
                    block_public_acls: true,
                    block_public_policy: true,
                    ignore_public_acls: true,
                    restrict_public_buckets: true,
                }),
                object_ownership: Some("BucketOwnerEnforced".to_owned()),
                policy: Some(
                    serde_json::json!({
                        "Version": "2012-10-17",
                        "Statement": [{
                            "Sid": "DenyInsecureTransport",
                            "Effect": "Deny",
                            "Principal": "*",
                            "Action": "s3:*",
                            "Resource": ["${ArtifactsBucket.Arn}", "${ArtifactsBucket.Arn}/*"],
                            "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                        }],
                    })
                    .to_string(),
                ),
            },
            queue: QueueSpec {
                // The visibility timeout is at least the step function's timeout: a
                // message is not handed out again while an invocation may still be
                // working on it.
                attributes: pairs(&[
                    ("VisibilityTimeout", "900"),
                    ("MessageRetentionPeriod", "345600"),
                    ("SqsManagedSseEnabled", "true"),
                ]),
                max_receive_count: Some(5),
            },
            dead_letter_queue: QueueSpec {
                attributes: pairs(&[
                    ("MessageRetentionPeriod", "1209600"),
                    ("SqsManagedSseEnabled", "true"),
                ]),
                max_receive_count: None,
            },
        }
    }
}
