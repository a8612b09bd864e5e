//! Create the backend's resources — table, bucket, queue and dead-letter queue — from
//! the definitions in `infra/template.yaml`, so that `siesta bootstrap`, the test suite
//! and a CloudFormation deployment all build the same thing. The template is read, not
//! copied: keys, indexes, TTL, point-in-time recovery, encryption, deletion protection,
//! the bucket's public access block, ownership, TLS-only policy and expiry, the queues'
//! timeouts and the redrive limit all come from it (`!Ref` to a parameter takes the
//! parameter's default; `!If` is decided by the template's conditions on those
//! defaults). The CloudWatch alarm on the dead-letter queue exists only in a
//! CloudFormation deployment.
//!
//! Every step is idempotent: a table or bucket that exists already is kept (TTL,
//! point-in-time recovery and the bucket's settings are applied again, which changes
//! nothing when they are in place); an existing queue gets the template's attributes.
//! What an emulator does not implement (DynamoDB Local has no continuous backups, so no
//! point-in-time recovery) is skipped with a warning; on AWS it is an error.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, GlobalSecondaryIndex, KeySchemaElement, KeyType,
    PointInTimeRecoverySpecification, Projection, ProjectionType, ScalarAttributeType,
    SseSpecification, TableStatus, TimeToLiveSpecification, TimeToLiveStatus,
};
use aws_sdk_s3::types::{
    BucketLifecycleConfiguration, BucketLocationConstraint, CreateBucketConfiguration,
    ExpirationStatus, LifecycleExpiration, LifecycleRule, LifecycleRuleFilter, ObjectOwnership,
    OwnershipControls, OwnershipControlsRule, PublicAccessBlockConfiguration, ServerSideEncryption,
    ServerSideEncryptionByDefault, ServerSideEncryptionConfiguration, ServerSideEncryptionRule,
};
use aws_sdk_sqs::types::QueueAttributeName;
use serde_yaml::Value;

use crate::ResourceNames;
use crate::error::code;

/// The template the resources are declared in.
pub const TEMPLATE: &str = include_str!("../../../infra/template.yaml");

/// How long a new table may take to become active.
const TABLE_ACTIVE_TIMEOUT: Duration = Duration::from_secs(300);

/// Why the resources could not be created.
#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    /// The template does not declare what is needed.
    #[error("infra/template.yaml: {0}")]
    Template(String),
    /// An AWS call failed.
    #[error("creating {resource}: {message}")]
    Aws {
        /// What was being created.
        resource: String,
        /// What the service said.
        message: String,
    },
}

fn template_error(what: impl Into<String>) -> BootstrapError {
    BootstrapError::Template(what.into())
}

/// A global secondary index as declared.
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

/// The runs table as declared (billing is on demand: the template must say
/// `PAY_PER_REQUEST`).
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
    /// Deletion protection, as the `DeletionProtection` parameter's default decides.
    /// Tests that delete their tables turn it off in their copy of the plan.
    pub deletion_protection: bool,
}

/// A queue as declared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueSpec {
    /// Its attributes, as SQS names them (`VisibilityTimeout`, `MessageRetentionPeriod`,
    /// `SqsManagedSseEnabled`).
    pub attributes: Vec<(String, String)>,
    /// The redrive limit, for a queue with a dead-letter queue.
    pub max_receive_count: Option<u32>,
}

/// S3 Block Public Access settings as declared.
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

/// The bucket as declared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BucketSpec {
    /// The default server-side encryption algorithm.
    pub sse_algorithm: Option<String>,
    /// Days after which objects expire (the template declares none: a run's objects go
    /// with the run, see `crate::retention`).
    pub expiration_days: Option<i32>,
    /// Days after which an incomplete multipart upload is aborted.
    pub abort_incomplete_upload_days: Option<i32>,
    /// The public access block.
    pub public_access_block: Option<PublicAccessBlockSpec>,
    /// The object ownership rule (`BucketOwnerEnforced`: no ACLs).
    pub object_ownership: Option<String>,
    /// The bucket policy (`ArtifactsBucketPolicy`) as JSON, with `${ArtifactsBucket.Arn}`,
    /// `${ArtifactsBucket}` and `${AWS::Partition}` standing for the bucket's ARN, its
    /// name and the partition, filled in when the bucket is created.
    pub policy: Option<String>,
}

/// Everything the backend needs, read from the template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// `RunsTable`.
    pub table: TableSpec,
    /// `ArtifactsBucket` (and `ArtifactsBucketPolicy`).
    pub bucket: BucketSpec,
    /// `WakeUpQueue`.
    pub queue: QueueSpec,
    /// `WakeUpDeadLetterQueue`.
    pub dead_letter_queue: QueueSpec,
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

/// Wait until table `name` is active, and return the names of its indexes.
async fn wait_active(client: &aws_sdk_dynamodb::Client, name: &str) -> Result<Vec<String>, String> {
    let deadline = Instant::now() + TABLE_ACTIVE_TIMEOUT;
    loop {
        let table = client
            .describe_table()
            .table_name(name)
            .send()
            .await
            .map_err(|e| crate::error::sdk("DescribeTable", e).to_string())?
            .table;
        let status = table.as_ref().and_then(|t| t.table_status.clone());
        if status == Some(TableStatus::Active) {
            return Ok(table
                .map(|t| {
                    t.global_secondary_indexes()
                        .iter()
                        .filter_map(|i| i.index_name().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "not active after {TABLE_ACTIVE_TIMEOUT:?} (status {status:?})"
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

// ---- Reading the template -------------------------------------------------------------

/// An intrinsic function in either form, by its long name: `!Ref X` and `{Ref: X}` are
/// ("Ref", X); `!If [..]` and `{"Fn::If": [..]}` are ("Fn::If", [..]); `!Condition X`
/// is ("Condition", X).
fn intrinsic(v: &Value) -> Option<(String, &Value)> {
    match v {
        Value::Tagged(t) => {
            let tag = t.tag.to_string();
            let name = tag.trim_start_matches('!');
            let name = match name {
                "Ref" | "Condition" => name.to_owned(),
                _ => format!("Fn::{name}"),
            };
            Some((name, &t.value))
        }
        Value::Mapping(m) if m.len() == 1 => {
            let (k, v) = m.iter().next()?;
            let k = k.as_str()?;
            (k == "Ref" || k.starts_with("Fn::")).then(|| (k.to_owned(), v))
        }
        _ => None,
    }
}

/// `v` with a `Ref` to a parameter replaced by the parameter's default and an `Fn::If`
/// decided by its condition; anything else (or what cannot be decided) as it is.
fn resolve(t: &Value, v: &Value) -> Value {
    match intrinsic(v) {
        Some((f, arg)) if f == "Ref" => arg
            .as_str()
            .and_then(|name| t.get("Parameters")?.get(name)?.get("Default"))
            .cloned()
            .unwrap_or_else(|| v.clone()),
        Some((f, arg)) if f == "Fn::If" => match arg.as_sequence().map(Vec::as_slice) {
            Some([c, then, otherwise]) => match c.as_str().and_then(|c| condition(t, c, 0)) {
                Some(true) => resolve(t, then),
                Some(false) => resolve(t, otherwise),
                None => v.clone(),
            },
            _ => v.clone(),
        },
        _ => v.clone(),
    }
}

/// The template's condition `name`, on the parameters' defaults.
fn condition(t: &Value, name: &str, depth: usize) -> Option<bool> {
    evaluate(t, t.get("Conditions")?.get(name)?, depth + 1)
}

fn evaluate(t: &Value, v: &Value, depth: usize) -> Option<bool> {
    if depth > 32 {
        return None; // a cycle
    }
    if let Value::Mapping(m) = v
        && m.len() == 1
        && let Some(name) = m.get("Condition").and_then(Value::as_str)
    {
        return condition(t, name, depth);
    }
    let (f, arg) = intrinsic(v)?;
    let args = arg.as_sequence().map(Vec::as_slice);
    match (f.as_str(), args) {
        ("Condition", _) => condition(t, arg.as_str()?, depth),
        ("Fn::Equals", Some([a, b])) => Some(scalar(t, a)? == scalar(t, b)?),
        ("Fn::Not", Some([c])) => Some(!evaluate(t, c, depth + 1)?),
        ("Fn::And", Some(cs)) => cs.iter().try_fold(true, |all, c| {
            let c = evaluate(t, c, depth + 1)?;
            Some(all && c)
        }),
        ("Fn::Or", Some(cs)) => cs.iter().try_fold(false, |any, c| {
            let c = evaluate(t, c, depth + 1)?;
            Some(any || c)
        }),
        _ => None,
    }
}

fn scalar(t: &Value, v: &Value) -> Option<String> {
    match resolve(t, v) {
        Value::String(s) => Some(s),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// A boolean property: absent is `None`; present but not a boolean is an error.
fn flag(t: &Value, props: &Value, path: &[&str]) -> Result<Option<bool>, BootstrapError> {
    let Some(v) = path.iter().try_fold(props, |v, key| v.get(key)) else {
        return Ok(None);
    };
    match scalar(t, v).as_deref() {
        Some("true") => Ok(Some(true)),
        Some("false") => Ok(Some(false)),
        _ => Err(template_error(format!(
            "{} is not a boolean (or cannot be resolved from the defaults)",
            path.join(".")
        ))),
    }
}

fn properties<'a>(
    template: &'a Value,
    logical_id: &str,
    kind: &str,
) -> Result<&'a Value, BootstrapError> {
    let resource = template
        .get("Resources")
        .and_then(|r| r.get(logical_id))
        .ok_or_else(|| template_error(format!("no resource {logical_id}")))?;
    let declared = resource
        .get("Type")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if declared != kind {
        return Err(template_error(format!(
            "{logical_id} is {declared}, not {kind}"
        )));
    }
    resource
        .get("Properties")
        .ok_or_else(|| template_error(format!("{logical_id} has no Properties")))
}

fn pairs(template: &Value, list: Option<&Value>, a: &str, b: &str) -> Vec<(String, String)> {
    list.and_then(Value::as_sequence)
        .map(|items| {
            items
                .iter()
                .filter_map(|i| Some((scalar(template, i.get(a)?)?, scalar(template, i.get(b)?)?)))
                .collect()
        })
        .unwrap_or_default()
}

fn queue_spec(template: &Value, logical_id: &str) -> Result<QueueSpec, BootstrapError> {
    let props = properties(template, logical_id, "AWS::SQS::Queue")?;
    let mut attributes = Vec::new();
    for name in [
        "VisibilityTimeout",
        "MessageRetentionPeriod",
        "SqsManagedSseEnabled",
    ] {
        if let Some(v) = props.get(name).and_then(|v| scalar(template, v)) {
            attributes.push((name.to_owned(), v));
        }
    }
    let max_receive_count = props
        .get("RedrivePolicy")
        .and_then(|r| r.get("maxReceiveCount"))
        .and_then(|v| scalar(template, v))
        .map(|v| {
            v.parse()
                .map_err(|_| template_error(format!("{logical_id}: maxReceiveCount {v}")))
        })
        .transpose()?;
    Ok(QueueSpec {
        attributes,
        max_receive_count,
    })
}

/// The policy document of the `AWS::S3::BucketPolicy` on `bucket`, as JSON with
/// placeholders for what only exists once the bucket does.
fn bucket_policy(t: &Value, bucket: &str) -> Result<Option<String>, BootstrapError> {
    let Some(resources) = t.get("Resources").and_then(Value::as_mapping) else {
        return Ok(None);
    };
    for (id, resource) in resources {
        let props = resource.get("Properties");
        let on_bucket = props
            .and_then(|p| p.get("Bucket"))
            .and_then(intrinsic)
            .is_some_and(|(f, arg)| f == "Ref" && arg.as_str() == Some(bucket));
        if resource.get("Type").and_then(Value::as_str) == Some("AWS::S3::BucketPolicy")
            && on_bucket
        {
            let id = id.as_str().unwrap_or_default();
            let document = props
                .and_then(|p| p.get("PolicyDocument"))
                .ok_or_else(|| template_error(format!("{id} has no PolicyDocument")))?;
            return Ok(Some(policy_json(t, id, document)?.to_string()));
        }
    }
    Ok(None)
}

fn policy_json(t: &Value, id: &str, v: &Value) -> Result<serde_json::Value, BootstrapError> {
    let v = resolve(t, v);
    if let Some((f, arg)) = intrinsic(&v) {
        let placeholder = |s: String| Ok(serde_json::Value::String(format!("${{{s}}}")));
        return match (f.as_str(), arg) {
            ("Fn::GetAtt", Value::String(s)) => placeholder(s.clone()),
            ("Fn::GetAtt", Value::Sequence(parts)) => placeholder(
                parts
                    .iter()
                    .filter_map(Value::as_str)
                    .collect::<Vec<_>>()
                    .join("."),
            ),
            ("Ref", Value::String(s)) => placeholder(s.clone()),
            ("Fn::Sub", Value::String(s)) => Ok(serde_json::Value::String(s.clone())),
            _ => Err(template_error(format!("{id}: cannot evaluate {f} here"))),
        };
    }
    Ok(match v {
        Value::Mapping(m) => {
            let mut out = serde_json::Map::new();
            for (k, v) in &m {
                let k = k
                    .as_str()
                    .ok_or_else(|| template_error(format!("{id}: a key that is not a string")))?;
                out.insert(k.to_owned(), policy_json(t, id, v)?);
            }
            serde_json::Value::Object(out)
        }
        Value::Sequence(items) => serde_json::Value::Array(
            items
                .iter()
                .map(|i| policy_json(t, id, i))
                .collect::<Result<_, _>>()?,
        ),
        scalar => {
            serde_json::to_value(&scalar).map_err(|e| template_error(format!("{id}: {e}")))?
        }
    })
}

/// The partition of a region (`aws`, `aws-cn`, `aws-us-gov`).
fn partition(region: Option<&str>) -> &'static str {
    match region {
        Some(r) if r.starts_with("cn-") => "aws-cn",
        Some(r) if r.starts_with("us-gov-") => "aws-us-gov",
        _ => "aws",
    }
}

impl Plan {
    /// The plan of the template this crate was built with.
    pub fn from_embedded_template() -> Result<Plan, BootstrapError> {
        Plan::from_template(TEMPLATE)
    }

    /// Read the resources out of a CloudFormation/SAM template.
    pub fn from_template(yaml: &str) -> Result<Plan, BootstrapError> {
        let t: Value = serde_yaml::from_str(yaml).map_err(|e| template_error(e.to_string()))?;
        let table = properties(&t, "RunsTable", "AWS::DynamoDB::Table")?;
        if table
            .get("BillingMode")
            .and_then(|v| scalar(&t, v))
            .as_deref()
            != Some("PAY_PER_REQUEST")
        {
            return Err(template_error(
                "RunsTable must be PAY_PER_REQUEST (on demand)",
            ));
        }
        let indexes = table
            .get("GlobalSecondaryIndexes")
            .and_then(Value::as_sequence)
            .map(|gsis| {
                gsis.iter()
                    .map(|g| {
                        let name = g
                            .get("IndexName")
                            .and_then(|v| scalar(&t, v))
                            .ok_or_else(|| template_error("an index without IndexName"))?;
                        let projection = g.get("Projection");
                        Ok(IndexSpec {
                            keys: pairs(&t, g.get("KeySchema"), "AttributeName", "KeyType"),
                            projection: projection
                                .and_then(|p| p.get("ProjectionType"))
                                .and_then(|v| scalar(&t, v))
                                .unwrap_or_else(|| "ALL".into()),
                            non_key_attributes: projection
                                .and_then(|p| p.get("NonKeyAttributes"))
                                .and_then(Value::as_sequence)
                                .map(|s| s.iter().filter_map(|v| scalar(&t, v)).collect())
                                .unwrap_or_default(),
                            name,
                        })
                    })
                    .collect::<Result<Vec<_>, BootstrapError>>()
            })
            .transpose()?
            .unwrap_or_default();
        let ttl_attribute =
            if flag(&t, table, &["TimeToLiveSpecification", "Enabled"])? == Some(true) {
                table
                    .get("TimeToLiveSpecification")
                    .and_then(|s| s.get("AttributeName"))
                    .and_then(|v| scalar(&t, v))
            } else {
                None
            };
        let bucket = properties(&t, "ArtifactsBucket", "AWS::S3::Bucket")?;
        let sse_algorithm = bucket
            .get("BucketEncryption")
            .and_then(|e| e.get("ServerSideEncryptionConfiguration"))
            .and_then(Value::as_sequence)
            .and_then(|rules| rules.first())
            .and_then(|r| r.get("ServerSideEncryptionByDefault"))
            .and_then(|d| d.get("SSEAlgorithm"))
            .and_then(|v| scalar(&t, v));
        let expiration_days = bucket
            .get("LifecycleConfiguration")
            .and_then(|l| l.get("Rules"))
            .and_then(Value::as_sequence)
            .and_then(|rules| rules.iter().find_map(|r| r.get("ExpirationInDays")))
            .and_then(|v| scalar(&t, v))
            .and_then(|v| v.parse().ok());
        let abort_incomplete_upload_days = bucket
            .get("LifecycleConfiguration")
            .and_then(|l| l.get("Rules"))
            .and_then(Value::as_sequence)
            .and_then(|rules| {
                rules.iter().find_map(|r| {
                    r.get("AbortIncompleteMultipartUpload")
                        .and_then(|a| a.get("DaysAfterInitiation"))
                })
            })
            .and_then(|v| scalar(&t, v))
            .and_then(|v| v.parse().ok());
        let public_access_block = match bucket.get("PublicAccessBlockConfiguration") {
            None => None,
            Some(b) => {
                let setting =
                    |name| Ok::<_, BootstrapError>(flag(&t, b, &[name])?.unwrap_or(false));
                Some(PublicAccessBlockSpec {
                    block_public_acls: setting("BlockPublicAcls")?,
                    block_public_policy: setting("BlockPublicPolicy")?,
                    ignore_public_acls: setting("IgnorePublicAcls")?,
                    restrict_public_buckets: setting("RestrictPublicBuckets")?,
                })
            }
        };
        let object_ownership = bucket
            .get("OwnershipControls")
            .and_then(|o| o.get("Rules"))
            .and_then(Value::as_sequence)
            .and_then(|rules| rules.first())
            .and_then(|r| r.get("ObjectOwnership"))
            .and_then(|v| scalar(&t, v));
        let plan = Plan {
            table: TableSpec {
                attributes: pairs(
                    &t,
                    table.get("AttributeDefinitions"),
                    "AttributeName",
                    "AttributeType",
                ),
                keys: pairs(&t, table.get("KeySchema"), "AttributeName", "KeyType"),
                indexes,
                ttl_attribute,
                point_in_time_recovery: flag(
                    &t,
                    table,
                    &[
                        "PointInTimeRecoverySpecification",
                        "PointInTimeRecoveryEnabled",
                    ],
                )?
                .unwrap_or(false),
                sse_enabled: flag(&t, table, &["SSESpecification", "SSEEnabled"])?.unwrap_or(false),
                deletion_protection: flag(&t, table, &["DeletionProtectionEnabled"])?
                    .unwrap_or(false),
            },
            bucket: BucketSpec {
                sse_algorithm,
                expiration_days,
                abort_incomplete_upload_days,
                public_access_block,
                object_ownership,
                policy: bucket_policy(&t, "ArtifactsBucket")?,
            },
            queue: queue_spec(&t, "WakeUpQueue")?,
            dead_letter_queue: queue_spec(&t, "WakeUpDeadLetterQueue")?,
        };
        if plan.table.keys.is_empty() || plan.table.attributes.is_empty() {
            return Err(template_error(
                "RunsTable needs KeySchema and AttributeDefinitions",
            ));
        }
        Ok(plan)
    }

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

    /// Create the table (keys, indexes, on-demand billing, encryption, deletion
    /// protection), wait until it is active, turn on TTL and point-in-time recovery.
    pub async fn create_table(
        &self,
        client: &aws_sdk_dynamodb::Client,
        name: &str,
    ) -> Result<(), BootstrapError> {
        let aws = |e: String| BootstrapError::Aws {
            resource: format!("table {name}"),
            message: e,
        };
        let key = |(attr, kind): &(String, String)| {
            KeySchemaElement::builder()
                .attribute_name(attr)
                .key_type(KeyType::from(kind.as_str()))
                .build()
                .map_err(|e| aws(e.to_string()))
        };
        let mut request = client
            .create_table()
            .table_name(name)
            .billing_mode(BillingMode::PayPerRequest)
            .deletion_protection_enabled(self.table.deletion_protection);
        if self.table.sse_enabled {
            request = request.sse_specification(SseSpecification::builder().enabled(true).build());
        }
        for (attr, kind) in &self.table.attributes {
            request = request.attribute_definitions(
                AttributeDefinition::builder()
                    .attribute_name(attr)
                    .attribute_type(ScalarAttributeType::from(kind.as_str()))
                    .build()
                    .map_err(|e| aws(e.to_string()))?,
            );
        }
        for k in &self.table.keys {
            request = request.key_schema(key(k)?);
        }
        let gsi_of = |index: &IndexSpec| {
            let mut projection = Projection::builder()
                .projection_type(ProjectionType::from(index.projection.as_str()));
            for attr in &index.non_key_attributes {
                projection = projection.non_key_attributes(attr);
            }
            let mut gsi = GlobalSecondaryIndex::builder()
                .index_name(&index.name)
                .projection(projection.build());
            for k in &index.keys {
                gsi = gsi.key_schema(key(k)?);
            }
            gsi.build().map_err(|e| aws(e.to_string()))
        };
        for index in &self.table.indexes {
            request = request.global_secondary_indexes(gsi_of(index)?);
        }
        let created = match request.send().await {
            Ok(_) => true,
            // It exists (or is being created): keep it.
            Err(e) if code(&e) == Some("ResourceInUseException") => false,
            Err(e) => return Err(aws(crate::error::sdk("CreateTable", e).to_string())),
        };

        let existing = wait_active(client, name).await.map_err(aws)?;
        // A table made by an earlier release gets the indexes added since (the `reap`
        // index, for one); it stays online while each backfills, and a query of an
        // index still backfilling fails until it is done. DynamoDB builds one new index
        // of a table at a time: with two missing, a second bootstrap, once the first is
        // built, adds the other.
        if !created {
            for index in &self.table.indexes {
                if existing.contains(&index.name) {
                    continue;
                }
                let mut update = client.update_table().table_name(name);
                for (attr, kind) in &self.table.attributes {
                    if index.keys.iter().any(|(k, _)| k == attr) {
                        update = update.attribute_definitions(
                            AttributeDefinition::builder()
                                .attribute_name(attr)
                                .attribute_type(ScalarAttributeType::from(kind.as_str()))
                                .build()
                                .map_err(|e| aws(e.to_string()))?,
                        );
                    }
                }
                let g = gsi_of(index)?;
                let create = aws_sdk_dynamodb::types::CreateGlobalSecondaryIndexAction::builder()
                    .index_name(g.index_name())
                    .set_key_schema(Some(g.key_schema().to_vec()))
                    .set_projection(g.projection().cloned())
                    .build()
                    .map_err(|e| aws(e.to_string()))?;
                update
                    .global_secondary_index_updates(
                        aws_sdk_dynamodb::types::GlobalSecondaryIndexUpdate::builder()
                            .create(create)
                            .build(),
                    )
                    .send()
                    .await
                    .map_err(|e| {
                        aws(format!(
                            "adding the index {}: {} (if another index of the table is still being built, run this again once it is)",
                            index.name,
                            crate::error::sdk("UpdateTable", e)
                        ))
                    })?;
                wait_active(client, name).await.map_err(aws)?;
                tracing::info!(table = name, index = %index.name, "index added; it backfills while the table serves");
            }
        }

        if let Some(attr) = &self.table.ttl_attribute {
            let ttl = client
                .describe_time_to_live()
                .table_name(name)
                .send()
                .await
                .map_err(|e| aws(crate::error::sdk("DescribeTimeToLive", e).to_string()))?
                .time_to_live_description;
            let on = ttl.as_ref().is_some_and(|d| {
                d.attribute_name() == Some(attr.as_str())
                    && matches!(
                        d.time_to_live_status(),
                        Some(TimeToLiveStatus::Enabled | TimeToLiveStatus::Enabling)
                    )
            });
            if !on {
                let spec = TimeToLiveSpecification::builder()
                    .attribute_name(attr)
                    .enabled(true)
                    .build()
                    .map_err(|e| aws(e.to_string()))?;
                client
                    .update_time_to_live()
                    .table_name(name)
                    .time_to_live_specification(spec)
                    .send()
                    .await
                    .map_err(|e| aws(crate::error::sdk("UpdateTimeToLive", e).to_string()))?;
            }
        }

        if self.table.point_in_time_recovery {
            let deadline = Instant::now() + TABLE_ACTIVE_TIMEOUT;
            let spec = PointInTimeRecoverySpecification::builder()
                .point_in_time_recovery_enabled(true)
                .build()
                .map_err(|e| aws(e.to_string()))?;
            loop {
                match client
                    .update_continuous_backups()
                    .table_name(name)
                    .point_in_time_recovery_specification(spec.clone())
                    .send()
                    .await
                {
                    Ok(_) => break,
                    // An emulator without continuous backups (DynamoDB Local).
                    Err(e) if code(&e) == Some("UnknownOperationException") => {
                        tracing::warn!(
                            table = name,
                            "the endpoint has no point-in-time recovery (UpdateContinuousBackups); skipped"
                        );
                        break;
                    }
                    // Right after creation AWS may still be setting backups up.
                    Err(e)
                        if e.as_service_error()
                            .is_some_and(|e| e.is_continuous_backups_unavailable_exception())
                            && Instant::now() < deadline =>
                    {
                        tokio::time::sleep(Duration::from_secs(2)).await;
                    }
                    Err(e) => {
                        return Err(aws(
                            crate::error::sdk("UpdateContinuousBackups", e).to_string()
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    /// Create the bucket with default encryption, the public access block, the object
    /// ownership rule, the bucket policy and the lifecycle expiry.
    pub async fn create_bucket(
        &self,
        client: &aws_sdk_s3::Client,
        name: &str,
        sdk: &aws_config::SdkConfig,
    ) -> Result<(), BootstrapError> {
        let aws = |e: String| BootstrapError::Aws {
            resource: format!("bucket {name}"),
            message: e,
        };
        let region = sdk.region().map(|r| r.as_ref().to_owned());
        let mut request = client.create_bucket().bucket(name);
        // us-east-1 takes no location constraint; every other region needs one.
        if let Some(region) = region.as_deref()
            && region != "us-east-1"
        {
            request = request.create_bucket_configuration(
                CreateBucketConfiguration::builder()
                    .location_constraint(BucketLocationConstraint::from(region))
                    .build(),
            );
        }
        match request.send().await {
            Ok(_) => {}
            Err(e) if code(&e) == Some("BucketAlreadyOwnedByYou") => {}
            Err(e) => return Err(aws(crate::error::sdk("CreateBucket", e).to_string())),
        }
        if let Some(algorithm) = &self.bucket.sse_algorithm {
            let rule = ServerSideEncryptionRule::builder()
                .apply_server_side_encryption_by_default(
                    ServerSideEncryptionByDefault::builder()
                        .sse_algorithm(ServerSideEncryption::from(algorithm.as_str()))
                        .build()
                        .map_err(|e| aws(e.to_string()))?,
                )
                .build();
            client
                .put_bucket_encryption()
                .bucket(name)
                .server_side_encryption_configuration(
                    ServerSideEncryptionConfiguration::builder()
                        .rules(rule)
                        .build()
                        .map_err(|e| aws(e.to_string()))?,
                )
                .send()
                .await
                .map_err(|e| aws(crate::error::sdk("PutBucketEncryption", e).to_string()))?;
        }
        if let Some(block) = self.bucket.public_access_block {
            client
                .put_public_access_block()
                .bucket(name)
                .public_access_block_configuration(
                    PublicAccessBlockConfiguration::builder()
                        .block_public_acls(block.block_public_acls)
                        .block_public_policy(block.block_public_policy)
                        .ignore_public_acls(block.ignore_public_acls)
                        .restrict_public_buckets(block.restrict_public_buckets)
                        .build(),
                )
                .send()
                .await
                .map_err(|e| aws(crate::error::sdk("PutPublicAccessBlock", e).to_string()))?;
        }
        if let Some(ownership) = &self.bucket.object_ownership {
            let rule = OwnershipControlsRule::builder()
                .object_ownership(ObjectOwnership::from(ownership.as_str()))
                .build()
                .map_err(|e| aws(e.to_string()))?;
            client
                .put_bucket_ownership_controls()
                .bucket(name)
                .ownership_controls(
                    OwnershipControls::builder()
                        .rules(rule)
                        .build()
                        .map_err(|e| aws(e.to_string()))?,
                )
                .send()
                .await
                .map_err(|e| aws(crate::error::sdk("PutBucketOwnershipControls", e).to_string()))?;
        }
        if let Some(policy) = &self.bucket.policy {
            let partition = partition(region.as_deref());
            let policy = policy
                .replace(
                    "${ArtifactsBucket.Arn}",
                    &format!("arn:{partition}:s3:::{name}"),
                )
                .replace("${ArtifactsBucket}", name)
                .replace("${AWS::Partition}", partition);
            if let Some(at) = policy.find("${") {
                let rest: String = policy[at..].chars().take(40).collect();
                return Err(template_error(format!(
                    "ArtifactsBucketPolicy: cannot fill in {rest}…"
                )));
            }
            client
                .put_bucket_policy()
                .bucket(name)
                .policy(policy)
                .send()
                .await
                .map_err(|e| aws(crate::error::sdk("PutBucketPolicy", e).to_string()))?;
        }
        // The declared rules replace whatever the bucket had (an earlier release's
        // expiry by age, which would take a waiting run's values).
        let mut rules = Vec::new();
        if let Some(days) = self.bucket.expiration_days {
            rules.push(
                LifecycleRule::builder()
                    .id("expire-artifacts")
                    .status(ExpirationStatus::Enabled)
                    .filter(LifecycleRuleFilter::builder().prefix("").build())
                    .expiration(LifecycleExpiration::builder().days(days).build())
                    .build()
                    .map_err(|e| aws(e.to_string()))?,
            );
        }
        if let Some(days) = self.bucket.abort_incomplete_upload_days {
            rules.push(
                LifecycleRule::builder()
                    .id("abort-incomplete-uploads")
                    .status(ExpirationStatus::Enabled)
                    .filter(LifecycleRuleFilter::builder().prefix("").build())
                    .abort_incomplete_multipart_upload(
                        aws_sdk_s3::types::AbortIncompleteMultipartUpload::builder()
                            .days_after_initiation(days)
                            .build(),
                    )
                    .build()
                    .map_err(|e| aws(e.to_string()))?,
            );
        }
        if !rules.is_empty() {
            client
                .put_bucket_lifecycle_configuration()
                .bucket(name)
                .lifecycle_configuration(
                    BucketLifecycleConfiguration::builder()
                        .set_rules(Some(rules))
                        .build()
                        .map_err(|e| aws(e.to_string()))?,
                )
                .send()
                .await
                .map_err(|e| {
                    aws(crate::error::sdk("PutBucketLifecycleConfiguration", e).to_string())
                })?;
        }
        Ok(())
    }

    /// Create the dead-letter queue, then the queue with its redrive policy; the receive
    /// limit is the template's unless `max_receive_count` overrides it (tests that count
    /// receptions use a small one; the other attributes stay the template's). A queue
    /// that exists with other attributes is given the template's. Returns (queue URL,
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
            .ok_or_else(|| template_error("WakeUpQueue has no RedrivePolicy.maxReceiveCount"))?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plan_read_from_the_real_template_has_what_the_adapter_relies_on() {
        use crate::keys::*;
        let plan = Plan::from_embedded_template().unwrap();
        assert_eq!(
            plan.table.keys,
            vec![(PK.into(), "HASH".into()), (SK.into(), "RANGE".into())]
        );
        let due = plan
            .table
            .indexes
            .iter()
            .find(|i| i.name == DUE_INDEX)
            .unwrap();
        assert_eq!(
            due.keys,
            vec![
                (DUE_SHARD.into(), "HASH".into()),
                (SWEEP_AT.into(), "RANGE".into())
            ]
        );
        assert_eq!(due.projection, "INCLUDE");
        for attr in [TENANT, "run_id", "status", DUE_AT] {
            assert!(due.non_key_attributes.iter().any(|a| a == attr), "{attr}");
        }
        let by_tenant = plan
            .table
            .indexes
            .iter()
            .find(|i| i.name == TENANT_INDEX)
            .unwrap();
        assert_eq!(
            by_tenant.keys,
            vec![
                (TENANT.into(), "HASH".into()),
                (CREATED_KEY.into(), "RANGE".into())
            ]
        );
        assert_eq!(by_tenant.projection, "KEYS_ONLY");
        let by_build = plan
            .table
            .indexes
            .iter()
            .find(|i| i.name == BUILD_INDEX)
            .unwrap();
        assert_eq!(
            by_build.keys,
            vec![
                (BUILD_KEY.into(), "HASH".into()),
                (CREATED_KEY.into(), "RANGE".into())
            ]
        );
        assert_eq!(by_build.projection, "KEYS_ONLY");
        assert_eq!(plan.table.indexes.len(), 4);
        for (attr, kind) in [
            (PK, "S"),
            (SK, "S"),
            (DUE_SHARD, "S"),
            (SWEEP_AT, "N"),
            (TENANT, "S"),
            (CREATED_KEY, "S"),
            (BUILD_KEY, "S"),
        ] {
            assert!(
                plan.table
                    .attributes
                    .contains(&(attr.to_owned(), kind.to_owned())),
                "{attr} {kind}"
            );
        }
        assert_eq!(plan.table.ttl_attribute.as_deref(), Some(EXPIRES_AT));
        assert!(plan.table.point_in_time_recovery);
        assert!(plan.table.sse_enabled);
        assert!(
            plan.table.deletion_protection,
            "!If [ProtectRunsTable, ..] on the DeletionProtection default \"true\""
        );

        assert_eq!(plan.queue.max_receive_count, Some(5));
        assert!(
            plan.queue
                .attributes
                .contains(&("VisibilityTimeout".into(), "900".into()))
        );
        assert!(
            plan.queue
                .attributes
                .contains(&("SqsManagedSseEnabled".into(), "true".into()))
        );
        assert_eq!(plan.dead_letter_queue.max_receive_count, None);
        assert!(
            plan.dead_letter_queue
                .attributes
                .contains(&("MessageRetentionPeriod".into(), "1209600".into())),
            "14 days"
        );

        assert_eq!(plan.bucket.sse_algorithm.as_deref(), Some("AES256"));
        assert_eq!(
            plan.bucket.expiration_days, None,
            "no expiry by age: a run's objects go with the run"
        );
        assert_eq!(plan.bucket.abort_incomplete_upload_days, Some(1));
        assert_eq!(
            plan.bucket.public_access_block,
            Some(PublicAccessBlockSpec {
                block_public_acls: true,
                block_public_policy: true,
                ignore_public_acls: true,
                restrict_public_buckets: true,
            })
        );
        assert_eq!(
            plan.bucket.object_ownership.as_deref(),
            Some("BucketOwnerEnforced")
        );
        let policy: serde_json::Value =
            serde_json::from_str(plan.bucket.policy.as_deref().unwrap()).unwrap();
        let statement = &policy["Statement"][0];
        assert_eq!(statement["Effect"], "Deny");
        assert_eq!(
            statement["Condition"]["Bool"]["aws:SecureTransport"],
            "false"
        );
        assert_eq!(
            statement["Resource"],
            serde_json::json!(["${ArtifactsBucket.Arn}", "${ArtifactsBucket.Arn}/*"])
        );
    }

    const SMALL: &str = r#"
Parameters:
  Protect: {Type: String, Default: "false"}
  Receives: {Type: Number, Default: 3}
  Mode: {Type: String, Default: PAY_PER_REQUEST}
Conditions:
  IsProtected: {"Fn::Equals": [{Ref: Protect}, "true"]}
  NotProtected: !Not [!Condition IsProtected]
  Both: !And [!Condition NotProtected, {Condition: NotProtected}]
Resources:
  RunsTable:
    Type: AWS::DynamoDB::Table
    Properties:
      BillingMode: !Ref Mode
      AttributeDefinitions: [{AttributeName: pk, AttributeType: S}]
      KeySchema: [{AttributeName: pk, KeyType: HASH}]
      TimeToLiveSpecification: {AttributeName: ttl, Enabled: false}
      DeletionProtectionEnabled: {"Fn::If": [IsProtected, true, false]}
      SSESpecification: {SSEEnabled: !If [Both, true, false]}
  ArtifactsBucket:
    Type: AWS::S3::Bucket
    Properties: {}
  WakeUpQueue:
    Type: AWS::SQS::Queue
    Properties:
      VisibilityTimeout: 60
      RedrivePolicy: {deadLetterTargetArn: !GetAtt WakeUpDeadLetterQueue.Arn, maxReceiveCount: !Ref Receives}
  WakeUpDeadLetterQueue:
    Type: AWS::SQS::Queue
    Properties: {}
"#;

    #[test]
    fn parameters_and_conditions_are_read_in_both_forms() {
        let plan = Plan::from_template(SMALL).unwrap();
        assert!(!plan.table.deletion_protection);
        assert!(
            plan.table.sse_enabled,
            "Both: !And of !Not and {{Condition}}"
        );
        assert!(!plan.table.point_in_time_recovery);
        assert_eq!(plan.table.ttl_attribute, None, "TTL declared but disabled");
        assert_eq!(plan.queue.max_receive_count, Some(3));
        assert_eq!(plan.bucket.policy, None);
        assert_eq!(plan.bucket.public_access_block, None);

        let protected = SMALL.replace(r#"Default: "false""#, r#"Default: "true""#);
        let plan = Plan::from_template(&protected).unwrap();
        assert!(plan.table.deletion_protection);
        assert!(!plan.table.sse_enabled);
    }

    #[test]
    fn what_cannot_be_decided_is_an_error_not_a_guess() {
        let undecidable = SMALL.replace(
            "{\"Fn::If\": [IsProtected, true, false]}",
            "!If [NoSuchCondition, true, false]",
        );
        let err = Plan::from_template(&undecidable).unwrap_err();
        assert!(
            err.to_string().contains("DeletionProtectionEnabled"),
            "{err}"
        );

        let policy = format!(
            "{SMALL}
  Policy:
    Type: AWS::S3::BucketPolicy
    Properties:
      Bucket: !Ref ArtifactsBucket
      PolicyDocument:
        Statement: [{{Effect: Deny, Resource: !ImportValue elsewhere}}]
"
        );
        let err = Plan::from_template(&policy).unwrap_err();
        assert!(err.to_string().contains("Fn::ImportValue"), "{err}");
    }

    #[test]
    fn a_template_without_the_table_is_a_clear_error() {
        let err = Plan::from_template("Resources: {}").unwrap_err();
        assert!(err.to_string().contains("RunsTable"), "{err}");
        let err = Plan::from_template("not: [yaml").unwrap_err();
        assert!(matches!(err, BootstrapError::Template(_)), "{err}");
    }

    #[test]
    fn partitions() {
        assert_eq!(partition(Some("eu-west-1")), "aws");
        assert_eq!(partition(Some("cn-north-1")), "aws-cn");
        assert_eq!(partition(Some("us-gov-west-1")), "aws-us-gov");
        assert_eq!(partition(None), "aws");
    }
}
