//! Loading what a replay reads: the run's history (journal and deliveries), or its
//! journal alone.
use siesta::ports::*;
use siesta::*;

use super::DynamoStore;
use crate::error::corrupt;
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
    let mut history = History::default();
    for item in &items {
        match history_from_item(item)? {
            HistoryItem::Journal(entry) => history.journal.push(entry),
            HistoryItem::Delivery(delivery) => history.deliveries.push(delivery),
        }
    }
    history.deliveries.sort_by_key(|d| d.seq);
    Ok(history)
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
                q.key_condition_expression("pk = :pk AND begins_with(sk, :journal)")
                    .expression_attribute_values(":pk", s(&pk))
                    .expression_attribute_values(":journal", s(JOURNAL_PREFIX))
                    .consistent_read(true)
            },
            None,
        )
        .await?;
    let mut journal = Vec::with_capacity(items.len());
    for item in &items {
        match history_from_item(item)? {
            HistoryItem::Journal(entry) => journal.push(entry),
            HistoryItem::Delivery(_) => {
                return Err(corrupt(
                    "load_journal",
                    "a delivery under the journal's keys",
                ));
            }
        }
    }
    Ok(journal)
}
