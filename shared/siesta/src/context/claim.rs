//! Claims: the deliveries an operation took from the run's inbox and has not handed to
//! the workflow yet.
//!
//! Invariants this module keeps, and why:
//! - **A delivery belongs to the operation that returns it.** Taking a delivery marks
//!   it consumed at once (so no other branch takes it too), but only the operation's
//!   return to the workflow makes that final ([`Claim::keep`]). A combinator or a batch
//!   that settles early drops its losers at whatever `.await` they were; a loser that
//!   took an event, a callback outcome, a child's result or drained messages must not
//!   keep them: on replay the settled combinator is not polled again, so the loser
//!   never takes them there, and what the workflow saw would differ from what replay
//!   shows it (vercel/workflow#4264: the next event goes to an iteration that already
//!   lost, and the wait live at that moment never sees it).
//! - **Released in memory at once, in the journal with the next checkpoint.** Dropping
//!   an unkept claim makes its deliveries takeable again in this pass (the live wait
//!   takes the event now, not at the next wake-up), and puts undrained messages back.
//!   If the loser's own checkpoint was already written (another branch's coalesced
//!   checkpoint took its delta before the combinator decided), the next checkpoint —
//!   the combinator's or batch's own, which always follows — writes the loser's entry
//!   back without those deliveries and, for a wait, as still waiting. Checkpoints are
//!   serialised by the writer lock, so by then the loser's write has either landed
//!   (and is visible in the journal) or never will.
//! - **A combinator passes deliveries on with outcomes.** Inside a combinator's or a
//!   batch's future an operation's kept deliveries stay that future's ([`Scoped`]); the
//!   combinator keeps those of the futures whose outcome it hands on (the winner, every
//!   `join_all` outcome, every finished branch) and gives back those it discards
//!   (`try_join_all`'s values before its failure, `select_ok`'s failures before its
//!   winner): the workflow never sees them, on first run or on replay.
//! - **Messages the workflow already read stay taken.** A message drained by a loser
//!   and read by another branch (`Context::messages`) before the loser was dropped was
//!   seen by the workflow; putting it back would hand it out twice.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use super::state::{ExecState, Shared};
use crate::model::*;

/// Deliveries an operation at `position` took and has not handed to the workflow yet;
/// dropped unkept, they are released (see the module's invariants).
#[must_use = "a claim dropped unkept releases its deliveries"]
pub(crate) struct Claim {
    shared: Arc<Shared>,
    release: Option<Release>,
}

/// What dropping an unkept claim gives back.
pub(crate) struct Release {
    /// The operation that took the deliveries.
    pub position: Position,
    /// The deliveries taken.
    pub ids: Vec<DeliveryId>,
    /// The state the operation's entry goes back to if its taking was journaled (a
    /// wait: waiting again); `None` keeps the state and drops only the deliveries.
    pub reverts_to: Option<EntryState>,
}

impl Claim {
    /// A claim on `ids`, taken by the operation at `position`.
    pub(crate) fn new(
        shared: &Arc<Shared>,
        position: &Position,
        ids: Vec<DeliveryId>,
        reverts_to: Option<EntryState>,
    ) -> Claim {
        let release = (!ids.is_empty()).then(|| Release {
            position: position.clone(),
            ids,
            reverts_to,
        });
        Claim {
            shared: shared.clone(),
            release,
        }
    }

    /// The operation handed its outcome on. Inside a combinator's future (a
    /// [`Scoped`]) the deliveries stay the future's until the combinator passes its
    /// outcome on too; otherwise they are the workflow's for good.
    pub(crate) fn keep(mut self) {
        if let Some(release) = self.release.take() {
            keep(&mut self.shared.state(), vec![release]);
        }
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        if let Some(release) = self.release.take() {
            give_back(&mut self.shared.state(), vec![release]);
        }
    }
}

/// Hand `releases` to the combinator future being polled, if any (see [`Scoped`]).
fn keep(st: &mut ExecState, releases: Vec<Release>) {
    if let Some(scope) = st.scopes.last_mut() {
        scope.extend(releases);
    }
}

/// Make what `releases` took takeable again, and note what the journal must undo.
fn give_back(st: &mut ExecState, releases: Vec<Release>) {
    for release in releases {
        let read: Vec<DeliveryId> = release
            .ids
            .iter()
            .filter(|id| {
                let message = st
                    .deliveries
                    .iter()
                    .any(|d| d.id == **id && matches!(d.body, DeliveryBody::Message { .. }));
                message && !st.messages.iter().any(|(m, _)| m == *id)
            })
            .cloned()
            .collect();
        let ids: Vec<DeliveryId> = release
            .ids
            .into_iter()
            .filter(|id| !read.contains(id))
            .collect();
        if ids.is_empty() {
            continue;
        }
        st.messages.retain(|(id, _)| !ids.contains(id));
        for id in &ids {
            st.consumed.remove(id);
        }
        st.releases.push(Release { ids, ..release });
    }
}

/// One future of a combinator or batch, polled inside a scope of its own: what the
/// operations in it kept is held here until the combinator decides. The combinator
/// [`Kept::keep`]s the deliveries of the futures whose outcome it passes on and drops
/// the rest; a future dropped unfinished gives back what it held.
pub(crate) struct Scoped<F> {
    inner: F,
    kept: Kept,
}

/// Deliveries a finished future of a combinator took; given back when dropped unkept.
#[must_use = "dropped unkept, the deliveries are given back"]
pub(crate) struct Kept {
    shared: Arc<Shared>,
    releases: Vec<Release>,
}

impl Kept {
    /// The combinator passes this future's outcome on: its deliveries go with it.
    pub(crate) fn keep(mut self) {
        let releases = std::mem::take(&mut self.releases);
        if !releases.is_empty() {
            keep(&mut self.shared.state(), releases);
        }
    }
}

impl Drop for Kept {
    fn drop(&mut self) {
        let releases = std::mem::take(&mut self.releases);
        if !releases.is_empty() {
            give_back(&mut self.shared.state(), releases);
        }
    }
}

/// The scope of one poll of a [`Scoped`] future: pushed on entry, popped on exit into
/// the future's kept deliveries — also when the poll unwinds (a panicking workflow).
struct ScopeGuard<'a> {
    shared: &'a Shared,
    into: &'a mut Vec<Release>,
}

impl<'a> ScopeGuard<'a> {
    fn enter(shared: &'a Shared, into: &'a mut Vec<Release>) -> ScopeGuard<'a> {
        shared.state().scopes.push(Vec::new());
        ScopeGuard { shared, into }
    }
}

impl Drop for ScopeGuard<'_> {
    fn drop(&mut self) {
        let taken = self.shared.state().scopes.pop().unwrap_or_default();
        self.into.extend(taken);
    }
}

impl<F> Scoped<F> {
    pub(crate) fn new(shared: &Arc<Shared>, inner: F) -> Scoped<F> {
        Scoped {
            inner,
            kept: Kept {
                shared: shared.clone(),
                releases: Vec::new(),
            },
        }
    }
}

impl<F: Future + Unpin> Future for Scoped<F> {
    type Output = (F::Output, Kept);

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        let polled = {
            let Kept { shared, releases } = &mut this.kept;
            let _scope = ScopeGuard::enter(shared, releases);
            Pin::new(&mut this.inner).poll(cx)
        };
        polled.map(|output| {
            let kept = Kept {
                shared: this.kept.shared.clone(),
                releases: std::mem::take(&mut this.kept.releases),
            };
            (output, kept)
        })
    }
}

/// The journal entries that undo `releases` (each kept only where the journal shows the
/// loser's taking, i.e. its checkpoint was written), leaving out positions `delta`
/// already writes.
pub(crate) fn reverted(
    journal: &std::collections::HashMap<Position, JournalEntry>,
    releases: Vec<Release>,
    writing: &[JournalEntry],
) -> Vec<JournalEntry> {
    let mut out: Vec<JournalEntry> = Vec::new();
    for release in releases {
        if writing.iter().any(|e| e.position == release.position) {
            continue;
        }
        let current = out
            .iter()
            .position(|e| e.position == release.position)
            .map(|i| out.remove(i))
            .or_else(|| journal.get(&release.position).cloned());
        let Some(mut entry) = current else {
            continue;
        };
        if !entry.consumed.iter().any(|id| release.ids.contains(id)) {
            // Never written: nothing to undo in the journal.
            continue;
        }
        entry.consumed.retain(|id| !release.ids.contains(id));
        if let Some(state) = release.reverts_to {
            entry.state = state;
        }
        out.push(entry);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::Timestamp;

    fn entry(position: &str, state: EntryState, consumed: &[&str]) -> JournalEntry {
        JournalEntry {
            position: Position(position.to_owned()),
            index: 0,
            kind: OperationKind::Event,
            name: "ping".to_owned(),
            state,
            consumed: consumed
                .iter()
                .map(|c| DeliveryId((*c).to_owned()))
                .collect(),
            handle: None,
            minted: Vec::new(),
            within: None,
            superseded: None,
            updated_at: Timestamp(0),
        }
    }

    fn waiting() -> EntryState {
        EntryState::Waiting(Wait {
            kind: WaitKind::Event {
                name: "ping".to_owned(),
                accepts: None,
            },
            deadline: None,
            started_at: Timestamp(0),
        })
    }

    fn release(position: &str, ids: &[&str], reverts_to: Option<EntryState>) -> Release {
        Release {
            position: Position(position.to_owned()),
            ids: ids.iter().map(|c| DeliveryId((*c).to_owned())).collect(),
            reverts_to,
        }
    }

    #[test]
    fn a_written_taking_is_undone_and_the_wait_waits_again() {
        let succeeded = EntryState::Succeeded {
            value: Payload::Inline(serde_json::json!("hello")),
            attempt: 0,
        };
        let journal = [entry("ping#0", succeeded, &["a", "e"])]
            .into_iter()
            .map(|e| (e.position.clone(), e))
            .collect();
        let out = reverted(
            &journal,
            vec![release("ping#0", &["e"], Some(waiting()))],
            &[],
        );
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].state, waiting());
        assert_eq!(out[0].consumed, vec![DeliveryId("a".to_owned())]);
    }

    #[test]
    fn a_taking_never_written_or_already_being_rewritten_writes_nothing() {
        let journal = [entry("ping#0", waiting(), &[])]
            .into_iter()
            .map(|e| (e.position.clone(), e))
            .collect();
        assert!(reverted(&journal, vec![release("ping#0", &["e"], None)], &[]).is_empty());
        assert!(reverted(&journal, vec![release("gone#0", &["e"], None)], &[]).is_empty());
        let taken = [entry("ping#0", waiting(), &["e"])]
            .into_iter()
            .map(|e| (e.position.clone(), e))
            .collect();
        let writing = [entry("ping#0", waiting(), &[])];
        assert!(reverted(&taken, vec![release("ping#0", &["e"], None)], &writing).is_empty());
    }

    #[test]
    fn a_step_keeps_its_state_and_gives_back_only_the_messages() {
        let started = EntryState::Started {
            attempt: 1,
            key: None,
        };
        let journal = [entry("step#0", started.clone(), &["m1", "m2"])]
            .into_iter()
            .map(|e| (e.position.clone(), e))
            .collect();
        let out = reverted(&journal, vec![release("step#0", &["m1", "m2"], None)], &[]);
        assert_eq!(out[0].state, started);
        assert!(out[0].consumed.is_empty());
    }
}
