//! The machinery under the operations: minting positions, reading the journal back
//! (and noticing where the code left it), holding and suspending, checkpoints, and the
//! deliveries an operation takes. The author's facade is in `mod.rs`; each operation's
//! file calls into this.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::claim::Claim;
use super::payload::{decode_payload, encode_payload};
use super::state::{BlockGuard, Delta, Shared, Stop};
use super::{Context, coalesce};
use crate::error::Error;
use crate::model::*;
use crate::time::Timestamp;

/// A durable operation's identity, minted where the workflow creates it.
#[derive(Debug, Clone)]
pub(crate) struct Op {
    pub position: Position,
    pub parent: Option<Position>,
    /// The combinator being decided whose future minted this operation, if any.
    pub within: Option<Position>,
    pub index: u32,
    pub kind: OperationKind,
    pub name: String,
}

impl Op {
    pub(crate) fn entry(&self, state: EntryState) -> JournalEntry {
        JournalEntry {
            position: self.position.clone(),
            index: self.index,
            kind: self.kind,
            name: self.name.clone(),
            state,
            consumed: Vec::new(),
            handle: None,
            minted: Vec::new(),
            within: self.within.clone(),
            superseded: None,
            updated_at: Timestamp(0),
        }
    }
}

impl Context {
    pub(crate) fn root(shared: Arc<Shared>) -> Context {
        let replaying = !shared.state().journal.is_empty();
        Context {
            shared,
            path: None,
            replaying: Arc::new(AtomicBool::new(replaying)),
            starts: Vec::new(),
        }
    }

    /// A context for the operations under `op` that records its start (`ContextStarted`
    /// of `sub`) with the first checkpoint made inside it, when `fresh` (the journal has
    /// nothing for `op` yet).
    pub(crate) fn child_started(
        &self,
        op: &Op,
        sub: SubType,
        own_replay_flag: bool,
        fresh: bool,
        details: crate::timeline::EventDetails,
    ) -> Context {
        let mut child = self.child(&op.position, own_replay_flag);
        if fresh {
            let entry = op.entry(EntryState::Started {
                attempt: 1,
                key: None,
            });
            let mut event = self.event(EventType::ContextStarted, sub, op, details);
            event.seq = self.shared.start_order();
            child
                .starts
                .push(Arc::new(Mutex::new(Some((entry, event)))));
        }
        child
    }

    /// Record `op`'s start (its `Started` entry and `ContextStarted` of `sub`) with the
    /// next checkpoint made by any branch, after the starts of the contexts around it:
    /// for an operation whose work happens outside it, so no checkpoint is made inside.
    pub(crate) fn start_detached(
        &self,
        op: &Op,
        sub: SubType,
        details: crate::timeline::EventDetails,
    ) {
        let entry = op.entry(EntryState::Started {
            attempt: 1,
            key: None,
        });
        let mut event = self.event(EventType::ContextStarted, sub, op, details);
        event.seq = self.shared.start_order();
        let mut st = self.shared.state();
        st.detached_starts.extend(self.starts.iter().cloned());
        st.detached_starts
            .push(Arc::new(Mutex::new(Some((entry, event)))));
    }

    /// Count every journaled operation created before `op` in the same context as
    /// reached. A settled combinator does not poll its futures again (they were created
    /// just before it), nor its losers once it has decided, so their entries would
    /// otherwise look like code that no longer reaches them.
    pub(crate) fn reached_before(&self, op: &Op) {
        let mut st = self.shared.state();
        let before: Vec<Position> = st
            .journal
            .values()
            .filter(|e| e.index < op.index && e.position.parent() == op.parent)
            .map(|e| e.position.clone())
            .collect();
        st.visited.extend(before);
    }

    /// Take the positions a decided combinator's futures minted when it decided (see
    /// [`JournalEntry::minted`]), as minting them again would: replay does not poll
    /// those futures, so without this the operations after the combinator would take
    /// the positions of the ones its futures created lazily. They count as reached.
    pub(crate) fn take_minted(&self, minted: &[MintedPosition]) {
        let mut st = self.shared.state();
        for m in minted {
            let parent = m.position.parent().map(|p| p.0).unwrap_or_default();
            let own = m.position.0.rsplit('/').next().unwrap_or_default();
            if let Some((name, occurrence)) = own.rsplit_once('#')
                && let Ok(occurrence) = occurrence.parse::<u32>()
            {
                let next = st
                    .counters
                    .entry((parent.clone(), name.to_owned()))
                    .or_insert(0);
                *next = (*next).max(occurrence + 1);
            }
            let next = st.indexes.entry(parent).or_insert(0);
            *next = (*next).max(m.index + 1);
            st.visited.insert(m.position.clone());
        }
    }

    /// What the futures of the combinator at `combinator` minted in earlier invocations,
    /// found in the journal by [`JournalEntry::within`]: the operations they created,
    /// and those created by the combinators they created, and so on.
    pub(crate) fn minted_within(&self, combinator: &Position) -> Vec<MintedPosition> {
        let st = self.shared.state();
        let mut owners = vec![combinator.clone()];
        let mut found = Vec::new();
        while let Some(owner) = owners.pop() {
            for entry in st.journal.values() {
                if entry.within.as_ref() == Some(&owner) {
                    found.push(MintedPosition {
                        position: entry.position.clone(),
                        index: entry.index,
                    });
                    owners.push(entry.position.clone());
                }
            }
        }
        found
    }

    /// A context for the operations under `position` (a child context, a branch).
    pub(crate) fn child(&self, position: &Position, own_replay_flag: bool) -> Context {
        let replaying = if own_replay_flag {
            let prefix = format!("{}/", position.0);
            let has_entries = self
                .shared
                .state()
                .journal
                .keys()
                .any(|p| p.0.starts_with(&prefix));
            Arc::new(AtomicBool::new(has_entries))
        } else {
            self.replaying.clone()
        };
        Context {
            shared: self.shared.clone(),
            path: Some(position.clone()),
            replaying,
            starts: self.starts.clone(),
        }
    }

    pub(crate) fn mint(&self, name: &str, kind: OperationKind) -> Op {
        let name = name.replace(['/', '#'], "_");
        let parent = self.path.as_ref().map(|p| p.0.clone()).unwrap_or_default();
        let mut st = self.shared.state();
        let n = st
            .counters
            .entry((parent.clone(), name.clone()))
            .or_insert(0);
        let occurrence = *n;
        *n += 1;
        let i = st.indexes.entry(parent.clone()).or_insert(0);
        let index = *i;
        *i += 1;
        let position = if parent.is_empty() {
            Position(format!("{name}#{occurrence}"))
        } else {
            Position(format!("{parent}/{name}#{occurrence}"))
        };
        let within = st.minting.last_mut().map(|recording| {
            recording.minted.push(MintedPosition {
                position: position.clone(),
                index,
            });
            recording.combinator.clone()
        });
        Op {
            position,
            parent: self.path.clone(),
            within,
            index,
            kind,
            name,
        }
    }

    /// The journal entry at `op`'s position, checking that the code still matches the
    /// journal. On a mismatch the run is parked (in a replay check, the divergence
    /// recorded) and this never returns.
    pub(crate) async fn lookup(&self, op: &Op) -> Option<JournalEntry> {
        let mismatch = {
            let mut st = self.shared.state();
            let parent = op.parent.as_ref().map(|p| p.0.clone()).unwrap_or_default();
            match st.journal.get(&op.position).cloned() {
                Some(entry) if entry.kind == op.kind => {
                    if st.visited.insert(op.position.clone()) && !entry.consumed.is_empty() {
                        let drained: Vec<(DeliveryId, Payload)> = st
                            .deliveries
                            .iter()
                            .filter(|d| entry.consumed.contains(&d.id))
                            .filter_map(|d| match &d.body {
                                DeliveryBody::Message { value } => {
                                    Some((d.id.clone(), value.clone()))
                                }
                                _ => None,
                            })
                            .collect();
                        st.messages.extend(drained);
                    }
                    return Some(entry);
                }
                Some(entry) => Some((
                    entry.kind,
                    format!(
                        "non-determinism at {}: the journal has a {} operation there but the code now runs a {}",
                        op.position, entry.kind, op.kind
                    ),
                )),
                None => match st
                    .by_index
                    .get(&(parent.clone(), op.index))
                    .and_then(|p| st.journal.get(p))
                {
                    Some(entry) => Some((
                        entry.kind,
                        format!(
                            "non-determinism at {}: operation #{} under '{}' was {} '{}' in the journal but the code now runs {} '{}'",
                            op.position,
                            op.index,
                            if parent.is_empty() {
                                "the run"
                            } else {
                                parent.as_str()
                            },
                            entry.kind,
                            entry.position,
                            op.kind,
                            op.position
                        ),
                    )),
                    None => {
                        st.visited.insert(op.position.clone());
                        None
                    }
                },
            }
        };
        match mismatch {
            Some((journal_kind, message)) => self.diverged(op, journal_kind, message).await,
            None => None,
        }
    }

    /// The code left the journal at `op` (the journal holds a `journal_kind` there):
    /// park the run, or in a replay check record the divergence. Never returns: this
    /// branch cannot go on.
    pub(crate) async fn diverged<T>(
        &self,
        op: &Op,
        journal_kind: OperationKind,
        message: String,
    ) -> T {
        if self.shared.checking {
            self.shared.diverge(Divergence {
                position: op.position.clone(),
                journal_kind: Some(journal_kind),
                code_kind: Some(op.kind),
                message,
            });
        } else {
            self.shared
                .set_stop(Stop::Park(ErrorInfo::new("NonDeterminism", message, false)));
        }
        self.suspend(None).await
    }

    /// This branch now does new work: its log lines are written from here on.
    pub(crate) fn go_live(&self) {
        self.replaying.store(false, Ordering::SeqCst);
    }

    /// Stop at an operation boundary when the run is stopping, cancelled, or out of
    /// time; otherwise return at once.
    /// A spent budget holds the branch until the next invocation re-arms the pass with
    /// a new one; a stop or cancellation blocks it for good.
    pub(crate) async fn boundary(&self) {
        if self.shared.checking {
            // A replay check does no new work: the run replayed cleanly up to here.
            self.suspend::<()>(None).await;
        }
        loop {
            let block = {
                let mut st = self.shared.state();
                if st.stop.is_some() {
                    Some(true)
                } else if st.run.cancel_requested {
                    st.stop = Some(Stop::Cancel);
                    Some(true)
                } else if let Some(by) = st.run.pause_requested.clone() {
                    st.stop = Some(Stop::Pause(by));
                    Some(true)
                } else if self.shared.now() >= st.budget_deadline {
                    st.continue_now = true;
                    Some(false)
                } else {
                    None
                }
            };
            match block {
                None => return,
                Some(true) => self.suspend::<()>(None).await,
                Some(false) => self.hold(None).await,
            }
        }
    }

    /// Block this branch for good (until the engine drops the workflow), noting when it
    /// next needs attention. The pass can no longer be continued.
    pub(crate) async fn suspend<T>(&self, due: Option<Timestamp>) -> T {
        {
            let mut st = self.shared.state();
            st.stuck = true;
            if let Some(due) = due {
                st.next_due = Some(st.next_due.map_or(due, |d| d.min(due)));
            }
        }
        let _blocked = BlockGuard::new(&self.shared);
        std::future::pending::<T>().await
    }

    /// Block this branch until the pass is re-armed by a new invocation (see
    /// [`Shared::rearm`]), noting when it next needs attention. The caller then
    /// re-evaluates what it waits for, as a replay of the journal would.
    pub(crate) async fn hold(&self, due: Option<Timestamp>) {
        let generation = {
            let mut st = self.shared.state();
            if let Some(due) = due {
                st.next_due = Some(st.next_due.map_or(due, |d| d.min(due)));
            }
            st.generation
        };
        let _blocked = BlockGuard::new(&self.shared);
        loop {
            // Registered before the check, so a re-arm in between is not missed.
            let rearmed = self.shared.rearmed.notified();
            if self.shared.state().generation != generation {
                return;
            }
            rearmed.await;
        }
    }

    /// Commit `delta`; if that fails, the invocation is over: block for good.
    /// Concurrent branches' commits share a checkpoint (see `coalesce`).
    pub(crate) async fn commit_or_suspend(&self, mut delta: Delta) {
        // Recording something new means this branch is past what the journal held.
        self.go_live();
        delta.starts = self.starts.clone();
        if self.shared.commit_coalesced(delta).await.is_err() {
            self.suspend::<()>(None).await;
        }
    }

    /// Record a wait's opening, to be written with the next checkpoint anyone makes
    /// (the suspension's, most often) rather than on its own: the caller suspends or
    /// holds next, with nothing of the opening yet outside the process (see
    /// `coalesce`). A replay check writes nothing, so there it is committed as usual
    /// (which stops the check).
    pub(crate) async fn hold_opening(&self, delta: Delta) {
        self.hold_delta(delta, coalesce::Held::Opening).await;
    }

    async fn hold_delta(&self, mut delta: Delta, held: coalesce::Held) {
        if self.shared.checking {
            return self.commit_or_suspend(delta).await;
        }
        self.go_live();
        delta.starts = self.starts.clone();
        self.shared.hold_coalesced(delta, held);
    }

    /// Record a wait's ending that a replay derives again from what is stored (a
    /// delivery taken from the run's inbox, a timer's time passed), to be written with
    /// the next checkpoint anyone makes — most often the next wait's opening and
    /// suspension — rather than on its own. Losing it in a crash loses nothing: the
    /// replay takes the same delivery (the earliest one that answers the wait) or finds
    /// the same time passed. So the workflow may act on the value before it is durable:
    /// a step's closure runs at once, its checkpoint carries the ending, and a crash
    /// in between replays both as after any crash mid-step (see `coalesce`).
    ///
    /// Inside a combinator's or a batch's future it is committed as before: the
    /// combinator may yet discard this outcome and give the delivery back (see
    /// `claim`), which undoes only what the journal holds.
    pub(crate) async fn hold_ending(&self, delta: Delta) {
        let scoped = {
            let mut st = self.shared.state();
            let scoped = !st.scopes.is_empty();
            if !scoped && crate::telemetry::exporting() {
                for entry in &delta.journal {
                    st.ending_spans
                        .insert(entry.position.clone(), tracing::Span::current());
                }
            }
            scoped
        };
        if scoped {
            return self.commit_or_suspend(delta).await;
        }
        self.hold_delta(delta, coalesce::Held::Ending).await;
    }

    /// Make the held openings and endings of waits durable before something that
    /// leaves the process and is not done again by a replay (a stream publish) runs;
    /// if that write fails, the invocation is over: block for good, as a failed
    /// checkpoint.
    pub(crate) async fn flush_held(&self) {
        if self.shared.flush_held().await.is_err() {
            self.suspend::<()>(None).await;
        }
    }

    /// Make the held openings of waits durable before something that could hand them
    /// to the outside world (a step's closure, a lookup, a condition's check, an
    /// artifact) runs. Held endings queued after the last opening stay held: what the
    /// closure does with their values is redone by a replay, which derives the same
    /// endings again. If the write fails, block for good, as a failed checkpoint.
    pub(crate) async fn flush_openings(&self) {
        if self.shared.flush_openings().await.is_err() {
            self.suspend::<()>(None).await;
        }
    }

    pub(crate) fn event(
        &self,
        event_type: EventType,
        sub_type: SubType,
        op: &Op,
        details: crate::timeline::EventDetails,
    ) -> TimelineEvent {
        TimelineEvent {
            seq: 0,
            at: self.shared.now(),
            event_type,
            sub_type: Some(sub_type),
            id: Some(op.position.0.clone()),
            parent_id: op.parent.as_ref().map(|p| p.0.clone()),
            name: Some(op.name.clone()),
            details: details.to_value(),
        }
    }

    /// Serialise `value`; over the inline limit it goes to the artifact store, under
    /// this run.
    pub(crate) fn encode<T: Serialize>(
        &self,
        value: &T,
    ) -> impl std::future::Future<Output = Result<Payload, Error>> + Send + 'static {
        self.encode_under(&self.shared.run_id, value)
    }

    /// [`encode`](Self::encode), a large value stored under `run_id` (a child run's
    /// input, which is the child's).
    pub(crate) fn encode_under<T: Serialize>(
        &self,
        run_id: &RunId,
        value: &T,
    ) -> impl std::future::Future<Output = Result<Payload, Error>> + Send + 'static {
        encode_payload(
            &self.shared.backend,
            &self.shared.config,
            &self.shared.tenant,
            run_id,
            value,
        )
    }

    /// Serialise `value` for the journal and decode it back, so that the workflow sees
    /// on first execution exactly the value replay will hand it, whatever the type's
    /// serialization loses. Decodes from memory: an offloaded value is not read back.
    pub(crate) fn encode_decoded<T>(
        &self,
        value: &T,
    ) -> impl std::future::Future<Output = Result<(Payload, Result<T, Error>), Error>> + Send + 'static
    where
        T: Serialize + DeserializeOwned + Send + 'static,
    {
        // Serialised before the first await, so `value` need not be `Sync`.
        let json = serde_json::to_value(value);
        let ctx = self.clone();
        async move {
            let json = json?;
            let payload = ctx.encode(&json).await?;
            Ok((payload, T::deserialize(json).map_err(Error::from)))
        }
    }

    pub(crate) async fn decode<T: DeserializeOwned>(&self, payload: &Payload) -> Result<T, Error> {
        decode_payload(&self.shared.backend, payload).await
    }

    /// The earliest delivery not yet consumed that `pick` accepts, marked consumed and
    /// claimed by `op`: keep the claim once the outcome is handed to the workflow;
    /// dropped before (a combinator's loser), it releases the delivery, and if `op`'s
    /// taking was journaled by then, writes `op` back as `reverts_to` (see `claim`).
    pub(crate) fn take_delivery(
        &self,
        op: &Op,
        reverts_to: Option<EntryState>,
        pick: impl Fn(&Delivery) -> bool,
    ) -> Option<(Delivery, Claim)> {
        let found = {
            let mut st = self.shared.state();
            let found = st
                .deliveries
                .iter()
                .find(|d| !st.consumed.contains(&d.id) && pick(d))
                .cloned();
            if let Some(d) = &found {
                st.consumed.insert(d.id.clone());
            }
            found
        }?;
        let claim = Claim::new(
            &self.shared,
            &op.position,
            vec![found.id.clone()],
            reverts_to,
        );
        Some((found, claim))
    }

    /// Drain injected messages at `op`'s boundary; returns their ids to journal and
    /// `op`'s claim on them (kept once `op` returns; see [`Context::take_delivery`]).
    pub(crate) fn drain_messages(&self, op: &Op) -> (Vec<DeliveryId>, Claim) {
        let ids = {
            let mut st = self.shared.state();
            let fresh: Vec<Delivery> = st
                .deliveries
                .iter()
                .filter(|d| {
                    !st.consumed.contains(&d.id) && matches!(d.body, DeliveryBody::Message { .. })
                })
                .cloned()
                .collect();
            let mut ids = Vec::with_capacity(fresh.len());
            for d in fresh {
                st.consumed.insert(d.id.clone());
                if let DeliveryBody::Message { value } = d.body {
                    st.messages.push_back((d.id.clone(), value));
                }
                ids.push(d.id);
            }
            ids
        };
        let claim = Claim::new(&self.shared, &op.position, ids.clone(), None);
        (ids, claim)
    }

    pub(crate) fn deliveries_for(&self, pick: impl Fn(&Delivery) -> bool) -> Vec<Delivery> {
        self.shared
            .state()
            .deliveries
            .iter()
            .filter(|d| pick(d))
            .cloned()
            .collect()
    }
}
