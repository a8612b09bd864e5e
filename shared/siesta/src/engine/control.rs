//! An operator's control of a run: cancel, resume, resolve an unknown tool call.

use crate::timeline as tl;
use std::time::Duration;

use super::finish::{child_finished, open_callbacks, overflowing};
use super::{Engine, EngineError, ToolCallResolution, inline_detail};
use crate::lifecycle::{LifecycleEvent, decide};
use crate::model::*;
use crate::ports::*;
use crate::time::Timestamp;

impl Engine {
    /// The run as read now, if it is at version `if_match` (when given; else
    /// [`EngineError::VersionMismatch`]): what an operator's action (cancel, resume,
    /// resolve, upgrade) acts on, guarded against a stale view.
    pub(super) async fn run_at(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        if_match: Option<u64>,
    ) -> Result<Run, EngineError> {
        let run = self.get_run(tenant, run_id).await?;
        match if_match {
            Some(v) if v != run.version => Err(EngineError::VersionMismatch {
                current: run.version,
            }),
            _ => Ok(run),
        }
    }

    /// Cancel a run: at once when it is not running, at its next operation boundary when
    /// it is. `if_match` guards against a stale view (the run's version).
    pub async fn cancel(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        if_match: Option<u64>,
    ) -> Result<Run, EngineError> {
        self.cancel_as(tenant, run_id, if_match, None).await
    }

    /// [`Engine::cancel`] by `by` (the operator: `dev`, an API key's fingerprint, a JWT's
    /// `sub`), named in the timeline's `ExecutionCancelled` or `CancelRequested`
    /// (`CancelledBy`).
    pub async fn cancel_as(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        if_match: Option<u64>,
        by: Option<&str>,
    ) -> Result<Run, EngineError> {
        for _ in 0..8 {
            let run = self.run_at(tenant, run_id, if_match).await?;
            if run.status.is_finished() {
                return Err(EngineError::AlreadyFinished(run.status));
            }
            let now = self.clock.now();
            let leased = run.is_leased(now);
            let event = if leased {
                LifecycleEvent::RequestCancel
            } else {
                LifecycleEvent::Cancel
            };
            let status = decide(run.status, event).map_err(|e| EngineError::Gone(e.to_string()))?;
            let mut next = run.clone();
            next.version += 1;
            next.updated_at = now;
            next.cancel_requested = true;
            next.status = status;
            let mut checkpoint_events = vec![TimelineEvent {
                seq: 0,
                at: now,
                event_type: if leased {
                    EventType::CancelRequested
                } else {
                    EventType::ExecutionCancelled
                },
                sub_type: None,
                id: None,
                parent_id: None,
                name: Some(run.workflow.clone()),
                details: match by {
                    Some(by) => tl::EventDetails::Cancelled(tl::Cancelled {
                        cancelled_by: Some(by.to_owned()),
                    })
                    .to_value(),
                    None => serde_json::Value::Null,
                },
            }];
            for e in &mut checkpoint_events {
                next.timeline_seq += 1;
                e.seq = next.timeline_seq;
            }
            let mut checkpoint = Checkpoint::new(next.clone(), run.version, None);
            checkpoint.timeline = checkpoint_events;
            if !leased {
                // A queued run leaves its line with this write (the store frees it).
                next.queued = None;
                next.lease = None;
                next.due_at = None;
                next.resend_after = None;
                next.error = Some(ErrorInfo::new("Cancelled", "the run was cancelled", false));
                checkpoint.run = next.clone();
                let replay_input = self.backend.store.load_replay_input(tenant, run_id).await?;
                checkpoint.callbacks =
                    open_callbacks(replay_input.journal.iter(), &replay_input.deliveries, &run);
                if let Some(parent) = &run.parent {
                    let outcome = Err(ErrorInfo::new(
                        "Cancelled",
                        format!("child run {} was cancelled", run.id),
                        false,
                    ));
                    checkpoint.parent_delivery = Some(child_finished(
                        &run,
                        parent,
                        outcome,
                        status,
                        now,
                        self.delivery_resend_after(now),
                    ));
                }
            }
            let others = checkpoint.item_count() - checkpoint.callbacks.len();
            let overflow = overflowing(&mut checkpoint.callbacks, others);
            match self.backend.store.checkpoint_admitting(&checkpoint).await {
                Ok(admitted) => {
                    self.wake_admitted(&admitted).await;
                    self.close_overflow(tenant, run_id, overflow).await;
                    self.watchers.changed(tenant, run_id);
                    // A run cancelled while no one held it ends here: its root span
                    // too (docs/telemetry.md, "The run's root").
                    crate::telemetry::on_run_finished(&next, next.status, next.error.as_ref(), now);
                    if leased {
                        // The holder sees the flag when its next write conflicts.
                        self.send_wake(
                            WakeUp {
                                tenant: tenant.clone(),
                                run_id: run_id.clone(),
                                reason: WakeReason::Delivery,
                                epoch_hint: 0,
                                seq_hint: Some(next.timeline_seq),
                            },
                            Duration::ZERO,
                            None,
                        )
                        .await;
                    } else if let Some(parent) = &run.parent {
                        self.send_wake(
                            WakeUp {
                                tenant: tenant.clone(),
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
                    return Ok(next);
                }
                Err(StoreError::Conflict(current)) => {
                    // At the version the caller named, the conflict was a lease
                    // renewal in between (it moves no version): read again.
                    if let (Some(expected), Some(current)) = (if_match, current)
                        && current.version != expected
                    {
                        return Err(EngineError::VersionMismatch {
                            current: current.version,
                        });
                    }
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(EngineError::Store(StoreError::Unavailable(
            "the run kept changing while cancelling".to_owned(),
        )))
    }

    /// Close the callback records a finished run's last checkpoint had no room for, a
    /// transaction's worth at a time. Safe after the run finished: a delivery to a
    /// finished run is refused whatever its callback's record says, so a crash before
    /// these writes leaves records that read open but accept nothing.
    pub(super) async fn close_overflow(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        mut rest: Vec<CallbackRecord>,
    ) {
        while !rest.is_empty() {
            let chunk: Vec<CallbackRecord> = rest
                .drain(..rest.len().min(MAX_TRANSACTION_ITEMS - 1))
                .collect();
            let mut closed = false;
            for _ in 0..8 {
                let run = match self.backend.store.get_run(tenant, run_id).await {
                    Ok(Some(run)) => run,
                    Ok(None) => return,
                    Err(e) => {
                        tracing::warn!(run_id = %run_id, error = %e, "callbacks of a finished run not closed");
                        return;
                    }
                };
                let mut next = run.clone();
                next.version += 1;
                let mut checkpoint = Checkpoint::new(next, run.version, None);
                checkpoint.callbacks = chunk.clone();
                match self.backend.store.checkpoint(&checkpoint).await {
                    Ok(()) => {
                        closed = true;
                        break;
                    }
                    Err(StoreError::Conflict(_)) => continue,
                    Err(e) => {
                        tracing::warn!(run_id = %run_id, error = %e, "callbacks of a finished run not closed");
                        return;
                    }
                }
            }
            if !closed {
                tracing::warn!(run_id = %run_id, "callbacks of a finished run not closed: the run kept changing");
                return;
            }
        }
    }

    /// The run, if it is parked and (with `if_match`) still at that version: what an
    /// operator's action on a parked run (resume, resolve) starts from.
    async fn parked_run(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        if_match: Option<u64>,
    ) -> Result<Run, EngineError> {
        let run = self.run_at(tenant, run_id, if_match).await?;
        if !matches!(run.status, RunStatus::Parked | RunStatus::Paused) {
            return Err(if run.status.is_finished() {
                EngineError::AlreadyFinished(run.status)
            } else {
                EngineError::NotParked(run.status)
            });
        }
        Ok(run)
    }

    /// Resume a parked run once its cause is fixed, or a paused run: it becomes pending,
    /// due now, and is woken; replay continues from its journal (an unresolved cause
    /// parks it again; a timer or deadline that fell due while paused takes effect
    /// now). `if_match` guards against a stale view (the run's version).
    pub async fn resume(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        if_match: Option<u64>,
    ) -> Result<Run, EngineError> {
        self.resume_as(tenant, run_id, if_match, None).await
    }

    /// [`Engine::resume`] by `by` (the operator), named in the timeline's `RunResumed`
    /// (`ResolvedBy`).
    pub async fn resume_as(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        if_match: Option<u64>,
        by: Option<&str>,
    ) -> Result<Run, EngineError> {
        let run = self.parked_run(tenant, run_id, if_match).await?;
        let now = self.clock.now();
        let mut next = run.clone();
        next.version += 1;
        next.updated_at = now;
        let mut resumed = self.resume_parked(&run, &mut next, now)?;
        if let Some(by) = by {
            resumed.details = tl::EventDetails::RunResumed(tl::RunResumed {
                parked_for: run.error.clone(),
                resolved_by: Some(by.to_owned()),
            })
            .to_value();
        }
        next.timeline_seq += 1;
        resumed.seq = next.timeline_seq;
        let mut checkpoint = Checkpoint::new(next.clone(), run.version, None);
        checkpoint.timeline.push(resumed);
        self.write_and_wake(tenant, run_id, &checkpoint, next).await
    }

    /// `next`, a copy of the parked `run`, resumed at `now` — the status `decide` gives
    /// it, due now with the wake-up's resend mark, its error cleared — and the
    /// `RunResumed` event naming what it was parked for (its `seq` left for the caller).
    /// Shared by `resume` and an upgrade that fixes a run parked for its code.
    pub(super) fn resume_parked(
        &self,
        run: &Run,
        next: &mut Run,
        now: Timestamp,
    ) -> Result<TimelineEvent, EngineError> {
        next.status = decide(run.status, LifecycleEvent::Resume)
            .map_err(|e| EngineError::Gone(e.to_string()))?;
        next.due_at = Some(now);
        next.resend_after = self.resend_after(now);
        next.error = None;
        Ok(TimelineEvent {
            seq: 0,
            at: now,
            event_type: EventType::RunResumed,
            sub_type: None,
            id: None,
            parent_id: None,
            name: Some(run.workflow.clone()),
            details: tl::EventDetails::RunResumed(tl::RunResumed {
                parked_for: run.error.clone(),
                resolved_by: None,
            })
            .to_value(),
        })
    }

    /// Pause a run for `by` (the operator): a pending or waiting run (or a running one
    /// whose holder is gone) is paused at once — not due, no turn, its deliveries still
    /// recorded; a running one is asked to, and its holder pauses it at its next
    /// boundary (the attempt in flight finishes and checkpoints first). A paused run is
    /// answered as it is. Resume it with [`Engine::resume`]. A queued or parked run is
    /// not paused ([`EngineError::Gone`]): it takes no turn already.
    pub async fn pause(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        if_match: Option<u64>,
        by: &str,
    ) -> Result<Run, EngineError> {
        let run = self.run_at(tenant, run_id, if_match).await?;
        if run.status.is_finished() {
            return Err(EngineError::AlreadyFinished(run.status));
        }
        if run.status == RunStatus::Paused {
            return Ok(run);
        }
        let now = self.clock.now();
        let leased = run.status == RunStatus::Running && run.is_leased(now);
        let event = if leased {
            LifecycleEvent::RequestPause
        } else {
            LifecycleEvent::Pause
        };
        let status = decide(run.status, event).map_err(|e| EngineError::Gone(e.to_string()))?;
        let mut next = run.clone();
        next.version += 1;
        next.updated_at = now;
        next.status = status;
        let mut checkpoint = Checkpoint::new(next.clone(), run.version, None);
        if leased {
            next.pause_requested = Some(by.to_owned());
        } else {
            next.pause_requested = None;
            next.lease = None;
            next.due_at = None;
            next.resend_after = None;
            next.timeline_seq += 1;
            checkpoint.timeline.push(TimelineEvent {
                seq: next.timeline_seq,
                at: now,
                event_type: EventType::RunPaused,
                sub_type: None,
                id: None,
                parent_id: None,
                name: Some(run.workflow.clone()),
                details: tl::EventDetails::RunPaused(tl::RunPaused {
                    paused_by: Some(by.to_owned()),
                })
                .to_value(),
            });
        }
        checkpoint.run = next.clone();
        match self.backend.store.checkpoint(&checkpoint).await {
            Ok(()) => Ok(next),
            Err(StoreError::Conflict(Some(current))) => Err(EngineError::VersionMismatch {
                current: current.version,
            }),
            Err(e) => Err(e.into()),
        }
    }

    /// Write an operator's change to a parked run (`resume`, `resolve_tool_call`): a
    /// stale version is [`EngineError::VersionMismatch`]; once written, wake the run to
    /// act on it.
    async fn write_and_wake(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        checkpoint: &Checkpoint,
        next: Run,
    ) -> Result<Run, EngineError> {
        match self.backend.store.checkpoint(checkpoint).await {
            Ok(()) => {}
            Err(StoreError::Conflict(Some(current))) => {
                return Err(EngineError::VersionMismatch {
                    current: current.version,
                });
            }
            Err(e) => return Err(e.into()),
        }
        self.send_wake(
            WakeUp {
                tenant: tenant.clone(),
                run_id: run_id.clone(),
                reason: WakeReason::Delivery,
                epoch_hint: 0,
                seq_hint: Some(next.timeline_seq),
            },
            Duration::ZERO,
            next.due_at,
        )
        .await;
        Ok(next)
    }

    /// Resolve the tool call at `position` of a run parked because its outcome is
    /// `unknown`: journal the operator's resolution, with who made it (`by`), in the
    /// same write that resumes the run (pending, due now), then wake it. The timeline
    /// shows `ToolCallRecorded` with the resolution and `ResolvedBy`, the step's outcome
    /// (`StepSucceeded`/`StepFailed`) when there is one, and `RunResumed`. `if_match`
    /// guards against a stale view (the run's version).
    pub async fn resolve_tool_call(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        position: &Position,
        resolution: ToolCallResolution,
        by: &str,
        if_match: Option<u64>,
    ) -> Result<Run, EngineError> {
        let run = self.parked_run(tenant, run_id, if_match).await?;
        let replay_input = self.backend.store.load_replay_input(tenant, run_id).await?;
        let entry = replay_input
            .journal
            .into_iter()
            .find(|e| e.position == *position)
            .ok_or(EngineError::NotFound)?;
        let EntryState::Unknown { key, attempt } = entry.state.clone() else {
            return Err(EngineError::NothingToResolve(format!(
                "the operation at {position} is not a tool call whose outcome is unknown"
            )));
        };
        let attempt = attempt.max(1);
        let now = self.clock.now();
        let event = |event_type: EventType, details: tl::EventDetails| TimelineEvent {
            seq: 0,
            at: now,
            event_type,
            sub_type: Some(SubType::ToolCall),
            id: Some(position.0.clone()),
            parent_id: position.parent().map(|p| p.0),
            name: Some(entry.name.clone()),
            details: details.to_value(),
        };
        let mut timeline = vec![event(
            EventType::ToolCallRecorded,
            tl::EventDetails::ToolCallRecorded(tl::ToolCallRecorded {
                status: resolution.as_str().to_owned(),
                resolution: Some(resolution.as_str().to_owned()),
                resolved_by: Some(by.to_string()),
                idempotency_key: Some(key.clone()),
            }),
        )];
        let record = |status: ToolCallStatus, outcome: Result<Payload, ErrorInfo>| ToolCallRecord {
            key: key.clone(),
            tenant: tenant.clone(),
            run_id: run_id.clone(),
            position: position.clone(),
            status,
            outcome: Some(outcome),
            updated_at: now,
        };
        let (state, tool_call) = match &resolution {
            ToolCallResolution::Succeeded(value) => {
                let payload = self.encode(tenant, run_id, value).await?;
                timeline.push(event(
                    EventType::StepSucceeded,
                    tl::EventDetails::StepSucceeded(tl::StepEnded {
                        attempt: Some(attempt),
                        result: Some(inline_detail(&payload)),
                        resolved_by: Some(by.to_string()),
                        ..Default::default()
                    }),
                ));
                (
                    EntryState::Succeeded {
                        value: payload.clone(),
                        attempt,
                    },
                    Some(record(ToolCallStatus::Succeeded, Ok(payload))),
                )
            }
            ToolCallResolution::Failed(error) => {
                timeline.push(event(
                    EventType::StepFailed,
                    tl::EventDetails::StepFailed(tl::StepEnded {
                        attempt: Some(attempt),
                        error: Some(error.clone()),
                        resolved_by: Some(by.to_string()),
                        ..Default::default()
                    }),
                ));
                (
                    EntryState::Failed {
                        error: error.clone(),
                        attempt,
                    },
                    Some(record(ToolCallStatus::Failed, Err(error.clone()))),
                )
            }
            // Due at once: the step makes its next attempt when the run replays.
            ToolCallResolution::Retry => (
                EntryState::Retrying {
                    attempt,
                    error: ErrorInfo::new(
                        "ResolvedForRetry",
                        format!("the outcome was unknown; {by} chose to make the call again"),
                        true,
                    ),
                    retry_at: now,
                },
                None,
            ),
        };
        timeline.push(TimelineEvent {
            seq: 0,
            at: now,
            event_type: EventType::RunResumed,
            sub_type: None,
            id: None,
            parent_id: None,
            name: Some(run.workflow.clone()),
            details: tl::EventDetails::RunResumed(tl::RunResumed {
                parked_for: run.error.clone(),
                resolved_by: Some(by.to_string()),
            })
            .to_value(),
        });
        let status = decide(run.status, LifecycleEvent::Resume)
            .map_err(|e| EngineError::Gone(e.to_string()))?;
        let mut next = run.clone();
        next.status = status;
        next.version += 1;
        next.updated_at = now;
        next.due_at = Some(now);
        next.resend_after = self.resend_after(now);
        next.error = None;
        for e in &mut timeline {
            next.timeline_seq += 1;
            e.seq = next.timeline_seq;
        }
        let mut resolved = entry;
        resolved.state = state;
        resolved.updated_at = now;
        let mut checkpoint = Checkpoint::new(next.clone(), run.version, None);
        checkpoint.journal = vec![resolved];
        checkpoint.timeline = timeline;
        checkpoint.tool_calls = tool_call.into_iter().collect();
        let next = self
            .write_and_wake(tenant, run_id, &checkpoint, next)
            .await?;
        tracing::info!(tenant = %tenant, run_id = %run_id, %position, resolution = resolution.as_str(), %by, "unknown tool call resolved");
        Ok(next)
    }
}
