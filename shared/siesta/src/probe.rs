//! A run-store wrapper that counts what the engine asks of storage and can simulate a
//! crash: for tests (replay after a crash after each write) and benchmarks (writes and
//! bytes per step). Wrap any backend's store with it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};

use async_trait::async_trait;

use crate::model::*;
use crate::ports::*;
use crate::time::Timestamp;

/// Counts calls to the run store and, when armed, fails every call after the n-th
/// checkpoint write has been applied: the process "dies" right after that write.
pub struct ProbeStore {
    /// The wrapped store.
    pub inner: Arc<dyn RunStore>,
    /// Reads made (get, load, query).
    pub reads: AtomicU64,
    /// Writes applied (create, claim, checkpoint, deliver).
    pub writes: AtomicU64,
    /// Serialized bytes of the run, journal, timeline, callback and tool-call items written by checkpoints and creates.
    pub bytes_written: AtomicU64,
    /// Checkpoints applied.
    pub checkpoints: AtomicU64,
    /// Replay inputs (journal and deliveries) loaded.
    pub replay_input_loads: AtomicU64,
    crash_after: AtomicI64,
    crash_before: AtomicBool,
    dead: AtomicBool,
    paused: Pause,
    paused_before: Pause,
    paused_renewal: Pause,
}

/// A point where the next caller of a store call (a checkpoint, a renewal) is held,
/// when armed: who hears it is held, and what releases it.
#[derive(Default)]
struct Pause(
    std::sync::Mutex<
        Option<(
            tokio::sync::oneshot::Sender<()>,
            tokio::sync::oneshot::Receiver<()>,
        )>,
    >,
);

impl Pause {
    /// Arm it: (hears the caller is held, releases it).
    fn arm(
        &self,
    ) -> (
        tokio::sync::oneshot::Receiver<()>,
        tokio::sync::oneshot::Sender<()>,
    ) {
        let (held_tx, held) = tokio::sync::oneshot::channel();
        let (release, release_rx) = tokio::sync::oneshot::channel();
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some((held_tx, release_rx));
        (held, release)
    }

    /// If armed, disarm it, tell it the caller is held, and wait for the release.
    async fn hold(&self) {
        let armed = self.0.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some((held, release)) = armed {
            let _ = held.send(());
            let _ = release.await;
        }
    }
}

impl ProbeStore {
    /// Wrap `inner`.
    pub fn new(inner: Arc<dyn RunStore>) -> Arc<Self> {
        Arc::new(ProbeStore {
            inner,
            reads: AtomicU64::new(0),
            writes: AtomicU64::new(0),
            bytes_written: AtomicU64::new(0),
            checkpoints: AtomicU64::new(0),
            replay_input_loads: AtomicU64::new(0),
            crash_after: AtomicI64::new(-1),
            crash_before: AtomicBool::new(false),
            dead: AtomicBool::new(false),
            paused: Pause::default(),
            paused_before: Pause::default(),
            paused_renewal: Pause::default(),
        })
    }

    /// Hold the caller of the next checkpoint that applies, right after it applied,
    /// until `release` is sent; `applied` hears it is held. For tests of what happens
    /// between a write and what its writer does next.
    pub fn pause_after_next_checkpoint(
        &self,
    ) -> (
        tokio::sync::oneshot::Receiver<()>,
        tokio::sync::oneshot::Sender<()>,
    ) {
        self.paused.arm()
    }

    /// Hold the caller of the next checkpoint before it is written, until `release` is
    /// sent; `reached` hears it is held. For tests of what happens between what a
    /// writer read and its write.
    pub fn pause_before_next_checkpoint(
        &self,
    ) -> (
        tokio::sync::oneshot::Receiver<()>,
        tokio::sync::oneshot::Sender<()>,
    ) {
        self.paused_before.arm()
    }

    /// Hold the caller of the next lease renewal before it is written, until `release`
    /// is sent; `reached` hears it is held. For tests of what a holder's checkpoint does
    /// while its renewal is on its way.
    pub fn pause_before_next_renewal(
        &self,
    ) -> (
        tokio::sync::oneshot::Receiver<()>,
        tokio::sync::oneshot::Sender<()>,
    ) {
        self.paused_renewal.arm()
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

    /// Whether the simulated process has died.
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

    /// (reads, writes) so far.
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
        self.wrote(serde_json::to_vec(run).map(|v| v.len()).unwrap_or(0));
        self.inner.create_run(run, started).await
    }
    async fn create_run_within(
        &self,
        run: &Run,
        started: &TimelineEvent,
        max_unfinished: u64,
    ) -> Result<(), StoreError> {
        self.check()?;
        self.wrote(serde_json::to_vec(run).map(|v| v.len()).unwrap_or(0));
        self.inner
            .create_run_within(run, started, max_unfinished)
            .await
    }
    async fn admit_run(
        &self,
        run: &Run,
        started: &TimelineEvent,
        max_unfinished: Option<u64>,
    ) -> Result<Run, StoreError> {
        self.check()?;
        self.wrote(serde_json::to_vec(run).map(|v| v.len()).unwrap_or(0));
        self.inner.admit_run(run, started, max_unfinished).await
    }
    async fn take_step_slot(
        &self,
        key: &str,
        max: u32,
        holder: &StepSlotHolder,
        now: Timestamp,
        grant_for: std::time::Duration,
    ) -> Result<(StepSlot, Vec<HandedSlot>), StoreError> {
        self.check()?;
        self.wrote(0);
        self.inner
            .take_step_slot(key, max, holder, now, grant_for)
            .await
    }
    async fn take_rate_turn(
        &self,
        key: &str,
        interval: std::time::Duration,
        holder: &StepSlotHolder,
        now: Timestamp,
    ) -> Result<RateTurn, StoreError> {
        self.check()?;
        self.wrote(0);
        self.inner.take_rate_turn(key, interval, holder, now).await
    }
    async fn give_back_step_slot(
        &self,
        key: &str,
        max: u32,
        holder: &StepSlotHolder,
        now: Timestamp,
        grant_for: std::time::Duration,
    ) -> Result<Vec<HandedSlot>, StoreError> {
        self.check()?;
        self.wrote(0);
        self.inner
            .give_back_step_slot(key, max, holder, now, grant_for)
            .await
    }
    async fn limit_usage(&self, tenant: &TenantId) -> Result<Vec<LimitUsage>, StoreError> {
        self.read()?;
        self.inner.limit_usage(tenant).await
    }
    async fn queue_position(&self, tenant: &TenantId, at: &QueuedAt) -> Result<u64, StoreError> {
        self.read()?;
        self.inner.queue_position(tenant, at).await
    }
    async fn get_debounce_entry(
        &self,
        tenant: &TenantId,
        name: &str,
        key: &str,
    ) -> Result<Option<DebounceEntry>, StoreError> {
        self.read()?;
        self.inner.get_debounce_entry(tenant, name, key).await
    }
    async fn put_debounce_entry(
        &self,
        tenant: &TenantId,
        name: &str,
        key: &str,
        run_id: &RunId,
        expected: u64,
        keep_until: Timestamp,
    ) -> Result<u64, StoreError> {
        self.check()?;
        self.wrote(0);
        self.inner
            .put_debounce_entry(tenant, name, key, run_id, expected, keep_until)
            .await
    }
    async fn put_action_job(&self, job: &ActionJob, expected: u64) -> Result<u64, StoreError> {
        self.check()?;
        self.wrote(0);
        self.inner.put_action_job(job, expected).await
    }
    async fn get_action_job(
        &self,
        tenant: &TenantId,
        id: &str,
    ) -> Result<Option<ActionJob>, StoreError> {
        self.read()?;
        self.inner.get_action_job(tenant, id).await
    }
    async fn list_action_jobs(
        &self,
        tenant: &TenantId,
        limit: usize,
    ) -> Result<Vec<ActionJob>, StoreError> {
        self.read()?;
        self.inner.list_action_jobs(tenant, limit).await
    }
    async fn active_action_jobs(&self, limit: usize) -> Result<Vec<ActiveActionJob>, StoreError> {
        self.read()?;
        self.inner.active_action_jobs(limit).await
    }
    async fn unfinished_runs(&self, tenant: &TenantId) -> Result<u64, StoreError> {
        self.read()?;
        self.inner.unfinished_runs(tenant).await
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
        self.paused_renewal.hold().await;
        self.inner
            .renew_lease(tenant, run_id, epoch, expires_at)
            .await
    }
    async fn load_replay_input(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
    ) -> Result<ReplayInput, StoreError> {
        self.read()?;
        self.replay_input_loads.fetch_add(1, Ordering::SeqCst);
        self.inner.load_replay_input(tenant, run_id).await
    }
    async fn load_claimed_replay_input(&self, run: &Run) -> Result<ReplayInput, StoreError> {
        self.read()?;
        self.replay_input_loads.fetch_add(1, Ordering::SeqCst);
        self.inner.load_claimed_replay_input(run).await
    }
    async fn load_journal(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
    ) -> Result<Vec<JournalEntry>, StoreError> {
        self.read()?;
        self.inner.load_journal(tenant, run_id).await
    }
    async fn checkpoint(&self, checkpoint: &Checkpoint) -> Result<(), StoreError> {
        self.checkpoint_admitting(checkpoint).await.map(drop)
    }
    async fn checkpoint_admitting(&self, checkpoint: &Checkpoint) -> Result<Vec<Run>, StoreError> {
        self.check()?;
        self.paused_before.hold().await;
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
        let bytes = serde_json::to_vec(&checkpoint.run)
            .map(|v| v.len())
            .unwrap_or(0)
            + serde_json::to_vec(&checkpoint.journal)
                .map(|v| v.len())
                .unwrap_or(0)
            + serde_json::to_vec(&checkpoint.timeline)
                .map(|v| v.len())
                .unwrap_or(0)
            + serde_json::to_vec(&checkpoint.callbacks)
                .map(|v| v.len())
                .unwrap_or(0)
            + serde_json::to_vec(&checkpoint.tool_calls)
                .map(|v| v.len())
                .unwrap_or(0);
        let result = self.inner.checkpoint_admitting(checkpoint).await;
        if result.is_ok() {
            self.wrote(bytes);
            self.checkpoints.fetch_add(1, Ordering::SeqCst);
            self.paused.hold().await;
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
    async fn builds(&self, tenant: &TenantId) -> Result<Vec<BuildSummary>, StoreError> {
        self.read()?;
        self.inner.builds(tenant).await
    }
    async fn due_runs(&self, before: Timestamp, limit: usize) -> Result<Vec<DueRun>, StoreError> {
        self.read()?;
        self.inner.due_runs(before, limit).await
    }
    async fn set_resend_after(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        due_at: Timestamp,
        resend_after: Option<Timestamp>,
    ) -> Result<(), StoreError> {
        self.check()?;
        self.wrote(0);
        self.inner
            .set_resend_after(tenant, run_id, due_at, resend_after)
            .await
    }

    async fn reap_due(
        &self,
        rules: &crate::retention::RetentionRules,
        now: Timestamp,
        limit: usize,
    ) -> Result<crate::retention::ReapReport, StoreError> {
        self.check()?;
        self.wrote(0);
        self.inner.reap_due(rules, now, limit).await
    }

    async fn rearm_reaping(
        &self,
        rules: &crate::retention::RetentionRules,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        self.check()?;
        self.wrote(0);
        self.inner.rearm_reaping(rules, now).await
    }
}
