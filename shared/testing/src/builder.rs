//! [`TestEnvBuilder`]: a [`TestEnv`] with other than the default settings (tenant, start
//! time, engine configuration, receives before a dead letter).

use std::sync::{Arc, Mutex};

use siesta::{EngineConfig, ManualClock, Registry, TenantId, Timestamp};
use siesta_embedded::EmbeddedBackend;

use crate::TestEnv;

/// Builds a [`TestEnv`] with other than the default settings.
pub struct TestEnvBuilder {
    pub(crate) registry: Registry,
    pub(crate) tenant: TenantId,
    pub(crate) start: Timestamp,
    pub(crate) config: EngineConfig,
    pub(crate) max_receives: u32,
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
