//! A queue that loses sends: what a process dying between its write and its send
//! leaves behind (the lost-start and lost-delivery tests).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use siesta::ports::*;
use siesta::*;
use siesta_testing::TestEnv;

/// The engine's queue, but the first `lose` sends vanish without an error — what a
/// process dying between its write and its send leaves behind — and every send is
/// counted.
pub struct LosesSends {
    inner: Arc<dyn WakeQueue>,
    /// How many of the next sends vanish.
    pub lose: AtomicUsize,
    sends: AtomicUsize,
}

#[async_trait]
impl WakeQueue for LosesSends {
    async fn send(&self, wake: &WakeUp, delay: Duration) -> Result<(), StoreError> {
        self.sends.fetch_add(1, Ordering::SeqCst);
        let lost = self
            .lose
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if lost {
            return Ok(());
        }
        self.inner.send(wake, delay).await
    }
    async fn receive(&self, max: usize, v: Duration) -> Result<Vec<ReceivedWakeUp>, StoreError> {
        self.inner.receive(max, v).await
    }
    async fn ack(&self, receipt: &str) -> Result<(), StoreError> {
        self.inner.ack(receipt).await
    }
    async fn extend_visibility(&self, receipt: &str, v: Duration) -> Result<(), StoreError> {
        self.inner.extend_visibility(receipt, v).await
    }
    async fn dead_letters(&self, max: usize, v: Duration) -> Result<Vec<DeadLetter>, StoreError> {
        self.inner.dead_letters(max, v).await
    }
    async fn delete_dead_letter(&self, receipt: &str) -> Result<(), StoreError> {
        self.inner.delete_dead_letter(receipt).await
    }
    async fn holds(
        &self,
        t: &TenantId,
        r: &RunId,
        due: Timestamp,
    ) -> Result<Option<bool>, StoreError> {
        self.inner.holds(t, r, due).await
    }
}

/// An engine running `registry` over the harness's store and queue whose first `lose`
/// sends vanish.
pub fn lossy(w: &TestEnv, registry: Registry, lose: usize) -> (Engine, Arc<LosesSends>) {
    let base = w.embedded().backend();
    let queue = Arc::new(LosesSends {
        inner: base.queue.clone(),
        lose: AtomicUsize::new(lose),
        sends: AtomicUsize::new(0),
    });
    let engine = Engine::new(
        Backend {
            queue: queue.clone(),
            ..base
        },
        w.clock().clone(),
        registry,
        EngineConfig::default(),
    );
    (engine, queue)
}

pub fn sends(queue: &LosesSends) -> usize {
    queue.sends.load(Ordering::SeqCst)
}
