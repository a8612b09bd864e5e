//! Listings: a page of a run's timeline, a page of a tenant's runs.

use aws_sdk_dynamodb::types::ReturnConsumedCapacity;
use siesta::ports::*;
use siesta::*;

use super::DynamoStore;
use super::reads::{item_key, query_page};
use crate::checkpoint_item::{archived_tail, committed_by, timeline_from_item};
use crate::error::sdk;
use crate::item::*;
use crate::keys::*;

/// How many times a timeline page is read at most, while a write lands between its
/// two queries.
const TIMELINE_READS: usize = 3;

/// [`RunStore::timeline`]: a page of the run's timeline, from the kinds of item that
/// hold events: timeline items (a run's first event, deliveries' events, when the run
/// item had no room for them), checkpoint items, and the run item's
/// checkpoint tail (read first: see [`crate::checkpoint_item`]). Each is read
/// from `after` on until it has given `limit` events or has no more, so each gives its
/// first `limit` events after `after`: the page is the first `limit` of both, by `seq`.
/// The two queries are not one snapshot: a write committed between them can leave its
/// event out while a later one is in. Seqs are gapless, so such a page has a hole: it
/// is read again, and if writes keep landing, cut before the hole — a paging reader
/// that went on past it would never see the event.
pub(super) async fn timeline(
    store: &DynamoStore,
    tenant: &TenantId,
    run_id: &RunId,
    after: u64,
    limit: usize,
) -> Result<Vec<TimelineEvent>, StoreError> {
    if limit == 0 || after == u64::MAX {
        return Ok(Vec::new());
    }
    let mut page = Vec::new();
    for _ in 0..TIMELINE_READS {
        page = read_timeline(store, tenant, run_id, after, limit).await?;
        let run = unbroken(&page, after);
        if run == page.len() {
            return Ok(page);
        }
        page.truncate(run);
    }
    // Still a hole (writes kept landing between the queries): the events before it,
    // which the next page goes on from.
    Ok(page)
}

/// Up to `limit` events after `after` from each kind of item, in `seq` order, the
/// first `limit`.
async fn read_timeline(
    store: &DynamoStore,
    tenant: &TenantId,
    run_id: &RunId,
    after: u64,
    limit: usize,
) -> Result<Vec<TimelineEvent>, StoreError> {
    let pk = run_pk(tenant, run_id);
    let run = store
        .get_item("timeline: the run", key(pk.clone(), RUN_SK))
        .await?;
    let tail = run.as_ref().map(archived_tail).transpose()?.flatten();
    let mut events = Vec::with_capacity(limit);
    if let Some(tail) = &tail {
        events.extend(
            timeline_from_item(tail)?
                .into_iter()
                .filter(|e| e.seq > after),
        );
    }
    for (from, to) in [
        (timeline_sk(after + 1), timeline_sk(u64::MAX)),
        (checkpoint_sk_from(after + 1), CHECKPOINT_END.to_owned()),
    ] {
        // An item is keyed by its last event's `seq` (or, a checkpoint item holding
        // none, the last before it): the first found may begin before `after`, and a
        // checkpoint item may hold no event after it at all.
        // The seqs this kind of item gave: an event held twice counts once.
        let mut found = std::collections::BTreeSet::new();
        let mut start = None;
        loop {
            let query = store
                .client
                .query()
                .table_name(&store.table)
                .key_condition_expression("pk = :pk AND sk BETWEEN :from AND :to")
                .expression_attribute_values(":pk", s(&pk))
                .expression_attribute_values(":from", s(&from))
                .expression_attribute_values(":to", s(&to))
                .consistent_read(true)
                .limit((limit - found.len().min(limit)).clamp(1, 1000) as i32);
            let (page, next) = query_page(query, &store.capacity, "timeline", start).await?;
            // Without the checkpoints committed after the run item was read. The tail,
            // if archived since, gives its events twice: one each, below.
            let page = match &run {
                Some(run) => committed_by(page, run)?,
                None => page,
            };
            for item in &page {
                for event in timeline_from_item(item)?
                    .into_iter()
                    .filter(|e| e.seq > after)
                {
                    found.insert(event.seq);
                    events.push(event);
                }
            }
            start = next;
            if start.is_none() || found.len() >= limit {
                break;
            }
        }
    }
    events.sort_by_key(|e| e.seq);
    // A checkpoint's events can be held twice: the run item's tail and its archive
    // written since the run item was read, or a tail archived by a writer that then
    // crashed and the same tail joined by the next step (see `super::tail`). An
    // event's seq is its identity.
    events.dedup_by_key(|e| e.seq);
    events.truncate(limit);
    Ok(events)
}

/// How many of `page`'s events follow `after` without a hole: `after + 1`, `after + 2`,
/// ...
fn unbroken(page: &[TimelineEvent], after: u64) -> usize {
    page.iter()
        .zip(after + 1..)
        .take_while(|(e, seq)| e.seq == *seq)
        .count()
}

/// [`RunStore::list_runs`]: a page of the tenant's runs, newest first.
pub(super) async fn list_runs(
    store: &DynamoStore,
    tenant: &TenantId,
    filter: &RunFilter,
    cursor: Option<&str>,
    limit: usize,
) -> Result<RunPage, StoreError> {
    let limit = limit.clamp(1, 100);
    let start = match cursor {
        None => None,
        Some(c) => {
            let c = siesta::cursor::decode(c)?;
            let (_, run) = c
                .split_once('#')
                .ok_or_else(|| StoreError::Invalid("malformed cursor".into()))?;
            let mut k = key(run_pk(tenant, &RunId(run.to_owned())), RUN_SK);
            k.insert(TENANT.into(), s(tenant.as_str()));
            k.insert(CREATED_KEY.into(), s(&c));
            Some(k)
        }
    };
    // One more than the page, to know whether there is a next one.
    let out = store
        .client
        .query()
        .table_name(&store.table)
        .index_name(TENANT_INDEX)
        .key_condition_expression("#tenant = :tenant")
        .expression_attribute_names("#tenant", TENANT)
        .expression_attribute_values(":tenant", s(tenant.as_str()))
        .scan_index_forward(false)
        .limit(limit as i32 + 1)
        .set_exclusive_start_key(start)
        .return_consumed_capacity(ReturnConsumedCapacity::Total)
        .send()
        .await
        .map_err(|e| sdk("list_runs", e))?;
    store.capacity.add(false, out.consumed_capacity());
    let mut entries = out.items.unwrap_or_default();
    let next_cursor = if entries.len() > limit {
        entries.truncate(limit);
        match entries.last() {
            Some(last) => Some(siesta::cursor::encode(&created_key_of(last)?)),
            None => None,
        }
    } else {
        None
    };
    if entries.is_empty() {
        return Ok(RunPage {
            runs: Vec::new(),
            next_cursor,
        });
    }
    // The index holds keys only (it never changes after a run is created, so
    // checkpoints cost it nothing); the runs themselves come from one batch read.
    let keys: Vec<Item> = entries
        .iter()
        .map(|e| item_key(e).map(|(pk, sk)| key(pk, sk)))
        .collect::<Result<_, _>>()?;
    let mut found = store.batch_get("list_runs", keys).await?;
    let mut runs = Vec::with_capacity(entries.len());
    for entry in &entries {
        if let Some(item) = found.remove(&item_key(entry)?) {
            let run = run_from_item(&item)?;
            let wanted = filter.status.is_none_or(|s| s == run.status)
                && filter.workflow.as_ref().is_none_or(|w| *w == run.workflow);
            if wanted {
                runs.push(run);
            }
        }
    }
    Ok(RunPage { runs, next_cursor })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(seqs: &[u64]) -> Vec<TimelineEvent> {
        seqs.iter()
            .map(|&seq| {
                let mut e = TimelineEvent::execution_started(
                    Timestamp(0),
                    "order",
                    serde_json::Value::Null,
                );
                e.seq = seq;
                e
            })
            .collect()
    }

    #[test]
    fn a_page_without_a_hole_is_unbroken() {
        assert_eq!(unbroken(&events(&[4, 5, 6]), 3), 3);
        assert_eq!(unbroken(&[], 3), 0);
    }

    #[test]
    fn a_page_a_concurrent_write_left_a_hole_in_is_unbroken_only_before_it() {
        // Event 11 committed between the two queries: the first missed it, the
        // second found the checkpoint after it.
        assert_eq!(unbroken(&events(&[12, 13]), 10), 0);
        assert_eq!(unbroken(&events(&[11, 12, 14]), 10), 2);
    }
}
