//! Handling a wake-up: read the run, claim its lease, replay the workflow until it
//! suspends, finishes or spends its budget (then `finish` writes the ending),
//! and hand what was replayed to the replay cache for the next wake-up.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::Poll;
use std::time::Duration;

use super::finish::{Ending, unvisited, workflow_panicked};
use super::lease::{AbortOnDrop, renew_lease};
use super::{Engine, EngineError, WakeOutcome};
use crate::context::Replayed;
use crate::context::{Context, LeaseWatch, Shared, Stop, decode_payload};
use crate::error::{Error, panic_message};
use crate::model::*;
use crate::ports::*;
use crate::replay_cache::{Continuation, Kept};
use crate::time::Timestamp;

enum Exec {
    Finished(Result<serde_json::Value, Error>),
    Suspended,
    Aborted(String),
    /// The workflow body panicked outside a step (a step's panic is a failed attempt).
    Panicked(String),
}

impl Engine {
    /// Handle one wake-up: advance the run as far as it goes, with the default budget.
    pub async fn handle_wakeup(&self, wake: &WakeUp) -> Result<WakeOutcome, EngineError> {
        self.handle_wakeup_until(wake, None).await
    }

    /// Handle one wake-up, stopping new work at `deadline` (the Lambda's remaining time
    /// less a safety margin) or after the configured budget, whichever comes first.
    ///
    /// A wake-up of a run this process is handling already is folded into that
    /// handling ([`WakeOutcome::Folded`]): when done, the handler handles the run once
    /// more (see `turns`). The outcome is the first pass's, unless a pass after it did
    /// something to the run. Past `deadline` there is no time for that pass: unless the
    /// run finished, a wake-up is sent for it instead.
    pub async fn handle_wakeup_until(
        &self,
        wake: &WakeUp,
        deadline: Option<Timestamp>,
    ) -> Result<WakeOutcome, EngineError> {
        if wake.reason == WakeReason::Action {
            // Not a run's: a bulk action's job, its id in `run_id` (`actions/`).
            return self
                .advance_action_job(&wake.tenant, wake.run_id.as_str())
                .await;
        }
        let Some(turn) = self.turns.take(&wake.tenant, &wake.run_id) else {
            return Ok(WakeOutcome::Folded);
        };
        let mut outcome = self.handle_wakeup_once(wake, deadline).await;
        let mut turn = turn.again();
        while let Some(held) = turn {
            if deadline.is_some_and(|d| self.clock.now() >= d) {
                return self.hand_on_folded(wake, outcome).await;
            }
            let again = self.handle_wakeup_once(wake, deadline).await;
            if !matches!(
                again,
                Ok(WakeOutcome::NothingToDo
                    | WakeOutcome::Busy
                    | WakeOutcome::Folded
                    | WakeOutcome::NotFound)
            ) {
                outcome = again;
            }
            turn = held.again();
        }
        outcome
    }

    /// Past the deadline, with wake-ups folded into this handling: a run that finished
    /// needs nothing more; any other gets a wake-up of its own, handled by the next
    /// invocation (a pass cut short by the deadline sent one already; one more is a
    /// duplicate, which costs a read). If it cannot be sent, this handling reports its
    /// own wake-up aborted, for the queue to redeliver.
    async fn hand_on_folded(
        &self,
        wake: &WakeUp,
        outcome: Result<WakeOutcome, EngineError>,
    ) -> Result<WakeOutcome, EngineError> {
        if let Ok(WakeOutcome::Advanced(status)) = &outcome
            && status.is_finished()
        {
            return outcome;
        }
        let again = WakeUp {
            reason: WakeReason::Continue,
            ..wake.clone()
        };
        match self.backend.queue.send(&again, Duration::ZERO).await {
            Ok(()) => outcome,
            Err(e) => Ok(WakeOutcome::Aborted(format!(
                "wake-ups folded into this one: past the deadline, and sending one for them failed ({e}); left to this one's redelivery"
            ))),
        }
    }

    /// Claims the lease of `wake`'s run from `now` for the engine's lease time, owned as
    /// this engine's owner, `#` and `suffix` (a wake-up's count, or what else claims).
    pub(super) async fn claim_lease(
        &self,
        wake: &WakeUp,
        suffix: impl std::fmt::Display,
        now: Timestamp,
    ) -> Result<Run, StoreError> {
        let claim = Claim {
            owner: format!("{}#{suffix}", self.config.owner),
            now,
            expires_at: now.plus(self.config.lease_ttl),
        };
        self.backend
            .store
            .claim(&wake.tenant, &wake.run_id, &claim)
            .await
    }

    /// One pass of [`Engine::handle_wakeup_until`]: read the run, claim it, advance it.
    async fn handle_wakeup_once(
        &self,
        wake: &WakeUp,
        deadline: Option<Timestamp>,
    ) -> Result<WakeOutcome, EngineError> {
        let now = self.clock.now();
        let Some(run) = self
            .backend
            .store
            .get_run(&wake.tenant, &wake.run_id)
            .await?
        else {
            return Ok(WakeOutcome::NotFound);
        };
        // A start a debounce or a start rate held back: released at its instant (a
        // wake-up before it, for a release a later start moved, finds nothing to do).
        let run = match (&run.held, run.status) {
            (Some(held), RunStatus::Queued) if held.until <= now => {
                match self.release(&run, now).await? {
                    Some(released) => released,
                    None => return Ok(WakeOutcome::Busy),
                }
            }
            _ => run,
        };
        if !run.needs_attention(now) {
            return Ok(if run.is_leased(now) {
                WakeOutcome::Busy
            } else {
                WakeOutcome::NothingToDo
            });
        }
        // Pinned: a run is replayed only on the code it started on. Its build (or an
        // upgrade that moves it to this one) takes it from here.
        if let Some(build_id) = self.awaiting_build(&run) {
            return Ok(WakeOutcome::OtherBuild {
                build_id: build_id.to_owned(),
            });
        }
        let n = self.invocations.fetch_add(1, Ordering::Relaxed);
        let run = match self.claim_lease(wake, n, now).await {
            Ok(run) => run,
            Err(StoreError::Conflict(_)) => return Ok(WakeOutcome::Busy),
            Err(StoreError::NotFound) => return Ok(WakeOutcome::NotFound),
            Err(e) => return Err(e.into()),
        };
        let budget = now.plus(self.config.time_budget);
        let budget = deadline.map_or(budget, |d| d.min(budget));
        let epoch = run.epoch;
        let watch = Arc::new(LeaseWatch::default());
        // Dropping the invocation (a timeout around it, an aborted task) stops renewal too.
        let _renewal = AbortOnDrop(tokio::spawn(renew_lease(
            self.backend.store.clone(),
            self.clock.clone(),
            run.tenant.clone(),
            run.id.clone(),
            epoch,
            self.config.lease_ttl,
            watch.clone(),
        )));
        // Named and shaped after AWS's durable-execution SDK: one span per wake-up, in the
        // run's own trace (see `crate::telemetry`).
        let trace = crate::telemetry::run_trace_parent(&run);
        let span = tracing::info_span!(
            "durable_execution",
            tenant = %run.tenant,
            run_id = %run.id,
            workflow = %run.workflow,
            epoch = epoch.0,
            "siesta.trace_id" = %trace.trace_id_hex(),
            outcome = tracing::field::Empty,
        );
        crate::telemetry::on_execution_span(&span, trace);
        let outcome =
            tracing::Instrument::instrument(self.advance(run, budget, &watch), span.clone()).await;
        span.record("outcome", wake_outcome_name(&outcome));
        outcome
    }

    async fn advance(
        &self,
        mut run: Run,
        budget: Timestamp,
        watch: &Arc<LeaseWatch>,
    ) -> Result<WakeOutcome, EngineError> {
        let Some(workflow) = self.registry.get(&run.workflow).cloned() else {
            let error = ErrorInfo::new(
                "UnknownWorkflow",
                format!("no workflow is registered as '{}'", run.workflow),
                false,
            );
            let shared = self.shared(run, Replayed::default(), budget, watch);
            return self.finish(&shared, Ending::Fail(error)).await;
        };
        // Only the first pass may use the cache: later ones follow a conflict, which
        // means something new was written.
        let mut cached = self.replay_cache.take(&run).0;
        for _ in 0..self.config.max_passes.max(1) {
            let (shared, mut fut) = match cached.take() {
                Some(Kept::Continuation(Continuation { shared, future }))
                    if !run.cancel_requested && run.pause_requested.is_none() =>
                {
                    shared.rearm(run.clone(), budget, watch.clone());
                    (shared, future)
                }
                kept => {
                    let replayed = match kept {
                        Some(Kept::Journal(replayed)) => replayed,
                        _ => self
                            .backend
                            .store
                            .load_claimed_replay_input(&run)
                            .await?
                            .into(),
                    };
                    let cancel = run.cancel_requested;
                    let pause = run.pause_requested.clone();
                    let shared = self.shared(run.clone(), replayed, budget, watch);
                    if cancel {
                        return self.finish(&shared, Ending::Cancel).await;
                    }
                    if let Some(by) = pause {
                        return self.finish(&shared, Ending::Pause(by)).await;
                    }
                    let input: serde_json::Value =
                        match decode_payload(&self.backend, &run.input).await {
                            Ok(v) => v,
                            Err(e) => return self.finish(&shared, Ending::Fail(e.to_info())).await,
                        };
                    let fut = workflow.start(Context::root(shared.clone()), input);
                    (shared, fut)
                }
            };
            let exec = {
                // Tells a branch that woke the workflow during a poll (a `FuturesUnordered`
                // yielding, a held branch a re-arm woke behind one) from one that waits.
                let woken = Arc::new(WokenFlag::default());
                let woken_waker = futures::task::waker(woken.clone());
                std::future::poll_fn(|cx| {
                    woken.arm(cx.waker());
                    let mut inner = std::task::Context::from_waker(&woken_waker);
                    // A panicking workflow must not take the worker with it; the future
                    // is dropped unpolled after it.
                    match std::panic::catch_unwind(AssertUnwindSafe(|| {
                        fut.as_mut().poll(&mut inner)
                    })) {
                        Ok(Poll::Ready(r)) => return Poll::Ready(Exec::Finished(r)),
                        Ok(Poll::Pending) => {}
                        Err(payload) => {
                            return Poll::Ready(Exec::Panicked(panic_message(payload.as_ref())));
                        }
                    }
                    if watch.lost.load(Ordering::SeqCst) {
                        shared.set_stop(Stop::Abort("the lease was lost".to_owned()));
                    }
                    let mut st = shared.state();
                    if watch.cancel.load(Ordering::SeqCst) {
                        st.run.cancel_requested = true;
                    }
                    if let Some(by) = watch.pause.lock().ok().and_then(|mut p| p.take()) {
                        st.run.pause_requested = Some(by);
                    }
                    if let Some(Stop::Abort(why)) = &st.stop {
                        return Poll::Ready(Exec::Aborted(why.clone()));
                    }
                    if st.running <= 0 && !woken.woken() {
                        Poll::Ready(Exec::Suspended)
                    } else {
                        Poll::Pending
                    }
                })
                .await
            };
            let suspended = matches!(exec, Exec::Suspended);
            let ending = {
                let st = shared.state();
                match (exec, st.stop.clone()) {
                    (Exec::Aborted(why), _) | (_, Some(Stop::Abort(why))) => {
                        return Ok(WakeOutcome::Aborted(why));
                    }
                    (Exec::Panicked(message), _) => Ending::Park(workflow_panicked(&message)),
                    (_, Some(Stop::Park(reason))) => Ending::Park(reason),
                    (_, Some(Stop::Cancel)) => Ending::Cancel,
                    (_, Some(Stop::Pause(by))) => Ending::Pause(by),
                    (Exec::Finished(result), None) => match unvisited(&st) {
                        Some(reason) => Ending::Park(reason),
                        None => match result {
                            Ok(value) => Ending::Complete(Payload::Inline(value)),
                            Err(e) => Ending::Fail(e.to_info()),
                        },
                    },
                    (Exec::Suspended, None) if st.continue_now => Ending::Yield,
                    (Exec::Suspended, None) => Ending::Suspend,
                }
            };
            match self.finish(&shared, ending).await {
                Err(EngineError::Store(StoreError::Conflict(_))) => {
                    // New deliveries arrived while suspending: replay with them.
                    run = shared.state().run.clone();
                }
                other => {
                    if let Ok(WakeOutcome::Advanced(status)) = &other
                        && !status.is_finished()
                    {
                        let future = suspended.then_some(fut);
                        self.keep_replayed(&shared, future);
                    }
                    return other;
                }
            }
        }
        // Deliveries kept racing; leave the run due so the next wake-up continues.
        Ok(WakeOutcome::Aborted(
            "too many deliveries raced with this invocation".to_owned(),
        ))
    }

    /// Keep what the invocation that just wrote its final checkpoint replayed, for the
    /// run's next wake-up — unless deliveries arrived that it did not load (its final
    /// checkpoint merged them): those are only in the store. With `future` (every
    /// branch held, none blocked for good) the workflow itself is kept, to continue;
    /// otherwise its journal.
    ///
    /// Only a run due again soon (within [`EngineConfig::resend_margin`]: a timer, a
    /// retry, a spent budget) is kept. A run that waits for a delivery (an event, a
    /// callback, a child's result) or a distant deadline is not: the delivery that wakes
    /// it is a write, which makes anything kept stale, so keeping it would only hold
    /// memory — a dev server with a million runs asleep on events held every journal
    /// the cache had room for.
    fn keep_replayed(&self, shared: &Arc<Shared>, future: Option<WorkflowFuture>) {
        let horizon = self.clock.now().plus(self.config.resend_margin);
        let (run, continuable) = {
            let st = shared.state();
            let loaded = st.deliveries.last().map_or(0, |d| d.seq);
            if loaded != st.run.inbox_seq || st.run.due_at.is_none_or(|due| due > horizon) {
                return;
            }
            (st.run.clone(), !st.stuck && st.stop.is_none())
        };
        let kept = match future {
            Some(future) if continuable && self.replay_cache.keeps_continuations() => {
                Kept::Continuation(Continuation {
                    shared: shared.clone(),
                    future,
                })
            }
            _ => Kept::Journal(shared.take_replayed()),
        };
        self.replay_cache.put(&run, shared.epoch(), kept);
    }

    fn shared(
        &self,
        run: Run,
        replayed: Replayed,
        budget: Timestamp,
        watch: &Arc<LeaseWatch>,
    ) -> Arc<Shared> {
        Arc::new(Shared::new(
            self.backend.clone(),
            self.clock.clone(),
            self.context_config(),
            run,
            replayed,
            budget,
            watch.clone(),
        ))
    }
}

/// What a wake-up came to, as its span records it.
fn wake_outcome_name(outcome: &Result<WakeOutcome, EngineError>) -> &'static str {
    match outcome {
        Ok(WakeOutcome::Advanced(status)) => status.as_str(),
        Ok(WakeOutcome::Aborted(_)) => "aborted",
        Ok(_) => "skipped",
        Err(_) => "error",
    }
}

/// A workflow's future, as the registry starts it.
pub(super) type WorkflowFuture =
    futures::future::BoxFuture<'static, Result<serde_json::Value, Error>>;

/// The waker an invocation polls its workflow with: it remembers whether anything woke
/// the workflow during a poll (so the engine polls again instead of taking a branch
/// that has yet to run for one that waits) and passes the wake on to the task.
#[derive(Default)]
pub(super) struct WokenFlag {
    woken: std::sync::atomic::AtomicBool,
    task: std::sync::Mutex<Option<std::task::Waker>>,
}

impl WokenFlag {
    /// Before a poll: forget earlier wakes and wake `task` from now on.
    pub(super) fn arm(&self, task: &std::task::Waker) {
        self.woken.store(false, Ordering::SeqCst);
        let mut held = self.task.lock().unwrap_or_else(|e| e.into_inner());
        if !held.as_ref().is_some_and(|w| w.will_wake(task)) {
            *held = Some(task.clone());
        }
    }

    /// Whether anything woke the workflow since [`WokenFlag::arm`].
    pub(super) fn woken(&self) -> bool {
        self.woken.load(Ordering::SeqCst)
    }
}

impl futures::task::ArcWake for WokenFlag {
    fn wake_by_ref(arc_self: &Arc<Self>) {
        arc_self.woken.store(true, Ordering::SeqCst);
        let task = arc_self
            .task
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if let Some(task) = task {
            task.wake();
        }
    }
}
