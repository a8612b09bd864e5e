//! Create the backend's resources — table, bucket, queue and dead-letter queue — from
//! the definitions in `infra/template.yaml`, so that `siesta bootstrap`, the test suite
//! and a CloudFormation deployment all build the same thing. The template is read, not
//! copied: keys, indexes, TTL, queue timeouts and the redrive limit come from it.
//! Every step is idempotent: what exists already is left as it is.

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, GlobalSecondaryIndex, KeySchemaElement, KeyType, Projection,
    ProjectionType, ScalarAttributeType, TableStatus, TimeToLiveSpecification,
};
use aws_sdk_s3::types::{
    BucketLifecycleConfiguration, BucketLocationConstraint, CreateBucketConfiguration,
    ExpirationStatus, LifecycleExpiration, LifecycleRule, LifecycleRuleFilter,
    ServerSideEncryption, ServerSideEncryptionByDefault, ServerSideEncryptionConfiguration,
    ServerSideEncryptionRule,
};
use aws_sdk_sqs::types::QueueAttributeName;
use serde_yaml::Value;

use crate::ResourceNames;
use crate::error::code;

/// The template the resources are declared in.
pub const TEMPLATE: &str = include_str!("../../../infra/template.yaml");

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

/// The runs table as declared.
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

/// The bucket as declared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BucketSpec {
    /// The default server-side encryption algorithm.
    pub sse_algorithm: Option<String>,
    /// Days after which objects expire.
    pub expiration_days: Option<i32>,
}

/// Everything the backend needs, read from the template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// `RunsTable`.
    pub table: TableSpec,
    /// `ArtifactsBucket`.
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

/// Resolve `!Ref Parameter` to the parameter's default; other values as they are.
fn resolve<'a>(template: &'a Value, v: &'a Value) -> &'a Value {
    if let Value::Tagged(t) = v
        && t.tag == "!Ref"
        && let Some(name) = t.value.as_str()
        && let Some(default) = template
            .get("Parameters")
            .and_then(|p| p.get(name))
            .and_then(|p| p.get("Default"))
    {
        return default;
    }
    v
}

fn scalar(template: &Value, v: &Value) -> Option<String> {
    match resolve(template, v) {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
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

impl Plan {
    /// The plan of the template this crate was built with.
    pub fn from_embedded_template() -> Result<Plan, BootstrapError> {
        Plan::from_template(TEMPLATE)
    }

    /// Read the resources out of a CloudFormation/SAM template.
    pub fn from_template(yaml: &str) -> Result<Plan, BootstrapError> {
        let t: Value = serde_yaml::from_str(yaml).map_err(|e| template_error(e.to_string()))?;
        let table = properties(&t, "RunsTable", "AWS::DynamoDB::Table")?;
        if table.get("BillingMode").and_then(Value::as_str) != Some("PAY_PER_REQUEST") {
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
        let ttl = table.get("TimeToLiveSpecification");
        let ttl_attribute = ttl
            .filter(|s| s.get("Enabled").and_then(Value::as_bool) == Some(true))
            .and_then(|s| s.get("AttributeName"))
            .and_then(|v| scalar(&t, v));
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
            },
            bucket: BucketSpec {
                sse_algorithm,
                expiration_days,
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

    /// Create the table, wait until it is active, and turn on TTL.
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
            .billing_mode(BillingMode::PayPerRequest);
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
        for index in &self.table.indexes {
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
            request =
                request.global_secondary_indexes(gsi.build().map_err(|e| aws(e.to_string()))?);
        }
        match request.send().await {
            Ok(_) => {}
            Err(e) if code(&e) == Some("ResourceInUseException") => {}
            Err(e) => return Err(aws(crate::error::sdk("CreateTable", e).to_string())),
        }
        for _ in 0..600 {
            let status = client
                .describe_table()
                .table_name(name)
                .send()
                .await
                .map_err(|e| aws(crate::error::sdk("DescribeTable", e).to_string()))?
                .table
                .and_then(|t| t.table_status);
            if status == Some(TableStatus::Active) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        if let Some(attr) = &self.table.ttl_attribute {
            let spec = TimeToLiveSpecification::builder()
                .attribute_name(attr)
                .enabled(true)
                .build()
                .map_err(|e| aws(e.to_string()))?;
            match client
                .update_time_to_live()
                .table_name(name)
                .time_to_live_specification(spec)
                .send()
                .await
            {
                Ok(_) => {}
                // "TimeToLive is already enabled".
                Err(e) if code(&e) == Some("ValidationException") => {}
                Err(e) => return Err(aws(crate::error::sdk("UpdateTimeToLive", e).to_string())),
            }
        }
        Ok(())
    }

    /// Create the bucket with default encryption and the lifecycle expiry.
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
        let mut request = client.create_bucket().bucket(name);
        // us-east-1 takes no location constraint; every other region needs one.
        if let Some(region) = sdk.region().map(|r| r.as_ref().to_owned())
            && region != "us-east-1"
        {
            request = request.create_bucket_configuration(
                CreateBucketConfiguration::builder()
                    .location_constraint(BucketLocationConstraint::from(region.as_str()))
                    .build(),
            );
        }
        match request.send().await {
            Ok(_) => {}
            Err(e) if matches!(code(&e), Some("BucketAlreadyOwnedByYou")) => {}
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
        if let Some(days) = self.bucket.expiration_days {
            let rule = LifecycleRule::builder()
                .id("expire-artifacts")
                .status(ExpirationStatus::Enabled)
                .filter(LifecycleRuleFilter::builder().prefix("").build())
                .expiration(LifecycleExpiration::builder().days(days).build())
                .build()
                .map_err(|e| aws(e.to_string()))?;
            client
                .put_bucket_lifecycle_configuration()
                .bucket(name)
                .lifecycle_configuration(
                    BucketLifecycleConfiguration::builder()
                        .rules(rule)
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
    /// receptions use a small one). Returns (queue URL, dead-letter queue URL).
    pub async fn create_queues(
        &self,
        client: &aws_sdk_sqs::Client,
        queue: &str,
        dead_letter_queue: &str,
        max_receive_count: Option<u32>,
    ) -> Result<(String, String), BootstrapError> {
        let aws = |name: &str, e: String| BootstrapError::Aws {
            resource: format!("queue {name}"),
            message: e,
        };
        let attributes = |spec: &QueueSpec| -> HashMap<QueueAttributeName, String> {
            spec.attributes
                .iter()
                .map(|(k, v)| (QueueAttributeName::from(k.as_str()), v.clone()))
                .collect()
        };
        let dlq_url = client
            .create_queue()
            .queue_name(dead_letter_queue)
            .set_attributes(Some(attributes(&self.dead_letter_queue)))
            .send()
            .await
            .map_err(|e| {
                aws(
                    dead_letter_queue,
                    crate::error::sdk("CreateQueue", e).to_string(),
                )
            })?
            .queue_url
            .ok_or_else(|| aws(dead_letter_queue, "no queue URL".into()))?;
        let arn = client
            .get_queue_attributes()
            .queue_url(&dlq_url)
            .attribute_names(QueueAttributeName::QueueArn)
            .send()
            .await
            .map_err(|e| {
                aws(
                    dead_letter_queue,
                    crate::error::sdk("GetQueueAttributes", e).to_string(),
                )
            })?
            .attributes
            .and_then(|mut a| a.remove(&QueueAttributeName::QueueArn))
            .ok_or_else(|| aws(dead_letter_queue, "no queue ARN".into()))?;
        let limit = max_receive_count
            .or(self.queue.max_receive_count)
            .ok_or_else(|| template_error("WakeUpQueue has no RedrivePolicy.maxReceiveCount"))?;
        let mut attrs = attributes(&self.queue);
        attrs.insert(
            QueueAttributeName::RedrivePolicy,
            serde_json::json!({"deadLetterTargetArn": arn, "maxReceiveCount": limit.to_string()})
                .to_string(),
        );
        let url = client
            .create_queue()
            .queue_name(queue)
            .set_attributes(Some(attrs))
            .send()
            .await
            .map_err(|e| aws(queue, crate::error::sdk("CreateQueue", e).to_string()))?
            .queue_url
            .ok_or_else(|| aws(queue, "no queue URL".into()))?;
        Ok((url, dlq_url))
    }
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
                (DUE_AT.into(), "RANGE".into())
            ]
        );
        assert_eq!(due.projection, "INCLUDE");
        for attr in [TENANT, "run_id", "status"] {
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
        assert_eq!(plan.table.ttl_attribute.as_deref(), Some(EXPIRES_AT));
        assert_eq!(plan.queue.max_receive_count, Some(5));
        assert!(
            plan.queue
                .attributes
                .contains(&("VisibilityTimeout".into(), "900".into()))
        );
        assert_eq!(plan.bucket.sse_algorithm.as_deref(), Some("AES256"));
        assert_eq!(
            plan.bucket.expiration_days,
            Some(30),
            "!Ref RetentionDays → its default"
        );
    }

    #[test]
    fn a_template_without_the_table_is_a_clear_error() {
        let err = Plan::from_template("Resources: {}").unwrap_err();
        assert!(err.to_string().contains("RunsTable"), "{err}");
        let err = Plan::from_template("not: [yaml").unwrap_err();
        assert!(matches!(err, BootstrapError::Template(_)), "{err}");
    }
}
