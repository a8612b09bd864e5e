//! A queue that loses sends: what a process dying between its write and its send
//! leaves behind (the lost-start and lost-delivery tests).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use siesta::ports::*;
use siesta::*;
use siesta_testing::TestEnv;

/// A send hook for the engine's queue: the first `lose` sends vanish without an error — what a
/// process dying between its write and its send leaves behind — and every send is
/// counted.
pub struct LosesSends {
    /// How many of the next sends vanish.
    pub lose: AtomicUsize,
    sends: AtomicUsize,
}

#[async_trait]
impl SendHook for LosesSends {
    async fn send(
        &self,
        queue: &dyn WakeQueue,
        wake: &WakeUp,
        delay: Duration,
    ) -> Result<(), StoreError> {
        self.sends.fetch_add(1, Ordering::SeqCst);
        let lost = self
            .lose
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if lost {
            return Ok(());
        }
        queue.send(wake, delay).await
    }
}

/// An engine running `registry` over the harness's store and queue whose first `lose`
/// sends vanish.
pub fn lossy(
    w: &TestEnv,
    registry: Registry,
    lose: usize,
) -> (Engine, Arc<HookedSends<LosesSends>>) {
    let base = w.embedded().backend();
    let queue = Arc::new(HookedSends::new(
        base.queue.clone(),
        LosesSends {
            lose: AtomicUsize::new(lose),
            sends: AtomicUsize::new(0),
        },
    ));
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
