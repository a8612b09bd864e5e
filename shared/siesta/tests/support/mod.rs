//! A test world: the engine on the embedded backend with a manual clock, and a store
//! wrapper that counts calls and can simulate a crash after the n-th write.
#![allow(dead_code, unreachable_pub, missing_docs)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use siesta::ports::*;
use siesta::*;

/// Counts calls to the run store and, when armed, fails every call after the n-th
/// checkpoint write has been applied: the process "dies" right after that write.
pub struct ProbeStore {
    pub inner: Arc<dyn RunStore>,
    pub reads: AtomicU64,
    pub writes: AtomicU64,
    pub bytes_written: AtomicU64,
    pub checkpoints: AtomicU64,
    crash_after: AtomicI64,
    crash_before: AtomicBool,
    dead: AtomicBool,
}

impl ProbeStore {
    pub fn new(inner: Arc<dyn RunStore>) -> Arc<Self> {
        Arc::new(ProbeStore {
            inner,
            reads: AtomicU64::new(0),
            writes: AtomicU64::new(0),
            bytes_written: AtomicU64::new(0),
            checkpoints: AtomicU64::new(0),
            crash_after: AtomicI64::new(-1),
            crash_before: AtomicBool::new(false),
            dead: AtomicBool::new(false),
        })
    }

    /// Die right after the n-th checkpoint from now (1 = the next one).
    pub fn crash_after(&self, n: i64) {
        self.crash_after.store(n, Ordering::SeqCst);
    }

    /// Die at the n-th checkpoint from now, before it is applied.
    pub fn crash_before(&self, n: i64) {
        self.crash_before.store(true, Ordering::SeqCst);
        self.crash_after.store(n, Ordering::SeqCst);
    }

    pub fn is_dead(&self) -> bool {
        self.dead.load(Ordering::SeqCst)
    }

    fn check(&self) -> Result<(), StoreError> {
        if self.is_dead() {
            Err(StoreError::Unavailable(
                "simulated crash: this process is dead".into(),
            ))
        } else {
            Ok(())
        }
    }

    fn read(&self) -> Result<(), StoreError> {
        self.check()?;
        self.reads.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    fn wrote(&self, bytes: usize) {
        self.writes.fetch_add(1, Ordering::SeqCst);
        self.bytes_written.fetch_add(bytes as u64, Ordering::SeqCst);
    }

    pub fn counts(&self) -> (u64, u64) {
        (
            self.reads.load(Ordering::SeqCst),
            self.writes.load(Ordering::SeqCst),
        )
    }
}

#[async_trait]
impl RunStore for ProbeStore {
    async fn create_run(&self, run: &Run, started: &TimelineEvent) -> Result<(), StoreError> {
        self.check()?;
        self.wrote(serde_json::to_vec(run).unwrap().len());
        self.inner.create_run(run, started).await
    }
    async fn get_run(&self, tenant: &TenantId, run_id: &RunId) -> Result<Option<Run>, StoreError> {
        self.read()?;
        self.inner.get_run(tenant, run_id).await
    }
    async fn claim(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        claim: &Claim,
    ) -> Result<Run, StoreError> {
        self.check()?;
        self.wrote(0);
        self.inner.claim(tenant, run_id, claim).await
    }
    async fn renew_lease(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        epoch: FencingEpoch,
        expires_at: Timestamp,
    ) -> Result<Run, StoreError> {
        self.check()?;
        self.inner
            .renew_lease(tenant, run_id, epoch, expires_at)
            .await
    }
    async fn load_history(&self, tenant: &TenantId, run_id: &RunId) -> Result<History, StoreError> {
        self.read()?;
        self.inner.load_history(tenant, run_id).await
    }
    async fn checkpoint(&self, checkpoint: &Checkpoint) -> Result<(), StoreError> {
        self.check()?;
        if self.crash_before.load(Ordering::SeqCst) && self.crash_after.load(Ordering::SeqCst) == 1
        {
            self.dead.store(true, Ordering::SeqCst);
            return Err(StoreError::Unavailable(
                "simulated crash before the write".into(),
            ));
        }
        if self.crash_before.load(Ordering::SeqCst) {
            self.crash_after.fetch_sub(1, Ordering::SeqCst);
        }
        let bytes = serde_json::to_vec(&checkpoint.run).unwrap().len()
            + serde_json::to_vec(&checkpoint.journal).unwrap().len()
            + serde_json::to_vec(&checkpoint.timeline).unwrap().len()
            + serde_json::to_vec(&checkpoint.callbacks).unwrap().len()
            + serde_json::to_vec(&checkpoint.tool_calls).unwrap().len();
        let result = self.inner.checkpoint(checkpoint).await;
        if result.is_ok() {
            self.wrote(bytes);
            self.checkpoints.fetch_add(1, Ordering::SeqCst);
            if !self.crash_before.load(Ordering::SeqCst)
                && self.crash_after.fetch_sub(1, Ordering::SeqCst) == 1
            {
                self.dead.store(true, Ordering::SeqCst);
                return Err(StoreError::Unavailable(
                    "simulated crash after the write".into(),
                ));
            }
        }
        result
    }
    async fn deliver(&self, delivery: &NewDelivery) -> Result<DeliverOutcome, StoreError> {
        self.check()?;
        self.wrote(0);
        self.inner.deliver(delivery).await
    }
    async fn get_callback(
        &self,
        callback_id: &CallbackId,
    ) -> Result<Option<CallbackRecord>, StoreError> {
        self.read()?;
        self.inner.get_callback(callback_id).await
    }
    async fn get_tool_call(
        &self,
        tenant: &TenantId,
        key: &IdempotencyKey,
    ) -> Result<Option<ToolCallRecord>, StoreError> {
        self.read()?;
        self.inner.get_tool_call(tenant, key).await
    }
    async fn timeline(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        after: u64,
        limit: usize,
    ) -> Result<Vec<TimelineEvent>, StoreError> {
        self.read()?;
        self.inner.timeline(tenant, run_id, after, limit).await
    }
    async fn list_runs(
        &self,
        tenant: &TenantId,
        filter: &RunFilter,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<RunPage, StoreError> {
        self.read()?;
        self.inner.list_runs(tenant, filter, cursor, limit).await
    }
    async fn due_runs(&self, before: Timestamp, limit: usize) -> Result<Vec<DueRun>, StoreError> {
        self.read()?;
        self.inner.due_runs(before, limit).await
    }
}

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
