//! The queue worker of a long-lived process (the dev server): it stands in for the SQS
//! trigger of the step function.
//!
//! Invariants this module keeps, and why:
//! - **Bounded concurrency.** At most [`WorkerConfig::concurrency`] wake-ups are handled
//!   at once, each on its own task; the worker receives only as many as it has free
//!   slots, so nothing it received waits behind a slow run while its visibility
//!   timeout runs down.
//! - **One slow run blocks nobody.** A wake-up's run advances on its own task; the
//!   others keep being received and handled.
//! - **No polling on the hot path.** When the queue is empty the worker sleeps until
//!   this process sends a wake-up, a delayed one it sent falls visible, or
//!   [`WorkerConfig::idle_look`] passes (for wake-ups sent by other processes).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;

use crate::engine::{Engine, WakeOutcome};
use crate::ports::ReceivedWakeUp;

/// Most wake-ups taken from the queue in one receive.
const MAX_RECEIVE: usize = 32;

/// How the queue worker runs.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// Most wake-ups handled at once. Handling a wake-up mostly waits on storage, so
    /// this is far above the core count: the default, 64, keeps two cores busy with 50
    /// runs in flight.
    pub concurrency: usize,
    /// Longest the worker sleeps on an empty queue when nothing in this process told it
    /// to look (wake-ups sent by another process, a manual clock moved forward).
    pub idle_look: Duration,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            concurrency: 64,
            idle_look: Duration::from_millis(500),
        }
    }
}

impl Engine {
    /// Work the queue for ever: receive wake-ups as slots free up, handle each on its own
    /// task, acknowledge what was handled. Dropping the future stops receiving; wake-ups
    /// in progress finish on their tasks.
    pub async fn work(&self, config: WorkerConfig) {
        let slots = Arc::new(Semaphore::new(config.concurrency.max(1)));
        loop {
            let Ok(first) = slots.clone().acquire_owned().await else {
                return;
            };
            let free = 1 + slots.available_permits();
            let received = match self
                .backend()
                .queue
                .receive(free.min(MAX_RECEIVE), self.config().lease_ttl)
                .await
            {
                Ok(received) => received,
                Err(e) => {
                    drop(first);
                    tracing::warn!(error = %e, "worker: receiving wake-ups failed");
                    tokio::time::sleep(Duration::from_millis(250)).await;
                    continue;
                }
            };
            if received.is_empty() {
                drop(first);
                self.queue_signal()
                    .wait(self.clock().as_ref(), config.idle_look)
                    .await;
                continue;
            }
            let mut first = Some(first);
            for message in received {
                let slot = match first.take() {
                    Some(slot) => slot,
                    // Received no more than the free slots, and only this loop takes them.
                    None => match slots.clone().acquire_owned().await {
                        Ok(slot) => slot,
                        Err(_) => return,
                    },
                };
                let engine = self.clone();
                tokio::spawn(async move {
                    engine.handle_received(message).await;
                    drop(slot);
                });
            }
        }
    }

    /// Handle one received wake-up, keeping it hidden meanwhile, and acknowledge it
    /// unless the invocation was aborted or failed (then it is redelivered).
    pub(crate) async fn handle_received(&self, message: ReceivedWakeUp) {
        match self
            .keep_hidden_while(&message.receipt, self.handle_wakeup(&message.wake))
            .await
        {
            Ok(WakeOutcome::Aborted(why)) => {
                tracing::warn!(run_id = %message.wake.run_id, %why, "invocation aborted; the wake-up will be redelivered");
            }
            Ok(_) => {
                if let Err(e) = self.backend().queue.ack(&message.receipt).await {
                    tracing::warn!(run_id = %message.wake.run_id, error = %e, "could not acknowledge a handled wake-up; it will be redelivered (a no-op)");
                }
            }
            Err(e) => {
                tracing::warn!(run_id = %message.wake.run_id, error = %e, "wake-up failed; it will be redelivered")
            }
        }
    }
}
