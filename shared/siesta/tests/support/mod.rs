//! A test world: the engine on the embedded backend with a manual clock, and a store
//! wrapper that counts calls and can simulate a crash after the n-th write.
#![allow(dead_code, unreachable_pub, missing_docs)]

use std::sync::Arc;
use std::time::Duration;

use siesta::ports::*;
pub use siesta::probe::ProbeStore;
use siesta::*;

/// The engine on an embedded backend in a temp dir, with a manual clock.
pub struct World {
    pub dir: tempfile::TempDir,
    pub clock: Arc<ManualClock>,
    pub embedded: siesta_embedded::EmbeddedBackend,
    pub probe: Arc<ProbeStore>,
    pub engine: Engine,
    pub registry: Registry,
    pub tenant: TenantId,
}

pub const LEASE_TTL: Duration = Duration::from_secs(30);

impl World {
    pub fn new(registry: Registry) -> World {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::default());
        let embedded =
            siesta_embedded::EmbeddedBackend::open(dir.path().join("siesta.db"), clock.clone())
                .unwrap();
        let base = embedded.backend();
        let probe = ProbeStore::new(base.store.clone());
        let engine = Self::engine_over(
            &base,
            probe.clone(),
            clock.clone(),
            registry.clone(),
            "engine-a",
        );
        World {
            dir,
            clock,
            embedded,
            probe,
            engine,
            registry,
            tenant: TenantId::from("acme"),
        }
    }

    fn engine_over(
        base: &Backend,
        store: Arc<dyn RunStore>,
        clock: Arc<ManualClock>,
        registry: Registry,
        owner: &str,
    ) -> Engine {
        let backend = Backend {
            store,
            artifacts: base.artifacts.clone(),
            queue: base.queue.clone(),
        };
        let config = EngineConfig {
            owner: owner.to_owned(),
            lease_ttl: LEASE_TTL,
            callback_base_url: "http://hooks.test".into(),
            ..EngineConfig::default()
        };
        Engine::new(backend, clock, registry, config)
    }

    /// A second engine (another process) on the same backend, with its own probe.
    pub fn another_engine(&self, owner: &str) -> (Engine, Arc<ProbeStore>) {
        let base = self.embedded.backend();
        let probe = ProbeStore::new(base.store.clone());
        (
            Self::engine_over(
                &base,
                probe.clone(),
                self.clock.clone(),
                self.registry.clone(),
                owner,
            ),
            probe,
        )
    }

    /// An engine with another registry (new code) on the same backend.
    pub fn engine_with(&self, registry: Registry, owner: &str) -> Engine {
        let base = self.embedded.backend();
        Self::engine_over(
            &base,
            base.store.clone(),
            self.clock.clone(),
            registry,
            owner,
        )
    }

    /// Replace the engine after a crash: a fresh process on the same data.
    pub fn restart(&mut self) {
        let (engine, probe) = self.another_engine("engine-restarted");
        self.engine = engine;
        self.probe = probe;
    }

    pub async fn start(&self, workflow: &str, input: serde_json::Value) -> RunId {
        self.engine
            .start(&self.tenant, workflow, input, None)
            .await
            .unwrap()
            .id
    }

    /// Work the queue until nothing is visible.
    pub async fn settle(&self) {
        self.engine.run_until_idle(1000).await.unwrap();
    }

    /// Move time on, let the sweep wake what fell due, and settle.
    pub async fn advance(&self, d: Duration) {
        self.clock.advance(d);
        self.engine.sweep(1000).await.unwrap();
        self.settle().await;
    }

    pub async fn run(&self, id: &RunId) -> Run {
        self.embedded
            .backend()
            .store
            .get_run(&self.tenant, id)
            .await
            .unwrap()
            .unwrap()
    }

    pub async fn history(&self, id: &RunId) -> History {
        self.embedded
            .backend()
            .store
            .load_history(&self.tenant, id)
            .await
            .unwrap()
    }

    pub async fn timeline(&self, id: &RunId) -> Vec<TimelineEvent> {
        self.embedded
            .backend()
            .store
            .timeline(&self.tenant, id, 0, 10_000)
            .await
            .unwrap()
    }

    /// Callback ids the run is waiting on, from its journal.
    pub async fn open_callbacks(&self, id: &RunId) -> Vec<CallbackId> {
        let mut ids: Vec<(Position, CallbackId)> = self
            .history(id)
            .await
            .journal
            .into_iter()
            .filter_map(|e| match e.state {
                EntryState::Waiting(Wait {
                    kind: WaitKind::Callback { callback_id, .. },
                    ..
                }) => Some((e.position, callback_id)),
                _ => None,
            })
            .collect();
        ids.sort();
        ids.into_iter().map(|(_, id)| id).collect()
    }

    pub fn output(run: &Run) -> serde_json::Value {
        match &run.output {
            Some(Payload::Inline(v)) => v.clone(),
            other => panic!(
                "no inline output: {other:?} (status {}, error {:?})",
                run.status, run.error
            ),
        }
    }
}
