//! Loading what a replay reads: the run's history (journal and deliveries), or its
//! journal alone.
use siesta::ports::*;
use siesta::*;

use super::DynamoStore;
use crate::error::corrupt;
use crate::history_item::{Journal, history_from_item};
use crate::item::*;
use crate::keys::*;

/// [`RunStore::load_history`]: the journal and the deliveries, in one paged query.
pub(super) async fn load_history(
    store: &DynamoStore,
    tenant: &TenantId,
    run_id: &RunId,
) -> Result<History, StoreError> {
    let pk = run_pk(tenant, run_id);
    let items = store
        .query_pages(
            "load_history",
            |q| {
                q.key_condition_expression("pk = :pk AND begins_with(sk, :history)")
                    .expression_attribute_values(":pk", s(&pk))
                    .expression_attribute_values(":history", s(HISTORY_PREFIX))
                    .consistent_read(true)
            },
            None,
        )
        .await?;
    let mut journal = Journal::default();
    let mut deliveries = Vec::new();
    for item in &items {
        deliveries.extend(journal.take(history_from_item(item)?));
    }
    deliveries.sort_by_key(|d: &Delivery| d.seq);
    Ok(History {
        journal: journal.into_entries(),
        deliveries,
    })
}

/// [`RunStore::load_journal`]: the journal alone.
pub(super) async fn load_journal(
    store: &DynamoStore,
    tenant: &TenantId,
    run_id: &RunId,
) -> Result<Vec<JournalEntry>, StoreError> {
    let pk = run_pk(tenant, run_id);
    let items = store
        .query_pages(
            "load_journal",
            |q| {
                q.key_condition_expression("pk = :pk AND sk BETWEEN :journal AND :end")
                    .expression_attribute_values(":pk", s(&pk))
                    .expression_attribute_values(":journal", s(JOURNAL_PREFIX))
                    .expression_attribute_values(":end", s(JOURNAL_END))
                    .consistent_read(true)
            },
            None,
        )
        .await?;
    let mut journal = Journal::default();
    for item in &items {
        if journal.take(history_from_item(item)?).is_some() {
            return Err(corrupt(
                "load_journal",
                "a delivery under the journal's keys",
            ));
        }
    }
    Ok(journal.into_entries())
}

/// Whether the run's history holds a checkpoint item: one key-only `Query`, `Limit 1`.
pub(super) async fn has_checkpoint_items(
    store: &DynamoStore,
    tenant: &TenantId,
    run_id: &RunId,
) -> Result<bool, StoreError> {
    let pk = run_pk(tenant, run_id);
    let items = store
        .query_pages(
            "checkpoint: does the history hold checkpoint items",
            |q| {
                q.key_condition_expression("pk = :pk AND begins_with(sk, :checkpoint)")
                    .expression_attribute_values(":pk", s(&pk))
                    .expression_attribute_values(":checkpoint", s(CHECKPOINT_PREFIX))
                    .projection_expression("pk")
                    .consistent_read(true)
            },
            Some(1),
        )
        .await?;
    Ok(!items.is_empty())
}
