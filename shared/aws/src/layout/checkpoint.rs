//! A checkpoint's writes: the run's new state, its journal entries and timeline events
//! (in checkpoint items, [`crate::history_item`]), callback and tool-call records, child
//! runs and a delivery to its parent, in one transaction conditioned on the version
//! (and epoch) it was computed from ([`transaction`]) — or, when it writes only the run
//! and one checkpoint item's worth, in the run item alone as its tail ([`in_tail`]):
//! one plain conditional write of one item, one write unit while the run item stays
//! under 1 KB, where a transaction of two items costs four. A finishing checkpoint is
//! a transaction's (it moves the tenant's count of unfinished runs).

use std::time::Duration;

use siesta::ports::{Checkpoint, StoreError};
use siesta::*;

use super::{
    Condition, Expected, PlannedWrite, Role, StatesKept, TailKept, WRITE_UNIT_BYTES, WritePlan,
    child_run, run_write, unfinished_count,
};
use crate::callback_state::{MAX_IN_RUN, in_run_record_item, put_state};
use crate::history_item::{
    TailWrite, checkpoint_items, next_tail, tail_before, tail_size, timeline_before,
};
use crate::item::*;

/// Whether checkpoint `cp`, which moves its tenant's count of unfinished runs by
/// `unfinished`, may be kept in the run item as its tail ([`in_tail`]): written by the
/// run's own build, with entries or events and nothing else to write atomically with
/// them (a step's checkpoint, typically).
pub(crate) fn may_keep_in_tail(cp: &Checkpoint, unfinished: i64) -> bool {
    cp.by_own_build
        && unfinished == 0
        && cp.callbacks.is_empty()
        && cp.tool_calls.is_empty()
        && cp.child_runs.is_empty()
        && cp.parent_delivery.is_none()
        && !(cp.journal.is_empty() && cp.timeline.is_empty())
}

/// A checkpoint kept in the run item: its writes (the tail it replaces archived by a
/// plain put, then the run item's conditional update) and the run item it writes.
#[derive(Debug)]
pub(crate) struct TailCheckpoint {
    /// The writes, in order, none in a transaction.
    pub(crate) plan: WritePlan,
    /// The run item written, holding the new tail.
    pub(crate) run_item: Item,
}

/// Checkpoint `cp` kept in the run item ([`may_keep_in_tail`]), given the tail
/// `previous` the run item holds at the version `cp` expects (as the checkpoint item it
/// is archived as) and the bytes `kept` of the callback states it holds beside. `None`
/// when it needs more than one item's worth ([`next_tail`]): a transaction then.
///
/// The checkpoint joins `previous` while the tail stays within its limits; else
/// `previous` is archived first, under its own key — committed content, so a retry, or
/// a stale writer that then loses the run's condition, writes the same item again.
/// Joined, a tail that would take the run item past one write unit is archived instead
/// when this checkpoint's own tail fits alone: every write of the run item until the
/// next step (a claim, a delivery, a renewal) would be billed a unit more.
pub(crate) fn in_tail(
    cp: &Checkpoint,
    previous: Option<Item>,
    kept: usize,
    retention: Duration,
) -> Result<Option<TailCheckpoint>, StoreError> {
    let before_tail = previous.as_ref().map_or(0, tail_size);
    let mut item = run_item(&cp.run, retention)?;
    let tail_of = |previous| {
        next_tail(
            &cp.run,
            cp.expected_version,
            &cp.journal,
            &cp.timeline,
            previous,
        )
    };
    let Some(mut tail) = tail_of(previous.clone())? else {
        return Ok(None);
    };
    if tail.archive.is_none()
        && let Some(previous) = previous
        && tail.size_in(&item) + kept > WRITE_UNIT_BYTES
        && let Some(fresh) = tail_of(None)?
        && fresh.size_in(&item) + kept <= WRITE_UNIT_BYTES
    {
        tail = TailWrite {
            archive: Some(previous),
            ..fresh
        };
    }
    let mut plan = WritePlan::default();
    if let Some(archive) = tail.archive.take() {
        plan.writes
            .push(PlannedWrite::put(Role::TailArchived, archive, None, false));
    }
    // Billed by the item before or after, whichever is larger, with the states it keeps.
    let before = item_size(&item) + before_tail + kept;
    tail.put_in(&mut item);
    let states = StatesKept {
        kept_bytes: kept,
        before_bytes: before,
        ..StatesKept::default()
    };
    plan.writes.push(run_write(
        Role::RunWithTail,
        &item,
        &Expected::of(cp),
        TailKept::Kept,
        &states,
        false,
    )?);
    Ok(Some(TailCheckpoint {
        plan,
        run_item: item,
    }))
}

/// What a checkpoint's transaction writes beside `cp` itself, as the store read or
/// decided it.
pub(crate) struct TransactionInputs<'a> {
    /// How it moves its tenant's count of unfinished runs.
    pub(crate) unfinished: i64,
    /// The tail the run item holds at the version `cp` expects, which the run's own
    /// build takes along (`None`: none, or not the run's own build).
    pub(crate) previous_tail: Option<&'a Item>,
    /// The callbacks it opens whose state goes in the run item (their records put
    /// before it).
    pub(crate) opened_in_item: &'a [&'a CallbackRecord],
    /// The callbacks it closes.
    pub(crate) closed: &'a [&'a CallbackRecord],
    /// The run item's attributes of the callback states it removes.
    pub(crate) closed_states: &'a [String],
    /// The deployment's shortest retention.
    pub(crate) retention: Duration,
}

/// Checkpoint `cp` in one transaction, but for its parent delivery, whose writes are
/// decided on a read of the parent (see [`super::delivery()`]) and added after these.
///
/// The run's own build takes the run item's tail along: into this checkpoint's items
/// when the tail's checkpoints came right before it (nothing sorts between them), else
/// as its own checkpoint item beside them. The run item is left without it, small for
/// the writes that follow (a delivery, a claim), which DynamoDB bills by its size.
pub(crate) fn transaction(
    cp: &Checkpoint,
    inputs: &TransactionInputs,
) -> Result<WritePlan, StoreError> {
    let (tenant, run_id) = (&cp.run.tenant, &cp.run.id);
    let (mut journal, mut timeline, mut archive) = (Vec::new(), Vec::new(), None);
    if let Some(tail) = inputs.previous_tail {
        let before = timeline_before(&cp.run, cp.timeline.len());
        match tail_before(tail, cp.expected_version, before)? {
            Some(contents) => (journal, timeline) = (contents.journal, contents.events),
            None => archive = Some(tail.clone()),
        }
    }
    journal.extend(cp.journal.iter().cloned());
    timeline.extend(cp.timeline.iter().cloned());
    let mut plan = WritePlan::default();
    if inputs.unfinished != 0 {
        plan.writes
            .push(unfinished_count(tenant, inputs.unfinished, None));
    }
    // The state of each callback it opens in the run item, when the store keeps it
    // there; that of each it closes removed (none if it was not there).
    let mut item = run_item(&cp.run, inputs.retention)?;
    let without_states = item_size(&item);
    for record in inputs.opened_in_item {
        put_state(&mut item, record);
    }
    let states = StatesKept {
        removed: inputs.closed_states.to_vec(),
        added_bytes: item_size(&item) - without_states,
        ..StatesKept::default()
    };
    let tail = match inputs.previous_tail {
        Some(tail) => TailKept::Dropped {
            bytes: tail_size(tail),
        },
        None => TailKept::Kept,
    };
    plan.writes.push(run_write(
        Role::Run,
        &item,
        &Expected::of(cp),
        tail,
        &states,
        true,
    )?);
    if let Some(archive) = archive {
        // Committed content under its own key.
        plan.writes
            .push(PlannedWrite::put(Role::Checkpoint, archive, None, true));
    }
    // Conditioned on being new, like the run's version it is keyed by.
    for item in checkpoint_items(tenant, run_id, &cp.run, &journal, &timeline)? {
        plan.writes
            .push(PlannedWrite::insert(Role::Checkpoint, item));
    }
    for record in inputs.closed {
        let item = callback_item(record, cp.run.updated_at, inputs.retention)?;
        plan.writes
            .push(PlannedWrite::put(Role::Callback, item, None, true));
    }
    for record in &cp.tool_calls {
        let item = tool_call_item(record, inputs.retention)?;
        plan.writes
            .push(PlannedWrite::put(Role::ToolCall, item, None, true));
    }
    for (child, started) in &cp.child_runs {
        plan.writes
            .extend(child_run(child, started, inputs.retention)?);
    }
    Ok(plan)
}

/// The put of the record of a callback a checkpoint opens, before its transaction
/// (`store/openings.rs` says why that is safe), only if new: as the index a webhook's
/// token finds the run by when its state goes `in_run` (in the run item), else whole.
pub(crate) fn opening(
    record: &CallbackRecord,
    in_run: bool,
    at: Timestamp,
    retention: Duration,
) -> Result<PlannedWrite, StoreError> {
    let item = match in_run {
        true => in_run_record_item(record, at, retention)?,
        false => callback_item(record, at, retention)?,
    };
    Ok(PlannedWrite::put(
        Role::CallbackOpened,
        item,
        Some(Condition::new_item()),
        false,
    ))
}

/// How many of the `opening` callbacks a checkpoint opens keep their state in the run
/// item (the first ones, the rest in their records): as many as leave the run item with
/// [`MAX_IN_RUN`] at most, given the states it `held` at the version the checkpoint
/// writes over (`None`: not known, and then none) and those it `closed`.
pub(crate) fn states_in_run(opening: usize, held: Option<&[String]>, closed: &[String]) -> usize {
    let Some(held) = held.filter(|_| opening > 0) else {
        return 0;
    };
    let kept = held.iter().filter(|s| !closed.contains(s)).count();
    opening.min(MAX_IN_RUN.saturating_sub(kept))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history_item::{TAIL_BYTES, TAIL_CHECKPOINTS, archived_tail};
    use crate::keys::{DUE_INDEX, REAP_INDEX};
    use crate::layout::MAX_ITEM_BYTES;
    use crate::layout::fixtures::*;
    use proptest::prelude::*;
    use serde_json::json;

    /// The checkpoint of a step `i` of `run` (at its version and timeline as stored):
    /// its entry and two events, under lease epoch `epoch`; the run it leaves.
    fn step(run: &Run, i: usize, detail: usize, epoch: u64) -> Checkpoint {
        let mut after = run.clone();
        after.version += 1;
        after.timeline_seq += 2;
        let mut cp = Checkpoint::new(after, run.version, Some(FencingEpoch(epoch)));
        cp.by_own_build = true;
        cp.journal = vec![entry(&format!("work#{i}"))];
        cp.timeline = vec![
            event(run.timeline_seq + 1, json!(null)),
            event(
                run.timeline_seq + 2,
                json!({ "result": noise(detail, i as u64) }),
            ),
        ];
        cp
    }

    #[test]
    fn a_steps_checkpoint_is_one_plain_write_of_the_run_item_under_its_version_and_epoch() {
        let running = run(RunStatus::Running);
        let cp = step(&running, 0, 10, 4);
        assert!(may_keep_in_tail(&cp, 0));
        let planned = in_tail(&cp, None, 0, RETENTION).unwrap().expect("kept");
        let roles: Vec<Role> = planned.plan.writes.iter().map(|w| w.role).collect();
        assert_eq!(roles, [Role::RunWithTail]);
        let write = &planned.plan.writes[0];
        assert!(!write.transactional);
        assert_eq!(
            condition(write).expression,
            "#version = :v AND #lease_epoch = :e AND #timeline_seq < :first"
        );
        assert_eq!(values(write).get(":e"), Some(&n(4)));
        assert!(archived_tail(&planned.run_item).unwrap().is_some());
        assert_eq!(planned.plan.write_units(), 1.0);
    }

    #[test]
    fn a_checkpoint_with_anything_else_to_write_takes_a_transaction() {
        let running = run(RunStatus::Running);
        let mut cp = step(&running, 0, 10, 4);
        assert!(!may_keep_in_tail(&cp, 1), "it moves the tenant's count");
        cp.callbacks.push(callback("cb_1"));
        assert!(!may_keep_in_tail(&cp, 0), "it opens a callback");
        let mut control = step(&running, 0, 10, 4);
        control.by_own_build = false;
        assert!(!may_keep_in_tail(&control, 0), "not the run's own build");
    }

    #[test]
    fn the_fourth_step_archives_the_tail_the_three_before_it_joined() {
        let mut stored = run(RunStatus::Running);
        let mut previous = None;
        let mut archived = Vec::new();
        for i in 0..4 {
            let cp = step(&stored, i, 10, 4);
            let planned = in_tail(&cp, previous, 0, RETENTION).unwrap().expect("kept");
            archived.push(planned.plan.of(Role::TailArchived).is_some());
            previous = archived_tail(&planned.run_item).unwrap();
            stored = cp.run;
        }
        assert_eq!(archived, [false, false, false, true]);
    }

    #[test]
    fn a_tail_that_would_pass_a_write_unit_joined_is_archived_for_the_steps_own() {
        let mut stored = run(RunStatus::Running);
        let first = step(&stored, 0, 600, 4);
        let planned = in_tail(&first, None, 0, RETENTION).unwrap().expect("kept");
        stored = first.run;
        let second = step(&stored, 1, 600, 4);
        let previous = archived_tail(&planned.run_item).unwrap();
        let planned = in_tail(&second, previous, 0, RETENTION)
            .unwrap()
            .expect("kept");
        assert!(planned.plan.of(Role::TailArchived).is_some());
        assert!(item_size(&planned.run_item) <= WRITE_UNIT_BYTES);
    }

    #[test]
    fn a_finishing_checkpoint_takes_the_tail_along_and_moves_the_run_to_the_reap_index() {
        // GIVEN a running run whose item holds its last step's tail
        let running = run(RunStatus::Running);
        let last = step(&running, 0, 10, 4);
        let kept = in_tail(&last, None, 0, RETENTION).unwrap().expect("kept");
        let read = kept.run_item.clone();
        let tail = archived_tail(&read).unwrap().expect("a tail");
        // WHEN it finishes right after
        let mut done = last.run.clone();
        done.version += 1;
        done.timeline_seq += 1;
        done.status = RunStatus::Completed;
        done.due_at = None;
        done.lease = None;
        let mut cp = Checkpoint::new(done.clone(), last.run.version, Some(FencingEpoch(4)));
        cp.by_own_build = true;
        cp.timeline = vec![event(done.timeline_seq, json!({ "result": 1 }))];
        let plan = transaction(
            &cp,
            &TransactionInputs {
                unfinished: -1,
                previous_tail: Some(&tail),
                opened_in_item: &[],
                closed: &[],
                closed_states: &[],
                retention: RETENTION,
            },
        )
        .unwrap();
        // THEN one transaction: the count, the run, one checkpoint item holding both
        let roles: Vec<Role> = plan.writes.iter().map(|w| w.role).collect();
        assert_eq!(roles, [Role::Quota, Role::Run, Role::Checkpoint]);
        assert!(plan.writes.iter().all(|w| w.transactional));
        let run_write = plan.of(Role::Run).unwrap();
        assert!(
            update_expression(run_write).contains("REMOVE"),
            "the tail dropped"
        );
        assert_eq!(values(run_write).get(":e"), Some(&n(4)));
        let moved: Vec<_> = run_write
            .index_effects(Some(&read))
            .into_iter()
            .map(|w| (w.index, w.writes))
            .collect();
        assert!(moved.contains(&(DUE_INDEX, 1)) && moved.contains(&(REAP_INDEX, 1)));
    }

    #[test]
    fn an_opening_is_put_alone_and_only_if_new_as_an_index_when_its_state_is_in_the_run() {
        for in_run in [true, false] {
            let write = opening(&callback("cb_1"), in_run, Timestamp(1_000), RETENTION).unwrap();
            assert!(!write.transactional, "half a transaction's units");
            assert_eq!(write.condition, Some(Condition::new_item()));
            let record = write.item().unwrap();
            assert_eq!(crate::callback_state::is_in_run(record), in_run);
        }
    }

    #[test]
    fn at_most_four_callback_states_are_held_in_the_run_item() {
        let held: Vec<String> = (0..3).map(|i| format!("c#cb_{i}")).collect();
        assert_eq!(states_in_run(3, Some(&held), &[]), 1);
        assert_eq!(states_in_run(3, Some(&held), &held[..2]), 3);
        assert_eq!(states_in_run(3, None, &[]), 0, "not known: none");
        assert_eq!(states_in_run(0, Some(&[]), &[]), 0);
    }

    proptest! {
        /// Whatever the versions, epochs and sizes, a checkpoint's write of the run item
        /// — kept in the tail or in a transaction — is conditioned on the version it
        /// read and its fencing epoch.
        #[test]
        fn a_checkpoint_always_conditions_the_run_item_on_its_version_and_epoch(
            version in 1u64..1_000_000,
            epoch in 1u64..1_000,
            detail in 0usize..3_000,
        ) {
            let mut stored = run(RunStatus::Running);
            stored.version = version;
            let cp = step(&stored, 0, detail, epoch);
            let in_tail = in_tail(&cp, None, 0, RETENTION).unwrap().map(|t| t.plan);
            let inputs = TransactionInputs {
                unfinished: 0,
                previous_tail: None,
                opened_in_item: &[],
                closed: &[],
                closed_states: &[],
                retention: RETENTION,
            };
            let in_transaction = transaction(&cp, &inputs).unwrap();
            for plan in in_tail.iter().chain([&in_transaction]) {
                let run_write = plan
                    .writes
                    .iter()
                    .find(|w| matches!(w.role, Role::Run | Role::RunWithTail))
                    .unwrap();
                let values = values(run_write);
                prop_assert!(condition(run_write).expression.starts_with("#version = :v AND #lease_epoch = :e"));
                prop_assert_eq!(values.get(":v"), Some(&n(version)));
                prop_assert_eq!(values.get(":e"), Some(&n(epoch)));
            }
        }

        /// Over any run of consecutive steps, the tail holds at most its limit of
        /// checkpoints and bytes: a step that would pass either archives it.
        #[test]
        fn the_tail_never_holds_more_than_its_limit(
            details in proptest::collection::vec(0usize..1_200, 1..12),
        ) {
            let mut stored = run(RunStatus::Running);
            let mut previous = None;
            let mut joined = 0u64;
            for (i, detail) in details.into_iter().enumerate() {
                let cp = step(&stored, i, detail, 4);
                stored = cp.run.clone();
                let Some(planned) = in_tail(&cp, previous.clone(), 0, RETENTION).unwrap() else {
                    // Too large for a tail: a transaction's, which takes the tail along.
                    previous = None;
                    joined = 0;
                    continue;
                };
                joined = match (previous.is_some(), planned.plan.of(Role::TailArchived)) {
                    (true, None) => joined + 1,
                    _ => 1,
                };
                prop_assert!(joined <= TAIL_CHECKPOINTS);
                previous = archived_tail(&planned.run_item).unwrap();
                let packed = planned.run_item.get(crate::item::TAIL).and_then(|v| v.as_b().ok());
                prop_assert!(packed.is_some_and(|p| p.as_ref().len() <= TAIL_BYTES));
            }
        }

    }

    proptest! {
        // Each case packs up to a megabyte: fewer of them.
        #![proptest_config(ProptestConfig::with_cases(32))]

        /// Whatever its entries' sizes, no item a checkpoint's transaction puts passes
        /// DynamoDB's 400 KB: what does not fit one item goes in the next.
        #[test]
        fn no_planned_item_passes_dynamodbs_limit(
            sizes in proptest::collection::vec(0usize..120_000, 1..8),
        ) {
            let mut stored = run(RunStatus::Running);
            stored.timeline_seq = 3;
            let mut cp = step(&stored, 0, 10, 4);
            cp.journal = sizes
                .iter()
                .enumerate()
                .map(|(i, size)| {
                    let mut e = entry(&format!("big#{i}"));
                    e.name = noise(*size, i as u64);
                    e
                })
                .collect();
            let inputs = TransactionInputs {
                unfinished: 0,
                previous_tail: None,
                opened_in_item: &[],
                closed: &[],
                closed_states: &[],
                retention: RETENTION,
            };
            let plan = transaction(&cp, &inputs).unwrap();
            prop_assert!(plan.oversized().is_empty());
            prop_assert!(plan.writes.iter().filter_map(|w| w.item()).all(|i| item_size(i) <= MAX_ITEM_BYTES));
        }
    }
}
