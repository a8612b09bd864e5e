//! The due index, which the sweep reads: the runs due by a time, across its shards, and
//! the mark of a wake-up to resend.

use std::collections::HashMap;

use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::ReturnConsumedCapacity;
use siesta::ports::*;
use siesta::*;

use super::DynamoStore;
use crate::error::sdk;
use crate::item::*;
use crate::keys::*;
use crate::layout::names;

/// [`RunStore::due_runs`]: the earliest due runs of every shard.
pub(super) async fn due_runs(
    store: &DynamoStore,
    before: Timestamp,
    limit: usize,
) -> Result<Vec<DueRun>, StoreError> {
    if limit == 0 {
        return Ok(Vec::new());
    }
    // One bounded Query per shard, concurrently; the earliest `limit` of them all.
    let shards = (0..DUE_SHARDS).map(|shard| {
        let shard = shard_name(shard);
        async move {
            store
                .query_pages(
                    "due_runs",
                    |q| {
                        q.index_name(DUE_INDEX)
                            .key_condition_expression("#shard = :shard AND #sweep_at <= :before")
                            .expression_attribute_names("#shard", DUE_SHARD)
                            .expression_attribute_names("#sweep_at", SWEEP_AT)
                            .expression_attribute_values(":shard", s(&shard))
                            .expression_attribute_values(":before", n(before.0))
                    },
                    Some(limit),
                )
                .await
        }
    });
    let mut due: Vec<DueRun> = Vec::new();
    for items in futures::future::try_join_all(shards).await? {
        for item in &items {
            due.push(due_from_item(item)?);
        }
    }
    due.sort_by(|a, b| {
        (a.sweep_at(), &a.tenant, &a.run_id).cmp(&(b.sweep_at(), &b.tenant, &b.run_id))
    });
    due.truncate(limit);
    Ok(due)
}

/// [`RunStore::set_resend_after`]: one conditional `UpdateItem`.
pub(super) async fn set_resend_after(
    store: &DynamoStore,
    tenant: &TenantId,
    run_id: &RunId,
    due_at: Timestamp,
    resend_after: Option<Timestamp>,
) -> Result<(), StoreError> {
    let sweep_at = siesta::sweep_at(Some(due_at), resend_after).unwrap_or(due_at);
    let update = if resend_after.is_some() {
        "SET #sweep_at = :sweep_at, #resend_after = :resend_after"
    } else {
        "SET #sweep_at = :sweep_at REMOVE #resend_after"
    };
    let mut values = HashMap::from([
        (":due".to_owned(), n(due_at.0)),
        (":sweep_at".to_owned(), n(sweep_at.0)),
    ]);
    if let Some(r) = resend_after {
        values.insert(":resend_after".to_owned(), n(r.0));
    }
    let result = store
        .client
        .update_item()
        .table_name(&store.table)
        .set_key(Some(key(run_pk(tenant, run_id), RUN_SK)))
        .update_expression(update)
        .condition_expression("#due_at = :due")
        .set_expression_attribute_names(Some(names(&[
            ("#due_at", DUE_AT),
            ("#sweep_at", SWEEP_AT),
            ("#resend_after", RESEND_AFTER),
        ])))
        .set_expression_attribute_values(Some(values))
        .return_consumed_capacity(ReturnConsumedCapacity::Total)
        .send()
        .await;
    match result {
        Ok(out) => {
            store
                .capacity
                .note_update("set_resend_after", "Run", out.consumed_capacity());
            Ok(())
        }
        Err(e) => match e.as_service_error() {
            // No longer due then (claimed, finished, moved on), or gone: nothing to
            // note.
            Some(UpdateItemError::ConditionalCheckFailedException(_)) => Ok(()),
            _ => Err(sdk("set_resend_after", e)),
        },
    }
}
