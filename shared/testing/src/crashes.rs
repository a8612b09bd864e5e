//! Crashes and new code: an engine that dies at a chosen write, a restart or deploy on
//! the same data, and other engines racing the environment's own.

use std::sync::Arc;

use siesta::ports::Backend;
use siesta::probe::ProbeStore;
use siesta::{Engine, EngineConfig, Registry};

use crate::TestEnv;

impl TestEnv {
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
    /// dead engine held stays leased until its lease expires
    /// ([`LEASE_TTL`](crate::LEASE_TTL) after it was taken); [`TestEnv::drive`] skips
    /// over that.
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
            schedules: base.schedules,
        };
        (
            Engine::new(backend, self.clock.clone(), registry, config),
            probe,
        )
    }
}
