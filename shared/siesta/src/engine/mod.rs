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
//!
//! One file per job, each an `impl Engine` block: `start` (start a run, read one),
//! `wakeup` (claim, replay, hand-off to the replay cache), `lease` (its renewal while an
//! invocation runs), `finish` (a pass's final checkpoint), `deliveries` (events,
//! messages, callback outcomes and heartbeats), `control` (cancel, resume, resolve),
//! `replay_check` (does a run's journal replay on this code, writing nothing), `upgrade`
//! (move a run to this build when it replays), `sweep`, `dead_letters` (the dead-letter queue and the operator's view of it) and
//! `worker` (the queue worker and batch handling), `turns` (one wake-up of a run at a
//! time in a process). This file holds the engine itself,
//! its configuration and errors, and the helpers they share.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use crate::context::{ContextConfig, encode_payload};
use crate::error::ErrorKind;
use crate::model::*;
use crate::notify::{QueueSignal, RunWatch, RunWatchers, SignalSends, SignallingStreams};
use crate::ports::*;
use crate::quota::{QuotaExceeded, StartRate};
use crate::registry::{Registry, UpgradePolicy};
use crate::replay_cache::{ReplayCache, ReplayCacheStats};
use crate::time::{Clock, Timestamp};

pub mod actions;
mod control;
pub mod dead_letters;
mod deliveries;
mod finish;
mod held;
mod lease;
mod limits;
mod reap;
mod replay_check;
mod restart;
mod schedules;
mod start;
pub mod streams;
mod sweep;
mod turns;
mod upgrade;
mod wakeup;
pub(crate) mod worker;
mod workflow_pause;

pub use actions::{ActionRequest, DEFAULT_ACTION_RATE, MAX_ACTION_RATE};
pub use dead_letters::DeadLetterReport;
pub use limits::LimitReport;
pub use replay_check::{Divergence, ReplayCheck, RunExport};
pub use restart::{RestartRequest, Restarted, archived_position};
pub use schedules::{ScheduleInfo, ScheduleReport, parse_schedule_names};
pub use start::{StartOptions, Started};
pub use sweep::SweepReport;
pub use upgrade::{DivergedRun, SkippedRun, UpgradeReport};
pub use worker::BatchReport;
pub use workflow_pause::{PAUSE_CACHE_MS, WorkflowPaused};

/// How the engine behaves.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Names this engine's leases (an invocation counter is appended).
    pub owner: String,
    /// How long a lease lasts without renewal (and so how soon the sweep finds the run
    /// of a holder that died); renewed every two fifths of it while the run is held, a
    /// renewal that failed tried again after a tenth.
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
    /// the top (a continuation, see the replay cache); their journals count towards
    /// `replay_cache_entries`, and 0 (or a `replay_cache_entries` of 0) turns it off.
    /// Default: 256.
    pub max_continuations: usize,
    /// How long after a wake-up should have become visible the sweep leaves its run
    /// alone ([`Run::resend_after`]): a wake-up waiting behind a backlog is not lost.
    /// Default: 15 minutes, the wake-up queue's visibility timeout — a wake-up received
    /// by a consumer that died before claiming its run comes back from the queue itself
    /// after that long, so re-sending sooner could not help. A send that fails is
    /// re-sent by the next sweep regardless; only a wake-up lost without an error (the
    /// process died between its write and its send) waits this long — but a start's,
    /// which waits `start_resend_margin`, and a delivery's, `delivery_resend_margin`.
    /// When the sweep does re-send, it waits as long again as the run has been due (at
    /// least this margin) before the next one: a backlog that outlasts the margin costs
    /// a run a duplicate per doubling of its wait, not one per sweep.
    pub resend_margin: Duration,
    /// How long after its start a run that has not begun is left to its start's
    /// wake-up, before the sweep sends another (at most `resend_margin`). Default: 30
    /// seconds.
    ///
    /// A start writes its run, then sends its wake-up; a process that dies between the
    /// two (killed, a Lambda timeout) leaves a run that nothing wakes — and its client,
    /// answered 201, waits. A start's wake-up is handled within seconds unless the queue
    /// has a backlog, so its run's `resend_after` is this short margin instead of
    /// `resend_margin`: the first sweep after it re-sends the wake-up of a run still
    /// pending. No request is added on the normal path (the margin is a value in the
    /// run's first write, and the claim clears it); a start lost this way costs one
    /// `SendMessage` and one `UpdateItem` by the sweep. A start whose wake-up merely
    /// waits behind a backlog longer than this is sent one duplicate (a no-op when
    /// handled; the embedded queue, which can be asked, sends none), and then the
    /// general `resend_margin` applies. An idempotent retry of the start re-sends at once
    /// ([`Engine::ensure_started`]).
    pub start_resend_margin: Duration,
    /// How long after a delivery made a waiting run due (an event, a message, a
    /// callback's outcome or heartbeat, a webhook, a child's outcome to its parent) the
    /// run is left to the delivery's wake-up, before the sweep sends another (at most
    /// `resend_margin`). Default: 30 seconds.
    ///
    /// A delivery is written, then its wake-up sent; a process that dies between the
    /// two leaves a stored delivery — whose request may have been answered by a retry,
    /// as a duplicate — that nothing wakes its run for. On the embedded backend the file
    /// finds it when opened again; SQS cannot be asked whether it holds a wake-up, so on
    /// AWS only the margin bounds the wait (it was the general 15 minutes). As for a
    /// start, no request is added on the normal path (the margin is a value in the
    /// delivery's one write, and the claim clears it); a delivery lost this way costs the
    /// sweep one `SendMessage` and one `UpdateItem`, and one whose wake-up waits behind a
    /// backlog longer than this gets one duplicate (a no-op when handled). A duplicate
    /// of a delivery its run has not looked at yet sends the wake-up again at once.
    pub delivery_resend_margin: Duration,
    /// Per-tenant limits on starts and deliveries (default: none).
    pub quotas: crate::quota::Quotas,
    /// The [`UpgradePolicy`] of workflows whose registration sets none
    /// ([`Registry::upgrade_policy`]). Default: [`UpgradePolicy::Pinned`], what Lambda
    /// deploys use; the dev server sets [`UpgradePolicy::UpgradeWhenReplays`].
    pub upgrade_policy: UpgradePolicy,
    /// What the sweep does with a due run of another build. Default:
    /// [`OtherBuilds::Wake`], which a deployment whose wake-up handler forwards such a
    /// run to its build needs (on AWS the sweep runs no workflow code and wakes every
    /// build's runs); the dev server, which serves its own build only, sets
    /// [`OtherBuilds::Leave`].
    pub sweep_other_builds: OtherBuilds,
    /// Schedules this deployment does not fire (by name; see [`crate::schedule`]):
    /// listed as paused, they may still be triggered by hand. Enabled again, their
    /// missed ticks follow their catch-up policy. Default: none.
    pub disabled_schedules: std::collections::BTreeSet<String>,
    /// This deployment's maximum for concurrency limits declared in code, by name
    /// ([`Registry::limit`]); the others keep their declared maximum. Default: none.
    pub limits: crate::flow::LimitOverrides,
}

/// What the sweep of an engine does with a due run that another build started (see
/// [`EngineConfig::sweep_other_builds`]). Either way the engine's wake-up handling
/// leaves such a run alone ([`WakeOutcome::OtherBuild`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OtherBuilds {
    /// Wake it like any other: the wake-up's handler forwards it to the run's build.
    #[default]
    Wake,
    /// Send it no wake-up: its own build's sweep wakes it. The sweep only moves the
    /// run's `resend_after` on, as it does when it sends, so that such runs leave the
    /// due index's next pages instead of filling them (and starving this build's own
    /// due runs); the embedded store clears that mark when it is opened again, since
    /// no wake-up for the run is queued, so the run's build wakes it at its first
    /// sweep.
    Leave,
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
            start_resend_margin: Duration::from_secs(30),
            delivery_resend_margin: Duration::from_secs(30),
            quotas: crate::quota::Quotas::default(),
            upgrade_policy: UpgradePolicy::Pinned,
            sweep_other_builds: OtherBuilds::Wake,
            disabled_schedules: std::collections::BTreeSet::new(),
            limits: crate::flow::LimitOverrides::default(),
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
    /// The run's journal does not replay on this engine's code (an upgrade refused).
    #[error("the run's journal does not replay on this build {0}")]
    Diverged(Divergence),
    /// An invocation holds the run's lease right now; try again when it waits.
    #[error("the run is being worked on right now; try again when it waits")]
    Leased,
    /// The workflow is paused and refuses new starts (docs/operations.md).
    #[error("workflow {0} is paused: it takes no new start until resumed")]
    WorkflowPaused(String),
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
    /// This process is handling the run already: the wake-up was folded into that
    /// handling, which looks at the run once more when done (see
    /// [`Engine::handle_wakeup_until`]). Handled, as far as the queue is concerned.
    Folded,
    /// The run needs attention but started on another build than this engine's
    /// ([`EngineConfig::build_id`]): this engine does not claim it nor replay it on
    /// code it did not start on, and nothing was written (cost: one read). The run
    /// stays as it was, waiting for its build (or an upgrade); a queue worker counts
    /// the wake-up as handled.
    OtherBuild {
        /// The build the run started on.
        build_id: String,
    },
    /// The run was advanced and is now in this status.
    Advanced(RunStatus),
    /// The invocation stopped without finishing its work (lease lost, storage failed);
    /// the run will be picked up again.
    Aborted(String),
}

/// The durable engine over a backend.
#[derive(Clone)]
pub struct Engine {
    backend: Backend,
    clock: Arc<dyn Clock>,
    registry: Arc<Registry>,
    /// The workflows flow control governs, for the contexts' `invoke`.
    flow_controlled: Arc<std::collections::BTreeMap<String, String>>,
    config: EngineConfig,
    invocations: Arc<AtomicU64>,
    queue_signal: Arc<QueueSignal>,
    watchers: Arc<RunWatchers>,
    stream_watchers: Arc<RunWatchers>,
    replay_cache: Arc<ReplayCache>,
    start_rate: Arc<StartRate>,
    turns: Arc<turns::RunTurns>,
    /// What this process read of workflows' pauses, kept a second.
    workflow_pauses: Arc<workflow_pause::PauseCache>,
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
        // Every append through the engine tells this process's stream readers.
        let stream_watchers = Arc::new(RunWatchers::default());
        let backend = Backend {
            queue: Arc::new(HookedSends::new(
                backend.queue,
                SignalSends {
                    signal: queue_signal.clone(),
                    clock: clock.clone(),
                },
            )),
            streams: Arc::new(SignallingStreams {
                inner: backend.streams,
                watchers: stream_watchers.clone(),
            }),
            ..backend
        };
        let flow_controlled = registry
            .names()
            .filter_map(|w| Some((w.to_owned(), registry.flow_control_of(w)?)))
            .collect();
        Engine {
            backend,
            clock,
            flow_controlled: Arc::new(flow_controlled),
            registry: Arc::new(registry),
            replay_cache: Arc::new(ReplayCache::new(
                config.replay_cache_entries,
                config.max_continuations,
            )),
            config,
            invocations: Arc::new(AtomicU64::new(0)),
            queue_signal,
            watchers: Arc::new(RunWatchers::default()),
            stream_watchers,
            start_rate: Arc::new(StartRate::default()),
            turns: Arc::new(turns::RunTurns::default()),
            workflow_pauses: Arc::new(workflow_pause::PauseCache::default()),
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

    /// The [`UpgradePolicy`] of `workflow`'s runs: the one its registration sets, or the
    /// engine's default.
    pub fn upgrade_policy(&self, workflow: &str) -> UpgradePolicy {
        self.registry
            .policy(workflow)
            .unwrap_or(self.config.upgrade_policy)
    }

    /// The build a run waits for: the one it started on, when that is not this
    /// engine's and the run is not finished; `None` when this engine serves it (a run
    /// that records no build is any build's).
    pub fn awaiting_build<'r>(&self, run: &'r Run) -> Option<&'r str> {
        run.build_id
            .as_deref()
            .filter(|b| *b != self.config.build_id && !run.status.is_finished())
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
            limits: self.config.limits.clone(),
            lease_ttl: self.config.lease_ttl,
            flow_controlled: self.flow_controlled.clone(),
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

    /// The `resend_after` a delivery received at `now` gives the waiting run it makes
    /// due: the short margin, since its wake-up is sent at once and is handled within
    /// seconds but for a backlog (see [`EngineConfig::delivery_resend_margin`]).
    fn delivery_resend_after(&self, now: Timestamp) -> Option<Timestamp> {
        let margin = self
            .config
            .delivery_resend_margin
            .min(self.config.resend_margin);
        Some(now.plus(margin))
    }
}

fn inline_detail(payload: &Payload) -> serde_json::Value {
    match payload {
        Payload::Inline(v) => v.clone(),
        Payload::Artifact(a) => serde_json::json!({"Artifact": a}),
    }
}
