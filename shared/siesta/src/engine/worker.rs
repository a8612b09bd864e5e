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

use super::{Engine, EngineError, WakeOutcome};
use crate::ports::*;
use crate::time::Timestamp;

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
                    if let Err(e) = engine.handle_received(&message).await {
                        tracing::warn!(run_id = %message.wake.run_id, error = %e, "could not acknowledge a handled wake-up; it will be redelivered (a no-op)");
                    }
                    drop(slot);
                });
            }
        }
    }

    /// Handle one received wake-up, keeping it hidden meanwhile, and acknowledge it
    /// unless the invocation was aborted or failed (then it is redelivered). The error
    /// is the acknowledgement's: the wake-up, handled, is then redelivered (a no-op).
    pub(crate) async fn handle_received(&self, message: &ReceivedWakeUp) -> Result<(), StoreError> {
        match self
            .keep_hidden_while(&message.receipt, self.handle_wakeup(&message.wake))
            .await
        {
            Ok(WakeOutcome::Aborted(why)) => {
                tracing::warn!(run_id = %message.wake.run_id, %why, "invocation aborted; the wake-up will be redelivered");
                Ok(())
            }
            Ok(_) => self.backend.queue.ack(&message.receipt).await,
            Err(e) => {
                tracing::warn!(run_id = %message.wake.run_id, error = %e, "wake-up failed; it will be redelivered");
                Ok(())
            }
        }
    }
}

/// What one batch of wake-ups did, for the queue's partial-batch-failure report.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BatchReport {
    /// Each wake-up's outcome, in batch order.
    pub outcomes: Vec<Result<WakeOutcome, String>>,
}

impl BatchReport {
    /// Indexes of the wake-ups to redeliver: those that failed or were aborted.
    pub fn failed(&self) -> Vec<usize> {
        self.outcomes
            .iter()
            .enumerate()
            .filter(|(_, o)| matches!(o, Err(_) | Ok(WakeOutcome::Aborted(_))))
            .map(|(i, _)| i)
            .collect()
    }
}

impl Engine {
    /// Handle a batch of wake-ups (an SQS batch) concurrently, each with `deadline` as
    /// its time limit. A run's duplicates in one batch are folded into one handling
    /// ([`Engine::handle_wakeup_until`]), which looks at the run once more when done.
    pub async fn handle_batch(&self, wakes: &[WakeUp], deadline: Option<Timestamp>) -> BatchReport {
        let outcomes =
            futures::future::join_all(wakes.iter().map(|w| self.handle_wakeup_until(w, deadline)))
                .await;
        BatchReport {
            outcomes: outcomes
                .into_iter()
                .map(|o| o.map_err(|e| e.to_string()))
                .collect(),
        }
    }

    /// Take up to `max` wake-ups from the queue and handle each, acknowledging those
    /// handled; returns how many were received. The dev server's worker and tests use
    /// this in place of the SQS trigger.
    ///
    /// All at once, as the step function handles an SQS batch; a run's duplicates among
    /// them are folded into one handling (`turns.rs`) and acknowledged at once.
    pub async fn work_queue_once(&self, max: usize) -> Result<usize, EngineError> {
        let received = self
            .backend
            .queue
            .receive(max, self.config.lease_ttl)
            .await?;
        let n = received.len();
        // All of them at once, as the step function handles an SQS batch: a wake-up
        // received is a wake-up being handled, so a worker killed meanwhile costs a
        // receive only to wake-ups it was working on — never to ones waiting behind a
        // slow one, which would otherwise reach the receive limit and be dead-lettered
        // for another run's fault.
        let acks =
            futures::future::join_all(received.iter().map(|message| self.handle_received(message)))
                .await;
        acks.into_iter().collect::<Result<Vec<()>, _>>()?;
        Ok(n)
    }

    /// Run `work`, extending the visibility of the message `receipt` every half lease
    /// while it lasts, so that a run worked on for longer than the visibility timeout is
    /// not handed to a second worker meanwhile.
    pub(crate) async fn keep_hidden_while<T>(
        &self,
        receipt: &str,
        work: impl Future<Output = T>,
    ) -> T {
        let every = (self.config.lease_ttl / 2).max(Duration::from_millis(100));
        let mut work = std::pin::pin!(work);
        loop {
            tokio::select! {
                out = &mut work => return out,
                _ = tokio::time::sleep(every) => {
                    if let Err(e) = self.backend.queue.extend_visibility(receipt, self.config.lease_ttl).await {
                        tracing::warn!(error = %e, "could not extend a wake-up's visibility");
                    }
                }
            }
        }
    }

    /// Work the queue until it has nothing visible; returns how many wake-ups were
    /// handled. For tests and tools; `max_rounds` bounds it.
    pub async fn run_until_idle(&self, max_rounds: usize) -> Result<usize, EngineError> {
        let mut total = 0;
        for _ in 0..max_rounds {
            let n = self.work_queue_once(10).await?;
            if n == 0 {
                break;
            }
            total += n;
        }
        Ok(total)
    }
}
