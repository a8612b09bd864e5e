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

mod builder;
mod crashes;
mod deliveries;
mod moving;
mod reading;

pub use builder::TestEnvBuilder;

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use siesta::ports::Backend;
use siesta::probe::ProbeStore;
use siesta::{Engine, EngineConfig, ManualClock, Registry, TenantId, Timestamp};
use siesta_embedded::EmbeddedBackend;

pub use siesta::probe;

/// The lease a test engine takes on a run; a crashed engine's run is picked up again
/// after it.
pub const LEASE_TTL: Duration = Duration::from_secs(30);

/// The callback base URL of a test engine: a callback's URL is
/// `http://hooks.test/hooks/{callback_id}`.
pub const CALLBACK_BASE_URL: &str = "http://hooks.test";

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
            schedules: base.schedules,
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
