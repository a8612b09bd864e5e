//! The checkpoint: the run's new state, its journal entries and timeline events (in
//! checkpoint items, [`crate::history_item`]), callback and tool-call records, child
//! runs and a delivery to its parent, in one transaction conditioned on the version
//! (and epoch) it was computed from — or, when it writes only the run and one
//! checkpoint item's worth, in the run item alone ([`super::tail`]).

use siesta::delivery::Decision;
use siesta::ports::*;
use siesta::*;

use super::deliveries::{Dedup, Planned};
use super::openings::{put_openings, split_openings, withdraw_openings};
use super::tail::checkpoint_in_tail;
use super::tx::{Expected, Role, StatesKept, TailKept, Tx, TxOutcome, reason_of};
use super::{DynamoStore, RACE_ATTEMPTS};
use crate::callback_state::{MAX_IN_RUN, put_state, state_attr};
use crate::history_item::{
    checkpoint_items, created_items, tail_before, tail_size, timeline_before,
};
use crate::item::*;

impl DynamoStore {
    /// How a checkpoint changes its tenant's count of unfinished runs: +1 per child
    /// run, -1 when it moves the run from unfinished to finished. Whether it does is
    /// read here, at the version the checkpoint is conditioned on: if the run moved on
    /// since, the checkpoint's own condition fails and the count is not touched.
    pub(super) async fn unfinished_delta(&self, cp: &Checkpoint) -> Result<i64, StoreError> {
        let children = cp
            .child_runs
            .iter()
            .filter(|(child, _)| !child.status.is_finished())
            .count() as i64;
        if !cp.run.status.is_finished() {
            return Ok(children);
        }
        let finishes = match self.get_run(&cp.run.tenant, &cp.run.id).await? {
            Some(before) => before.version == cp.expected_version && !before.status.is_finished(),
            None => false,
        };
        Ok(children - i64::from(finishes))
    }

    pub(super) async fn current_run(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
    ) -> Result<Run, StoreError> {
        self.get_run(tenant, run_id)
            .await?
            .ok_or(StoreError::NotFound)
    }
}

/// [`RunStore::checkpoint`]: one `TransactWriteItems`.
pub(super) async fn checkpoint(store: &DynamoStore, cp: &Checkpoint) -> Result<(), StoreError> {
    let (tenant, run_id) = (&cp.run.tenant, &cp.run.id);
    // A run moved to another build (an upgrade) and child runs are on builds the
    // tenant's records must list.
    if cp
        .timeline
        .iter()
        .any(|e| e.event_type == EventType::RunUpgraded)
    {
        store.note_build(&cp.run).await?;
    }
    for (child, _) in &cp.child_runs {
        store.note_build(child).await?;
    }
    let unfinished = store.unfinished_delta(cp).await?;
    // A step's checkpoint, typically: one item's worth of history and nothing else to
    // write atomically with it.
    let alone = cp.by_own_build
        && unfinished == 0
        && cp.callbacks.is_empty()
        && cp.tool_calls.is_empty()
        && cp.child_runs.is_empty()
        && cp.parent_delivery.is_none();
    if alone && checkpoint_in_tail(store, cp).await? {
        return Ok(());
    }
    // The run's own build takes the run item's history tail along: into this
    // checkpoint's items when the tail's checkpoints came right before it, else as its
    // own checkpoint item beside them. The run item is left without it, small for the
    // writes that follow (a delivery, a claim), which DynamoDB bills by its size.
    let previous_tail = match cp.by_own_build {
        true => store.tail_at(&cp.run, cp.expected_version).await?.flatten(),
        false => None,
    };
    let (mut journal, mut timeline, mut archive) = (Vec::new(), Vec::new(), None);
    if let Some(tail) = &previous_tail {
        let before = timeline_before(&cp.run, cp.timeline.len());
        match tail_before(tail, cp.expected_version, before)? {
            Some(contents) => (journal, timeline) = (contents.journal, contents.events),
            None => archive = Some(tail.clone()),
        }
    }
    journal.extend(cp.journal.iter().cloned());
    timeline.extend(cp.timeline.iter().cloned());
    // Refused as the transaction would have been, before any opening is put: the
    // contract counts the callbacks' records among its items.
    if cp.item_count() > MAX_TRANSACTION_ITEMS {
        return Err(StoreError::Invalid(format!(
            "checkpoint: {} items exceed DynamoDB's {MAX_TRANSACTION_ITEMS} per transaction",
            cp.item_count()
        )));
    }
    // The callbacks it opens are put first (`super::openings`). An opening still takes
    // the transaction path (not the tail's, see `alone` above), so that the run item is
    // left small for the delivery and the claim that follow.
    let (opened, closed) = split_openings(&cp.callbacks);
    let closed_states: Vec<String> = closed.iter().map(|r| state_attr(&r.callback_id)).collect();
    let in_run = opened_in_run(store, cp, opened.len(), &closed_states);
    let mut created = Vec::new();
    let states_in_run =
        match put_openings(store, &opened, in_run, cp.run.updated_at, &mut created).await {
            Ok(states_in_run) => states_in_run,
            Err(e) => {
                withdraw_openings(store, &created).await;
                return Err(e);
            }
        };
    // The callbacks whose state goes in the run item, as their records say.
    let opened_in_item: Vec<&CallbackRecord> = opened
        .iter()
        .zip(&states_in_run)
        .filter(|(_, in_item)| **in_item)
        .map(|(record, _)| *record)
        .collect();
    let in_run_states: Vec<String> = opened_in_item
        .iter()
        .map(|r| state_attr(&r.callback_id))
        .collect();
    let written: Result<(), Refused> = async {
        for _ in 0..RACE_ATTEMPTS {
            let mut tx = Tx::default();
            if unfinished != 0 {
                tx.count_unfinished(&store.table, tenant, unfinished, None)?;
            }
            // The state of each callback it opens in the run item, when the store keeps
            // it there; that of each it closes removed (none if it was not there).
            let mut item = run_item(&cp.run, store.retention)?;
            let without_states = item_size(&item);
            opened_in_item
                .iter()
                .for_each(|record| put_state(&mut item, record));
            let states = StatesKept {
                removed: closed_states.clone(),
                added_bytes: item_size(&item) - without_states,
                ..StatesKept::default()
            };
            tx.put_run(
                &store.table,
                Role::Run,
                item,
                Expected::of(cp),
                match &previous_tail {
                    Some(tail) => TailKept::Dropped {
                        bytes: tail_size(tail),
                    },
                    None => TailKept::Kept,
                },
                &states,
            )?;
            if let Some(archive) = &archive {
                // Committed content under its own key (see `super::tail`).
                tx.put(&store.table, Role::Checkpoint, archive.clone(), None)?;
            }
            // Conditioned on being new, like the run's version it is keyed by.
            for item in checkpoint_items(tenant, run_id, &cp.run, &journal, &timeline)? {
                tx.insert(&store.table, Role::Checkpoint, item)?;
            }
            for record in &closed {
                let item = callback_item(record, cp.run.updated_at, store.retention)?;
                tx.put(&store.table, Role::Callback, item, None)?;
            }
            for record in &cp.tool_calls {
                let item = tool_call_item(record, store.retention)?;
                tx.put(&store.table, Role::ToolCall, item, None)?;
            }
            for (child, started) in &cp.child_runs {
                let (run_item, started_item) =
                    created_items(run_item(child, store.retention)?, child, started)?;
                tx.insert(&store.table, Role::ChildRun, run_item)?;
                if let Some(item) = started_item {
                    tx.insert(&store.table, Role::ChildTimeline, item)?;
                }
            }
            if let Some(delivery) = &cp.parent_delivery {
                // A missing or finished parent, or a duplicate, skips the delivery.
                match store.plan(delivery, Dedup::Read).await {
                    Ok(Planned {
                        decision: Decision::Accept(plan),
                        read,
                        callback_in_run,
                    }) => tx.delivery(
                        &store.table,
                        &plan,
                        read.as_ref(),
                        store.retention,
                        callback_in_run,
                    )?,
                    Ok(Planned {
                        decision: Decision::Duplicate,
                        ..
                    })
                    | Err(StoreError::NotFound)
                    | Err(StoreError::Gone(_)) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            let outcome = store.transact("checkpoint", tx).await;
            let reasons = match outcome.map_err(Refused::Maybe)? {
                TxOutcome::Committed => {
                    if cp.by_own_build {
                        store.tails.emptied(
                            &cp.run,
                            cp.expected_version,
                            &in_run_states,
                            &closed_states,
                        );
                    }
                    return Ok(());
                }
                TxOutcome::Cancelled(reasons) => reasons,
                TxOutcome::NotWritten(e) => return Err(Refused::Certainly(e)),
            };
            if let Some(reason) = reason_of(&reasons, Role::Run) {
                let current = match reason.item.as_ref().map(run_from_item).transpose() {
                    Ok(Some(current)) => StoreError::Conflict(Some(Box::new(current))),
                    Ok(None) => StoreError::NotFound,
                    Err(e) => e,
                };
                return Err(Refused::Certainly(current));
            }
            if reason_of(&reasons, Role::Checkpoint).is_some() {
                let current = match store.current_run(tenant, run_id).await {
                    Ok(current) => StoreError::Conflict(Some(Box::new(current))),
                    Err(e) => e,
                };
                return Err(Refused::Certainly(current));
            }
            if reason_of(&reasons, Role::ChildRun).is_some()
                || reason_of(&reasons, Role::ChildTimeline).is_some()
            {
                return Err(Refused::Certainly(StoreError::AlreadyExists));
            }
            // Only the parent's records moved since they were read: read them again.
        }
        Err(Refused::Certainly(StoreError::Unavailable(
            "checkpoint: the parent run kept changing".into(),
        )))
    }
    .await;
    match written {
        Ok(()) => Ok(()),
        Err(Refused::Maybe(e)) => Err(e),
        // A refused checkpoint writes nothing (the port's contract), its openings
        // included — even refused by a conflict under its own lease, which the core
        // writes again over the run's new version, putting them again.
        Err(Refused::Certainly(e)) => {
            withdraw_openings(store, &created).await;
            Err(e)
        }
    }
}

/// How many of the `opening` callbacks a checkpoint opens keep their state in the run
/// item (the first ones, the rest in their records — unless records an attempt before
/// put say otherwise, see [`put_openings`]): as many as leave the run item with
/// [`MAX_IN_RUN`] at most, as far as the store knows what it holds at the version the
/// checkpoint writes over (after the claim and the replay, it does; not knowing, none).
fn opened_in_run(store: &DynamoStore, cp: &Checkpoint, opening: usize, closed: &[String]) -> usize {
    if opening == 0 {
        return 0;
    }
    let Some(held) = store.callback_states_at(&cp.run, cp.expected_version) else {
        return 0;
    };
    let kept = held.iter().filter(|s| !closed.contains(s)).count();
    opening.min(MAX_IN_RUN.saturating_sub(kept))
}

/// Why a checkpoint's write failed: refused for certain (nothing was written), or
/// maybe committed (its answer was lost).
enum Refused {
    Certainly(StoreError),
    Maybe(StoreError),
}

impl From<StoreError> for Refused {
    fn from(e: StoreError) -> Self {
        Refused::Certainly(e)
    }
}
