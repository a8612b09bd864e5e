//! The checkpoint: what it must read first (its tenant's count, the run item's tail,
//! its parent's records), its callbacks' openings put before it, then the writes the
//! checkpoint plans of [`crate::layout`] decide — in one transaction, or in the run
//! item alone ([`super::tail`]) — sent, and a refusal traced to its cause.

use siesta::delivery::Decision;
use siesta::ports::*;
use siesta::*;

use super::deliveries::{Dedup, Planned};
use super::limits::{LINE_ATTEMPTS, line_backoff};
use super::openings::{put_openings, split_openings, withdraw_openings};
use super::tail::checkpoint_in_tail;
use super::tx::{TxOutcome, reason_of};
use super::{DynamoStore, RACE_ATTEMPTS};
use crate::callback_state::state_attr;
use crate::item::*;
use crate::layout::{self, Role};

impl DynamoStore {
    /// How a checkpoint changes its tenant's count of unfinished runs: +1 per child
    /// run, +1 when it reopens a finished run (a restart), -1 when it moves the run
    /// from unfinished to finished — and, then, the run
    /// as it was before (what the slots of its concurrency limits are freed from).
    /// Whether it does is read here, at the version the checkpoint is conditioned on:
    /// if the run moved on since, the checkpoint's own condition fails and neither the
    /// count nor a slot is touched.
    pub(super) async fn unfinished_delta(
        &self,
        cp: &Checkpoint,
    ) -> Result<(i64, Option<Run>), StoreError> {
        let children = cp
            .child_runs
            .iter()
            .filter(|(child, _)| !child.status.is_finished())
            .count() as i64;
        if !cp.run.status.is_finished() {
            // A restart in place moves a finished run back to unfinished.
            return Ok((children + i64::from(cp.reopens), None));
        }
        let finishing = self
            .get_run(&cp.run.tenant, &cp.run.id)
            .await?
            .filter(|before| before.version == cp.expected_version && !before.status.is_finished());
        Ok((children - i64::from(finishing.is_some()), finishing))
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

/// [`RunStore::checkpoint_admitting`]: one `TransactWriteItems` (or, for a step, one
/// `UpdateItem`); a run that finishes frees its concurrency slots in it and hands them
/// on ([`layout::release`]), answering which runs that admitted.
pub(super) async fn checkpoint(
    store: &DynamoStore,
    cp: &Checkpoint,
) -> Result<Vec<Run>, StoreError> {
    let (tenant, run_id) = (&cp.run.tenant, &cp.run.id);
    // A run moved to another build (an upgrade) and child runs are on builds the
    // tenant's records must list.
    if cp.timeline.iter().any(|e| {
        matches!(
            e.event_type,
            EventType::RunUpgraded | EventType::RunRestarted
        )
    }) {
        store.note_build(&cp.run).await?;
    }
    for (child, _) in &cp.child_runs {
        store.note_build(child).await?;
    }
    let (unfinished, finishing) = store.unfinished_delta(cp).await?;
    // A run with concurrency limits that finishes here frees its slots in this write.
    let releasing = finishing.filter(|before| !before.limits.is_empty());
    // A step's checkpoint, typically: kept in the run item as its tail.
    if layout::may_keep_in_tail(cp, unfinished) && checkpoint_in_tail(store, cp).await? {
        return Ok(Vec::new());
    }
    let previous_tail = match cp.by_own_build {
        true => store.tail_at(&cp.run, cp.expected_version).await?.flatten(),
        false => None,
    };
    // Refused as the transaction would have been, before any opening is put: the
    // contract counts the callbacks' records among its items.
    if cp.item_count() > MAX_TRANSACTION_ITEMS {
        return Err(StoreError::Invalid(format!(
            "checkpoint: {} items exceed DynamoDB's {MAX_TRANSACTION_ITEMS} per transaction",
            cp.item_count()
        )));
    }
    // The callbacks it opens are put first (`super::openings`). An opening still takes
    // the transaction path (not the tail's, [`layout::may_keep_in_tail`]), so that the run item is
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
    let inputs = layout::TransactionInputs {
        unfinished,
        previous_tail: previous_tail.as_ref(),
        opened_in_item: &opened_in_item,
        closed: &closed,
        closed_states: &closed_states,
        retention: store.retention,
    };
    let base = match layout::transaction(cp, &inputs) {
        Ok(base) => base,
        Err(e) => {
            withdraw_openings(store, &created).await;
            return Err(e);
        }
    };
    // A finish that frees slots may lose its lines to racing starts and finishes of
    // the same keys: it is planned again more often, after a pause.
    let attempts = match releasing {
        Some(_) => LINE_ATTEMPTS,
        None => RACE_ATTEMPTS,
    };
    let written: Result<Vec<Run>, Refused> = async {
        for attempt in 0..attempts {
            if attempt > 0 && releasing.is_some() {
                line_backoff(attempt).await;
            }
            let mut plan = base.clone();
            // The slots it frees, handed on, from the lines as they are now.
            let mut admitted = Vec::new();
            if let Some(before) = &releasing {
                let slots = store.plan_release(before, cp.run.updated_at).await?;
                plan.writes.extend(slots.writes);
                admitted = slots.admitted;
            }
            if let Some(delivery) = &cp.parent_delivery {
                // A missing or finished parent, or a duplicate, skips the delivery.
                match store.plan(delivery, Dedup::Read).await {
                    Ok(Planned {
                        decision: Decision::Accept(accepted),
                        read,
                        callback_in_run,
                    }) => plan.writes.extend(layout::delivery(
                        &accepted,
                        read.as_ref(),
                        store.retention,
                        callback_in_run,
                    )?),
                    Ok(Planned {
                        decision: Decision::Duplicate,
                        ..
                    })
                    | Err(StoreError::NotFound)
                    | Err(StoreError::Gone(_)) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            let outcome = store.transact("checkpoint", &plan).await;
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
                    return Ok(admitted);
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
            // Only the parent's records, or the limits' lines, moved since they were
            // read: read them again.
        }
        Err(Refused::Certainly(StoreError::Unavailable(
            "checkpoint: the parent run or the limits' lines kept changing".into(),
        )))
    }
    .await;
    match written {
        Ok(admitted) => Ok(admitted),
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
/// item ([`layout::states_in_run`]), as far as the store knows what the run item holds
/// at the version the checkpoint writes over (after the claim and the replay, it does)
/// — unless records an attempt before put say otherwise, see [`put_openings`].
fn opened_in_run(store: &DynamoStore, cp: &Checkpoint, opening: usize, closed: &[String]) -> usize {
    let held = store.callback_states_at(&cp.run, cp.expected_version);
    layout::states_in_run(opening, held.as_deref(), closed)
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
