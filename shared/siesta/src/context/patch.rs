//! Changing a workflow's code in place: `patched` and `deprecate_patch`.
//!
//! A run replays the operations it journaled in the order it journaled them. To change
//! that order for new runs without breaking the runs in flight, a workflow asks
//! `ctx.patched("id")` at the point of change and takes the new path when it is true:
//!
//! - the journal holds the patch's marker at this point: the run got here on code that
//!   has the patch → **true**;
//! - the journal holds another operation at this point: the run got here before the
//!   patch (its journal goes on down the old path) → **false**, and the marker takes
//!   no position, so the old path's operations keep theirs;
//! - the journal holds nothing here yet: the run is at its frontier, on this code →
//!   the marker is recorded (with the next checkpoint the run makes, costing no write
//!   of its own) → **true**.
//!
//! Once no run that predates the patch is left (`GET /builds`, `myapp replay`), the old
//! path is dead code: replace `if ctx.patched("id") { new } else { old }` with
//! `ctx.deprecate_patch("id"); new`. `deprecate_patch` takes the marker where the
//! journal holds one (runs made while the patch was in place) and records nothing
//! otherwise; once those runs are gone too, remove the call.

use crate::timeline as tl;
use std::sync::{Arc, Mutex};

use super::{Context, Op};
use crate::model::*;

/// What the journal says about a patch marker at the point the code asks for it.
enum Found {
    /// The marker is journaled here.
    Marker,
    /// Another operation is journaled at this point: the run predates the patch.
    Other,
    /// Nothing is journaled here: the run's frontier.
    Nothing,
}

impl Context {
    /// Whether this run reaches this point on code that has the patch `id` (see the
    /// module docs of `patch`): true for a run that recorded the patch's marker here
    /// or is at its frontier (the marker is recorded now), false for a run whose
    /// journal goes on down the old path. Replays the same way every time.
    ///
    /// ```ignore
    /// if ctx.patched("fraud-check") {
    ///     ctx.step("fraud_check", |_| async { Ok(check().await?) }).await?;
    /// }
    /// ```
    pub fn patched(&self, id: &str) -> bool {
        let (op, found) = self.find_marker(id);
        match found {
            Found::Marker => {
                self.take_marker(&op);
                true
            }
            Found::Other => false,
            Found::Nothing => {
                self.take_marker(&op);
                self.record_marker(&op, "patched");
                true
            }
        }
    }

    /// Retire the patch `id`: the code now always takes the new path. A journal that
    /// recorded the patch's marker here has it taken, so the operations after it keep
    /// their positions; otherwise nothing is recorded. Remove the call once no run
    /// that recorded the marker is left.
    pub fn deprecate_patch(&self, id: &str) {
        let (op, found) = self.find_marker(id);
        if let Found::Marker = found {
            self.take_marker(&op);
        }
    }

    /// The marker `id` would be at this point, and what the journal holds there;
    /// nothing is minted yet (a marker the run predates takes no position).
    fn find_marker(&self, id: &str) -> (Op, Found) {
        let name = format!("patch:{}", id.replace(['/', '#'], "_"));
        let parent = self.path.as_ref().map(|p| p.0.clone()).unwrap_or_default();
        let st = self.shared.state();
        let occurrence = st
            .counters
            .get(&(parent.clone(), name.clone()))
            .copied()
            .unwrap_or(0);
        let index = st.indexes.get(&parent).copied().unwrap_or(0);
        let position = if parent.is_empty() {
            Position(format!("{name}#{occurrence}"))
        } else {
            Position(format!("{parent}/{name}#{occurrence}"))
        };
        let found = match st.journal.get(&position) {
            Some(entry) if entry.kind == OperationKind::Patch => Found::Marker,
            _ => match st.by_index.get(&(parent, index)) {
                Some(_) => Found::Other,
                None => Found::Nothing,
            },
        };
        let op = Op {
            position,
            parent: self.path.clone(),
            within: None,
            index,
            kind: OperationKind::Patch,
            name,
        };
        (op, found)
    }

    /// Give the marker its position (as minting does) and count it as reached.
    fn take_marker(&self, op: &Op) {
        let minted = self.mint(&op.name, OperationKind::Patch);
        debug_assert_eq!(minted.position, op.position);
        self.shared.state().visited.insert(op.position.clone());
    }

    /// Journal the marker with the next checkpoint any branch makes, after the starts
    /// of the contexts around it, with a `MarkerRecorded` event.
    fn record_marker(&self, op: &Op, how: &str) {
        let id = op.name.trim_start_matches("patch:");
        let entry = op.entry(EntryState::Succeeded {
            value: Payload::Inline(serde_json::json!({ "patch": id })),
            attempt: 1,
        });
        let mut event = self.event(
            EventType::MarkerRecorded,
            SubType::Patch,
            op,
            tl::EventDetails::MarkerRecorded(tl::MarkerRecorded {
                patch: id.to_string(),
                call: how.to_string(),
            }),
        );
        event.seq = self.shared.start_order();
        let mut st = self.shared.state();
        st.detached_starts.extend(self.starts.iter().cloned());
        st.detached_starts
            .push(Arc::new(Mutex::new(Some((entry, event)))));
    }
}
