//! Loading what a replay reads: the run's history (journal and deliveries), or its
//! journal alone.
use siesta::ports::*;
use siesta::*;

use super::DynamoStore;
use crate::error::corrupt;
use crate::history_item::{Journal, history_from_item, with_tail};
use crate::item::*;
use crate::keys::*;

/// The run item, read before the history so that a tail archived since is found in
/// the history ([`with_tail`]), and remembered for the run's next checkpoint.
async fn run_item_first(
    store: &DynamoStore,
    op: &str,
    pk: &str,
) -> Result<Option<Item>, StoreError> {
    let item = store.get_item(op, key(pk.to_owned(), RUN_SK)).await?;
    if let Some(item) = &item {
        store.tails.remember(item)?;
    }
    Ok(item)
}

/// [`RunStore::load_replay_input`]: the journal and the deliveries, in one paged query
/// after the run item (for its history tail).
pub(super) async fn load_replay_input(
    store: &DynamoStore,
    tenant: &TenantId,
    run_id: &RunId,
) -> Result<ReplayInput, StoreError> {
    let pk = run_pk(tenant, run_id);
    let run = run_item_first(store, "load_replay_input: the run", &pk).await?;
    history_after(store, &pk, run.as_ref()).await
}

/// [`RunStore::load_claimed_replay_input`]: [`load_replay_input`] from the run item the claim
/// returned, when the store kept it and it is `run`'s (that run at that version): read
/// before the history's query as [`with_tail`] needs, and what any reader would read
/// at that version.
pub(super) async fn load_claimed_replay_input(
    store: &DynamoStore,
    run: &Run,
) -> Result<ReplayInput, StoreError> {
    let pk = run_pk(&run.tenant, &run.id);
    let claimed = store.claimed.take(&pk).filter(|item| {
        get_n::<u64>(item, VERSION, "run").is_ok_and(|v| v == run.version)
            && get_n::<i64>(item, CREATED_AT, "run").is_ok_and(|c| c == run.created_at.0)
    });
    match claimed {
        Some(item) => {
            // Its tail, for the run's next checkpoint, as `run_item_first` does.
            store.tails.remember(&item)?;
            history_after(store, &pk, Some(&item)).await
        }
        None => load_replay_input(store, &run.tenant, &run.id).await,
    }
}

/// The history of the run in partition `pk` whose run item was read as `run` (none:
/// there was no run item), by one paged query made after that read.
async fn history_after(
    store: &DynamoStore,
    pk: &str,
    run: Option<&Item>,
) -> Result<ReplayInput, StoreError> {
    let items = store
        .query_pages(
            "load_replay_input",
            |q| {
                q.key_condition_expression("pk = :pk AND begins_with(sk, :history)")
                    .expression_attribute_values(":pk", s(pk))
                    .expression_attribute_values(":history", s(HISTORY_PREFIX))
                    .consistent_read(true)
            },
            None,
        )
        .await?;
    let items = with_tail(items, run)?;
    let mut journal = Journal::default();
    let mut deliveries = Vec::new();
    for item in &items {
        deliveries.extend(journal.take(history_from_item(item)?));
    }
    deliveries.sort_by_key(|d: &Delivery| d.seq);
    Ok(ReplayInput {
        journal: journal.into_entries(),
        deliveries,
    })
}

/// [`RunStore::load_journal`]: the journal alone (and the run item first, for its
/// history tail).
pub(super) async fn load_journal(
    store: &DynamoStore,
    tenant: &TenantId,
    run_id: &RunId,
) -> Result<Vec<JournalEntry>, StoreError> {
    let pk = run_pk(tenant, run_id);
    let run = run_item_first(store, "load_journal: the run", &pk).await?;
    let items = store
        .query_pages(
            "load_journal",
            |q| {
                q.key_condition_expression("pk = :pk AND sk BETWEEN :journal AND :end")
                    .expression_attribute_values(":pk", s(&pk))
                    .expression_attribute_values(":journal", s(CHECKPOINT_PREFIX))
                    .expression_attribute_values(":end", s(CHECKPOINT_END))
                    .consistent_read(true)
            },
            None,
        )
        .await?;
    let items = with_tail(items, run.as_ref())?;
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
