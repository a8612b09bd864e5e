//! The wake-up queue: at-least-once, delayed messages asking for a run to be advanced.

use super::*;

/// Why a run is being woken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WakeReason {
    /// The run was just started.
    Started,
    /// Something was delivered to it.
    Delivery,
    /// A timer, deadline or retry delay fell due.
    Timer,
    /// The engine ran out of time budget and continues in a new invocation.
    Continue,
    /// The sweep found it due (a lost wake-up, an expired lease, a long timer).
    Sweep,
    /// A child run it waits on finished, or it was started as a child.
    Child,
    /// Not a run's: the wake-up of a bulk action's job ([`ActionJob`]), whose id is in
    /// the wake-up's `run_id`. Its next slice of runs is due.
    Action,
}

/// A message asking for a run to be advanced. Duplicates are harmless.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WakeUp {
    /// The owning tenant.
    pub tenant: TenantId,
    /// The run.
    pub run_id: RunId,
    /// Why.
    pub reason: WakeReason,
    /// The fencing epoch the sender saw, for diagnostics.
    #[serde(default)]
    pub epoch_hint: u64,
    /// The run's `timeline_seq` when the sender wrote it, when the sender knows it.
    /// Claims do not move it, progress does: a dead-lettered wake-up whose run has
    /// moved past it was overtaken, and parks nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq_hint: Option<u64>,
}

impl WakeUp {
    /// A wake-up for `run_id` with no hints.
    pub fn new(tenant: TenantId, run_id: RunId, reason: WakeReason) -> Self {
        WakeUp {
            tenant,
            run_id,
            reason,
            epoch_hint: 0,
            seq_hint: None,
        }
    }
}

/// A wake-up in the dead-letter queue, taken for handling.
#[derive(Debug, Clone)]
pub struct DeadLetter {
    /// The wake-up that was received too often without being acknowledged.
    pub wake: WakeUp,
    /// Handle for [`WakeQueue::delete_dead_letter`].
    pub receipt: String,
}

/// A wake-up taken from the queue, hidden from other receivers until acknowledged or
/// its visibility timeout passes.
#[derive(Debug, Clone)]
pub struct ReceivedWakeUp {
    /// The wake-up.
    pub wake: WakeUp,
    /// Handle for [`WakeQueue::ack`] and [`WakeQueue::extend_visibility`].
    pub receipt: String,
    /// How many times it has been received, this time included.
    pub receive_count: u32,
}

/// The longest delay a queue message can carry (SQS `DelaySeconds`); longer timers wait
/// in the due index for the sweep.
pub const MAX_QUEUE_DELAY: Duration = Duration::from_secs(15 * 60);

/// The queue of wake-ups: at-least-once, delayed delivery.
#[async_trait]
pub trait WakeQueue: Send + Sync + 'static {
    /// Send a wake-up, visible after `delay` (at most [`MAX_QUEUE_DELAY`]). One
    /// `SendMessage`.
    async fn send(&self, wake: &WakeUp, delay: Duration) -> Result<(), StoreError>;

    /// Receive up to `max` visible wake-ups, hiding each for `visibility`. A message
    /// already received as many times as the queue's limit (SQS `maxReceiveCount`) is
    /// moved to the dead-letter queue instead of being returned.
    async fn receive(
        &self,
        max: usize,
        visibility: Duration,
    ) -> Result<Vec<ReceivedWakeUp>, StoreError>;

    /// Delete a received wake-up. An unknown or stale receipt is not an error.
    async fn ack(&self, receipt: &str) -> Result<(), StoreError>;

    /// Hide a received wake-up for `visibility` more from now.
    async fn extend_visibility(
        &self,
        receipt: &str,
        visibility: Duration,
    ) -> Result<(), StoreError>;

    /// Take up to `max` (at most 10 per call, as SQS) dead letters, hiding each for
    /// `visibility`: a caller that pages through the dead-letter queue sees each once,
    /// however many there are. A dead letter stays until deleted; one taken and not
    /// deleted comes back after `visibility`.
    async fn dead_letters(
        &self,
        max: usize,
        visibility: Duration,
    ) -> Result<Vec<DeadLetter>, StoreError>;

    /// Delete a dead letter taken with [`WakeQueue::dead_letters`]: it has been handled.
    /// An unknown or stale receipt is not an error.
    async fn delete_dead_letter(&self, receipt: &str) -> Result<(), StoreError>;

    /// Whether a wake-up for the run that fell due at `due_at` is in the queue — being
    /// handled, or visible by `due_at` (a wake-up for a later timer does not count) —
    /// so that the sweep does not take a wake-up that merely waits for a lost one.
    /// `None` when the queue cannot tell (SQS is not searchable by run).
    async fn holds(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        due_at: Timestamp,
    ) -> Result<Option<bool>, StoreError>;
}

/// What a [`HookedSends`] queue does with a wake-up sent through it: its own
/// bookkeeping, and the send on the queue it wraps — or not, to lose it.
#[async_trait]
pub trait SendHook: Send + Sync + 'static {
    /// Handles `wake`, sent with `delay`; `queue` is the wrapped queue, to send it on.
    async fn send(
        &self,
        queue: &dyn WakeQueue,
        wake: &WakeUp,
        delay: Duration,
    ) -> Result<(), StoreError>;
}

/// A queue that hands each send to its `hook` and every other call to `inner`
/// unchanged: the engine's signal to its worker, and tests' queues that count, record,
/// lose or fail sends. It derefs to its hook, so the hook's counters read through it.
pub struct HookedSends<H> {
    /// The wrapped queue.
    pub inner: Arc<dyn WakeQueue>,
    /// What a send does.
    pub hook: H,
}

impl<H> HookedSends<H> {
    /// `inner`, with its sends handed to `hook`.
    pub fn new(inner: Arc<dyn WakeQueue>, hook: H) -> Self {
        HookedSends { inner, hook }
    }
}

impl<H> std::ops::Deref for HookedSends<H> {
    type Target = H;

    fn deref(&self) -> &H {
        &self.hook
    }
}

#[async_trait]
impl<H: SendHook> WakeQueue for HookedSends<H> {
    async fn send(&self, wake: &WakeUp, delay: Duration) -> Result<(), StoreError> {
        self.hook.send(self.inner.as_ref(), wake, delay).await
    }

    async fn receive(
        &self,
        max: usize,
        visibility: Duration,
    ) -> Result<Vec<ReceivedWakeUp>, StoreError> {
        self.inner.receive(max, visibility).await
    }

    async fn ack(&self, receipt: &str) -> Result<(), StoreError> {
        self.inner.ack(receipt).await
    }

    async fn extend_visibility(
        &self,
        receipt: &str,
        visibility: Duration,
    ) -> Result<(), StoreError> {
        self.inner.extend_visibility(receipt, visibility).await
    }

    async fn dead_letters(
        &self,
        max: usize,
        visibility: Duration,
    ) -> Result<Vec<DeadLetter>, StoreError> {
        self.inner.dead_letters(max, visibility).await
    }

    async fn delete_dead_letter(&self, receipt: &str) -> Result<(), StoreError> {
        self.inner.delete_dead_letter(receipt).await
    }

    async fn holds(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        due_at: Timestamp,
    ) -> Result<Option<bool>, StoreError> {
        self.inner.holds(tenant, run_id, due_at).await
    }
}
