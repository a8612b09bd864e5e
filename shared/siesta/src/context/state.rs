//! The state of one replay pass and its one writer: what the context handles and the
//! engine share ([`Shared`], [`ExecState`]), the checkpoint a commit writes, and the
//! count of branches still running.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::model::*;
use crate::ports::{Backend, Checkpoint, NewDelivery, StoreError, WakeReason, WakeUp};
use crate::time::{Clock, Timestamp};

/// Settings the context needs from the engine.
#[derive(Debug, Clone)]
pub(crate) struct ContextConfig {
    /// Values whose JSON is larger than this are stored as artifacts.
    pub inline_limit: usize,
    /// Base of callback URLs (`{base}/hooks/{callback_id}`).
    pub callback_base_url: String,
    /// The build of the code running, recorded on the child runs it starts.
    pub build_id: String,
    /// The deployment's maxima of limits, step limits' among them (by key).
    pub limits: crate::flow::LimitOverrides,
    /// How long a lease lasts: how long a step slot handed to a waiting run is kept for
    /// it, and (half of it) how often a waiting step looks at its line again.
    pub lease_ttl: std::time::Duration,
    /// The workflows whose starts flow control governs (a concurrency limit, a
    /// debounce, a start rate), each with what governs it: `invoke` refuses them, since
    /// a child run would not count against it.
    pub flow_controlled: std::sync::Arc<std::collections::BTreeMap<String, String>>,
}

/// Why every branch stopped, when it was not simply waiting.
#[derive(Debug, Clone)]
pub(crate) enum Stop {
    /// Park the run for an operator.
    Park(ErrorInfo),
    /// Cancellation was requested; honour it.
    Cancel,
    /// A pause was requested (by this operator); honour it.
    Pause(String),
    /// A checkpoint failed (lease lost, storage error): stop without writing more.
    Abort(String),
}

/// What the lease-renewal task of an invocation learns, for the replay passes to act on.
#[derive(Default)]
pub(crate) struct LeaseWatch {
    /// The lease was taken over.
    pub lost: std::sync::atomic::AtomicBool,
    /// Cancellation was requested.
    pub cancel: std::sync::atomic::AtomicBool,
    /// A pause was requested, by this operator.
    pub pause: std::sync::Mutex<Option<String>>,
    /// The latest lease expiry (ms) a renewal asked for, set before the renewal is
    /// written; checkpoints carry it, so a checkpoint never shortens the lease it is
    /// written under.
    pub expires_at: std::sync::atomic::AtomicI64,
}

/// Mutable state of one replay pass, behind a short-held lock.
pub(crate) struct ExecState {
    pub run: Run,
    pub journal: HashMap<Position, JournalEntry>,
    /// The entries a restart superseded, by position (see `carried`).
    pub superseded: HashMap<Position, JournalEntry>,
    /// Positions of the journal's callbacks still waiting, in order: what a suspension
    /// looks at for deadlines, so it costs the open callbacks, not the whole journal.
    pub waiting_callbacks: std::collections::BTreeSet<Position>,
    pub(super) by_index: HashMap<(String, u32), Position>,
    pub deliveries: Vec<Delivery>,
    pub consumed: HashSet<DeliveryId>,
    pub(super) counters: HashMap<(String, String), u32>,
    /// Publishes from the body so far, by (branch path, stream), skipped ones included:
    /// what keys a body's chunk, the same on every replay (see `stream`).
    pub(super) stream_publishes: HashMap<(String, String), u32>,
    /// The span each held wait's ending was reached under, by position, when spans are
    /// exported: its wait's span goes under it, not under whatever writes the ending
    /// later (a step's span).
    pub(super) ending_spans: HashMap<Position, tracing::Span>,
    pub(super) indexes: HashMap<String, u32>,
    /// Branches that are not durably blocked. After a poll of the workflow returns
    /// pending, zero means every branch waits on something outside the process.
    pub running: i64,
    pub next_due: Option<Timestamp>,
    pub continue_now: bool,
    pub stop: Option<Stop>,
    pub visited: HashSet<Position>,
    /// Messages drained and not yet read by the workflow, with their delivery ids.
    pub(super) messages: VecDeque<(DeliveryId, Payload)>,
    /// Deliveries dropped operations gave back, to undo in the journal with the next
    /// checkpoint (see `claim`).
    pub(super) releases: Vec<super::claim::Release>,
    /// What the operations of each combinator future being polled kept, innermost
    /// last (see `claim::Scoped`).
    pub(super) scopes: Vec<Vec<super::claim::Release>>,
    /// The positions minted during the poll of each combinator future being polled,
    /// innermost last (see `combinator::MintRecorder`).
    pub(super) minting: Vec<Minting>,
    pub budget_deadline: Timestamp,
    /// Outstanding wake-ups to send after the checkpoint that made them necessary.
    pub inbox_loaded: u64,
    /// Starts of operations whose work is not inside them (a combinator's futures were
    /// created before it), recorded by the next checkpoint anyone makes.
    pub(super) detached_starts: Vec<PendingStart>,
    /// Events the next checkpoint writes beside its delta's (a step's attempt that
    /// waits for its turn or a slot: the suspension writes them).
    pub(super) pending_events: Vec<TimelineEvent>,
    /// Counts re-arms: a held branch re-evaluates its wait when this moves.
    pub(super) generation: u64,
    /// A branch blocked for good (not held): this pass cannot be continued.
    pub stuck: bool,
    /// In a replay check, the first place the code left the journal.
    pub divergence: Option<Divergence>,
}

/// What the futures of the combinator at `combinator` minted during one of their polls.
pub(super) struct Minting {
    /// The combinator, named by the operations minted ([`JournalEntry::within`]).
    pub(super) combinator: Position,
    /// The positions minted.
    pub(super) minted: Vec<MintedPosition>,
}

/// What one replay pass shares between the context handles and the engine.
pub(crate) struct Shared {
    pub backend: Backend,
    pub clock: Arc<dyn Clock>,
    pub config: ContextConfig,
    pub tenant: TenantId,
    pub run_id: RunId,
    /// The fencing epoch of the invocation driving this pass (changes on re-arm).
    epoch: std::sync::atomic::AtomicU64,
    state: Mutex<ExecState>,
    pub(super) writer: tokio::sync::Mutex<()>,
    /// Branches' deltas waiting for a coalesced checkpoint (see `coalesce`).
    pub(super) queued: Mutex<Vec<super::coalesce::Queued>>,
    pub(super) queue_ids: std::sync::atomic::AtomicU64,
    /// Held openings and endings queued or being written (see `coalesce`).
    pub(super) held_unwritten: std::sync::atomic::AtomicUsize,
    /// Of those, the openings.
    pub(super) openings_unwritten: std::sync::atomic::AtomicUsize,
    /// The lease watch of the invocation driving this pass (replaced on re-arm).
    watch: Mutex<Arc<LeaseWatch>>,
    /// Wakes held branches when the pass is re-armed.
    pub(super) rearmed: tokio::sync::Notify,
    /// A replay check (see `engine::replay_check`): the pass only reads. Where it would
    /// do new work or write (a boundary, a checkpoint) the branch stops instead, and a
    /// mismatch with the journal is recorded as the divergence rather than parking.
    pub(crate) checking: bool,
}

/// Everything one checkpoint adds besides the run itself.
#[derive(Default)]
pub(crate) struct Delta {
    pub journal: Vec<JournalEntry>,
    pub timeline: Vec<TimelineEvent>,
    pub callbacks: Vec<CallbackRecord>,
    pub tool_calls: Vec<ToolCallRecord>,
    pub child_runs: Vec<(Run, TimelineEvent)>,
    pub parent_delivery: Option<NewDelivery>,
    /// Starts of the enclosing contexts not yet recorded; written with this checkpoint.
    pub starts: Vec<PendingStart>,
}

/// A context (child context, batch, branch) entered for the first time whose start is
/// not recorded yet: its `Started` journal entry and `ContextStarted` event go with the
/// first checkpoint made inside it (or with its end), so entering a context costs no
/// write of its own. Shared by everything under the context; taken once.
pub(crate) type PendingStart = Arc<Mutex<Option<(JournalEntry, TimelineEvent)>>>;

impl Delta {
    /// Put the enclosing contexts' unrecorded starts (outermost first) before this
    /// delta's own entries and events. Called under the writer lock, so a start is
    /// written before anything inside it, whichever branch writes first.
    fn take_starts(&mut self) {
        let mut journal = Vec::new();
        let mut timeline = Vec::new();
        for start in std::mem::take(&mut self.starts) {
            let taken = start.lock().unwrap_or_else(|e| e.into_inner()).take();
            if let Some((entry, event)) = taken {
                // One item per transaction: the context's own end replaces its start.
                if !self.journal.iter().any(|e| e.position == entry.position) {
                    journal.push(entry);
                }
                timeline.push(event);
            }
        }
        journal.append(&mut self.journal);
        timeline.append(&mut self.timeline);
        self.journal = journal;
        self.timeline = timeline;
    }
}

/// Why a checkpoint was not written.
#[derive(Debug, Clone)]
pub(crate) enum CommitError {
    /// New deliveries arrived while the writer expected none (final suspend).
    InboxChanged,
    /// The lease was lost or storage failed; the invocation must stop.
    Aborted(String),
}

impl Shared {
    pub(crate) fn new(
        backend: Backend,
        clock: Arc<dyn Clock>,
        config: ContextConfig,
        run: Run,
        replayed: super::Replayed,
        budget_deadline: Timestamp,
        watch: Arc<LeaseWatch>,
    ) -> Shared {
        let epoch = run.lease.as_ref().map(|l| l.epoch).unwrap_or(run.epoch);
        let mut replayed = replayed;
        replayed.live_for(crate::model::restarts_of(&run));
        let mut by_index = HashMap::with_capacity(replayed.journal.len());
        let mut consumed = HashSet::new();
        let mut waiting_callbacks = std::collections::BTreeSet::new();
        for entry in replayed.journal.values() {
            if is_waiting_callback(entry) {
                waiting_callbacks.insert(entry.position.clone());
            }
            let parent = entry.position.parent().map(|p| p.0).unwrap_or_default();
            by_index.insert((parent, entry.index), entry.position.clone());
            consumed.extend(entry.consumed.iter().cloned());
        }
        let journal = replayed.journal;
        let inbox_loaded = run.inbox_seq;
        Shared {
            backend,
            clock,
            config,
            tenant: run.tenant.clone(),
            run_id: run.id.clone(),
            epoch: std::sync::atomic::AtomicU64::new(epoch.0),
            state: Mutex::new(ExecState {
                run,
                journal,
                superseded: replayed.superseded,
                waiting_callbacks,
                by_index,
                deliveries: replayed.deliveries,
                consumed,
                counters: HashMap::new(),
                stream_publishes: HashMap::new(),
                ending_spans: HashMap::new(),
                indexes: HashMap::new(),
                running: 1,
                next_due: None,
                continue_now: false,
                stop: None,
                visited: HashSet::new(),
                minting: Vec::new(),
                messages: VecDeque::new(),
                releases: Vec::new(),
                scopes: Vec::new(),
                budget_deadline,
                inbox_loaded,
                detached_starts: Vec::new(),
                pending_events: Vec::new(),
                generation: 0,
                stuck: false,
                divergence: None,
            }),
            writer: tokio::sync::Mutex::new(()),
            queued: Mutex::new(Vec::new()),
            queue_ids: std::sync::atomic::AtomicU64::new(0),
            held_unwritten: std::sync::atomic::AtomicUsize::new(0),
            openings_unwritten: std::sync::atomic::AtomicUsize::new(0),
            watch: Mutex::new(watch),
            rearmed: tokio::sync::Notify::new(),
            checking: false,
        }
    }

    /// This pass as a replay check: nothing it does is written or sent.
    pub(crate) fn checking(mut self) -> Shared {
        self.checking = true;
        self
    }

    /// Record where the code left the journal, in a replay check: the first place
    /// found stands.
    pub(crate) fn diverge(&self, divergence: Divergence) {
        let mut st = self.state();
        if st.divergence.is_none() {
            st.divergence = Some(divergence);
        }
    }

    /// The fencing epoch checkpoints are written under.
    pub(crate) fn epoch(&self) -> FencingEpoch {
        FencingEpoch(self.epoch.load(Ordering::SeqCst))
    }

    fn watch(&self) -> Arc<LeaseWatch> {
        self.watch.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Hand this suspended pass to a new invocation: `run` as its claim left it (which
    /// the caller checked nothing else wrote since this pass's final checkpoint), its
    /// budget and lease watch. Every held branch then re-evaluates its wait on its
    /// next poll.
    pub(crate) fn rearm(&self, run: Run, budget_deadline: Timestamp, watch: Arc<LeaseWatch>) {
        let epoch = run.lease.as_ref().map(|l| l.epoch).unwrap_or(run.epoch);
        self.epoch.store(epoch.0, Ordering::SeqCst);
        *self.watch.lock().unwrap_or_else(|e| e.into_inner()) = watch;
        {
            let mut st = self.state();
            st.inbox_loaded = run.inbox_seq;
            st.run = run;
            st.budget_deadline = budget_deadline;
            st.next_due = None;
            st.continue_now = false;
            st.stop = None;
            st.generation += 1;
        }
        self.rearmed.notify_waiters();
    }

    pub(crate) fn state(&self) -> MutexGuard<'_, ExecState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn now(&self) -> Timestamp {
        self.clock.now()
    }

    /// What the replay cache keeps of an invocation that has ended: the journal as its
    /// checkpoints wrote it and the deliveries it loaded. Leaves this pass without
    /// them, so it must be over (its final checkpoint written).
    pub(crate) fn take_replayed(&self) -> super::Replayed {
        let mut st = self.state();
        st.waiting_callbacks.clear();
        super::Replayed {
            journal: std::mem::take(&mut st.journal),
            superseded: std::mem::take(&mut st.superseded),
            deliveries: std::mem::take(&mut st.deliveries),
        }
    }

    pub(crate) fn set_stop(&self, stop: Stop) {
        let mut st = self.state();
        // Abort wins over everything; otherwise the first reason stands.
        match (&st.stop, &stop) {
            (None, _) | (Some(Stop::Cancel | Stop::Park(_)), Stop::Abort(_)) => {
                st.stop = Some(stop)
            }
            _ => {}
        }
    }

    /// Write one checkpoint: the run (version + 1) with `delta`, timeline numbered on.
    /// `mutate` shapes the run after the write. A concurrent delivery moves only the
    /// version, so the writer merges what it changed and tries again; when
    /// `expect_inbox` is set and deliveries arrived, it gives up with `InboxChanged`.
    /// The held openings of waits go first, in the same checkpoint when they fit (see
    /// `coalesce`): a wait's opening and the suspension after it are one write.
    pub(crate) async fn commit(
        &self,
        mut delta: Delta,
        expect_inbox: Option<u64>,
        mutate: impl Fn(&mut Run),
    ) -> Result<(), CommitError> {
        let _writer = self.writer.lock().await;
        let waiters = self.absorb_queued_locked(&mut delta).await?;
        let result = self.commit_locked(delta, expect_inbox, mutate).await;
        self.answer(waiters, &result);
        result
    }

    /// Items the next checkpoint takes on beside its delta, at most: the starts
    /// recorded outside any delta (a patch marker, a context entered; an entry and an
    /// event each) and the journal entries dropped operations give back (one each).
    /// What sizes a checkpoint against the transaction's limit counts them too.
    pub(crate) fn pending_extra_items(&self) -> usize {
        let st = self.state();
        2 * st.detached_starts.len() + st.releases.len()
    }

    /// [`Shared::commit`] by the holder of the writer lock.
    pub(super) async fn commit_locked(
        &self,
        mut delta: Delta,
        expect_inbox: Option<u64>,
        mutate: impl Fn(&mut Run),
    ) -> Result<(), CommitError> {
        if self.checking {
            // A replay check reached what the journal does not hold: it ends here,
            // before anything is written or sent.
            return Err(CommitError::Aborted(
                "the replay check stops here".to_owned(),
            ));
        }
        {
            let mut st = self.state();
            delta.starts.extend(std::mem::take(&mut st.detached_starts));
            delta
                .timeline
                .extend(std::mem::take(&mut st.pending_events));
            // What dropped operations took and gave back: their entries as if they had
            // not taken it (see `claim`).
            let releases = std::mem::take(&mut st.releases);
            let undone = super::claim::reverted(&st.journal, releases, &delta.journal);
            delta.journal.extend(undone);
        }
        delta.take_starts();
        // Program order: the events of queued deltas carry their place in `seq` (see
        // `coalesce`), starts theirs from when the context was entered; the writer's
        // own events (still 0) go last.
        delta
            .timeline
            .sort_by_key(|e| if e.seq == 0 { u64::MAX } else { e.seq });
        let now = self.now();
        for entry in &mut delta.journal {
            entry.updated_at = now;
        }
        let mut attempts = 0;
        // A due time at or before now that another writer gave the run while this one
        // held it (a step slot handed to it): the run must not sleep past it.
        let mut made_due: Option<Timestamp> = None;
        loop {
            let checkpoint = {
                let st = self.state();
                if let Some(Stop::Abort(why)) = &st.stop {
                    return Err(CommitError::Aborted(why.clone()));
                }
                if expect_inbox.is_some_and(|seen| seen != st.run.inbox_seq) {
                    return Err(CommitError::InboxChanged);
                }
                let mut run = st.run.clone();
                let renewed = Timestamp(self.watch().expires_at.load(Ordering::SeqCst));
                if let Some(lease) = run.lease.as_mut().filter(|l| l.expires_at < renewed) {
                    lease.expires_at = renewed;
                    run.due_at = Some(renewed);
                }
                let expected_version = run.version;
                run.version += 1;
                run.updated_at = now;
                mutate(&mut run);
                if let Some(at) = made_due
                    && !run.status.is_finished()
                    && run.due_at.is_none_or(|d| d > at)
                {
                    run.due_at = Some(at);
                    run.resend_after = None;
                }
                let mut timeline = delta.timeline.clone();
                for event in &mut timeline {
                    run.timeline_seq += 1;
                    event.seq = run.timeline_seq;
                }
                Checkpoint {
                    run,
                    expected_version,
                    epoch: Some(self.epoch()),
                    journal: delta.journal.clone(),
                    timeline,
                    callbacks: delta.callbacks.clone(),
                    tool_calls: delta.tool_calls.clone(),
                    child_runs: delta.child_runs.clone(),
                    parent_delivery: delta.parent_delivery.clone(),
                    by_own_build: true,
                    reopens: false,
                }
            };
            match self.backend.store.checkpoint_admitting(&checkpoint).await {
                Ok(admitted) => {
                    let exporting = crate::telemetry::exporting();
                    let mut ended = Vec::new();
                    {
                        let mut st = self.state();
                        st.run = checkpoint.run;
                        for entry in std::mem::take(&mut delta.journal) {
                            if is_waiting_callback(&entry) {
                                st.waiting_callbacks.insert(entry.position.clone());
                            } else {
                                st.waiting_callbacks.remove(&entry.position);
                            }
                            // Taken for every entry written, so none is left behind
                            // (an event wait that took its event at once ends a wait
                            // the journal never held).
                            let held_under = st.ending_spans.remove(&entry.position);
                            let before = st.journal.get(&entry.position);
                            if let Some(wait) = before
                                .filter(|_| exporting)
                                .and_then(|before| crate::telemetry::wait_ended(before, &entry))
                            {
                                ended.push((
                                    wait,
                                    held_under.unwrap_or_else(tracing::Span::current),
                                ));
                            }
                            st.journal.insert(entry.position.clone(), entry);
                        }
                    }
                    // Only a live pass commits, and only once its write is in: a wait's
                    // span is reported once, by the pass that saw it end.
                    for (wait, parent) in &ended {
                        crate::telemetry::on_wait_ended(parent, wait);
                    }
                    for (child, _) in &delta.child_runs {
                        let mut wake =
                            WakeUp::new(child.tenant.clone(), child.id.clone(), WakeReason::Child);
                        wake.seq_hint = Some(child.timeline_seq);
                        // A lost send is healed by the sweep: the child is due now.
                        if let Err(e) = self
                            .backend
                            .queue
                            .send(&wake, std::time::Duration::ZERO)
                            .await
                        {
                            tracing::warn!(run_id = %child.id, error = %e, "wake-up for child run not sent");
                        }
                    }
                    // The runs this finish handed its concurrency slots to. A lost send
                    // is healed by the sweep: an admitted run is due now.
                    for run in &admitted {
                        let mut wake =
                            WakeUp::new(run.tenant.clone(), run.id.clone(), WakeReason::Started);
                        wake.seq_hint = Some(run.timeline_seq);
                        if let Err(e) = self
                            .backend
                            .queue
                            .send(&wake, std::time::Duration::ZERO)
                            .await
                        {
                            tracing::warn!(run_id = %run.id, error = %e, "wake-up for admitted run not sent");
                        }
                    }
                    return Ok(());
                }
                Err(StoreError::Conflict(Some(current)))
                    if current
                        .lease
                        .as_ref()
                        .is_some_and(|l| l.epoch == self.epoch())
                        && attempts < 16 =>
                {
                    attempts += 1;
                    let mut st = self.state();
                    st.run.version = current.version;
                    st.run.timeline_seq = current.timeline_seq;
                    st.run.inbox_seq = current.inbox_seq;
                    st.run.cancel_requested = current.cancel_requested;
                    st.run.pause_requested = current.pause_requested.clone();
                    st.run.lease = current.lease.clone();
                    st.run.due_at = current.due_at;
                    if current.due_at.is_some_and(|d| d <= now) {
                        made_due = current.due_at;
                    }
                }
                Err(e) => {
                    let why = match e {
                        StoreError::Conflict(_) => {
                            "the lease was taken over (stale fencing epoch)".to_owned()
                        }
                        other => other.to_string(),
                    };
                    self.set_stop(Stop::Abort(why.clone()));
                    return Err(CommitError::Aborted(why));
                }
            }
        }
    }
}

/// Increments the running-branch count while alive.
pub(crate) struct BranchGuard(Arc<Shared>);

impl BranchGuard {
    pub(crate) fn new(shared: &Arc<Shared>) -> Self {
        shared.state().running += 1;
        BranchGuard(shared.clone())
    }
}

impl Drop for BranchGuard {
    fn drop(&mut self) {
        self.0.state().running -= 1;
    }
}

/// Marks the current branch durably blocked while alive.
pub(crate) struct BlockGuard(Arc<Shared>);

impl BlockGuard {
    pub(crate) fn new(shared: &Arc<Shared>) -> Self {
        shared.state().running -= 1;
        BlockGuard(shared.clone())
    }
}

impl Drop for BlockGuard {
    fn drop(&mut self) {
        self.0.state().running += 1;
    }
}

/// Whether `entry` is a callback still waiting for its outcome or its deadline.
fn is_waiting_callback(entry: &JournalEntry) -> bool {
    matches!(
        &entry.state,
        EntryState::Waiting(Wait {
            kind: WaitKind::Callback { .. },
            ..
        })
    )
}
