//! One wake-up of a run at a time in this process, the others folded into it.
//!
//! Two wake-ups of one run handled side by side (a duplicate in an SQS batch, a run
//! that suspends twice on the same timer, a delivery's wake-up beside the timer's) could
//! both read the run while it was due, the second before the first claimed it; the claim
//! only checks that no lease is live, so the second claimed it once the first released
//! it and invoked the run again for nothing — a replay or a continuation, a checkpoint,
//! perhaps another timer wake-up, in DynamoDB a claim's and a checkpoint's write units.
//!
//! So a wake-up whose run is already being handled here does not wait for it (a queue
//! worker's slot would be held for as long as the run's invocation lasts, and a run that
//! receives many deliveries while it works would hold many): it is answered
//! [`WakeOutcome::Folded`](super::WakeOutcome::Folded) and leaves a mark on the run's turn.
//! The handler that holds the turn, when done, handles the run once more if it was
//! marked — reading the run as it left it, it finds whether anything arrived since its
//! last read — so nothing a folded wake-up stood for is lost. Other processes (other
//! Lambda instances) still race as before, and the lease still settles it.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::model::{RunId, TenantId};

/// The runs being handled in this process, each with whether a wake-up was folded into
/// its handling since it began (or since it last looked).
#[derive(Debug, Default)]
pub(crate) struct RunTurns(Mutex<HashMap<(TenantId, RunId), bool>>);

impl RunTurns {
    /// Take the run's turn, or — when another handler holds it — mark it so that the
    /// holder handles the run once more, and get `None`.
    pub(crate) fn take(&self, tenant: &TenantId, run_id: &RunId) -> Option<Turn<'_>> {
        let mut turns = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let key = (tenant.clone(), run_id.clone());
        match turns.get_mut(&key) {
            Some(folded) => {
                *folded = true;
                None
            }
            None => {
                turns.insert(key.clone(), false);
                Some(Turn {
                    turns: self,
                    key,
                    given_back: false,
                })
            }
        }
    }
}

/// A run's turn, held while one handler handles it; given back when dropped (a
/// handler stopped half-way, a Lambda timeout, gives it back too).
#[derive(Debug)]
pub(crate) struct Turn<'a> {
    turns: &'a RunTurns,
    key: (TenantId, RunId),
    /// Given back by [`Turn::again`] already: the entry may be another handler's now.
    given_back: bool,
}

impl Turn<'_> {
    /// Whether a wake-up was folded into this turn since it began or since the last
    /// call — the run must then be handled once more. When not, the turn is given back
    /// in the same step, so a wake-up arriving just after takes a turn of its own
    /// rather than marking one nobody looks at again.
    pub(crate) fn again(mut self) -> Option<Self> {
        let mut turns = self.turns.0.lock().unwrap_or_else(|e| e.into_inner());
        match turns.get_mut(&self.key) {
            Some(folded) if *folded => {
                *folded = false;
                drop(turns);
                Some(self)
            }
            _ => {
                // Under the same lock as the look: no wake-up can mark it in between.
                turns.remove(&self.key);
                self.given_back = true;
                None
            }
        }
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        if !self.given_back {
            let mut turns = self.turns.0.lock().unwrap_or_else(|e| e.into_inner());
            turns.remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(id: &str) -> (TenantId, RunId) {
        (TenantId::from("t"), RunId::from(id))
    }

    #[test]
    fn a_second_wake_up_of_a_run_being_handled_is_folded_into_the_turn() {
        let turns = RunTurns::default();
        let (t, a) = run("a");
        let turn = turns.take(&t, &a).expect("the first takes the turn");
        assert!(turns.take(&t, &a).is_none(), "the second is folded");
        assert!(turns.take(&t, &a).is_none(), "and the third");
        let turn = turn.again().expect("folded wake-ups: once more");
        assert!(
            turn.again().is_none(),
            "two folded are one more pass, not two"
        );
        assert!(
            turns.take(&t, &a).is_some(),
            "given back: the next takes its own"
        );
    }

    #[test]
    fn a_turn_nobody_folded_into_is_given_back_and_other_runs_never_wait() {
        let turns = RunTurns::default();
        let (t, a) = run("a");
        let (_, b) = run("b");
        let turn = turns.take(&t, &a).unwrap();
        let other = turns
            .take(&t, &b)
            .expect("another run has a turn of its own");
        assert!(turn.again().is_none());
        assert!(turns.take(&t, &a).is_some());
        drop(other);
        assert!(turns.take(&t, &b).is_some());
    }

    #[test]
    fn a_turn_dropped_half_way_is_given_back() {
        let turns = RunTurns::default();
        let (t, a) = run("a");
        let turn = turns.take(&t, &a).unwrap();
        assert!(turns.take(&t, &a).is_none());
        drop(turn);
        assert!(turns.take(&t, &a).is_some());
    }
}
