//! In-process notifications, so that a long-lived process (the dev server) reacts to
//! what it did itself at once instead of polling for it.
//!
//! Invariants this module keeps, and why:
//! - **The queue and the store stay the source of truth.** A notification only says
//!   "look now"; whoever receives it reads the queue or the run as before, and a missed
//!   notification costs latency, never correctness: the worker still looks at the queue
//!   now and then, and a waiter still re-reads the run on a backoff.
//! - **No notification is lost between a look and a wait.** The worker's signal keeps a
//!   permit ([`tokio::sync::Notify::notify_one`]) and a run watcher is registered
//!   before the run is read, so a send or a finish that lands between the read and the
//!   wait still wakes the waiter.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::Notify;

use crate::model::{RunId, TenantId};
use crate::ports::{NewChunk, SendHook, StoreError, StreamChunk, StreamStore, WakeQueue, WakeUp};
use crate::time::{Clock, Timestamp};

/// Most delayed sends remembered; beyond that the worker's idle look finds them.
const MAX_REMEMBERED_DELAYS: usize = 100_000;

/// Wake-ups sent by this process: the worker waits on it when the queue is empty.
#[derive(Default)]
pub(crate) struct QueueSignal {
    sent: Notify,
    /// When (ms) the delayed wake-ups sent by this process become visible, earliest on
    /// top.
    delayed: Mutex<BinaryHeap<Reverse<i64>>>,
}

impl QueueSignal {
    /// Wait until a wake-up is sent, a delayed one falls visible, or `idle` passes.
    pub(crate) async fn wait(&self, clock: &dyn Clock, idle: Duration) {
        let now = clock.now().millis();
        let wait = {
            let mut delayed = self.delayed.lock().unwrap_or_else(|e| e.into_inner());
            let mut due = false;
            while delayed.peek().is_some_and(|Reverse(at)| *at <= now) {
                delayed.pop();
                due = true;
            }
            match delayed.peek() {
                _ if due => Duration::ZERO,
                Some(Reverse(at)) => {
                    Duration::from_millis(u64::try_from(at - now).unwrap_or(0)).min(idle)
                }
                None => idle,
            }
        };
        if wait.is_zero() {
            return;
        }
        tokio::select! {
            _ = self.sent.notified() => {}
            _ = tokio::time::sleep(wait) => {}
        }
    }

    fn sent(&self, visible_at: Timestamp, now: Timestamp) {
        if visible_at > now {
            let mut delayed = self.delayed.lock().unwrap_or_else(|e| e.into_inner());
            if delayed.len() < MAX_REMEMBERED_DELAYS {
                delayed.push(Reverse(visible_at.millis()));
            }
        }
        // A worker asleep until a later time re-plans its wait.
        self.sent.notify_one();
    }
}

/// The engine's hook on its queue's sends ([`HookedSends`](crate::ports::HookedSends)):
/// each send also signals this process's worker.
pub(crate) struct SignalSends {
    pub(crate) signal: Arc<QueueSignal>,
    pub(crate) clock: Arc<dyn Clock>,
}

#[async_trait]
impl SendHook for SignalSends {
    async fn send(
        &self,
        queue: &dyn WakeQueue,
        wake: &WakeUp,
        delay: Duration,
    ) -> Result<(), StoreError> {
        queue.send(wake, delay).await?;
        let now = self.clock.now();
        self.signal.sent(now.plus(delay), now);
        Ok(())
    }
}

/// The engine's streams: the backend's, plus a notification to this process's readers
/// of the run's streams on every append.
pub(crate) struct SignallingStreams {
    pub(crate) inner: Arc<dyn StreamStore>,
    pub(crate) watchers: Arc<RunWatchers>,
}

#[async_trait]
impl StreamStore for SignallingStreams {
    async fn append(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        stream: &str,
        chunks: &[NewChunk],
    ) -> Result<u64, StoreError> {
        let first = self.inner.append(tenant, run_id, stream, chunks).await?;
        self.watchers.changed(tenant, run_id);
        Ok(first)
    }

    async fn read(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        stream: &str,
        from: u64,
        limit: usize,
    ) -> Result<Vec<StreamChunk>, StoreError> {
        self.inner.read(tenant, run_id, stream, from, limit).await
    }
}

type RunKey = (TenantId, RunId);

/// Who waits for which run to settle (finish an invocation), to be told at once.
#[derive(Default)]
pub(crate) struct RunWatchers {
    watching: Mutex<HashMap<RunKey, Arc<Notify>>>,
}

impl RunWatchers {
    /// Tell whoever watches this run that it changed.
    pub(crate) fn changed(&self, tenant: &TenantId, run_id: &RunId) {
        let watching = self.watching.lock().unwrap_or_else(|e| e.into_inner());
        if watching.is_empty() {
            return;
        }
        if let Some(notify) = watching.get(&(tenant.clone(), run_id.clone())) {
            notify.notify_waiters();
        }
    }

    /// Start watching a run; see [`RunWatch`].
    pub(crate) fn watch(self: &Arc<Self>, tenant: &TenantId, run_id: &RunId) -> RunWatch {
        let key = (tenant.clone(), run_id.clone());
        let notify = self
            .watching
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(key.clone())
            .or_default()
            .clone();
        RunWatch {
            watchers: self.clone(),
            key,
            notify,
        }
    }
}

/// A registration to hear when a run's invocation ends in this process (it finished,
/// suspended, was cancelled or parked). Create it before reading the run, then
/// [`RunWatch::changed`] misses nothing that happens after the read.
pub struct RunWatch {
    watchers: Arc<RunWatchers>,
    key: RunKey,
    notify: Arc<Notify>,
}

impl RunWatch {
    /// A future that completes at the next change notified after this call. To miss
    /// nothing between a read and the wait, call it (and pin it) before the read.
    pub fn changed(&self) -> impl Future<Output = ()> + '_ {
        let mut notified = Box::pin(self.notify.notified());
        notified.as_mut().enable();
        notified
    }
}

impl Drop for RunWatch {
    fn drop(&mut self) {
        let mut watching = self
            .watchers
            .watching
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        // The map's reference and this one: nobody else watches the run.
        if Arc::strong_count(&self.notify) <= 2 {
            watching.remove(&self.key);
        }
    }
}
