//! # siesta-testing: test workflows in-process, with time under your control
//!
//! A [`TestEnv`] is a whole Siesta deployment in one value: the real [`Engine`] on the
//! embedded backend's SQLite store kept **in memory** (the same code the dev server
//! runs, so the same conditional writes, leases and queue), and a [`ManualClock`] that
//! moves only when the test says so. A three-day `wait_for_event` or a one-hour
//! `sleep` is skipped in milliseconds; nothing in a test sleeps.
//!
//! ```
//! use std::time::Duration;
//! use serde_json::json;
//! use siesta::{Context, Error, Registry, RunStatus};
//! use siesta_testing::TestEnv;
//!
//! async fn approval(ctx: Context, name: String) -> Result<String, Error> {
//!     let greeting: String = ctx
//!         .step("greet", move |_| async move { Ok(format!("Hello, {name}")) })
//!         .await?;
//!     let ok: bool = ctx
//!         .wait_for_event("approval")
//!         .timeout(Duration::from_secs(3 * 24 * 3600))
//!         .await?;
//!     ctx.sleep(Duration::from_secs(3600)).await?;
//!     Ok(format!("{greeting} (approved: {ok})"))
//! }
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let mut registry = Registry::new();
//! registry.register("approval", approval);
//! let env = TestEnv::new(registry);
//!
//! let id = env.start("approval", json!("Ada")).await;      // runs until it waits
//! assert_eq!(env.status(&id).await, RunStatus::Waiting);
//! env.deliver_event(&id, "approval", json!(true)).await;   // now in its one-hour sleep
//! let run = env.drive(&id).await;                          // skips the hour
//! assert_eq!(run.status, RunStatus::Completed);
//! assert_eq!(env.output::<String>(&id).await, "Hello, Ada (approved: true)");
//! # });
//! ```
//!
//! ## How time moves
//! Never by itself. [`TestEnv::run_until_idle`] works every wake-up that is due *now*
//! and stops; [`TestEnv::advance`] moves the clock by a duration first;
//! [`TestEnv::skip_to_next_timer`] moves it to the earliest moment a run falls due (a
//! timer, a deadline, a retry's backoff, an expired lease); [`TestEnv::drive`] repeats
//! that until the run finishes, is parked, or waits for something only the test can
//! deliver (an event, a callback outcome). Skipping time over a wait's deadline times
//! the wait out, exactly as it would in production: deliver first, then drive.
//!
//! ## Crashes
//! [`TestEnv::crash_after_writes`] makes the engine "die" right after its n-th journal
//! write (a checkpoint) from now: every later storage call fails, as if the process
//! were killed between two writes. [`TestEnv::restart`] starts a fresh engine on the same
//! data; the dead engine's lease on the run expires and the run is replayed from its
//! journal ([`TestEnv::drive`] skips over the lease for you). Side effects counted in the
//! test show what ran twice and what did not.
//!
//! ## Why a crate of its own
//! The core crate `siesta` does no I/O and `siesta-embedded` depends on it, so the
//! harness cannot live in the core without a second, in-memory store to keep true to
//! the ports' contract. Using the embedded store (which passes the conformance suite)
//! in memory keeps one implementation of that contract and costs no files.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test tooling: a failed unwrap is a failed assertion"
)]

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use siesta::ports::{Backend, DeliverOutcome, History};
use siesta::probe::ProbeStore;
use siesta::{
    CallbackId, CallbackRecord, Engine, EngineConfig, EngineError, EntryState, ErrorInfo,
    JournalEntry, ManualClock, Payload, Registry, Run, RunId, RunStatus, TenantId, TimelineEvent,
    Timestamp, Wait, WaitKind,
};
use siesta_embedded::EmbeddedBackend;

pub use siesta::probe;

/// The lease a test engine takes on a run; a crashed engine's run is picked up again
/// after it.
pub const LEASE_TTL: Duration = Duration::from_secs(30);

/// The callback base URL of a test engine: a callback's URL is
/// `http://hooks.test/hooks/{callback_id}`.
pub const CALLBACK_BASE_URL: &str = "http://hooks.test";

/// How many rounds of sweep-and-work one call may do before it stops; a run that keeps
/// falling due without progressing would otherwise hold a test forever.
const MAX_ROUNDS: usize = 1000;

/// How many times [`TestEnv::drive`] skips time before it gives up on a run.
const MAX_SKIPS: usize = 10_000;

/// Builds a [`TestEnv`] with other than the default settings.
pub struct TestEnvBuilder {
    registry: Registry,
    tenant: TenantId,
    start: Timestamp,
    config: EngineConfig,
    max_receives: u32,
}

impl TestEnvBuilder {
    /// The tenant the environment's runs belong to (default `test`).
    pub fn tenant(mut self, tenant: impl Into<String>) -> Self {
        self.tenant = TenantId(tenant.into());
        self
    }

    /// What the clock reads at the start (default 2026-01-01T00:00:00Z).
    pub fn start_at(mut self, t: Timestamp) -> Self {
        self.start = t;
        self
    }

    /// The engine's configuration (default: a 30 s lease, callbacks under
    /// `http://hooks.test`, the engine's other defaults).
    pub fn engine_config(mut self, config: EngineConfig) -> Self {
        self.config = config;
        self
    }

    /// How many times a wake-up may be received before it is dead-lettered (default 5).
    pub fn max_receives(mut self, n: u32) -> Self {
        self.max_receives = n;
        self
    }

    /// The environment.
    pub fn build(self) -> TestEnv {
        let clock = Arc::new(ManualClock::new(self.start));
        // SQLite's in-memory database: the embedded backend's code, no file.
        let embedded = EmbeddedBackend::open_with(":memory:", clock.clone(), self.max_receives)
            .expect("opening an in-memory embedded store");
        let env = TestEnv {
            clock,
            embedded,
            registry: Mutex::new(self.registry),
            tenant: self.tenant,
            config: self.config,
            current: Mutex::new(None),
        };
        env.replace_engine("engine-test");
        env
    }
}

struct Current {
    engine: Engine,
    probe: Arc<ProbeStore>,
    generation: u32,
}

/// An in-process Siesta: engine, in-memory store and manual clock. See the crate docs.
pub struct TestEnv {
    clock: Arc<ManualClock>,
    embedded: EmbeddedBackend,
    registry: Mutex<Registry>,
    tenant: TenantId,
    config: EngineConfig,
    current: Mutex<Option<Current>>,
}

impl TestEnv {
    /// An environment running `registry`'s workflows, with the default settings.
    pub fn new(registry: Registry) -> TestEnv {
        TestEnv::builder(registry).build()
    }

    /// A builder for other settings.
    pub fn builder(registry: Registry) -> TestEnvBuilder {
        TestEnvBuilder {
            registry,
            tenant: TenantId::from("test"),
            start: siesta::Clock::now(&ManualClock::default()),
            config: default_engine_config(),
            max_receives: siesta_embedded::DEFAULT_MAX_RECEIVES,
        }
    }

    fn current(&self) -> MutexGuard<'_, Option<Current>> {
        self.current.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn replace_engine(&self, owner: &str) {
        let registry = self
            .registry
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let mut current = self.current();
        let generation = current.as_ref().map_or(0, |c| c.generation + 1);
        let base = self.embedded.backend();
        let probe = ProbeStore::new(base.store.clone());
        let backend = Backend {
            store: probe.clone(),
            artifacts: base.artifacts,
            queue: base.queue,
            streams: base.streams,
        };
        let config = EngineConfig {
            owner: format!("{owner}-{generation}"),
            ..self.config.clone()
        };
        let engine = Engine::new(backend, self.clock.clone(), registry, config);
        *current = Some(Current {
            engine,
            probe,
            generation,
        });
    }

    // ---- the parts ----

    /// The engine now serving (a new one after [`TestEnv::restart`]). Its store is
    /// wrapped in the crash probe.
    pub fn engine(&self) -> Engine {
        self.current()
            .as_ref()
            .map(|c| c.engine.clone())
            .expect("the environment has an engine")
    }

    /// The probe around the current engine's store: counts of reads, writes,
    /// checkpoints and bytes written, and the crash switch.
    pub fn probe(&self) -> Arc<ProbeStore> {
        self.current()
            .as_ref()
            .map(|c| c.probe.clone())
            .expect("the environment has an engine")
    }

    /// The store itself, not through the probe: reads here work after a crash.
    pub fn backend(&self) -> Backend {
        self.embedded.backend()
    }

    /// The embedded store under everything.
    pub fn embedded(&self) -> &EmbeddedBackend {
        &self.embedded
    }

    /// The clock; [`ManualClock::advance`] moves it without working the queue.
    pub fn clock(&self) -> &Arc<ManualClock> {
        &self.clock
    }

    /// What the clock reads.
    pub fn now(&self) -> Timestamp {
        siesta::Clock::now(self.clock.as_ref())
    }

    /// The tenant the environment's runs belong to.
    pub fn tenant(&self) -> &TenantId {
        &self.tenant
    }

    /// The engine configuration every engine of this environment uses.
    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    // ---- starting and moving runs ----

    /// Start a run of `workflow` with `input` and work it until nothing is due now
    /// (it finished, or waits for time or a delivery). Panics if the engine refuses
    /// the run; see [`TestEnv::try_start`].
    pub async fn start(&self, workflow: &str, input: impl Serialize) -> RunId {
        match self.try_start(workflow, input, None).await {
            Ok(id) => id,
            Err(e) => panic!("starting a run of '{workflow}': {e}"),
        }
    }

    /// Start a run and [`drive`](TestEnv::drive) it: the whole run, timers skipped, in
    /// one call, up to a wait for an event or a callback. What the run ended as is returned (completed, failed, cancelled,
    /// parked, or waiting for a delivery).
    pub async fn execute(&self, workflow: &str, input: impl Serialize) -> Run {
        let id = self.start(workflow, input).await;
        self.drive(&id).await
    }

    /// Start a run with the given id, or say why the engine refused it (unknown
    /// workflow, invalid input, the id is taken), and work it until nothing is due now.
    pub async fn try_start(
        &self,
        workflow: &str,
        input: impl Serialize,
        run_id: Option<RunId>,
    ) -> Result<RunId, EngineError> {
        let id = self.create(workflow, input, run_id).await?;
        self.run_until_idle().await;
        Ok(id)
    }

    /// Create a run without working the queue (to deliver something before its first
    /// step, or to start several runs at once).
    pub async fn create(
        &self,
        workflow: &str,
        input: impl Serialize,
        run_id: Option<RunId>,
    ) -> Result<RunId, EngineError> {
        let input = serde_json::to_value(input)
            .map_err(|e| EngineError::InvalidInput(format!("the input is not JSON: {e}")))?;
        Ok(self
            .engine()
            .start(&self.tenant, workflow, input, run_id)
            .await?
            .id)
    }

    /// Handle every wake-up that is due now, including runs the sweep finds due (a
    /// fired timer, a passed deadline, an expired lease), until nothing is left at this
    /// instant; the clock does not move. Returns how many wake-ups were handled.
    pub async fn run_until_idle(&self) -> usize {
        let engine = self.engine();
        let mut handled = 0;
        for _ in 0..MAX_ROUNDS {
            let n = engine
                .run_until_idle(MAX_ROUNDS)
                .await
                .expect("the in-memory queue failed");
            handled += n;
            // A crashed engine finds nothing due through its dead store; that is the
            // crash, not a failure of the test.
            let woken = engine.sweep(MAX_ROUNDS).await.map_or(0, |r| r.woken);
            if n == 0 && woken == 0 {
                break;
            }
        }
        handled
    }

    /// Move the clock forward by `d`, then [`run_until_idle`](TestEnv::run_until_idle).
    pub async fn advance(&self, d: Duration) -> usize {
        self.clock.advance(d);
        self.run_until_idle().await
    }

    /// When the next run falls due (a timer, a deadline, a retry, an expired lease),
    /// if any run is scheduled at all. A run already due whose wake-up is on its way
    /// counts from when the sweep would send it another (its wake-up may have been lost
    /// in a crash the test made).
    pub async fn next_due(&self) -> Option<Timestamp> {
        let now = self.now();
        self.backend()
            .store
            .due_runs(Timestamp(i64::MAX), 100_000)
            .await
            .expect("the in-memory store failed")
            .iter()
            .map(|d| {
                if d.due_at > now {
                    d.due_at
                } else {
                    d.sweep_at()
                }
            })
            .min()
    }

    /// Move the clock to the next moment a run falls due and work what is due then.
    /// Returns that moment, or `None` (the clock unmoved) when nothing is scheduled.
    pub async fn skip_to_next_timer(&self) -> Option<Timestamp> {
        let due = self.next_due().await?;
        if due > self.now() {
            self.clock.set(due);
        }
        self.run_until_idle().await;
        Some(due)
    }

    /// Work the run until it finishes, is parked, or waits for something only the test
    /// can deliver — an event or a callback, **even one with a timeout**: `drive` does
    /// not skip time to a delivery's deadline, since a test that means to deliver it
    /// would find it timed out. Time is skipped to each timer, backoff or lease expiry
    /// on the way. Returns the run as it then is. Other runs move with it. To let a
    /// wait time out, say so: [`TestEnv::drive_through_timeouts`].
    pub async fn drive(&self, run_id: &RunId) -> Run {
        self.drive_until(run_id, false).await
    }

    /// [`TestEnv::drive`], but time is skipped to the deadlines of waits for events and
    /// callbacks too, so a run waiting for a delivery that never comes times out.
    pub async fn drive_through_timeouts(&self, run_id: &RunId) -> Run {
        self.drive_until(run_id, true).await
    }

    async fn drive_until(&self, run_id: &RunId, through_timeouts: bool) -> Run {
        self.run_until_idle().await;
        for _ in 0..MAX_SKIPS {
            let run = self.run(run_id).await;
            if run.status.is_finished() || run.status == RunStatus::Parked {
                return run;
            }
            // Nothing of this run is scheduled (no timer, deadline, backoff or lease,
            // no child run in progress): only a delivery moves it on, and skipping
            // time for other runs' sake would time out their waits behind the test's back.
            if run.due_at.is_none() && !self.waits_on_child_run(run_id).await {
                return run;
            }
            // The next instant due is a deadline of a wait a delivery may end: skipping
            // to it times that wait out, which is for the test to ask. (A timer or a
            // backoff due before it is skipped to as ever.)
            if !through_timeouts
                && run.status == RunStatus::Waiting
                && let Some(due) = run.due_at
                && self
                    .delivery_deadlines(run_id)
                    .await
                    .iter()
                    .any(|deadline| *deadline <= due)
            {
                return run;
            }
            if self.skip_to_next_timer().await.is_none() {
                return run;
            }
        }
        panic!("run {run_id} kept falling due for {MAX_SKIPS} timer skips without finishing")
    }

    /// The deadlines of the run's open waits that a delivery ends (events, callbacks).
    async fn delivery_deadlines(&self, run_id: &RunId) -> Vec<Timestamp> {
        self.journal(run_id)
            .await
            .into_iter()
            .filter_map(|e| match e.state {
                EntryState::Waiting(Wait {
                    kind: WaitKind::Event { .. } | WaitKind::Callback { .. },
                    deadline,
                    ..
                }) => deadline,
                _ => None,
            })
            .collect()
    }

    async fn waits_on_child_run(&self, run_id: &RunId) -> bool {
        self.journal(run_id).await.iter().any(|e| {
            matches!(
                &e.state,
                EntryState::Waiting(Wait {
                    kind: WaitKind::Child { .. },
                    ..
                })
            )
        })
    }

    // ---- deliveries ----

    /// Deliver the named event to the run, then work until idle.
    pub async fn deliver_event(
        &self,
        run_id: &RunId,
        name: &str,
        value: impl Serialize,
    ) -> DeliverOutcome {
        let value = to_json(value);
        let outcome = self
            .engine()
            .deliver_event(&self.tenant, run_id, name, value, None)
            .await
            .unwrap_or_else(|e| panic!("delivering event '{name}' to run {run_id}: {e}"));
        self.run_until_idle().await;
        outcome
    }

    /// Inject a message into the run (drained at its next step boundary), then work
    /// until idle.
    pub async fn inject_message(&self, run_id: &RunId, value: impl Serialize) -> DeliverOutcome {
        let value = to_json(value);
        let outcome = self
            .engine()
            .inject_message(&self.tenant, run_id, value, None)
            .await
            .unwrap_or_else(|e| panic!("injecting a message into run {run_id}: {e}"));
        self.run_until_idle().await;
        outcome
    }

    /// Complete a callback with success, as its webhook would, then work until idle.
    pub async fn complete_callback(
        &self,
        callback_id: &CallbackId,
        value: impl Serialize,
    ) -> DeliverOutcome {
        self.callback_outcome(callback_id, Ok(to_json(value))).await
    }

    /// Fail a callback with `error`, then work until idle.
    pub async fn fail_callback(
        &self,
        callback_id: &CallbackId,
        error: ErrorInfo,
    ) -> DeliverOutcome {
        self.callback_outcome(callback_id, Err(error)).await
    }

    async fn callback_outcome(
        &self,
        callback_id: &CallbackId,
        outcome: Result<serde_json::Value, ErrorInfo>,
    ) -> DeliverOutcome {
        let delivered = self
            .engine()
            .complete_callback(callback_id, Some(&self.tenant), outcome, None)
            .await
            .unwrap_or_else(|e| panic!("completing callback {callback_id}: {e}"));
        self.run_until_idle().await;
        delivered
    }

    /// Record a heartbeat for a callback, pushing back its heartbeat timeout.
    pub async fn heartbeat_callback(&self, callback_id: &CallbackId) -> DeliverOutcome {
        self.engine()
            .heartbeat_callback(callback_id, Some(&self.tenant))
            .await
            .unwrap_or_else(|e| panic!("heartbeat for callback {callback_id}: {e}"))
    }

    /// The callbacks the run waits on, in position order.
    pub async fn open_callbacks(&self, run_id: &RunId) -> Vec<CallbackId> {
        let mut open: Vec<(siesta::Position, CallbackId)> = self
            .journal(run_id)
            .await
            .into_iter()
            .filter_map(|e| match e.state {
                EntryState::Waiting(Wait {
                    kind: WaitKind::Callback { callback_id, .. },
                    ..
                }) => Some((e.position, callback_id)),
                _ => None,
            })
            .collect();
        open.sort();
        open.into_iter().map(|(_, id)| id).collect()
    }

    /// The stored record of callback `id`; panics if there is none.
    pub async fn callback_record(&self, id: &CallbackId) -> CallbackRecord {
        self.backend()
            .store
            .get_callback(id)
            .await
            .unwrap_or_else(|e| panic!("reading callback {id}: {e}"))
            .unwrap_or_else(|| panic!("no record of callback {id}"))
    }

    /// The open callback the workflow created under `name`; panics if there is none.
    pub async fn callback(&self, run_id: &RunId, name: &str) -> CallbackId {
        self.journal(run_id)
            .await
            .into_iter()
            .find_map(|e| match e.state {
                EntryState::Waiting(Wait {
                    kind: WaitKind::Callback { callback_id, .. },
                    ..
                }) if e.name == name => Some(callback_id),
                _ => None,
            })
            .unwrap_or_else(|| panic!("run {run_id} waits on no callback named '{name}'"))
    }

    /// Cancel the run (at once, or at its next boundary if it is being worked), then
    /// work until idle.
    pub async fn cancel(&self, run_id: &RunId) -> Run {
        let run = self
            .engine()
            .cancel(&self.tenant, run_id, None)
            .await
            .unwrap_or_else(|e| panic!("cancelling run {run_id}: {e}"));
        self.run_until_idle().await;
        run
    }

    /// Resume a parked run, then work until idle.
    pub async fn resume(&self, run_id: &RunId) -> Run {
        let run = self
            .engine()
            .resume(&self.tenant, run_id, None)
            .await
            .unwrap_or_else(|e| panic!("resuming run {run_id}: {e}"));
        self.run_until_idle().await;
        run
    }

    // ---- reading runs ----

    /// The run as stored (read past the crash probe); panics if there is no such run.
    pub async fn run(&self, run_id: &RunId) -> Run {
        self.backend()
            .store
            .get_run(&self.tenant, run_id)
            .await
            .expect("the in-memory store failed")
            .unwrap_or_else(|| panic!("no run {run_id}"))
    }

    /// The run's status.
    pub async fn status(&self, run_id: &RunId) -> RunStatus {
        self.run(run_id).await.status
    }

    /// The output of a completed run, as `T`; panics with the run's status and error if
    /// it did not complete.
    pub async fn output<T: DeserializeOwned>(&self, run_id: &RunId) -> T {
        let run = self.run(run_id).await;
        let Some(payload) = run
            .output
            .as_ref()
            .filter(|_| run.status == RunStatus::Completed)
        else {
            panic!(
                "run {run_id} has no output: it is {}{}",
                run.status,
                run.error.map(|e| format!(" ({e})")).unwrap_or_default()
            )
        };
        let value = self.payload(payload).await;
        serde_json::from_value(value.clone())
            .unwrap_or_else(|e| panic!("run {run_id}'s output {value} does not fit: {e}"))
    }

    /// The error of a failed, parked or cancelled run; panics if it has none.
    pub async fn error(&self, run_id: &RunId) -> ErrorInfo {
        let run = self.run(run_id).await;
        run.error
            .unwrap_or_else(|| panic!("run {run_id} has no error: it is {}", run.status))
    }

    /// A payload's JSON, fetched from the artifact store when it was offloaded.
    pub async fn payload(&self, payload: &Payload) -> serde_json::Value {
        match payload {
            Payload::Inline(v) => v.clone(),
            Payload::Artifact(a) => {
                let bytes = self
                    .backend()
                    .artifacts
                    .get(a)
                    .await
                    .unwrap_or_else(|e| panic!("reading artifact {}: {e}", a.location));
                serde_json::from_slice(&bytes)
                    .unwrap_or_else(|e| panic!("artifact {} is not JSON: {e}", a.location))
            }
        }
    }

    /// The run's journal and deliveries.
    pub async fn history(&self, run_id: &RunId) -> History {
        self.backend()
            .store
            .load_history(&self.tenant, run_id)
            .await
            .expect("the in-memory store failed")
    }

    /// The run's journal entries.
    pub async fn journal(&self, run_id: &RunId) -> Vec<JournalEntry> {
        self.history(run_id).await.journal
    }

    /// The journal entry at `position` (`name#occurrence`, e.g. `charge#0`).
    pub async fn entry(&self, run_id: &RunId, position: &str) -> Option<JournalEntry> {
        self.journal(run_id)
            .await
            .into_iter()
            .find(|e| e.position.as_str() == position)
    }

    /// Every chunk of the run's stream `name`, in offset order (read from the store,
    /// not through the probe). [`siesta::visible`] gives what a reader shows of them.
    pub async fn stream(&self, run_id: &RunId, name: &str) -> Vec<siesta::ports::StreamChunk> {
        self.embedded
            .backend()
            .streams
            .read(&self.tenant, run_id, name, 0, usize::MAX)
            .await
            .expect("reading a stream")
    }

    /// The data of the chunks a reader shows of the run's stream `name`
    /// ([`siesta::visible`]: a failed attempt's chunks dropped).
    pub async fn stream_data(&self, run_id: &RunId, name: &str) -> Vec<serde_json::Value> {
        siesta::visible(&self.stream(run_id, name).await)
            .into_iter()
            .map(|c| c.chunk.data)
            .collect()
    }

    /// The run's whole timeline, in order.
    pub async fn timeline(&self, run_id: &RunId) -> Vec<TimelineEvent> {
        self.backend()
            .store
            .timeline(&self.tenant, run_id, 0, usize::MAX >> 1)
            .await
            .expect("the in-memory store failed")
    }

    // ---- crashes and new code ----

    /// The current engine dies right after its n-th journal write from now (1 = the
    /// next one): the write is kept, every later storage call of that engine fails.
    pub fn crash_after_writes(&self, n: u32) {
        self.probe().crash_after(i64::from(n));
    }

    /// The current engine dies at its n-th journal write from now, before it is applied.
    pub fn crash_before_write(&self, n: u32) {
        self.probe().crash_before(i64::from(n));
    }

    /// Whether the current engine has died.
    pub fn has_crashed(&self) -> bool {
        self.probe().is_dead()
    }

    /// A fresh engine on the same data, as a new process after a crash. A run the
    /// dead engine held stays leased until its lease expires ([`LEASE_TTL`] after it
    /// was taken); [`TestEnv::drive`] skips over that.
    pub fn restart(&self) {
        self.replace_engine("engine-restarted");
    }

    /// Deploy new code: a fresh engine running `registry` on the same data. Runs
    /// replay their journals against the new code (a change that no longer matches a
    /// journal parks the run with a `NonDeterminism` error).
    pub fn deploy(&self, registry: Registry) {
        *self.registry.lock().unwrap_or_else(|e| e.into_inner()) = registry;
        self.replace_engine("engine-deployed");
    }

    /// Another engine on the same data (another process racing this one), with its own
    /// probe; the environment's own engine is unchanged.
    pub fn another_engine(&self, owner: &str) -> (Engine, Arc<ProbeStore>) {
        let registry = self
            .registry
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let config = EngineConfig {
            owner: owner.to_owned(),
            ..self.config.clone()
        };
        self.engine_with(registry, config)
    }

    /// An engine with other code or another configuration (a shorter lease, a smaller
    /// time budget) on the same data, with its own probe; the environment's own
    /// engine is unchanged.
    pub fn engine_with(
        &self,
        registry: Registry,
        config: EngineConfig,
    ) -> (Engine, Arc<ProbeStore>) {
        let base = self.embedded.backend();
        let probe = ProbeStore::new(base.store.clone());
        let backend = Backend {
            store: probe.clone(),
            artifacts: base.artifacts,
            queue: base.queue,
            streams: base.streams,
        };
        (
            Engine::new(backend, self.clock.clone(), registry, config),
            probe,
        )
    }
}

/// The configuration of a test engine unless the builder says otherwise: a
/// [`LEASE_TTL`] lease, callbacks under [`CALLBACK_BASE_URL`], the engine's other
/// defaults. Change a field with `EngineConfig { time_budget, ..default_engine_config() }`.
///
/// `SIESTA_TEST_REPLAY_CACHE=off` in the environment turns the engine's replay cache off,
/// so the same tests check replay from the store alone (every wake-up a cache miss).
pub fn default_engine_config() -> EngineConfig {
    let replay_cache_off = std::env::var("SIESTA_TEST_REPLAY_CACHE").is_ok_and(|v| v == "off");
    let defaults = EngineConfig::default();
    EngineConfig {
        owner: "engine-test".to_owned(),
        lease_ttl: LEASE_TTL,
        callback_base_url: CALLBACK_BASE_URL.to_owned(),
        replay_cache_entries: if replay_cache_off {
            0
        } else {
            defaults.replay_cache_entries
        },
        ..defaults
    }
}

fn to_json(value: impl Serialize) -> serde_json::Value {
    serde_json::to_value(value).unwrap_or_else(|e| panic!("the value is not JSON: {e}"))
}
