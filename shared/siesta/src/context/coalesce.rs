//! Coalesced checkpoints: what concurrent branches (`map`, `parallel`, the combinators)
//! record at about the same time goes into one checkpoint.
//!
//! Invariants this module keeps, and why:
//! - **Group commit, FIFO.** A branch queues its delta, then waits for the run's writer
//!   lock; whoever holds the lock writes everything queued (oldest first) in one
//!   checkpoint and answers every branch in it. While one checkpoint is being written,
//!   the branches that finish queue up for the next one, so `n` branches finishing in
//!   one poll cost two checkpoints, not `n`, and in the order serial writes would have
//!   had.
//! - **Within one transaction's limits.** A batch stops before it would pass
//!   [`MAX_TRANSACTION_ITEMS`] or [`MAX_TRANSACTION_BYTES`] (counted as the stores count
//!   them, the run's own item included, and the starts and given-back entries every
//!   checkpoint takes on: `Shared::pending_extra_items`); the rest goes in the next
//!   checkpoint. A delta too large on its own is written alone, and the store refuses
//!   it as before.
//! - **Each branch's outcome is its batch's.** A branch returns only once the checkpoint
//!   holding its delta was written (or failed: then every branch in it hears the
//!   failure, as each would have alone).
//! - **A dropped branch writes nothing.** A branch dropped while queued (a combinator's
//!   loser) takes its delta out of the queue, as a branch dropped while waiting for the
//!   lock never wrote.
//! - **A held opening goes with the next write.** A wait's opening (a timer, a
//!   callback, an event wait) is queued without waiting ([`Shared::hold_coalesced`]):
//!   the branch suspends at once, and the opening is written, in queue order, with the
//!   next checkpoint anyone makes — most often the suspension's own (see
//!   [`Shared::commit`]), so a wait costs one checkpoint, not two. Until then nothing
//!   of it has left the process (a callback's id is random and known only here), so
//!   losing it in a crash loses nothing a replay does not make again. Whatever could
//!   hand it to the outside world (a step's closure, a stream publish, an artifact)
//!   first makes it durable ([`Shared::flush_openings`]).
//! - **A held ending goes the same way.** A wait's ending outside a combinator's or a
//!   batch's future (a callback answered, a timer passed, an event taken) is queued
//!   like an opening ([`Context::hold_ending`](super::Context)): a replay derives it
//!   again from the stored delivery or the clock. Unlike an opening it need not be
//!   durable before a step's closure, a lookup, a condition's check or an artifact
//!   ([`Shared::flush_openings`]): the step's own checkpoint carries it, and a crash
//!   before that replays the ending and runs the step again, as after any crash
//!   mid-step. A stream publish, which a replay does not redo, writes it first
//!   ([`Shared::flush_held`]). Only endings derived from something stored are held: a
//!   timeout, decided from a delivery's absence, is committed at once. Inside a
//!   combinator it is committed as before, since the combinator may discard it and
//!   give the delivery back (see `claim`).
//! - **Timeline in program order.** A context's start is written with the first
//!   checkpoint inside the context, which may also carry held deltas queued before it
//!   was entered; each queued delta's events and each start carry their place (in
//!   `seq`, until the checkpoint numbers them), so the checkpoint lists them in the
//!   order the workflow made them.
//! - **One item once per transaction.** A delta writing a journal position or a
//!   callback record already in the batch (a held opening and its own end) starts the
//!   next checkpoint instead: a store writes each item once per transaction.

use std::collections::HashSet;
use std::sync::Arc;

use super::{CommitError, Delta, Shared, Stop};
use crate::model::{CallbackId, EntryState, Position, Wait};
use crate::ports::{MAX_TRANSACTION_BYTES, MAX_TRANSACTION_ITEMS};

/// What a held delta records, which decides what must wait for it to be durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Held {
    /// A wait's opening: nothing that could hand it out (a step's closure, a stream
    /// publish, an artifact, a lookup) runs before it is durable.
    Opening,
    /// A wait's ending that a replay derives again from what is stored: a step's
    /// closure may run before it is durable (the step's own checkpoint carries it);
    /// only a stream publish waits for it.
    Ending,
}

/// A branch's delta waiting for a checkpoint.
pub(crate) struct Queued {
    id: u64,
    delta: Delta,
    done: tokio::sync::oneshot::Sender<Result<(), CommitError>>,
    /// A held opening or ending: nobody waits for it (see [`Shared::hold_coalesced`]).
    held: Option<Held>,
}

/// The answers a written batch owes: the branches waiting for it, and how many held
/// openings and endings it carried.
#[derive(Default)]
pub(super) struct Waiters {
    senders: Vec<tokio::sync::oneshot::Sender<Result<(), CommitError>>>,
    held: usize,
    openings: usize,
}

impl Waiters {
    fn add(&mut self, queued: Queued) -> Delta {
        self.senders.push(queued.done);
        self.held += usize::from(queued.held.is_some());
        self.openings += usize::from(queued.held == Some(Held::Opening));
        queued.delta
    }
}

/// Append `delta` to `merged`, after what it holds.
fn merge_into(merged: &mut Delta, delta: Delta) {
    merged.journal.extend(delta.journal);
    merged.timeline.extend(delta.timeline);
    merged.callbacks.extend(delta.callbacks);
    merged.tool_calls.extend(delta.tool_calls);
    merged.child_runs.extend(delta.child_runs);
    merged.starts.extend(delta.starts);
    if delta.parent_delivery.is_some() {
        merged.parent_delivery = delta.parent_delivery;
    }
}

/// The items a batch writes that no other delta of it may write again: journal
/// positions, callback records, and whether it carries a parent delivery. Borrowed from
/// the deltas, so checking a batch copies no entry.
#[derive(Default)]
struct Writes<'a> {
    positions: HashSet<&'a Position>,
    callbacks: HashSet<&'a CallbackId>,
    parent_delivery: bool,
}

impl<'a> Writes<'a> {
    fn add(&mut self, delta: &'a Delta) {
        self.positions
            .extend(delta.journal.iter().map(|e| &e.position));
        self.callbacks
            .extend(delta.callbacks.iter().map(|c| &c.callback_id));
        self.parent_delivery |= delta.parent_delivery.is_some();
    }

    /// Whether `delta` writes an item the batch writes too (a journal position, a
    /// callback record), or a second parent delivery: then they cannot share a
    /// transaction.
    fn clash(&self, delta: &Delta) -> bool {
        (self.parent_delivery && delta.parent_delivery.is_some())
            || delta
                .journal
                .iter()
                .any(|e| self.positions.contains(&e.position))
            || delta
                .callbacks
                .iter()
                .any(|c| self.callbacks.contains(&c.callback_id))
    }
}

/// Where the events of the delta queued as `id` go in a checkpoint's timeline (kept in
/// their `seq` until the checkpoint numbers them): after every context start made before
/// it was queued (see [`Shared::start_order`]), before every one made after.
fn queued_order(id: u64) -> u64 {
    2 * id + 2
}

/// The branch's queue entry while it waits; dropping it un-queues the delta if no
/// checkpoint took it yet.
struct Ticket<'a> {
    shared: &'a Shared,
    id: u64,
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        self.shared.queued().retain(|q| q.id != self.id);
    }
}

/// Items and bytes of a delta, as the stores count them for the transaction limits
/// (a start not yet recorded counts as its journal entry and its event).
fn weight(delta: &Delta) -> (usize, usize) {
    fn size<T: serde::Serialize>(v: &T) -> usize {
        serde_json::to_vec(v).map_or(0, |b| b.len())
    }
    let mut items = delta.journal.len()
        + delta.timeline.len()
        + delta.callbacks.len()
        + delta.tool_calls.len()
        + 2 * delta.child_runs.len()
        + delta.parent_delivery.as_ref().map_or(0, |_| 3);
    let mut bytes = delta.journal.iter().map(size).sum::<usize>()
        + delta.timeline.iter().map(size).sum::<usize>()
        + delta.callbacks.iter().map(size).sum::<usize>()
        + delta.tool_calls.iter().map(size).sum::<usize>()
        + delta
            .child_runs
            .iter()
            .map(|(run, event)| size(run) + size(event))
            .sum::<usize>()
        + delta.parent_delivery.as_ref().map_or(0, size);
    for start in &delta.starts {
        if let Some((entry, event)) = &*start.lock().unwrap_or_else(|e| e.into_inner()) {
            items += 2;
            bytes += size(entry) + size(event);
        }
    }
    (items, bytes)
}

/// Take the oldest queued deltas that fit in one checkpoint beside a run of
/// `run_bytes` and `extra_items` the checkpoint takes on anyway (at least one delta),
/// merged, with the branches to answer.
fn take_batch(queue: &mut Vec<Queued>, run_bytes: usize, extra_items: usize) -> (Delta, Waiters) {
    let (mut items, mut bytes) = (1 + extra_items, run_bytes);
    // The items of the batch so far, to spot a clash with the next delta.
    let mut written = Writes::default();
    let mut taken = 0;
    for queued in queue.iter() {
        let (i, b) = weight(&queued.delta);
        let over = items + i > MAX_TRANSACTION_ITEMS || bytes + b > MAX_TRANSACTION_BYTES;
        if taken > 0 && (over || written.clash(&queued.delta)) {
            break;
        }
        items += i;
        bytes += b;
        taken += 1;
        written.add(&queued.delta);
    }
    let mut merged = Delta::default();
    let mut waiters = Waiters::default();
    for queued in queue.drain(..taken) {
        merge_into(&mut merged, waiters.add(queued));
    }
    (merged, waiters)
}

/// Runs its action when dropped before [`AbortOnDrop::disarm`]: a future dropped at an
/// `.await` it held the guard across.
struct AbortOnDrop<F: FnOnce()>(Option<F>);

impl<F: FnOnce()> AbortOnDrop<F> {
    fn new(action: F) -> Self {
        AbortOnDrop(Some(action))
    }

    /// The guarded work finished: nothing to do on drop.
    fn disarm(mut self) {
        self.0 = None;
    }
}

impl<F: FnOnce()> Drop for AbortOnDrop<F> {
    fn drop(&mut self) {
        if let Some(action) = self.0.take() {
            action();
        }
    }
}

impl Shared {
    fn queued(&self) -> std::sync::MutexGuard<'_, Vec<Queued>> {
        self.queued.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Answer the branches of a batch written (or not) with `result`.
    pub(super) fn answer(&self, waiters: Waiters, result: &Result<(), CommitError>) {
        self.held_unwritten
            .fetch_sub(waiters.held, std::sync::atomic::Ordering::SeqCst);
        self.openings_unwritten
            .fetch_sub(waiters.openings, std::sync::atomic::Ordering::SeqCst);
        for waiter in waiters.senders {
            let _ = waiter.send(result.clone());
        }
    }

    /// Write the oldest queued deltas that fit in one checkpoint, by the holder of the
    /// writer lock, and answer their branches.
    async fn write_batch_locked(&self) -> Result<(), CommitError> {
        let run_bytes = serde_json::to_vec(&self.state().run).map_or(0, |b| b.len());
        let extra = self.pending_extra_items();
        let (merged, waiters) = take_batch(&mut self.queued(), run_bytes, extra);
        // Dropped during the write (a combinator's loser holding the lock), the
        // checkpoint may still be stored while no one learns its outcome: stop the
        // invocation so it ends aborted and no journal lacking it is kept for replay.
        let writing =
            AbortOnDrop::new(|| self.set_stop(Stop::Abort("dropped while writing".to_owned())));
        let result = self.commit_locked(merged, None, |_| {}).await;
        writing.disarm();
        self.answer(waiters, &result);
        result
    }

    /// Write `delta` in a checkpoint, together with the deltas other branches queued
    /// meanwhile (see the module's invariants).
    pub(crate) async fn commit_coalesced(
        self: &Arc<Self>,
        delta: Delta,
    ) -> Result<(), CommitError> {
        let (done, mut outcome) = tokio::sync::oneshot::channel();
        let id = self.enqueue(delta, done, None);
        let _ticket = Ticket { shared: self, id };
        let _writer = self.writer.lock().await;
        loop {
            match outcome.try_recv() {
                Ok(result) => return result,
                // Still queued: nobody else writes while this branch holds the lock.
                Err(tokio::sync::oneshot::error::TryRecvError::Empty) => {}
                // Taken by a branch dropped while it wrote (a combinator's loser): the
                // write may or may not have happened, so the invocation stops and the
                // run is replayed from what is stored.
                Err(tokio::sync::oneshot::error::TryRecvError::Closed) => {
                    let why = "a coalesced checkpoint was dropped while being written";
                    self.set_stop(Stop::Abort(why.to_owned()));
                    return Err(CommitError::Aborted(why.to_owned()));
                }
            }
            // Its outcome reaches this branch through `outcome`.
            let _ = self.write_batch_locked().await;
        }
    }

    fn enqueue(
        &self,
        mut delta: Delta,
        done: tokio::sync::oneshot::Sender<Result<(), CommitError>>,
        held: Option<Held>,
    ) -> u64 {
        let mut queue = self.queued();
        let id = self
            .queue_ids
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        for event in &mut delta.timeline {
            event.seq = queued_order(id);
        }
        if held.is_some() {
            self.held_unwritten
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        if held == Some(Held::Opening) {
            self.openings_unwritten
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        queue.push(Queued {
            id,
            delta,
            done,
            held,
        });
        id
    }

    /// Where a context's start made now goes in the timeline of the checkpoint that
    /// writes it: after the events of every delta queued so far, before those queued
    /// later and those of the checkpoint's own (see `Delta::take_starts`). A start is
    /// written with the first checkpoint inside its context, which may also carry a
    /// held opening or ending queued before the context was entered.
    pub(crate) fn start_order(&self) -> u64 {
        2 * self.queue_ids.load(std::sync::atomic::Ordering::Relaxed) + 1
    }

    /// Queue a wait's opening or ending to be written with the next checkpoint anyone
    /// makes, without waiting for it (see the module's invariants). The caller must not
    /// let anything of it leave the process before [`Shared::flush_held`].
    pub(crate) fn hold_coalesced(&self, delta: Delta, held: Held) {
        // Nobody waits for the answer: a failed write stops the invocation (see
        // `commit_locked`), which is all a failed opening did before.
        let (done, _) = tokio::sync::oneshot::channel();
        self.enqueue(delta, done, Some(held));
    }

    /// Make every held opening and ending durable: write what is queued up to the last
    /// of them (waiting for a write of them already under way). Fails when one was not
    /// written.
    pub(crate) async fn flush_held(&self) -> Result<(), CommitError> {
        self.flush(None).await
    }

    /// Make every held opening durable, and the endings queued before the last of
    /// them; endings queued after it stay held for the next checkpoint.
    pub(crate) async fn flush_openings(&self) -> Result<(), CommitError> {
        self.flush(Some(Held::Opening)).await
    }

    /// Write what is queued up to the last held delta of kind `only` (any held delta
    /// when `None`).
    async fn flush(&self, only: Option<Held>) -> Result<(), CommitError> {
        let counter = match only {
            Some(Held::Opening) => &self.openings_unwritten,
            _ => &self.held_unwritten,
        };
        let unwritten = || counter.load(std::sync::atomic::Ordering::SeqCst) > 0;
        let pending = |q: &Queued| q.held.is_some() && (only.is_none() || q.held == only);
        let aborted = || match &self.state().stop {
            Some(Stop::Abort(why)) => Err(CommitError::Aborted(why.clone())),
            _ => Ok(()),
        };
        if !unwritten() {
            // A held opening whose write failed stopped the invocation.
            return aborted();
        }
        let _writer = self.writer.lock().await;
        while self.queued().iter().any(pending) {
            self.write_batch_locked().await?;
        }
        aborted()
    }

    /// The journal entries of every held opening and ending, in the order they were
    /// held: what the journal will hold once they are written.
    pub(crate) fn held_entries(&self) -> Vec<crate::model::JournalEntry> {
        self.queued()
            .iter()
            .filter(|q| q.held.is_some())
            .flat_map(|q| q.delta.journal.iter().cloned())
            .collect()
    }

    /// The waits the held openings record, not yet in the journal (a held ending
    /// records none).
    pub(crate) fn held_waits(&self) -> Vec<Wait> {
        self.queued()
            .iter()
            .filter(|q| q.held == Some(Held::Opening))
            .flat_map(|q| q.delta.journal.iter())
            .filter_map(|e| match &e.state {
                EntryState::Waiting(wait) => Some(wait.clone()),
                _ => None,
            })
            .collect()
    }

    /// By the holder of the writer lock, about to write `delta`: take what is queued
    /// (the held openings: no branch runs when the engine writes) into it, before its
    /// own items, when all fits in one transaction; otherwise write the queue first.
    /// Returns whom to answer once `delta` is written.
    pub(super) async fn absorb_queued_locked(
        &self,
        delta: &mut Delta,
    ) -> Result<Waiters, CommitError> {
        loop {
            let run_bytes = serde_json::to_vec(&self.state().run).map_or(0, |b| b.len());
            let extra = self.pending_extra_items();
            {
                let mut queue = self.queued();
                if queue.is_empty() {
                    return Ok(Waiters::default());
                }
                let (mut items, mut bytes) = weight(delta);
                // The run, the tenant's count of unfinished runs a finish touches, and
                // what the checkpoint takes on beside the deltas.
                items += 2 + extra;
                bytes += run_bytes;
                let mut written = Writes::default();
                let mut fits = true;
                for queued in queue.iter() {
                    let (i, b) = weight(&queued.delta);
                    items += i;
                    bytes += b;
                    fits &= !written.clash(&queued.delta);
                    written.add(&queued.delta);
                }
                fits &= items <= MAX_TRANSACTION_ITEMS
                    && bytes <= MAX_TRANSACTION_BYTES
                    && !written.clash(delta);
                if fits {
                    let mut merged = Delta::default();
                    let mut waiters = Waiters::default();
                    for queued in queue.drain(..) {
                        merge_into(&mut merged, waiters.add(queued));
                    }
                    merge_into(&mut merged, std::mem::take(delta));
                    *delta = merged;
                    return Ok(waiters);
                }
            }
            self.write_batch_locked().await?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{AbortOnDrop, Delta, Writes};
    use crate::model::*;
    use crate::time::Timestamp;
    use std::sync::atomic::{AtomicBool, Ordering};

    fn writing(positions: &[&str]) -> Delta {
        Delta {
            journal: positions
                .iter()
                .map(|p| JournalEntry {
                    position: Position((*p).to_owned()),
                    index: 0,
                    kind: OperationKind::Wait,
                    name: "nap".to_owned(),
                    state: EntryState::Started {
                        attempt: 1,
                        key: None,
                    },
                    consumed: Vec::new(),
                    handle: None,
                    minted: Vec::new(),
                    within: None,
                    superseded: None,
                    updated_at: Timestamp(0),
                })
                .collect(),
            ..Delta::default()
        }
    }

    #[test]
    fn a_delta_clashes_with_a_batch_only_on_a_journal_position_the_batch_writes() {
        let (first, second) = (writing(&["nap#0", "nap#1"]), writing(&["nap#2"]));
        let mut batch = Writes::default();
        assert!(!batch.clash(&first), "an empty batch takes anything");
        batch.add(&first);
        assert!(!batch.clash(&second));
        batch.add(&second);
        assert!(batch.clash(&writing(&["nap#3", "nap#1"])));
        assert!(batch.clash(&writing(&["nap#2"])));
        assert!(!batch.clash(&writing(&["nap#3"])));
    }

    #[tokio::test]
    async fn a_write_dropped_mid_await_runs_the_abort_and_a_finished_one_does_not() {
        let aborted = AtomicBool::new(false);
        let (_release, held) = tokio::sync::oneshot::channel::<()>();
        let write = async {
            let writing = AbortOnDrop::new(|| aborted.store(true, Ordering::SeqCst));
            let _ = held.await;
            writing.disarm();
        };
        let mut write = Box::pin(write);
        // The write is in flight (waiting for its store call), then dropped.
        assert!(futures::poll!(write.as_mut()).is_pending());
        drop(write);
        assert!(aborted.load(Ordering::SeqCst));

        let finished = AtomicBool::new(false);
        let writing = AbortOnDrop::new(|| finished.store(true, Ordering::SeqCst));
        writing.disarm();
        assert!(!finished.load(Ordering::SeqCst));
    }
}
