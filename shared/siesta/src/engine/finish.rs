//! Ending a pass: the run's final checkpoint of an invocation (new status, next due
//! time, closed callbacks, the parent's delivery), and the wake-ups that follow it.

use crate::timeline as tl;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use super::{Engine, EngineError, WakeOutcome, inline_detail};
use crate::context::{
    CommitError, Delta, Shared, encode_payload, expire_callbacks, held_callbacks_due,
};
use crate::error::PANICKED;
use crate::lifecycle::{LifecycleEvent, decide};
use crate::model::*;
use crate::ports::*;
use crate::time::Timestamp;

/// How a pass ends, decided from what the workflow did.
pub(super) enum Ending {
    Complete(Payload),
    Fail(ErrorInfo),
    Park(ErrorInfo),
    Cancel,
    /// Paused at a boundary, as this operator asked.
    Pause(String),
    Suspend,
    Yield,
}

impl Engine {
    /// Write the pass's ending as the run's final checkpoint of this invocation.
    pub(super) async fn finish(
        &self,
        shared: &Arc<Shared>,
        ending: Ending,
    ) -> Result<WakeOutcome, EngineError> {
        let now = self.clock.now();
        // A pause asked for while the pass ran, and no boundary after it: the run
        // pauses rather than suspends or yields.
        let ending = match (ending, shared.state().run.pause_requested.clone()) {
            (Ending::Suspend | Ending::Yield, Some(by)) => Ending::Pause(by),
            (ending, _) => ending,
        };
        // Openings and endings of waits held for this checkpoint (see
        // `context::coalesce`) are written with it — a finishing run closes the
        // callbacks its journal would show open once they are written. When a held
        // callback is already due as the run suspends (its timeout is recorded from
        // the journal), they are written first, on their own.
        let held_due = held_callbacks_due(shared);
        let suspends = matches!(ending, Ending::Suspend | Ending::Yield);
        if suspends
            && held_due.is_some_and(|due| due <= now)
            && let Err(e) = shared.flush_held().await
        {
            let why = match e {
                CommitError::Aborted(why) => why,
                CommitError::InboxChanged => "new deliveries arrived".to_owned(),
            };
            return Ok(WakeOutcome::Aborted(why));
        }
        let (run, next_due) = {
            let st = shared.state();
            (st.run.clone(), st.next_due)
        };
        // An output that cannot be stored fails the run rather than losing it silently.
        let ending = match ending {
            Ending::Complete(Payload::Inline(value)) => {
                let config = self.context_config();
                match encode_payload(&self.backend, &config, &run.tenant, &run.id, &value).await {
                    Ok(payload) => Ending::Complete(payload),
                    Err(e) => Ending::Fail(e.to_info()),
                }
            }
            other => other,
        };
        let event = |event_type: EventType, details: tl::EventDetails| TimelineEvent {
            seq: 0,
            at: now,
            event_type,
            sub_type: None,
            id: None,
            parent_id: None,
            name: Some(run.workflow.clone()),
            details: details.to_value(),
        };
        // Callbacks past their deadline time out now, even those the workflow is not
        // awaiting; the open ones make the run due at their deadline.
        let (mut delta, callback_due) = match ending {
            Ending::Suspend | Ending::Yield => {
                let (delta, due) = expire_callbacks(shared, &shared.state(), now);
                // A held callback still open makes the run due at its deadline too.
                let held = held_callbacks_due(shared).filter(|due| *due > now);
                (delta, [due, held].into_iter().flatten().min())
            }
            _ => (Delta::default(), None),
        };
        let mut expect_inbox = (!delta.journal.is_empty()).then(|| shared.state().inbox_loaded);
        let (lifecycle, output, error, due_at) = match &ending {
            Ending::Complete(payload) => {
                delta.timeline.push(event(
                    EventType::ExecutionSucceeded,
                    tl::EventDetails::ExecutionSucceeded(tl::ExecutionSucceeded {
                        result: inline_detail(payload),
                    }),
                ));
                (LifecycleEvent::Complete, Some(payload.clone()), None, None)
            }
            Ending::Fail(error) => {
                delta.timeline.push(event(
                    EventType::ExecutionFailed,
                    tl::EventDetails::ExecutionFailed(tl::Failure {
                        error: error.clone(),
                    }),
                ));
                (LifecycleEvent::Fail, None, Some(error.clone()), None)
            }
            Ending::Park(reason) => {
                delta.timeline.push(event(
                    EventType::RunParked,
                    tl::EventDetails::RunParked(tl::RunParked {
                        error: Some(reason.clone()),
                        ..Default::default()
                    }),
                ));
                (LifecycleEvent::Park, None, Some(reason.clone()), None)
            }
            Ending::Cancel => {
                delta
                    .timeline
                    .push(event(EventType::ExecutionCancelled, tl::EventDetails::None));
                (
                    LifecycleEvent::Cancel,
                    None,
                    Some(ErrorInfo::new("Cancelled", "the run was cancelled", false)),
                    None,
                )
            }
            Ending::Pause(by) => {
                delta.timeline.push(event(
                    EventType::RunPaused,
                    tl::EventDetails::RunPaused(tl::RunPaused {
                        paused_by: Some(by.clone()),
                    }),
                ));
                (LifecycleEvent::Pause, None, None, None)
            }
            Ending::Suspend => {
                expect_inbox = Some(shared.state().inbox_loaded);
                let due = [next_due, callback_due].into_iter().flatten().min();
                (LifecycleEvent::Suspend, None, None, due)
            }
            Ending::Yield => (LifecycleEvent::Yield, None, None, Some(now)),
        };
        let status = decide(run.status, lifecycle).map_err(|e| EngineError::Gone(e.to_string()))?;
        // A wake-up follows a yield at once and a timer within the queue's longest
        // delay (a longer one is the sweep's to send).
        let resend_after = match (&ending, due_at) {
            (Ending::Yield, _) => self.resend_after(now),
            (Ending::Suspend, Some(due)) if now.until(due) <= MAX_QUEUE_DELAY => {
                self.resend_after(due)
            }
            _ => None,
        };
        delta.timeline.push(event(
            EventType::InvocationCompleted,
            tl::EventDetails::InvocationCompleted(tl::InvocationCompleted {
                status,
                next_wake_at: due_at,
                epoch: shared.epoch(),
            }),
        ));
        if status.is_finished() {
            // Only a finished run closes its callbacks: no scan of the journal otherwise.
            // The held entries stand over the journal's: a callback opened, held, is
            // closed too.
            let held = shared.held_entries();
            delta.callbacks = {
                let st = shared.state();
                let mut journal: HashMap<&Position, &JournalEntry> = st.journal.iter().collect();
                journal.extend(held.iter().map(|e| (&e.position, e)));
                open_callbacks(journal.into_values(), &st.deliveries, &run)
            };
            if let Some(parent) = &run.parent {
                let outcome = match (&ending, &output) {
                    (Ending::Complete(_), Some(payload)) => Ok(payload.clone()),
                    _ => Err(error.clone().unwrap_or_else(|| {
                        ErrorInfo::new("Failed", "the child run failed", false)
                    })),
                };
                delta.parent_delivery = Some(child_finished(
                    &run,
                    parent,
                    outcome,
                    status,
                    now,
                    self.delivery_resend_after(now),
                ));
            }
        }
        let others = 1
            + delta.journal.len()
            + delta.timeline.len()
            + delta.tool_calls.len()
            + 2 * delta.child_runs.len()
            + delta.parent_delivery.as_ref().map_or(0, |_| 3)
            // The tenant's count of unfinished runs (as `Checkpoint::item_count`).
            + usize::from(!delta.child_runs.is_empty() || status.is_finished())
            + shared.pending_extra_items();
        let overflow = overflowing(&mut delta.callbacks, others);
        // What this invocation looked at, whatever the ending: a yield or a park after a
        // delivery came in unseen leaves it counted as unseen (the quota of pending
        // deliveries, and the event check, which trusts that a delivery at or below
        // `inbox_seen` was seen by the writer of the journal).
        let inbox_seen = shared.state().inbox_loaded;
        let committed = shared
            .commit(delta, expect_inbox, |r| {
                r.status = status;
                r.lease = None;
                r.due_at = due_at;
                if status == RunStatus::Paused {
                    r.pause_requested = None;
                }
                r.resend_after = resend_after;
                r.inbox_seen = inbox_seen;
                if output.is_some() {
                    r.output = output.clone();
                }
                if error.is_some() {
                    r.error = error.clone();
                }
            })
            .await;
        match committed {
            Ok(()) => {}
            Err(CommitError::InboxChanged) => {
                return Err(EngineError::Store(StoreError::Conflict(None)));
            }
            Err(CommitError::Aborted(why)) => return Ok(WakeOutcome::Aborted(why)),
        }
        self.close_overflow(&run.tenant, &run.id, overflow).await;
        self.watchers.changed(&run.tenant, &run.id);
        // Its end known at last, the run's root span is emitted, whole: the parent its
        // wake-ups named (docs/telemetry.md, "The run's root").
        crate::telemetry::on_run_finished(&run, status, error.as_ref(), now);
        let epoch = shared.epoch().0;
        let seq = Some(shared.state().run.timeline_seq);
        match ending {
            Ending::Yield => {
                self.send_wake(
                    WakeUp {
                        tenant: run.tenant.clone(),
                        run_id: run.id.clone(),
                        reason: WakeReason::Continue,
                        epoch_hint: epoch,
                        seq_hint: seq,
                    },
                    Duration::ZERO,
                    due_at,
                )
                .await
            }
            Ending::Suspend => {
                if let Some(due) = due_at {
                    let delay = now.until(due);
                    // Longer timers wait in the due index for the sweep.
                    if delay <= MAX_QUEUE_DELAY {
                        self.send_wake(
                            WakeUp {
                                tenant: run.tenant.clone(),
                                run_id: run.id.clone(),
                                reason: WakeReason::Timer,
                                epoch_hint: epoch,
                                seq_hint: seq,
                            },
                            delay,
                            due_at,
                        )
                        .await;
                    }
                }
            }
            _ => {}
        }
        if let (true, Some(parent)) = (status.is_finished(), &run.parent) {
            self.send_wake(
                WakeUp {
                    tenant: run.tenant.clone(),
                    run_id: parent.run_id.clone(),
                    reason: WakeReason::Child,
                    epoch_hint: 0,
                    seq_hint: None,
                },
                Duration::ZERO,
                Some(now),
            )
            .await;
        }
        tracing::info!(tenant = %run.tenant, run_id = %run.id, status = %status, "invocation completed");
        Ok(WakeOutcome::Advanced(status))
    }
}

/// The delivery that tells a parent run its child (started by `invoke`) finished.
pub(super) fn child_finished(
    run: &Run,
    parent: &ParentLink,
    outcome: Result<Payload, ErrorInfo>,
    status: RunStatus,
    now: Timestamp,
    resend_after: Option<Timestamp>,
) -> NewDelivery {
    let event_type = if outcome.is_ok() {
        EventType::ChainedInvokeSucceeded
    } else {
        EventType::ChainedInvokeFailed
    };
    NewDelivery {
        id: child_finished_id(&run.id),
        tenant: run.tenant.clone(),
        run_id: parent.run_id.clone(),
        body: DeliveryBody::ChildFinished {
            position: parent.position.clone(),
            outcome,
            parent_created_at: parent.created_at,
        },
        received_at: now,
        resend_after,
        event: TimelineEvent {
            seq: 0,
            at: now,
            event_type,
            sub_type: Some(SubType::ChainedInvoke),
            // Named and nested like the parent's invoke operation, as its other events.
            id: Some(parent.position.0.clone()),
            parent_id: parent.position.parent().map(|p| p.0),
            name: Some(operation_name(&parent.position).to_owned()),
            details: tl::EventDetails::ChainedInvokeSucceeded(tl::ChainedInvoke {
                workflow: run.workflow.clone(),
                child_run_id: run.id.0.clone(),
                status: Some(status),
            })
            .to_value(),
        },
    }
}

/// Split off the callback records that do not fit in one transaction beside
/// `other_items` others; they are closed after it.
pub(super) fn overflowing(
    callbacks: &mut Vec<CallbackRecord>,
    other_items: usize,
) -> Vec<CallbackRecord> {
    let room = MAX_TRANSACTION_ITEMS.saturating_sub(other_items);
    if callbacks.len() <= room {
        Vec::new()
    } else {
        callbacks.split_off(room)
    }
}

/// The name an operation was given, from its position (`parent/name#occurrence`).
fn operation_name(position: &Position) -> &str {
    let last = position.0.rsplit('/').next().unwrap_or_default();
    last.rsplit_once('#').map_or(last, |(name, _)| name)
}

/// Callback records to close because their run is finishing: those its journal shows
/// waiting, but not one of its `deliveries` answers (its ending not journaled yet, or
/// held and lost in a crash, or never awaited), which stays as the answer left it.
pub(super) fn open_callbacks<'a>(
    entries: impl Iterator<Item = &'a JournalEntry>,
    deliveries: &[Delivery],
    run: &Run,
) -> Vec<CallbackRecord> {
    let answered: HashSet<&CallbackId> = deliveries
        .iter()
        .filter_map(|d| d.body.answered_callback())
        .collect();
    entries
        .filter_map(|e| match &e.state {
            EntryState::Waiting(Wait {
                kind: WaitKind::Callback { callback_id, .. },
                deadline,
                started_at,
            }) if !answered.contains(callback_id) => Some((e, callback_id, deadline, started_at)),
            _ => None,
        })
        .map(|(e, callback_id, deadline, started_at)| CallbackRecord {
            callback_id: callback_id.clone(),
            tenant: run.tenant.clone(),
            run_id: run.id.clone(),
            position: e.position.clone(),
            status: CallbackStatus::Closed,
            deadline: *deadline,
            created_at: *started_at,
            accepts: None,
            heartbeat: None,
        })
        .collect()
}

/// Why a run whose workflow body panicked is parked. A panic in workflow code (not in
/// a step) is a bug that replay would hit again, so retrying it is pointless and
/// failing the run would lose it: the run waits for an operator to fix the code and
/// resume it, replaying from its journal.
pub(super) fn workflow_panicked(message: &str) -> ErrorInfo {
    ErrorInfo::new(
        PANICKED,
        format!(
            "the workflow panicked outside a step: {message}; fix the code, then resume the run"
        ),
        false,
    )
}

/// Journal entries the finished workflow never reached: its code changed under it.
pub(super) fn unvisited(st: &crate::context::ExecState) -> Option<ErrorInfo> {
    first_unvisited(st).map(|e| ErrorInfo::new("NonDeterminism", unvisited_message(e), false))
}

/// The first journal entry (by position) the finished workflow never reached.
pub(super) fn first_unvisited(st: &crate::context::ExecState) -> Option<&JournalEntry> {
    st.journal
        .values()
        .filter(|e| {
            !st.visited.contains(&e.position)
                && !e.position.ancestors().any(|a| st.visited.contains(&a))
        })
        .min_by(|a, b| a.position.cmp(&b.position))
}

/// Why a finished workflow that never reached `entry` diverged from its journal.
pub(super) fn unvisited_message(e: &JournalEntry) -> String {
    format!(
        "non-determinism at {}: the journal has a {} operation '{}' that the code no longer reaches",
        e.position, e.kind, e.name
    )
}
