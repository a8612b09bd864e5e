//! Restart from a step (docs/operations.md): a run goes on from a position of its
//! journal — in place, keeping its id, or as a fork, a new run linked both ways —
//! only once the journal **before** that position is proved to replay on this build.
//!
//! What a restart writes, in place: the journal entries from the position on (the one
//! there, what the code reached after it, and its enclosing contexts) are written back
//! marked as superseded by this restart ([`JournalEntry::superseded`]), never replayed —
//! where they were (until the code reaches them again: what a restart carries over is
//! read there) and under an archived position kept for good ([`archived_position`]) —
//! and the run is made pending and due now on this
//! build, with `RunRestarted` in its timeline, in one write conditioned on the version
//! the check read (a journal too long for one write has its entries superseded by
//! writes before that one, which change nothing else). Callbacks the superseded
//! operations opened are closed. As a fork: a new run is created paused, the journal
//! before the position (and the superseded entries after it, for what a restart carries
//! over) is copied into it, and it is made pending; then the run it was made of
//! records the fork. A fork's id is derived from its source's id and restart number, so
//! a restart asked again after a crash finds the fork it had begun, not a second one.
//!
//! What happens to side effects after the position is the replay's business
//! (`context::carried`): a tool call that succeeded keeps its outcome unless the
//! restart asks to repeat it, a child run is taken over rather than started again; the
//! rest is done again.

use std::time::{Duration, Instant};

use super::finish::{open_callbacks, overflowing};
use super::replay_check::ReplayCheck;
use super::{Engine, EngineError};
use crate::lifecycle::{LifecycleEvent, decide};
use crate::model::*;
use crate::ports::*;
use crate::time::Timestamp;
use crate::timeline as tl;

/// How many journal entries one write sets aside at most: well within a transaction's
/// [`MAX_TRANSACTION_ITEMS`], with room for the run, its events and the counter.
const SET_ASIDE_PER_WRITE: usize = 64;

/// How long a restart of a running run waits for its holder to honour the cancel it
/// asks for (the attempt in flight finishes and checkpoints first).
const STOP_WAIT: Duration = Duration::from_secs(10);

/// Where an entry superseded by restart `number` is kept for good: its position with
/// `~r<number>` after it. A position the code mints ends in `#<occurrence>`, so no
/// operation ever takes it.
pub fn archived_position(position: &Position, number: u32) -> Position {
    Position(format!("{position}~r{number}"))
}

/// A fork is made with the journal before the point and none of its source's
/// deliveries (a checkpoint cannot carry them): refused, naming why, when the journal
/// before the point needs them — a step that drained messages (replay hands it them
/// again from the deliveries), or an operation still waiting for a delivery that goes
/// to the source (a callback, an event, a child's outcome).
fn fork_needs_no_deliveries(
    kept: &[JournalEntry],
    deliveries: &[Delivery],
) -> Result<(), EngineError> {
    let messages: std::collections::HashSet<&DeliveryId> = deliveries
        .iter()
        .filter(|d| matches!(d.body, DeliveryBody::Message { .. }))
        .map(|d| &d.id)
        .collect();
    let refuse = |why: String| {
        Err(EngineError::InvalidInput(format!(
            "{why}: a fork has none of its source's deliveries; restart it in place, or from an earlier point"
        )))
    };
    if let Some(e) = kept
        .iter()
        .find(|e| e.consumed.iter().any(|id| messages.contains(id)))
    {
        return refuse(format!("{} drained messages before the point", e.position));
    }
    if let Some(e) = kept
        .iter()
        .find(|e| matches!(e.state, EntryState::Waiting(_)))
    {
        return refuse(format!("{} still waits before the point", e.position));
    }
    Ok(())
}

/// What to restart a run from, and how.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RestartRequest {
    /// The position to go on from; `None`: the first operation that failed
    /// ([`first_failed`]), or where the run stopped when none did.
    pub from: Option<Position>,
    /// As a new run forked from this one, rather than in place.
    pub as_new: bool,
    /// Make tool calls superseded again rather than answer them from their recorded
    /// outcome.
    pub repeat_tool_calls: bool,
    /// A token that makes the restart idempotent (a bulk action's id): asked again with
    /// the token of the run's latest restart, it is answered as done.
    pub token: Option<String>,
}

/// What a restart did.
#[derive(Debug, Clone, PartialEq)]
pub struct Restarted {
    /// The run that goes on: the run itself, or the fork.
    pub run: Run,
    /// The position it goes on from (`None`: from where it stopped).
    pub from: Option<Position>,
    /// Journal entries superseded.
    pub superseded: usize,
    /// Journal entries before the position replayed on this build to check it.
    pub replayed: usize,
    /// Already done: the run's latest restart had this request's token.
    pub already: bool,
}

/// Where a restart goes on from, and what it sets aside: worked out from the journal.
struct Plan {
    from: Option<Position>,
    kept: Vec<JournalEntry>,
    superseded: Vec<JournalEntry>,
    deliveries: Vec<Delivery>,
    replayed: usize,
}

impl Engine {
    /// Restart the run from a step (see the module docs): in place, or as a new run
    /// with `request.as_new`. A failed, cancelled, completed, parked, paused, waiting
    /// or pending run is restarted at once; a running one is asked to cancel and
    /// restarted once its holder has stopped (within a few seconds, else
    /// [`EngineError::Leased`] and its cancel stands). The journal before the position
    /// must replay on this build ([`EngineError::Diverged`] otherwise, nothing
    /// changed). `if_match` guards against a stale view; `by` is who asks, for the
    /// timeline.
    pub async fn restart(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        request: RestartRequest,
        if_match: Option<u64>,
        by: &str,
    ) -> Result<Restarted, EngineError> {
        let mut run = self.run_at(tenant, run_id, if_match).await?;
        if let Some(done) = self.already_restarted(&run, &request).await? {
            return Ok(done);
        }
        if run.status == RunStatus::Queued {
            return Err(EngineError::Gone(
                "the run is queued: it has not begun, there is nothing to restart".to_owned(),
            ));
        }
        if request.as_new {
            if let Some(by) = self.flow_controlled.get(&run.workflow) {
                return Err(EngineError::InvalidInput(format!(
                    "{} is under {by}: a fork would not count against it; restart it in place",
                    run.workflow
                )));
            }
        } else if run.status.is_finished() && !run.limits.is_empty() {
            return Err(EngineError::InvalidInput(
                "the run was under a concurrency limit: restarting it in place would bypass the limit's line; restart it as new is refused too (not supported under a limit yet)"
                    .to_owned(),
            ));
        }
        if !request.as_new && run.status == RunStatus::Running && run.is_leased(self.clock.now()) {
            // Checked before the cancel, so that a restart refused (no such position, a
            // divergence) leaves the run running, as it found it.
            self.plan_restart(&run, request.from.clone(), request.as_new)
                .await?;
            run = self.stop_for_restart(tenant, run_id).await?;
        }
        for _ in 0..8 {
            let plan = self
                .plan_restart(&run, request.from.clone(), request.as_new)
                .await?;
            let outcome = if request.as_new {
                self.fork(&run, &request, plan, by).await
            } else {
                self.restart_in_place(&run, &request, plan, by).await
            };
            match outcome {
                Err(EngineError::Store(StoreError::Conflict(_))) => {
                    // The run moved since it was read (a delivery, a claim, or the
                    // restart's own earlier writes): read and plan again. `if_match`
                    // was the caller's guard on the run it asked about, checked above.
                    let current = self.get_run(tenant, run_id).await?;
                    if let Some(done) = self.already_restarted(&current, &request).await? {
                        return Ok(done);
                    }
                    if !request.as_new
                        && current.status == RunStatus::Running
                        && current.is_leased(self.clock.now())
                    {
                        return Err(EngineError::Leased);
                    }
                    run = current;
                }
                other => return other,
            }
        }
        Err(EngineError::Store(StoreError::Unavailable(
            "the run kept changing while being restarted".to_owned(),
        )))
    }

    /// The answer to a restart asked again with the token of the run's latest one.
    async fn already_restarted(
        &self,
        run: &Run,
        request: &RestartRequest,
    ) -> Result<Option<Restarted>, EngineError> {
        let Some(mark) = run.restart.as_ref().filter(|m| {
            request.token.is_some() && m.token == request.token && m.forked_from.is_none()
        }) else {
            return Ok(None);
        };
        let goes_on = match &mark.fork {
            Some(fork) => self.get_run(&run.tenant, fork).await?,
            None => run.clone(),
        };
        Ok(Some(Restarted {
            run: goes_on,
            from: mark.from.clone(),
            superseded: 0,
            replayed: 0,
            already: true,
        }))
    }

    /// Ask the running run to cancel and wait for its holder to stop it.
    async fn stop_for_restart(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
    ) -> Result<Run, EngineError> {
        match self.cancel(tenant, run_id, None).await {
            Ok(_) | Err(EngineError::AlreadyFinished(_)) => {}
            Err(e) => return Err(e),
        }
        let give_up = Instant::now() + STOP_WAIT;
        loop {
            let run = self.get_run(tenant, run_id).await?;
            if !(run.status == RunStatus::Running && run.is_leased(self.clock.now())) {
                return Ok(run);
            }
            if Instant::now() >= give_up {
                return Err(EngineError::Leased);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Where the restart of `run` goes on from, what it keeps and sets aside, and the
    /// proof that what it keeps replays on this build.
    async fn plan_restart(
        &self,
        run: &Run,
        from: Option<Position>,
        as_new: bool,
    ) -> Result<Plan, EngineError> {
        let restarts = restarts_of(run);
        let replay_input = self
            .backend
            .store
            .load_replay_input(&run.tenant, &run.id)
            .await?;
        let from = match from {
            Some(from) => {
                let known = replay_input
                    .journal
                    .iter()
                    .any(|e| e.position == from && !e.is_superseded(restarts));
                if !known {
                    return Err(EngineError::InvalidInput(format!(
                        "the run's journal has no operation at {from} (GET /runs/{}/timeline names each operation's position)",
                        run.id
                    )));
                }
                Some(from)
            }
            None => first_failed(&replay_input.journal, restarts),
        };
        let aside: std::collections::HashSet<Position> = match &from {
            Some(from) => superseded_from(&replay_input.journal, from, restarts)
                .into_iter()
                .collect(),
            None => Default::default(),
        };
        let (mut superseded, kept): (Vec<_>, Vec<_>) = replay_input
            .journal
            .into_iter()
            .filter(|e| !e.is_superseded(restarts))
            .partition(|e| aside.contains(&e.position));
        if as_new {
            fork_needs_no_deliveries(&kept, &replay_input.deliveries)?;
        }
        superseded.sort_by(|a, b| a.position.cmp(&b.position));
        let check = self
            .check_replay_input(
                run.clone(),
                ReplayInput {
                    journal: kept.clone(),
                    deliveries: replay_input.deliveries.clone(),
                },
            )
            .await?;
        let replayed = match check {
            ReplayCheck::Clean { replayed } => replayed,
            ReplayCheck::Diverged(divergence) => return Err(EngineError::Diverged(divergence)),
        };
        Ok(Plan {
            from,
            kept,
            superseded,
            deliveries: replay_input.deliveries,
            replayed,
        })
    }

    /// The `RunRestarted` event of the restart `mark` records, of a run of `workflow`.
    fn restarted_event(workflow: &str, plan: &Plan, mark: &RestartMark) -> TimelineEvent {
        TimelineEvent {
            seq: 0,
            at: mark.at,
            event_type: EventType::RunRestarted,
            sub_type: None,
            id: None,
            parent_id: None,
            name: Some(workflow.to_owned()),
            details: tl::EventDetails::RunRestarted(tl::RunRestarted {
                restarted_by: mark.by.clone(),
                from: mark.from.as_ref().map(|p| p.0.clone()),
                restart: mark.number,
                superseded: plan.superseded.len() as u64,
                replayed: plan.replayed as u64,
                repeat_tool_calls: mark.repeat_tool_calls,
                fork: mark.fork.as_ref().map(|id| id.0.clone()),
                forked_from: mark.forked_from.as_ref().map(|id| id.0.clone()),
            })
            .to_value(),
        }
    }

    /// The mark a restart numbered `number` leaves on a run.
    fn restart_mark(
        &self,
        plan: &Plan,
        number: u32,
        request: &RestartRequest,
        by: &str,
        now: Timestamp,
    ) -> RestartMark {
        RestartMark {
            number,
            from: plan.from.clone(),
            by: by.to_owned(),
            at: now,
            repeat_tool_calls: request.repeat_tool_calls,
            token: request.token.clone(),
            forked_from: None,
            origin: None,
            fork: None,
        }
    }

    /// Write `entries` into `run`'s journal by writes that change nothing else, all but
    /// the last [`SET_ASIDE_PER_WRITE`] of them (those go with the caller's own write):
    /// the run as it stands after them.
    async fn write_ahead(
        &self,
        run: &Run,
        entries: &mut Vec<JournalEntry>,
    ) -> Result<Run, EngineError> {
        let mut run = run.clone();
        while entries.len() > SET_ASIDE_PER_WRITE {
            let chunk: Vec<JournalEntry> = entries.drain(..SET_ASIDE_PER_WRITE).collect();
            let mut next = run.clone();
            next.version += 1;
            let mut checkpoint = Checkpoint::new(next.clone(), run.version, None);
            checkpoint.journal = chunk;
            self.backend.store.checkpoint(&checkpoint).await?;
            run = next;
        }
        Ok(run)
    }

    /// The restart of `run` in place, as planned.
    async fn restart_in_place(
        &self,
        run: &Run,
        request: &RestartRequest,
        plan: Plan,
        by: &str,
    ) -> Result<Restarted, EngineError> {
        let now = self.clock.now();
        let number = run.restart.as_ref().map_or(0, |m| m.number) + 1;
        // Each entry twice: where it was, until the code reaches it again (what the
        // restart carries over is read there), and under its archived position, kept.
        let mut entries: Vec<JournalEntry> = plan
            .superseded
            .iter()
            .flat_map(|e| {
                let mut aside = e.clone();
                aside.superseded = Some(number);
                let mut archived = aside.clone();
                archived.position = archived_position(&e.position, number);
                [aside, archived]
            })
            .collect();
        let base = self.write_ahead(run, &mut entries).await?;
        let status = decide(run.status, LifecycleEvent::Restart)
            .map_err(|e| EngineError::Gone(e.to_string()))?;
        let mut next = base.clone();
        next.version += 1;
        next.updated_at = now;
        next.status = status;
        next.due_at = Some(now);
        next.resend_after = self.resend_after(now);
        next.error = None;
        next.output = None;
        next.lease = None;
        next.cancel_requested = false;
        next.pause_requested = None;
        next.queued = None;
        next.held = None;
        next.build_id = Some(self.config.build_id.clone());
        let mark = self.restart_mark(&plan, number, request, by, now);
        let mut event = Self::restarted_event(&run.workflow, &plan, &mark);
        next.restart = Some(mark);
        next.timeline_seq += 1;
        event.seq = next.timeline_seq;
        let mut checkpoint = Checkpoint::new(next.clone(), base.version, None);
        checkpoint.journal = entries;
        checkpoint.timeline = vec![event];
        checkpoint.callbacks = open_callbacks(plan.superseded.iter(), &plan.deliveries, run);
        checkpoint.reopens = run.status.is_finished();
        // Callbacks past what one write holds are closed after it (a completion of one
        // of them meanwhile finds no wait: its superseded wait's callback id is nobody's).
        let others = checkpoint.item_count() - checkpoint.callbacks.len();
        let overflow = overflowing(&mut checkpoint.callbacks, others);
        self.backend.store.checkpoint(&checkpoint).await?;
        self.close_overflow(&run.tenant, &run.id, overflow).await;
        self.watchers.changed(&run.tenant, &run.id);
        self.send_wake(
            WakeUp {
                tenant: run.tenant.clone(),
                run_id: run.id.clone(),
                reason: WakeReason::Delivery,
                epoch_hint: 0,
                seq_hint: Some(next.timeline_seq),
            },
            Duration::ZERO,
            next.due_at,
        )
        .await;
        Ok(Restarted {
            run: next,
            from: plan.from,
            superseded: plan.superseded.len(),
            replayed: plan.replayed,
            already: false,
        })
    }

    /// The id of the fork a restart numbered `number` of `source` makes: the same every
    /// time that restart is asked, so a retry finds the fork it had begun.
    fn fork_id(source: &Run, number: u32) -> RunId {
        RunId(format!("{}.fork-{number}", source.id))
    }

    /// The restart of `source` as a new run, as planned.
    async fn fork(
        &self,
        source: &Run,
        request: &RestartRequest,
        plan: Plan,
        by: &str,
    ) -> Result<Restarted, EngineError> {
        let now = self.clock.now();
        let number = source.restart.as_ref().map_or(0, |m| m.number) + 1;
        let fork_id = Self::fork_id(source, number);
        let mut mark = self.restart_mark(&plan, 1, request, by, now);
        mark.forked_from = Some(source.id.clone());
        mark.origin = Some(source.key_origin().clone());
        let fork = match self.backend.store.get_run(&source.tenant, &fork_id).await? {
            // Made by this restart asked before, and not finished then: finish it.
            Some(fork) if fork.status == RunStatus::Paused && fork.timeline_seq <= 1 => fork,
            Some(fork) => {
                return self
                    .record_fork(source, request, &plan, number, fork, by, now)
                    .await;
            }
            None => {
                let mut fork = Run::new(
                    source.tenant.clone(),
                    fork_id.clone(),
                    source.workflow.clone(),
                    source.input.clone(),
                    now,
                );
                fork.status = RunStatus::Paused;
                fork.due_at = None;
                fork.build_id = Some(self.config.build_id.clone());
                fork.restart = Some(mark.clone());
                fork.timeline_seq = 1;
                let mut started = TimelineEvent::execution_started(
                    now,
                    &source.workflow,
                    tl::EventDetails::ExecutionStarted(tl::ExecutionStarted {
                        workflow: None,
                        parent_run_id: None,
                        parent_operation_id: None,
                        build_id: Some(self.config.build_id.clone()),
                    })
                    .to_value(),
                );
                started.seq = 1;
                let quota = self.config.quotas.for_tenant(&source.tenant);
                let created = match quota.max_unfinished_runs {
                    Some(max) => {
                        self.backend
                            .store
                            .create_run_within(&fork, &started, max)
                            .await
                    }
                    None => self.backend.store.create_run(&fork, &started).await,
                };
                match created {
                    Ok(()) => fork,
                    Err(StoreError::OverQuota(m)) => {
                        return Err(crate::quota::QuotaExceeded::new(
                            crate::quota::QuotaLimit::UnfinishedRuns,
                            m,
                        )
                        .into());
                    }
                    Err(StoreError::AlreadyExists) => {
                        return Err(EngineError::Store(StoreError::Conflict(None)));
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        };
        // The journal before the point. Of what comes after the point, only a succeeded tool call's outcome is carried
        // into a fork: its children are its own (a child's outcome goes to its parent,
        // the source), its waits wait anew.
        let mut entries: Vec<JournalEntry> = plan.kept.clone();
        entries.extend(
            plan.superseded
                .iter()
                .filter(|e| {
                    e.kind == OperationKind::ToolCall
                        && matches!(e.state, EntryState::Succeeded { .. })
                })
                .cloned()
                .map(|mut e| {
                    e.superseded = Some(1);
                    e
                }),
        );
        let base = self.write_ahead(&fork, &mut entries).await?;
        let mut next = base.clone();
        next.version += 1;
        next.updated_at = now;
        next.status = decide(base.status, LifecycleEvent::Restart)
            .map_err(|e| EngineError::Gone(e.to_string()))?;
        next.due_at = Some(now);
        next.resend_after = self.resend_after(now);
        let mut event = Self::restarted_event(&source.workflow, &plan, &mark);
        next.timeline_seq += 1;
        event.seq = next.timeline_seq;
        let mut checkpoint = Checkpoint::new(next.clone(), base.version, None);
        checkpoint.journal = entries;
        checkpoint.timeline = vec![event];
        self.backend.store.checkpoint(&checkpoint).await?;
        self.send_wake(
            WakeUp::new(next.tenant.clone(), next.id.clone(), WakeReason::Started),
            Duration::ZERO,
            next.due_at,
        )
        .await;
        self.record_fork(source, request, &plan, number, next, by, now)
            .await
    }

    /// Record on `source` the fork its restart numbered `number` made.
    #[allow(clippy::too_many_arguments)]
    async fn record_fork(
        &self,
        source: &Run,
        request: &RestartRequest,
        plan: &Plan,
        number: u32,
        fork: Run,
        by: &str,
        now: Timestamp,
    ) -> Result<Restarted, EngineError> {
        let mut next = source.clone();
        next.version += 1;
        // A finished source keeps its time of finishing (what lists show, and what its
        // retention counts from): recording its fork changes nothing it did.
        if !source.status.is_finished() {
            next.updated_at = now;
        }
        let mut mark = self.restart_mark(plan, number, request, by, now);
        mark.fork = Some(fork.id.clone());
        let mut event = Self::restarted_event(&source.workflow, plan, &mark);
        next.restart = Some(mark);
        next.timeline_seq += 1;
        event.seq = next.timeline_seq;
        let mut checkpoint = Checkpoint::new(next, source.version, None);
        checkpoint.timeline = vec![event];
        self.backend.store.checkpoint(&checkpoint).await?;
        self.watchers.changed(&source.tenant, &source.id);
        Ok(Restarted {
            run: fork,
            from: plan.from.clone(),
            superseded: plan.superseded.len(),
            replayed: plan.replayed,
            already: false,
        })
    }
}
