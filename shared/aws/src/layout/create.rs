//! A run's creation: its run item, inserted, holding its first event as its tail when
//! the item then stays within a write unit with [`CLAIM_ROOM`] to spare (else the event
//! has a timeline item of its own), and the tenant's count of unfinished runs, within a
//! limit when there is one. A child run is created the same way, in its parent's
//! checkpoint.

use std::time::Duration;

use siesta::ports::StoreError;
use siesta::{Run, TenantId, TimelineEvent};

use super::{
    Action, Billed, CLAIM_ROOM, Condition, PlannedWrite, Role, WRITE_UNIT_BYTES, WritePlan,
};
use crate::history_item::tail_with_event;
use crate::item::*;
use crate::keys::*;

/// The create of `run` with its first event `started`, counted among its tenant's
/// unfinished runs (a finished run is not) — only while the count is under
/// `max_unfinished`, when given. In one transaction.
pub(crate) fn create(
    run: &Run,
    started: &TimelineEvent,
    max_unfinished: Option<u64>,
    retention: Duration,
) -> Result<WritePlan, StoreError> {
    let mut plan = WritePlan::default();
    plan.writes
        .extend(created(run, started, retention, Role::Run, Role::Timeline)?);
    if !run.status.is_finished() {
        plan.writes
            .push(unfinished_count(&run.tenant, 1, max_unfinished));
    }
    Ok(plan)
}

/// The writes of child run `child` with its first event, in its parent's checkpoint.
pub(crate) fn child_run(
    child: &Run,
    started: &TimelineEvent,
    retention: Duration,
) -> Result<Vec<PlannedWrite>, StoreError> {
    created(
        child,
        started,
        retention,
        Role::ChildRun,
        Role::ChildTimeline,
    )
}

/// A new run's item, inserted, and its first event's item if the run item has no room
/// for it ([`created_items`]).
fn created(
    run: &Run,
    started: &TimelineEvent,
    retention: Duration,
    run_role: Role,
    event_role: Role,
) -> Result<Vec<PlannedWrite>, StoreError> {
    let (run_item, started_item) = created_items(run_item(run, retention)?, run, started)?;
    let mut writes = vec![PlannedWrite::insert(run_role, run_item)];
    writes.extend(started_item.map(|item| PlannedWrite::insert(event_role, item)));
    Ok(writes)
}

/// The items a run created with its first event writes, given its `run_item`: the run
/// item holding the event in its tail, as a delivery's event is held
/// ([`tail_with_event`]), when it stays within one write unit with room for the claim
/// after it — the create's transaction then writes one item fewer (two write units)
/// and no later write of the run item is billed a unit more; else the run item as given
/// and the event's own timeline item (a large input, which the run item's body holds,
/// leaves no room). The tail is keyed by the run's timeline seq, so only an event at
/// that seq goes in it.
pub(crate) fn created_items(
    run_item: Item,
    run: &Run,
    started: &TimelineEvent,
) -> Result<(Item, Option<Item>), StoreError> {
    if started.seq == run.timeline_seq
        && let Some(tail) = tail_with_event(run, run.version, None, started)?
        && tail.size_in(&run_item) + CLAIM_ROOM <= WRITE_UNIT_BYTES
    {
        let mut with_tail = run_item;
        tail.put_in(&mut with_tail);
        return Ok((with_tail, None));
    }
    let event = timeline_item(&run.tenant, &run.id, started)?;
    Ok((run_item, Some(event)))
}

/// Add `delta` to `tenant`'s count of unfinished runs, in the transaction; with
/// `below`, only while the count is under it (a missing counter is zero).
pub(crate) fn unfinished_count(tenant: &TenantId, delta: i64, below: Option<u64>) -> PlannedWrite {
    let counter = key(quota_pk(tenant), RECORD_SK);
    // The counter item: its key and one number.
    let bytes = item_size(&counter) + UNFINISHED.len() + 4;
    let condition = below.map(|max| Condition {
        // Its `#unfinished` is the update's.
        expression: "attribute_not_exists(#unfinished) OR #unfinished < :max".into(),
        names: Default::default(),
        values: Item::from([(":max".to_owned(), n(max))]),
    });
    PlannedWrite {
        role: Role::Quota,
        action: Action::Update {
            key: counter,
            expression: "ADD #unfinished :delta".into(),
            names: std::collections::HashMap::from([(
                "#unfinished".to_owned(),
                UNFINISHED.to_owned(),
            )]),
            values: Item::from([(":delta".to_owned(), n(delta))]),
        },
        condition,
        transactional: true,
        billed: Billed::Bytes(bytes),
        run_after: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history_item::{archived_tail, timeline_from_item};
    use crate::keys::{DUE_INDEX, TENANT_INDEX};
    use crate::layout::fixtures::*;
    use serde_json::json;
    use siesta::{RunStatus, Timestamp};

    #[test]
    fn a_new_runs_first_event_is_held_in_its_run_item_when_it_leaves_room_for_the_claim() {
        let mut run = run(RunStatus::Pending);
        (run.version, run.timeline_seq) = (1, 1);
        let run_item = run_item(&run, RETENTION).unwrap();
        let (held, own) = created_items(run_item.clone(), &run, &event(1, json!(null))).unwrap();
        assert!(own.is_none(), "no item of its own");
        let tail = archived_tail(&held).unwrap().expect("a tail");
        assert_eq!(checkpoint_seq(get_s(&tail, SK, "tail").unwrap()), Some(1));
        assert_eq!(
            timeline_from_item(&tail).unwrap(),
            vec![event(1, json!(null))]
        );

        // An event at another seq than the run's: not under the run's key.
        let (alone, own) = created_items(run_item.clone(), &run, &event(2, json!(null))).unwrap();
        assert_eq!(alone, run_item);
        assert!(own.is_some());

        // An event too large to leave that room even deflated: an item of its own.
        // (The engine's carries no input; a large input fills the run item's body.)
        let large = event(1, json!({ "note": noise(900, 0) }));
        let (alone, own) = created_items(run_item.clone(), &run, &large).unwrap();
        assert_eq!(alone, run_item, "the run item as given");
        let own = own.expect("the event's own item");
        assert_eq!(get_s(&own, SK, "event").unwrap(), timeline_sk(1));
    }

    #[test]
    fn a_create_inserts_the_run_and_counts_it_within_the_tenants_limit() {
        let mut run = run(RunStatus::Pending);
        (run.version, run.timeline_seq) = (1, 1);
        run.due_at = Some(Timestamp(1_000));
        let plan = create(&run, &event(1, json!(null)), Some(10), RETENTION).unwrap();
        let roles: Vec<Role> = plan.writes.iter().map(|w| w.role).collect();
        assert_eq!(roles, [Role::Run, Role::Quota]);
        assert!(plan.writes.iter().all(|w| w.transactional));
        assert_eq!(
            plan.writes[0].condition,
            Some(Condition::new_item()),
            "an existing run is not overwritten"
        );
        let quota = plan.of(Role::Quota).unwrap();
        assert_eq!(
            quota.condition.as_ref().map(|c| c.expression.as_str()),
            Some("attribute_not_exists(#unfinished) OR #unfinished < :max")
        );
        assert_eq!(values(quota).get(":max"), Some(&n(10)));
        // A new run due at once enters the due index and its tenant's.
        let entered: Vec<_> = plan.writes[0]
            .index_effects(None)
            .into_iter()
            .map(|w| (w.index, w.writes))
            .collect();
        assert_eq!(entered, [(DUE_INDEX, 1), (TENANT_INDEX, 1)]);
        // Two items in a transaction, under a unit each: four units.
        assert_eq!(plan.write_units(), 4.0);
    }

    #[test]
    fn a_run_created_finished_is_not_counted_and_without_a_limit_nothing_is_checked() {
        let mut finished = run(RunStatus::Completed);
        finished.timeline_seq = 1;
        let plan = create(&finished, &event(1, json!(null)), Some(1), RETENTION).unwrap();
        assert!(plan.of(Role::Quota).is_none());
        let open = run(RunStatus::Pending);
        let plan = create(&open, &event(1, json!(null)), None, RETENTION).unwrap();
        assert_eq!(plan.of(Role::Quota).unwrap().condition, None);
    }
}
