//! The runs table: created with its keys and indexes, or, made by an earlier release,
//! given the indexes it lacks; then TTL and point-in-time recovery.

use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, CreateGlobalSecondaryIndexAction, GlobalSecondaryIndex,
    GlobalSecondaryIndexUpdate, KeySchemaElement, KeyType, PointInTimeRecoverySpecification,
    Projection, ProjectionType, ScalarAttributeType, SseSpecification, TableStatus,
    TimeToLiveSpecification, TimeToLiveStatus,
};

use super::{BootstrapError, IndexSpec, Plan};
use crate::error::code;

/// How long a new table may take to become active.
const TABLE_ACTIVE_TIMEOUT: Duration = Duration::from_secs(300);

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

fn key(attr: &str, kind: &str) -> Result<KeySchemaElement, String> {
    KeySchemaElement::builder()
        .attribute_name(attr)
        .key_type(KeyType::from(kind))
        .build()
        .map_err(|e| e.to_string())
}

fn attribute(attr: &str, kind: &str) -> Result<AttributeDefinition, String> {
    AttributeDefinition::builder()
        .attribute_name(attr)
        .attribute_type(ScalarAttributeType::from(kind))
        .build()
        .map_err(|e| e.to_string())
}

fn gsi(index: &IndexSpec) -> Result<GlobalSecondaryIndex, String> {
    let mut projection =
        Projection::builder().projection_type(ProjectionType::from(index.projection.as_str()));
    for attr in &index.non_key_attributes {
        projection = projection.non_key_attributes(attr);
    }
    let mut gsi = GlobalSecondaryIndex::builder()
        .index_name(&index.name)
        .projection(projection.build());
    for (attr, kind) in &index.keys {
        gsi = gsi.key_schema(key(attr, kind)?);
    }
    gsi.build().map_err(|e| e.to_string())
}

impl Plan {
    /// Create the table (keys, indexes, on-demand billing, encryption, deletion
    /// protection), wait until it is active, turn on TTL and point-in-time recovery. A
    /// table that exists is kept and given the indexes it lacks.
    pub async fn create_table(
        &self,
        client: &aws_sdk_dynamodb::Client,
        name: &str,
    ) -> Result<(), BootstrapError> {
        let aws = |e: String| BootstrapError::Aws {
            resource: format!("table {name}"),
            message: e,
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
            request = request.attribute_definitions(attribute(attr, kind).map_err(aws)?);
        }
        for (attr, kind) in &self.table.keys {
            request = request.key_schema(key(attr, kind).map_err(aws)?);
        }
        for index in &self.table.indexes {
            request = request.global_secondary_indexes(gsi(index).map_err(aws)?);
        }
        let created = match request.send().await {
            Ok(_) => true,
            // It exists (or is being created): keep it.
            Err(e) if code(&e) == Some("ResourceInUseException") => false,
            Err(e) => return Err(aws(crate::error::sdk("CreateTable", e).to_string())),
        };
        let existing = wait_active(client, name).await.map_err(aws)?;
        if !created {
            self.add_missing_indexes(client, name, &existing)
                .await
                .map_err(aws)?;
        }
        if let Some(attr) = &self.table.ttl_attribute {
            enable_ttl(client, name, attr).await.map_err(aws)?;
        }
        if self.table.point_in_time_recovery {
            enable_point_in_time_recovery(client, name)
                .await
                .map_err(aws)?;
        }
        Ok(())
    }

    /// A table made by an earlier release gets the indexes added since (the `reap`
    /// index, for one); it stays online while each backfills, and a query of an index
    /// still backfilling fails until it is done. DynamoDB builds one new index of a table
    /// at a time: with two missing, a second bootstrap, once the first is built, adds the
    /// other.
    async fn add_missing_indexes(
        &self,
        client: &aws_sdk_dynamodb::Client,
        name: &str,
        existing: &[String],
    ) -> Result<(), String> {
        for index in &self.table.indexes {
            if existing.contains(&index.name) {
                continue;
            }
            let mut update = client.update_table().table_name(name);
            for (attr, kind) in &self.table.attributes {
                if index.keys.iter().any(|(k, _)| k == attr) {
                    update = update.attribute_definitions(attribute(attr, kind)?);
                }
            }
            let g = gsi(index)?;
            let create = CreateGlobalSecondaryIndexAction::builder()
                .index_name(g.index_name())
                .set_key_schema(Some(g.key_schema().to_vec()))
                .set_projection(g.projection().cloned())
                .build()
                .map_err(|e| e.to_string())?;
            update
                .global_secondary_index_updates(
                    GlobalSecondaryIndexUpdate::builder().create(create).build(),
                )
                .send()
                .await
                .map_err(|e| {
                    format!(
                        "adding the index {}: {} (if another index of the table is still being built, run this again once it is)",
                        index.name,
                        crate::error::sdk("UpdateTable", e)
                    )
                })?;
            wait_active(client, name).await?;
            tracing::info!(table = name, index = %index.name, "index added; it backfills while the table serves");
        }
        Ok(())
    }
}

/// Turn on TTL on `attr`, unless it is on (or being turned on) already.
async fn enable_ttl(
    client: &aws_sdk_dynamodb::Client,
    name: &str,
    attr: &str,
) -> Result<(), String> {
    let ttl = client
        .describe_time_to_live()
        .table_name(name)
        .send()
        .await
        .map_err(|e| crate::error::sdk("DescribeTimeToLive", e).to_string())?
        .time_to_live_description;
    let on = ttl.as_ref().is_some_and(|d| {
        d.attribute_name() == Some(attr)
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
            .map_err(|e| e.to_string())?;
        client
            .update_time_to_live()
            .table_name(name)
            .time_to_live_specification(spec)
            .send()
            .await
            .map_err(|e| crate::error::sdk("UpdateTimeToLive", e).to_string())?;
    }
    Ok(())
}

/// Turn on point-in-time recovery. An emulator without continuous backups (DynamoDB
/// Local) is skipped with a warning; on AWS a failure is an error.
async fn enable_point_in_time_recovery(
    client: &aws_sdk_dynamodb::Client,
    name: &str,
) -> Result<(), String> {
    let deadline = Instant::now() + TABLE_ACTIVE_TIMEOUT;
    let spec = PointInTimeRecoverySpecification::builder()
        .point_in_time_recovery_enabled(true)
        .build()
        .map_err(|e| e.to_string())?;
    loop {
        match client
            .update_continuous_backups()
            .table_name(name)
            .point_in_time_recovery_specification(spec.clone())
            .send()
            .await
        {
            Ok(_) => return Ok(()),
            Err(e) if code(&e) == Some("UnknownOperationException") => {
                tracing::warn!(
                    table = name,
                    "the endpoint has no point-in-time recovery (UpdateContinuousBackups); skipped"
                );
                return Ok(());
            }
            // Right after creation AWS may still be setting backups up.
            Err(e)
                if e.as_service_error()
                    .is_some_and(|e| e.is_continuous_backups_unavailable_exception())
                    && Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
            Err(e) => return Err(crate::error::sdk("UpdateContinuousBackups", e).to_string()),
        }
    }
}
