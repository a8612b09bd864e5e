//! The engine: what the four handlers call.
//!
//! A wake-up is handled in four moves: **read** the run (one read; if nothing needs
//! doing, stop here, no write), **claim** its lease (one conditional write that bumps the
//! fencing epoch), **replay** the workflow from the top against its journal until every
//! branch is suspended, it finishes, or the time budget is spent, and **release** with
//! one final checkpoint that records the new status and when the run next falls due.
//! Deliveries that race with an invocation move the run's version, so the final
//! checkpoint conflicts and the engine replays again instead of going to sleep on a
//! stale view.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::Poll;
use std::time::Duration;

use futures::StreamExt;

use crate::context::{
    CommitError, Context, ContextConfig, Delta, LeaseWatch, Shared, Stop, decode_payload,
    encode_payload, expire_callbacks,
};
use crate::error::{Error, ErrorKind, PANICKED, panic_message};
use crate::lifecycle::{LifecycleEvent, decide};
use crate::model::*;
use crate::notify::{QueueSignal, RunWatch, RunWatchers, SignallingQueue};
use crate::ports::*;
use crate::quota::{self, QuotaExceeded, QuotaLimit, StartRate, json_size};
use crate::registry::Registry;
use crate::replay_cache::{Continuation, Kept, ReplayCache, ReplayCacheStats, Replayed};
use crate::time::{Clock, Timestamp};

/// How the engine behaves.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Names this engine's leases (an invocation counter is appended).
    pub owner: String,
    /// How long a lease lasts without renewal; renewed every third of it.
    pub lease_ttl: Duration,
    /// Longest one invocation advances a run before it checkpoints and continues in a
    /// new one.
    pub time_budget: Duration,
    /// Values whose JSON is larger go to the artifact store (DynamoDB items stop at
    /// 400 KB; this keeps them well under 64 KB).
    pub inline_limit: usize,
    /// Base URL of callback webhooks (`{base}/hooks/{callback_id}`).
    pub callback_base_url: String,
    /// Replays one wake-up may do when deliveries keep arriving while it works.
    pub max_passes: u32,
    /// The build of the code this engine runs, recorded on every run it starts (and in
    /// the run's `ExecutionStarted` event): set it from the application's binary with
    /// [`build_id!`](crate::build_id). Default: Siesta's own version, `siesta@x.y.z`.
    pub build_id: String,
    /// Most journal entries the replay cache keeps of suspended runs, so a wake-up in
    /// this process replays from memory instead of reading the journal again (see
    /// [`Engine::replay_cache_stats`]); 0 turns it off. Default: 50 000.
    pub replay_cache_entries: usize,
    /// Most suspended runs whose workflow the replay cache keeps whole, so their next
    /// wake-up in this process continues where they stopped instead of replaying from
    /// the top (a [continuation](crate::replay_cache)); their journals count towards
    /// `replay_cache_entries`, and 0 (or a `replay_cache_entries` of 0) turns it off.
    /// Default: 256.
    pub max_continuations: usize,
    /// How long after a wake-up should have become visible the sweep leaves its run
    /// alone ([`Run::resend_after`]): a wake-up waiting behind a backlog is not lost.
    /// Default: 15 minutes, the wake-up queue's visibility timeout — a wake-up received
    /// by a consumer that died before claiming its run comes back from the queue itself
    /// after that long, so re-sending sooner could not help. A send that fails is
    /// re-sent by the next sweep regardless; only a wake-up lost without an error (the
    /// process died between its write and its send) waits this long. When the sweep does
    /// re-send, it waits as long again as the run has been due (at least this margin)
    /// before the next one: a backlog that outlasts the margin costs a run a duplicate
    /// per doubling of its wait, not one per sweep.
    pub resend_margin: Duration,
    /// Per-tenant limits on starts and deliveries (default: none).
    pub quotas: crate::quota::Quotas,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            owner: format!("engine-{}", uuid::Uuid::new_v4()),
            lease_ttl: Duration::from_secs(60),
            time_budget: Duration::from_secs(600),
            inline_limit: 32 * 1024,
            callback_base_url: "http://127.0.0.1:8080".to_owned(),
            max_passes: 8,
            build_id: concat!("siesta@", env!("CARGO_PKG_VERSION")).to_owned(),
            replay_cache_entries: 50_000,
            max_continuations: 256,
            resend_margin: Duration::from_secs(15 * 60),
            quotas: crate::quota::Quotas::default(),
        }
    }
}

/// What the engine can report to a handler.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// No such run (or callback) for this tenant.
    #[error("not found")]
    NotFound,
    /// No workflow is registered under this name.
    #[error("unknown workflow '{0}'")]
    UnknownWorkflow(String),
    /// The input does not fit the workflow's input type.
    #[error("invalid input: {0}")]
    InvalidInput(String),
    /// A run with this id exists already.
    #[error("a run with this id exists already")]
    AlreadyExists,
    /// `If-Match` named another version.
    #[error("version mismatch: the run is at version {current}")]
    VersionMismatch {
        /// The run's current version.
        current: u64,
    },
    /// The run is finished.
    #[error("the run is already {0}")]
    AlreadyFinished(RunStatus),
    /// The callback or run no longer accepts this.
    #[error("gone: {0}")]
    Gone(String),
    /// Only a parked run can be resumed.
    #[error("the run is {0}, not parked")]
    NotParked(RunStatus),
    /// The operation at this position is not a tool call whose outcome is unknown.
    #[error("nothing to resolve: {0}")]
    NothingToResolve(String),
    /// A delivery does not match what its callback or event wait accepts; nothing was
    /// recorded.
    #[error("delivery rejected: {0}")]
    DeliveryRejected(String),
    /// The tenant reached one of its [quotas](crate::quota); nothing was recorded.
    #[error(transparent)]
    QuotaExceeded(#[from] QuotaExceeded),
    /// Storage failed; retrying may help.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// How an operator resolves a tool call whose outcome is `unknown`.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolCallResolution {
    /// The call happened and returned this value; the workflow gets it.
    Succeeded(serde_json::Value),
    /// The call failed with this error (or must not be made); the workflow gets it as
    /// the tool call's failure.
    Failed(ErrorInfo),
    /// Make the call again (its lookup, if the code has one now, is asked first); the
    /// operator takes the risk that it already happened.
    Retry,
}

impl ToolCallResolution {
    /// The resolution's wire name: `succeeded`, `failed` or `retry`.
    pub fn as_str(&self) -> &'static str {
        match self {
            ToolCallResolution::Succeeded(_) => "succeeded",
            ToolCallResolution::Failed(_) => "failed",
            ToolCallResolution::Retry => "retry",
        }
    }
}

/// What handling one wake-up did.
#[derive(Debug, Clone, PartialEq)]
pub enum WakeOutcome {
    /// The run does not exist.
    NotFound,
    /// Nothing needed doing (cost: one read).
    NothingToDo,
    /// Another invocation holds the run's lease; it will see anything new.
    Busy,
    /// The run was advanced and is now in this status.
    Advanced(RunStatus),
    /// The invocation stopped without finishing its work (lease lost, storage failed);
    /// the run will be picked up again.
    Aborted(String),
}

/// What one sweep did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SweepReport {
    /// Due runs found.
    pub due: usize,
    /// Wake-ups sent.
    pub woken: usize,
    /// Of those, runs whose holder's lease expired (a crashed step).
    pub expired_leases: usize,
    /// Of those, waiting runs whose timer, deadline, heartbeat timeout or retry fell due,
    /// or that received a delivery.
    pub due_waits: usize,
    /// Of those, runnable runs whose wake-up was lost.
    pub lost_wakeups: usize,
    /// Due runs not woken because a wake-up for them waits in the queue already.
    pub already_queued: usize,
    /// Dead letters handled (and deleted from the dead-letter queue).
    pub dead_letters: usize,
    /// Of those, runs parked because a wake-up of theirs kept failing and was
    /// dead-lettered while it was their latest.
    pub parked_dead_letters: usize,
}

/// What handling the dead-letter queue did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeadLetterReport {
    /// Dead letters handled, each then deleted.
    pub handled: usize,
    /// Runs parked for one.
    pub parked: usize,
}

/// What one batch of wake-ups did, for the queue's partial-batch-failure report.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BatchReport {
    /// Each wake-up's outcome, in batch order.
    pub outcomes: Vec<Result<WakeOutcome, String>>,
}

impl BatchReport {
    /// Indexes of the wake-ups to redeliver: those that failed or were aborted.
    pub fn failed(&self) -> Vec<usize> {
        self.outcomes
            .iter()
            .enumerate()
            .filter(|(_, o)| matches!(o, Err(_) | Ok(WakeOutcome::Aborted(_))))
            .map(|(i, _)| i)
            .collect()
    }
}

/// How many wake-ups the sweep sends at once.
const SWEEP_SENDS_IN_FLIGHT: usize = 16;

/// How long a dead letter taken by the sweep stays hidden: it is deleted once handled,
/// and comes back after this if the sweep stopped before.
const DEAD_LETTER_VISIBILITY: Duration = Duration::from_secs(300);

/// The durable engine over a backend.
#[derive(Clone)]
pub struct Engine {
    backend: Backend,
    clock: Arc<dyn Clock>,
    registry: Arc<Registry>,
    config: EngineConfig,
    invocations: Arc<AtomicU64>,
    queue_signal: Arc<QueueSignal>,
    watchers: Arc<RunWatchers>,
    replay_cache: Arc<ReplayCache>,
    start_rate: Arc<StartRate>,
}

enum Exec {
    Finished(Result<serde_json::Value, Error>),
    Suspended,
    Aborted(String),
    /// The workflow body panicked outside a step (a step's panic is a failed attempt).
    Panicked(String),
}

/// How a pass ends, decided from what the workflow did.
enum Ending {
    Complete(Payload),
    Fail(ErrorInfo),
    Park(ErrorInfo),
    Cancel,
    Suspend,
    Yield,
}

impl Engine {
    /// An engine over `backend`, reading time from `clock`, running `registry`'s workflows.
    pub fn new(
        backend: Backend,
        clock: Arc<dyn Clock>,
        registry: Registry,
        config: EngineConfig,
    ) -> Self {
        // Every send through the engine (and the contexts it runs) tells this process's
        // worker to look at the queue at once.
        let queue_signal = Arc::new(QueueSignal::default());
        let backend = Backend {
            queue: Arc::new(SignallingQueue {
                inner: backend.queue,
                signal: queue_signal.clone(),
                clock: clock.clone(),
            }),
            ..backend
        };
        Engine {
            backend,
            clock,
            registry: Arc::new(registry),
            replay_cache: Arc::new(ReplayCache::new(
                config.replay_cache_entries,
                config.max_continuations,
            )),
            config,
            invocations: Arc::new(AtomicU64::new(0)),
            queue_signal,
            watchers: Arc::new(RunWatchers::default()),
            start_rate: Arc::new(StartRate::default()),
        }
    }

    /// Watch a run, to hear at once when an invocation of it in this process ends (it
    /// finished, suspended, was parked) or it is cancelled. Register before reading the
    /// run; see [`RunWatch`].
    pub fn watch_run(&self, tenant: &TenantId, run_id: &RunId) -> RunWatch {
        self.watchers.watch(tenant, run_id)
    }

    pub(crate) fn queue_signal(&self) -> &QueueSignal {
        &self.queue_signal
    }

    /// The backend it runs on.
    pub fn backend(&self) -> &Backend {
        &self.backend
    }

    /// The registry of workflows.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The engine's clock.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// The engine's configuration.
    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// How often wake-ups replayed from the replay cache rather than the store.
    pub fn replay_cache_stats(&self) -> ReplayCacheStats {
        self.replay_cache.stats()
    }

    fn context_config(&self) -> ContextConfig {
        ContextConfig {
            inline_limit: self.config.inline_limit,
            callback_base_url: self.config.callback_base_url.clone(),
            build_id: self.config.build_id.clone(),
        }
    }

    /// Store a caller's value as a payload (offloaded when large). A value that cannot
    /// be serialized is the caller's problem; storage that fails (full, unreachable) is
    /// not, and a retry may succeed.
    async fn encode(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        value: &serde_json::Value,
    ) -> Result<Payload, EngineError> {
        encode_payload(&self.backend, &self.context_config(), tenant, run_id, value)
            .await
            .map_err(|e| match e.kind() {
                ErrorKind::Storage => StoreError::Unavailable(e.to_string()).into(),
                _ => EngineError::InvalidInput(e.to_string()),
            })
    }

    /// Send `wake`, visible after `delay`, following a write that left its run due at
    /// `due_at` (when it did) with a `resend_after`.
    async fn send_wake(&self, wake: WakeUp, delay: Duration, due_at: Option<Timestamp>) {
        let (tenant, run_id) = (&wake.tenant, &wake.run_id);
        // The write before this one left the run due; a lost send is healed by the sweep.
        if let Err(e) = self
            .backend
            .queue
            .send(&wake, delay.min(MAX_QUEUE_DELAY))
            .await
        {
            tracing::warn!(tenant = %tenant, run_id = %run_id, error = %e, "wake-up not sent; the sweep will resend it");
            // The write said a wake-up was on its way; it is not, so the next sweep may
            // send it at once. If this fails too, the margin runs out instead.
            if let Some(due) = due_at
                && let Err(e) = self
                    .backend
                    .store
                    .set_resend_after(tenant, run_id, due, None)
                    .await
            {
                tracing::warn!(tenant = %tenant, run_id = %run_id, error = %e, "could not mark the wake-up lost; the sweep resends it after its margin");
            }
        }
    }

    /// The `resend_after` of a run whose wake-up becomes visible at `visible_at`.
    fn resend_after(&self, visible_at: Timestamp) -> Option<Timestamp> {
        Some(visible_at.plus(self.config.resend_margin))
    }

    /// Start a run of `workflow` with `input`. The run is created pending and a wake-up
    /// is sent; `run_id` picks the id (default: a fresh time-ordered one).
    pub async fn start(
        &self,
        tenant: &TenantId,
        workflow: &str,
        input: serde_json::Value,
        run_id: Option<RunId>,
    ) -> Result<Run, EngineError> {
        let wf = self
            .registry
            .get(workflow)
            .ok_or_else(|| EngineError::UnknownWorkflow(workflow.to_owned()))?;
        wf.validate(&input).map_err(EngineError::InvalidInput)?;
        let now = self.clock.now();
        let quota = self.config.quotas.for_tenant(tenant);
        quota::check_size(
            QuotaLimit::InputBytes,
            "the input",
            json_size(&input),
            quota.max_input_bytes,
        )?;
        if let Some(per_minute) = quota.starts_per_minute {
            self.start_rate
                .take(tenant, per_minute, now)
                .map_err(|retry_after| QuotaExceeded {
                    limit: QuotaLimit::StartRate,
                    message: format!("tenant {tenant} may start {per_minute} runs a minute"),
                    retry_after,
                })?;
        }
        let id = run_id.unwrap_or_else(RunId::generate);
        let payload = self.encode(tenant, &id, &input).await?;
        let mut run = Run::new(tenant.clone(), id, workflow, payload, now);
        run.timeline_seq = 1;
        run.build_id = Some(self.config.build_id.clone());
        run.resend_after = self.resend_after(now);
        let started = TimelineEvent::execution_started(
            now,
            workflow,
            serde_json::json!({"Workflow": workflow, "BuildId": self.config.build_id}),
        );
        let created = match quota.max_unfinished_runs {
            Some(max) => {
                self.backend
                    .store
                    .create_run_within(&run, &started, max)
                    .await
            }
            None => self.backend.store.create_run(&run, &started).await,
        };
        match created {
            Ok(()) => {}
            Err(StoreError::AlreadyExists) => return Err(EngineError::AlreadyExists),
            Err(StoreError::OverQuota(m)) => {
                return Err(QuotaExceeded::new(QuotaLimit::UnfinishedRuns, m).into());
            }
            Err(e) => return Err(e.into()),
        }
        self.send_wake(
            WakeUp {
                tenant: tenant.clone(),
                run_id: run.id.clone(),
                reason: WakeReason::Started,
                epoch_hint: 0,
                seq_hint: Some(run.timeline_seq),
            },
            Duration::ZERO,
            run.due_at,
        )
        .await;
        Ok(run)
    }

    /// The run, if this tenant has it.
    pub async fn get_run(&self, tenant: &TenantId, run_id: &RunId) -> Result<Run, EngineError> {
        self.backend
            .store
            .get_run(tenant, run_id)
            .await?
            .ok_or(EngineError::NotFound)
    }

    /// Handle one wake-up: advance the run as far as it goes, with the default budget.
    pub async fn handle_wakeup(&self, wake: &WakeUp) -> Result<WakeOutcome, EngineError> {
        self.handle_wakeup_until(wake, None).await
    }

    /// Handle one wake-up, stopping new work at `deadline` (the Lambda's remaining time
    /// less a safety margin) or after the configured budget, whichever comes first.
    pub async fn handle_wakeup_until(
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
        if !run.needs_attention(now) {
            return Ok(if run.is_leased(now) {
                WakeOutcome::Busy
            } else {
                WakeOutcome::NothingToDo
            });
        }
        let n = self.invocations.fetch_add(1, Ordering::Relaxed);
        let claim = Claim {
            owner: format!("{}#{n}", self.config.owner),
            now,
            expires_at: now.plus(self.config.lease_ttl),
        };
        let run = match self
            .backend
            .store
            .claim(&wake.tenant, &wake.run_id, &claim)
            .await
        {
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
        let span = tracing::info_span!("invocation", tenant = %run.tenant, run_id = %run.id, epoch = epoch.0);
        tracing::Instrument::instrument(self.advance(run, budget, &watch), span).await
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
                    if !run.cancel_requested =>
                {
                    shared.rearm(run.clone(), budget, watch.clone());
                    (shared, future)
                }
                kept => {
                    let history = match kept {
                        Some(Kept::Journal(replayed)) => replayed,
                        _ => self
                            .backend
                            .store
                            .load_history(&run.tenant, &run.id)
                            .await?
                            .into(),
                    };
                    let cancel = run.cancel_requested;
                    let shared = self.shared(run.clone(), history, budget, watch);
                    if cancel {
                        return self.finish(&shared, Ending::Cancel).await;
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
                // yielding, a parked branch a re-arm woke behind one) from one that waits.
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
    /// branch parked, none blocked for good) the workflow itself is kept, to continue;
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
        history: Replayed,
        budget: Timestamp,
        watch: &Arc<LeaseWatch>,
    ) -> Arc<Shared> {
        Arc::new(Shared::new(
            self.backend.clone(),
            self.clock.clone(),
            self.context_config(),
            run,
            history,
            budget,
            watch.clone(),
        ))
    }

    /// Write the pass's ending as the run's final checkpoint of this invocation.
    async fn finish(
        &self,
        shared: &Arc<Shared>,
        ending: Ending,
    ) -> Result<WakeOutcome, EngineError> {
        let now = self.clock.now();
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
        let event = |event_type: EventType, details: serde_json::Value| TimelineEvent {
            seq: 0,
            at: now,
            event_type,
            sub_type: None,
            id: None,
            parent_id: None,
            name: Some(run.workflow.clone()),
            details,
        };
        // Callbacks past their deadline time out now, even those the workflow is not
        // awaiting; the open ones make the run due at their deadline.
        let (mut delta, callback_due) = match ending {
            Ending::Suspend | Ending::Yield => expire_callbacks(shared, &shared.state(), now),
            _ => (Delta::default(), None),
        };
        let mut expect_inbox = (!delta.journal.is_empty()).then(|| shared.state().inbox_loaded);
        let (lifecycle, output, error, due_at) = match &ending {
            Ending::Complete(payload) => {
                delta.timeline.push(event(
                    EventType::ExecutionSucceeded,
                    serde_json::json!({"Result": inline_detail(payload)}),
                ));
                (LifecycleEvent::Complete, Some(payload.clone()), None, None)
            }
            Ending::Fail(error) => {
                delta.timeline.push(event(
                    EventType::ExecutionFailed,
                    serde_json::json!({"Error": error}),
                ));
                (LifecycleEvent::Fail, None, Some(error.clone()), None)
            }
            Ending::Park(reason) => {
                delta.timeline.push(event(
                    EventType::RunParked,
                    serde_json::json!({"Error": reason}),
                ));
                (LifecycleEvent::Park, None, Some(reason.clone()), None)
            }
            Ending::Cancel => {
                delta.timeline.push(event(
                    EventType::ExecutionCancelled,
                    serde_json::Value::Null,
                ));
                (
                    LifecycleEvent::Cancel,
                    None,
                    Some(ErrorInfo::new("Cancelled", "the run was cancelled", false)),
                    None,
                )
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
            serde_json::json!({"Status": status, "NextWakeAt": due_at, "Epoch": shared.epoch()}),
        ));
        if status.is_finished() {
            // Only a finished run closes its callbacks: no scan of the journal otherwise.
            delta.callbacks = open_callbacks(shared.state().journal.values(), &run);
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
                    self.resend_after(now),
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
            + usize::from(!delta.child_runs.is_empty() || status.is_finished());
        let overflow = overflowing(&mut delta.callbacks, others);
        let inbox_seen = expect_inbox.unwrap_or(run.inbox_seq);
        let committed = shared
            .commit(delta, expect_inbox, |r| {
                r.status = status;
                r.lease = None;
                r.due_at = due_at;
                r.resend_after = resend_after;
                r.inbox_seen = if expect_inbox.is_some() {
                    inbox_seen
                } else {
                    r.inbox_seq
                };
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

    /// Deliver a named event (an approval, a signal) to a run. It is kept if the run is
    /// not waiting for it yet. `delivery_id` dedupes repeats (default: a fresh id).
    pub async fn deliver_event(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        name: &str,
        value: serde_json::Value,
        delivery_id: Option<DeliveryId>,
    ) -> Result<DeliverOutcome, EngineError> {
        self.check_delivery_size(tenant, &value)?;
        self.check_event(tenant, run_id, name, &value).await?;
        let payload = self.encode(tenant, run_id, &value).await?;
        let id =
            delivery_id.unwrap_or_else(|| DeliveryId(format!("event:{}", uuid::Uuid::new_v4())));
        let event = self.delivery_event(
            EventType::EventDelivered,
            Some(name),
            serde_json::json!({"Event": name, "DeliveryId": id}),
        );
        self.deliver(
            tenant,
            run_id,
            id,
            DeliveryBody::Event {
                name: name.to_owned(),
                value: payload,
            },
            event,
        )
        .await
    }

    /// Refuse an event whose payload matches none of the typed waits for it the run has
    /// registered. An event that comes before any wait for it is kept unchecked (the
    /// run may never ask for a type); if it then does not decode, the wait sets it aside.
    async fn check_event(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        name: &str,
        value: &serde_json::Value,
    ) -> Result<(), EngineError> {
        let run = self
            .backend
            .store
            .get_run(tenant, run_id)
            .await?
            .ok_or(EngineError::NotFound)?;
        if run.status.is_finished() {
            return Ok(()); // the store answers: gone
        }
        let history = self.backend.store.load_history(tenant, run_id).await?;
        let schemas: Vec<&serde_json::Value> = history
            .journal
            .iter()
            .filter_map(|e| match &e.state {
                EntryState::Waiting(Wait {
                    kind:
                        WaitKind::Event {
                            name: waiting_for,
                            accepts,
                        },
                    ..
                }) if waiting_for == name => Some(accepts.as_ref()),
                _ => None,
            })
            .collect::<Option<Vec<_>>>()
            // An untyped wait for this event takes anything.
            .unwrap_or_default();
        let mut reasons = Vec::new();
        for schema in &schemas {
            match crate::accepts::check(schema, value) {
                Ok(()) => return Ok(()),
                Err(why) => reasons.push(why),
            }
        }
        if reasons.is_empty() {
            return Ok(());
        }
        Err(EngineError::DeliveryRejected(format!(
            "the payload does not match what the wait for event '{name}' accepts: {}",
            reasons.join(" | ")
        )))
    }

    /// Inject a message into a run; it is drained at the run's next step boundary.
    pub async fn inject_message(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        value: serde_json::Value,
        delivery_id: Option<DeliveryId>,
    ) -> Result<DeliverOutcome, EngineError> {
        self.check_delivery_size(tenant, &value)?;
        let payload = self.encode(tenant, run_id, &value).await?;
        let id =
            delivery_id.unwrap_or_else(|| DeliveryId(format!("message:{}", uuid::Uuid::new_v4())));
        let event = self.delivery_event(
            EventType::MessageInjected,
            None,
            serde_json::json!({"DeliveryId": id}),
        );
        self.deliver(
            tenant,
            run_id,
            id,
            DeliveryBody::Message { value: payload },
            event,
        )
        .await
    }

    /// Complete a callback with success (`Ok(value)`) or failure (`Err(error)`). With
    /// `tenant` set (the authenticated API), another tenant's callback is not found;
    /// without it (a webhook), the callback id is the credential. The same
    /// `delivery_id` twice is a duplicate; a second outcome for a closed callback is
    /// [`EngineError::Gone`].
    pub async fn complete_callback(
        &self,
        callback_id: &CallbackId,
        tenant: Option<&TenantId>,
        outcome: Result<serde_json::Value, ErrorInfo>,
        delivery_id: Option<DeliveryId>,
    ) -> Result<DeliverOutcome, EngineError> {
        let record = self.callback(callback_id, tenant).await?;
        if let Ok(value) = &outcome {
            self.check_delivery_size(&record.tenant, value)?;
        }
        let id =
            delivery_id.unwrap_or_else(|| DeliveryId(format!("callback-outcome:{callback_id}")));
        if let (Ok(value), Some(schema), CallbackStatus::Open) =
            (&outcome, &record.accepts, record.status)
        {
            // Judged before anything is stored: a payload the workflow could not decode
            // must not use up the single-use callback. A closed callback is left to the
            // store (a duplicate or 410), whatever the body.
            crate::accepts::check(schema, value).map_err(|why| {
                EngineError::DeliveryRejected(format!(
                    "the payload does not match what callback '{}' accepts: {why}",
                    record.position
                ))
            })?;
        }
        let (body, status) = match outcome {
            Ok(value) => {
                let payload = self.encode(&record.tenant, &record.run_id, &value).await?;
                (
                    DeliveryBody::CallbackSucceeded {
                        callback_id: callback_id.clone(),
                        value: payload,
                    },
                    "succeeded",
                )
            }
            Err(error) => (
                DeliveryBody::CallbackFailed {
                    callback_id: callback_id.clone(),
                    error,
                },
                "failed",
            ),
        };
        let event = self.delivery_event(
            EventType::CallbackDelivered,
            None,
            serde_json::json!({"CallbackId": callback_id, "Outcome": status, "DeliveryId": id, "OperationId": record.position}),
        );
        self.deliver(&record.tenant, &record.run_id, id, body, event)
            .await
    }

    /// Record a heartbeat for a callback, pushing back its heartbeat timeout.
    pub async fn heartbeat_callback(
        &self,
        callback_id: &CallbackId,
        tenant: Option<&TenantId>,
    ) -> Result<DeliverOutcome, EngineError> {
        let record = self.callback(callback_id, tenant).await?;
        let id = DeliveryId(format!("callback-heartbeat:{}", uuid::Uuid::new_v4()));
        let event = self.delivery_event(
            EventType::CallbackDelivered,
            None,
            serde_json::json!({"CallbackId": callback_id, "Outcome": "heartbeat", "OperationId": record.position}),
        );
        self.deliver(
            &record.tenant,
            &record.run_id,
            id,
            DeliveryBody::CallbackHeartbeat {
                callback_id: callback_id.clone(),
            },
            event,
        )
        .await
    }

    async fn callback(
        &self,
        callback_id: &CallbackId,
        tenant: Option<&TenantId>,
    ) -> Result<CallbackRecord, EngineError> {
        let record = self
            .backend
            .store
            .get_callback(callback_id)
            .await?
            .ok_or(EngineError::NotFound)?;
        if tenant.is_some_and(|t| *t != record.tenant) {
            return Err(EngineError::NotFound);
        }
        // Whether it is still open is checked by the store after its dedup check, so a
        // repeated delivery is acknowledged as a duplicate rather than refused as gone.
        Ok(record)
    }

    /// Refuse a delivery's value over the tenant's `max_delivery_bytes`.
    fn check_delivery_size(
        &self,
        tenant: &TenantId,
        value: &serde_json::Value,
    ) -> Result<(), QuotaExceeded> {
        quota::check_size(
            QuotaLimit::DeliveryBytes,
            "the delivery",
            json_size(value),
            self.config.quotas.for_tenant(tenant).max_delivery_bytes,
        )
    }

    fn delivery_event(
        &self,
        event_type: EventType,
        name: Option<&str>,
        details: serde_json::Value,
    ) -> TimelineEvent {
        TimelineEvent {
            seq: 0,
            at: self.clock.now(),
            event_type,
            sub_type: None,
            id: None,
            parent_id: None,
            name: name.map(str::to_owned),
            details,
        }
    }

    async fn deliver(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        id: DeliveryId,
        body: DeliveryBody,
        event: TimelineEvent,
    ) -> Result<DeliverOutcome, EngineError> {
        let now = self.clock.now();
        if let Some(max) = self.config.quotas.for_tenant(tenant).max_pending_deliveries {
            // Read, then written under the run's version: two deliveries racing for the
            // last place may both be taken, so the bound is approximate by that much.
            let run = self.get_run(tenant, run_id).await?;
            let pending = run.inbox_seq.saturating_sub(run.inbox_seen);
            if pending >= max && !run.status.is_finished() {
                return Err(QuotaExceeded::new(
                    QuotaLimit::PendingDeliveries,
                    format!(
                        "run {run_id} holds {pending} deliveries it has not taken in yet; \
                         this tenant's limit is {max}"
                    ),
                )
                .into());
            }
        }
        let delivery = NewDelivery {
            id,
            tenant: tenant.clone(),
            run_id: run_id.clone(),
            body,
            received_at: now,
            resend_after: self.resend_after(now),
            event,
        };
        let outcome = match self.backend.store.deliver(&delivery).await {
            Ok(outcome) => outcome,
            Err(StoreError::NotFound) => return Err(EngineError::NotFound),
            Err(StoreError::Gone(why)) => return Err(EngineError::Gone(why)),
            Err(e) => return Err(e.into()),
        };
        if let DeliverOutcome::Accepted(run) = &outcome {
            self.send_wake(
                WakeUp {
                    tenant: tenant.clone(),
                    run_id: run_id.clone(),
                    reason: WakeReason::Delivery,
                    epoch_hint: run.epoch.0,
                    seq_hint: Some(run.timeline_seq),
                },
                Duration::ZERO,
                Some(now),
            )
            .await;
        }
        Ok(outcome)
    }

    /// Cancel a run: at once when it is not running, at its next operation boundary when
    /// it is. `if_match` guards against a stale view (the run's version).
    pub async fn cancel(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        if_match: Option<u64>,
    ) -> Result<Run, EngineError> {
        for _ in 0..8 {
            let run = self.get_run(tenant, run_id).await?;
            if if_match.is_some_and(|v| v != run.version) {
                return Err(EngineError::VersionMismatch {
                    current: run.version,
                });
            }
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
                details: serde_json::Value::Null,
            }];
            for e in &mut checkpoint_events {
                next.timeline_seq += 1;
                e.seq = next.timeline_seq;
            }
            let mut checkpoint = Checkpoint::new(next.clone(), run.version, None);
            checkpoint.timeline = checkpoint_events;
            if !leased {
                next.lease = None;
                next.due_at = None;
                next.resend_after = None;
                next.error = Some(ErrorInfo::new("Cancelled", "the run was cancelled", false));
                checkpoint.run = next.clone();
                let history = self.backend.store.load_history(tenant, run_id).await?;
                checkpoint.callbacks = open_callbacks(history.journal.iter(), &run);
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
                        self.resend_after(now),
                    ));
                }
            }
            let others = checkpoint.item_count() - checkpoint.callbacks.len();
            let overflow = overflowing(&mut checkpoint.callbacks, others);
            match self.backend.store.checkpoint(&checkpoint).await {
                Ok(()) => {
                    self.close_overflow(tenant, run_id, overflow).await;
                    self.watchers.changed(tenant, run_id);
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
                    if let (Some(_), Some(current)) = (if_match, current) {
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
    async fn close_overflow(
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
        let run = self.get_run(tenant, run_id).await?;
        if if_match.is_some_and(|v| v != run.version) {
            return Err(EngineError::VersionMismatch {
                current: run.version,
            });
        }
        if run.status != RunStatus::Parked {
            return Err(if run.status.is_finished() {
                EngineError::AlreadyFinished(run.status)
            } else {
                EngineError::NotParked(run.status)
            });
        }
        Ok(run)
    }

    /// Resume a parked run once its cause is fixed: it becomes pending, due now, and is
    /// woken; replay continues from its journal (an unresolved cause parks it again).
    /// `if_match` guards against a stale view (the run's version).
    pub async fn resume(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        if_match: Option<u64>,
    ) -> Result<Run, EngineError> {
        let run = self.parked_run(tenant, run_id, if_match).await?;
        let status = decide(run.status, LifecycleEvent::Resume)
            .map_err(|e| EngineError::Gone(e.to_string()))?;
        let now = self.clock.now();
        let mut next = run.clone();
        next.status = status;
        next.version += 1;
        next.updated_at = now;
        next.due_at = Some(now);
        next.resend_after = self.resend_after(now);
        next.timeline_seq += 1;
        let mut checkpoint = Checkpoint::new(next.clone(), run.version, None);
        checkpoint.timeline.push(TimelineEvent {
            seq: next.timeline_seq,
            at: now,
            event_type: EventType::RunResumed,
            sub_type: None,
            id: None,
            parent_id: None,
            name: Some(run.workflow.clone()),
            details: serde_json::json!({"ParkedFor": run.error}),
        });
        next.error = None;
        checkpoint.run = next.clone();
        self.write_and_wake(tenant, run_id, &checkpoint, next).await
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
        let history = self.backend.store.load_history(tenant, run_id).await?;
        let entry = history
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
        let event = |event_type: EventType, details: serde_json::Value| TimelineEvent {
            seq: 0,
            at: now,
            event_type,
            sub_type: Some(SubType::ToolCall),
            id: Some(position.0.clone()),
            parent_id: position.parent().map(|p| p.0),
            name: Some(entry.name.clone()),
            details,
        };
        let mut timeline = vec![event(
            EventType::ToolCallRecorded,
            serde_json::json!({"Status": resolution.as_str(), "Resolution": resolution.as_str(), "ResolvedBy": by, "IdempotencyKey": key}),
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
                    serde_json::json!({"Attempt": attempt, "Result": inline_detail(&payload), "ResolvedBy": by}),
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
                    serde_json::json!({"Attempt": attempt, "Error": error, "ResolvedBy": by}),
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
            details: serde_json::json!({"ParkedFor": run.error, "ResolvedBy": by}),
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

    /// Handle the dead-letter queue (see [`Engine::handle_dead_letters`]), then wake
    /// every run that is due — fired timers, passed deadlines, expired leases, lost
    /// wake-ups — and whose wake-up is not on its way: the due index leaves out runs
    /// whose `resend_after` has not passed (a wake-up sent for them may merely wait
    /// behind others), and a queue that can tell (the embedded one) is asked whether it
    /// holds one: if it does, the run's `resend_after` is pushed a margin out and
    /// nothing is sent; if it does not, a wake-up is sent at once. Each wake-up sent
    /// pushes the run's `resend_after` out, so the next sweep does not send another
    /// while this one waits in the queue. Bounded by
    /// `limit`; idempotent (a duplicate wake-up is a no-op).
    pub async fn sweep(&self, limit: usize) -> Result<SweepReport, EngineError> {
        let dead = self.handle_dead_letters(limit).await?;
        let now = self.clock.now();
        let due = self.backend.store.due_runs(now, limit).await?;
        let mut report = SweepReport {
            due: due.len(),
            dead_letters: dead.handled,
            parked_dead_letters: dead.parked,
            ..SweepReport::default()
        };
        // Checks and sends go out concurrently: a page of hundreds of due runs would
        // otherwise cost hundreds of round trips in a row.
        let sent: Vec<(RunStatus, Option<bool>)> = futures::stream::iter(due)
            .map(|run| async move {
                let queue = &self.backend.queue;
                match queue.holds(&run.tenant, &run.run_id, run.due_at).await {
                    Ok(Some(true)) => {
                        // On its way: look again only after another margin, so the run
                        // leaves the due index's next pages instead of filling them.
                        let later = now.plus(self.config.resend_margin);
                        if let Err(e) = self
                            .backend
                            .store
                            .set_resend_after(&run.tenant, &run.run_id, run.due_at, Some(later))
                            .await
                        {
                            tracing::warn!(run_id = %run.run_id, error = %e, "could not note the queued wake-up");
                        }
                        return (run.status, None);
                    }
                    Ok(_) => {}
                    // Unknown: better a harmless duplicate than a lost wake-up.
                    Err(e) => tracing::warn!(run_id = %run.run_id, error = %e, "could not look for a queued wake-up"),
                }
                let wake = WakeUp::new(run.tenant.clone(), run.run_id.clone(), WakeReason::Sweep);
                if queue.send(&wake, Duration::ZERO).await.is_err() {
                    return (run.status, Some(false));
                }
                // The longer the run has waited for its wake-up, the longer the next
                // one is given: a long backlog costs a duplicate per doubling, not one
                // per sweep.
                let waited = run.due_at.until(now);
                let resend_after = now.plus(waited.max(self.config.resend_margin));
                if let Err(e) = self
                    .backend
                    .store
                    .set_resend_after(&run.tenant, &run.run_id, run.due_at, Some(resend_after))
                    .await
                {
                    // The next sweep sends another: a duplicate, nothing lost.
                    tracing::warn!(run_id = %run.run_id, error = %e, "could not note the wake-up sent");
                }
                (run.status, Some(true))
            })
            .buffer_unordered(SWEEP_SENDS_IN_FLIGHT)
            .collect()
            .await;
        for (status, sent) in sent {
            match sent {
                None => {
                    report.already_queued += 1;
                    continue;
                }
                Some(false) => continue,
                Some(true) => {}
            }
            report.woken += 1;
            match status {
                RunStatus::Running => report.expired_leases += 1,
                RunStatus::Waiting => report.due_waits += 1,
                _ => report.lost_wakeups += 1,
            }
        }
        Ok(report)
    }

    /// Handle every dead letter, up to `limit`, each once: the dead-letter queue is
    /// paged through (each page hidden while it is handled) and every dead letter is
    /// deleted once handled, so none is seen twice and none is missed however many
    /// there are.
    ///
    /// A dead letter parks its run — with the reason and the wake-up in its error and
    /// timeline, for an operator to see, fix and resume — only when the run is still
    /// where the wake-up left it: not finished or parked, no live lease (someone is
    /// working on it), and no progress since the wake-up was sent (`seq_hint`, when
    /// the sender knew it). A wake-up that the run's progress has overtaken parks
    /// nothing: the run went on without it. A resumed run has moved on past its old
    /// dead letters, so `resume` sticks.
    pub async fn handle_dead_letters(&self, limit: usize) -> Result<DeadLetterReport, EngineError> {
        let mut report = DeadLetterReport::default();
        while report.handled < limit {
            let page = self
                .backend
                .queue
                .dead_letters((limit - report.handled).min(10), DEAD_LETTER_VISIBILITY)
                .await?;
            if page.is_empty() {
                break;
            }
            for letter in page {
                // On an error the letter stays, and comes back after its visibility.
                let parked = self.handle_dead_letter(&letter.wake).await?;
                self.backend
                    .queue
                    .delete_dead_letter(&letter.receipt)
                    .await?;
                report.handled += 1;
                report.parked += usize::from(parked);
            }
        }
        Ok(report)
    }

    /// Park the run of one dead letter if the letter is still its latest wake-up;
    /// whether it parked it.
    async fn handle_dead_letter(&self, wake: &WakeUp) -> Result<bool, EngineError> {
        let Some(run) = self
            .backend
            .store
            .get_run(&wake.tenant, &wake.run_id)
            .await?
        else {
            return Ok(false);
        };
        if run.status.is_finished() || run.status == RunStatus::Parked {
            return Ok(false);
        }
        if wake.seq_hint.is_some_and(|seq| run.timeline_seq > seq) {
            tracing::info!(tenant = %run.tenant, run_id = %run.id, "a dead-lettered wake-up was overtaken by the run's progress; nothing to park");
            return Ok(false);
        }
        // Take the lease first: parking is then an ordinary fenced checkpoint, and a
        // run someone holds is not parked under them.
        let now = self.clock.now();
        let claim = Claim {
            owner: format!("{}#dead-letter", self.config.owner),
            now,
            expires_at: now.plus(self.config.lease_ttl),
        };
        let run = match self
            .backend
            .store
            .claim(&wake.tenant, &wake.run_id, &claim)
            .await
        {
            Ok(run) => run,
            Err(StoreError::Conflict(_) | StoreError::NotFound) => return Ok(false),
            Err(e) => return Err(e.into()),
        };
        let status = decide(run.status, LifecycleEvent::Park)
            .map_err(|e| EngineError::Gone(e.to_string()))?;
        let reason = ErrorInfo::new(
            crate::dead_letters::DEAD_LETTERED,
            "a wake-up of this run kept failing and went to the dead-letter queue; \
             fix the cause, then resume or cancel the run",
            false,
        );
        let mut next = run.clone();
        next.status = status;
        next.version += 1;
        next.updated_at = now;
        next.lease = None;
        next.due_at = None;
        next.resend_after = None;
        next.error = Some(reason.clone());
        next.timeline_seq += 1;
        let mut checkpoint = Checkpoint::new(next.clone(), run.version, Some(run.epoch));
        checkpoint.timeline.push(TimelineEvent {
            seq: next.timeline_seq,
            at: now,
            event_type: EventType::RunParked,
            sub_type: None,
            id: None,
            parent_id: None,
            name: Some(run.workflow.clone()),
            details: serde_json::json!({"Error": reason, "WakeUp": wake}),
        });
        match self.backend.store.checkpoint(&checkpoint).await {
            Ok(()) => {
                tracing::warn!(tenant = %run.tenant, run_id = %run.id, "run parked: its wake-up was dead-lettered");
                Ok(true)
            }
            Err(StoreError::Conflict(_)) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Handle a batch of wake-ups (an SQS batch) concurrently, each with `deadline` as
    /// its time limit. Duplicates in one batch are harmless: the lease lets one through.
    pub async fn handle_batch(&self, wakes: &[WakeUp], deadline: Option<Timestamp>) -> BatchReport {
        let outcomes =
            futures::future::join_all(wakes.iter().map(|w| self.handle_wakeup_until(w, deadline)))
                .await;
        BatchReport {
            outcomes: outcomes
                .into_iter()
                .map(|o| o.map_err(|e| e.to_string()))
                .collect(),
        }
    }

    /// Take up to `max` wake-ups from the queue and handle each, acknowledging those
    /// handled; returns how many were received. The dev server's worker and tests use
    /// this in place of the SQS trigger.
    pub async fn work_queue_once(&self, max: usize) -> Result<usize, EngineError> {
        let received = self
            .backend
            .queue
            .receive(max, self.config.lease_ttl)
            .await?;
        let n = received.len();
        // All of them at once, as the step function handles an SQS batch: a wake-up
        // received is a wake-up being handled, so a worker killed meanwhile costs a
        // receive only to wake-ups it was working on — never to ones waiting behind a
        // slow one, which would otherwise reach the receive limit and be dead-lettered
        // for another run's fault.
        let acks = futures::future::join_all(received.iter().map(|message| async move {
            match self
                .keep_hidden_while(&message.receipt, self.handle_wakeup(&message.wake))
                .await
            {
                Ok(WakeOutcome::Aborted(why)) => {
                    tracing::warn!(run_id = %message.wake.run_id, %why, "invocation aborted; the wake-up will be redelivered");
                    Ok(())
                }
                Ok(_) => self.backend.queue.ack(&message.receipt).await,
                Err(e) => {
                    tracing::warn!(run_id = %message.wake.run_id, error = %e, "wake-up failed; it will be redelivered");
                    Ok(())
                }
            }
        }))
        .await;
        acks.into_iter().collect::<Result<Vec<()>, _>>()?;
        Ok(n)
    }

    /// Run `work`, extending the visibility of the message `receipt` every half lease
    /// while it lasts, so that a run worked on for longer than the visibility timeout is
    /// not handed to a second worker meanwhile.
    pub(crate) async fn keep_hidden_while<T>(
        &self,
        receipt: &str,
        work: impl Future<Output = T>,
    ) -> T {
        let every = (self.config.lease_ttl / 2).max(Duration::from_millis(100));
        let mut work = std::pin::pin!(work);
        loop {
            tokio::select! {
                out = &mut work => return out,
                _ = tokio::time::sleep(every) => {
                    if let Err(e) = self.backend.queue.extend_visibility(receipt, self.config.lease_ttl).await {
                        tracing::warn!(error = %e, "could not extend a wake-up's visibility");
                    }
                }
            }
        }
    }

    /// Work the queue until it has nothing visible; returns how many wake-ups were
    /// handled. For tests and tools; `max_rounds` bounds it.
    pub async fn run_until_idle(&self, max_rounds: usize) -> Result<usize, EngineError> {
        let mut total = 0;
        for _ in 0..max_rounds {
            let n = self.work_queue_once(10).await?;
            if n == 0 {
                break;
            }
            total += n;
        }
        Ok(total)
    }
}

fn inline_detail(payload: &Payload) -> serde_json::Value {
    match payload {
        Payload::Inline(v) => v.clone(),
        Payload::Artifact(a) => serde_json::json!({"Artifact": a}),
    }
}

/// The delivery that tells a parent run its child (started by `invoke`) finished.
fn child_finished(
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
        id: DeliveryId(format!("child-finished:{}", run.id)),
        tenant: run.tenant.clone(),
        run_id: parent.run_id.clone(),
        body: DeliveryBody::ChildFinished {
            position: parent.position.clone(),
            outcome,
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
            details: serde_json::json!({"ChildRunId": run.id, "Workflow": run.workflow, "Status": status}),
        },
    }
}

/// Split off the callback records that do not fit in one transaction beside
/// `other_items` others; they are closed after it.
fn overflowing(callbacks: &mut Vec<CallbackRecord>, other_items: usize) -> Vec<CallbackRecord> {
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

/// Callback records to close because their run is finishing.
fn open_callbacks<'a>(
    entries: impl Iterator<Item = &'a JournalEntry>,
    run: &Run,
) -> Vec<CallbackRecord> {
    entries
        .filter_map(|e| match &e.state {
            EntryState::Waiting(Wait {
                kind: WaitKind::Callback { callback_id, .. },
                deadline,
                started_at,
            }) => Some((e, callback_id, deadline, started_at)),
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
fn workflow_panicked(message: &str) -> ErrorInfo {
    ErrorInfo::new(
        PANICKED,
        format!(
            "the workflow panicked outside a step: {message}; fix the code, then resume the run"
        ),
        false,
    )
}

/// Journal entries the finished workflow never reached: its code changed under it.
fn unvisited(st: &crate::context::ExecState) -> Option<ErrorInfo> {
    let mut missing: Vec<&JournalEntry> = st
        .journal
        .values()
        .filter(|e| {
            !st.visited.contains(&e.position)
                && !e.position.ancestors().any(|a| st.visited.contains(&a))
        })
        .collect();
    missing.sort_by(|a, b| a.position.cmp(&b.position));
    missing.first().map(|e| {
        ErrorInfo::new(
            "NonDeterminism",
            format!("non-determinism at {}: the journal has a {} operation '{}' that the code no longer reaches", e.position, e.kind, e.name),
            false,
        )
    })
}

/// Aborts a spawned task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Renew the lease every third of its TTL until aborted; note a lost lease or a
/// cancellation request for the engine to act on.
async fn renew_lease(
    store: Arc<dyn RunStore>,
    clock: Arc<dyn Clock>,
    tenant: TenantId,
    run_id: RunId,
    epoch: FencingEpoch,
    ttl: Duration,
    watch: Arc<LeaseWatch>,
) {
    loop {
        tokio::time::sleep(ttl / 3).await;
        match store
            .renew_lease(&tenant, &run_id, epoch, clock.now().plus(ttl))
            .await
        {
            Ok(run) => {
                if let Some(lease) = &run.lease {
                    watch
                        .expires_at
                        .fetch_max(lease.expires_at.millis(), Ordering::SeqCst);
                }
                if run.cancel_requested {
                    watch.cancel.store(true, Ordering::SeqCst);
                }
            }
            Err(StoreError::Conflict(_)) | Err(StoreError::NotFound) => {
                watch.lost.store(true, Ordering::SeqCst);
                return;
            }
            Err(e) => {
                tracing::warn!(run_id = %run_id, error = %e, "lease renewal failed; retrying")
            }
        }
    }
}

/// A workflow's future, as the registry starts it.
type WorkflowFuture = futures::future::BoxFuture<'static, Result<serde_json::Value, Error>>;

/// The waker an invocation polls its workflow with: it remembers whether anything woke
/// the workflow during a poll (so the engine polls again instead of taking a branch
/// that has yet to run for one that waits) and passes the wake on to the task.
#[derive(Default)]
struct WokenFlag {
    woken: std::sync::atomic::AtomicBool,
    task: std::sync::Mutex<Option<std::task::Waker>>,
}

impl WokenFlag {
    /// Before a poll: forget earlier wakes and wake `task` from now on.
    fn arm(&self, task: &std::task::Waker) {
        self.woken.store(false, Ordering::SeqCst);
        let mut held = self.task.lock().unwrap_or_else(|e| e.into_inner());
        if !held.as_ref().is_some_and(|w| w.will_wake(task)) {
            *held = Some(task.clone());
        }
    }

    /// Whether anything woke the workflow since [`WokenFlag::arm`].
    fn woken(&self) -> bool {
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
