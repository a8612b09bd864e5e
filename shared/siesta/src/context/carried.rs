//! What a restart from a step carries over from the operations it superseded
//! (docs/operations.md, "Restart from a step"): an operation after the point is done
//! again when the code reaches it, except for two side effects that must not repeat.
//!
//! - A **tool call** that succeeded keeps its recorded outcome — the same call (same
//!   position, same name) is answered from it and not made again — unless the restart
//!   asked to repeat tool calls ([`RestartMark::repeat_tool_calls`]); repeated, it
//!   carries the same idempotency key, so a provider that honours keys dedupes anyway.
//! - A **child run** started by an `invoke` is not started again: the invoke at the same
//!   position takes the same child over, its outcome if it finished (its result is still
//!   delivered to this run, and a superseded entry's deliveries are offered again), or
//!   waits for it if it has not. A child that failed is the exception: the restart is
//!   there to do it again, so a new child is started, under an id of the restart's.
//!
//! Nothing else is carried: a step, a wait, a callback (a new one, with a new id) and an
//! event wait are done again; an event or message a superseded operation had taken is
//! offered again to the operation that now reaches it.

use super::{Context, Op};
use crate::model::*;

impl Context {
    /// The recorded value (and the attempt that got it) of the succeeded tool call a restart superseded at `op`'s
    /// position, when it is the same call and the restart did not ask to repeat it.
    pub(crate) fn carried_tool_call(&self, op: &Op) -> Option<(Payload, u32)> {
        let st = self.shared.state();
        if st.run.restart.as_ref().is_some_and(|r| r.repeat_tool_calls) {
            return None;
        }
        match st.superseded.get(&op.position) {
            Some(JournalEntry {
                kind: OperationKind::ToolCall,
                name,
                state: EntryState::Succeeded { value, attempt },
                ..
            }) if *name == op.name => Some((value.clone(), *attempt)),
            _ => None,
        }
    }

    /// The child run the `invoke` a restart superseded at `op`'s position started, when
    /// it invoked the same thing: taken over, not started again — unless it failed,
    /// which is what the restart is for: then a new child is started, under an id of
    /// this restart's ([`Context::restarted_child_id`]).
    pub(crate) fn carried_child(&self, op: &Op) -> Option<RunId> {
        let st = self.shared.state();
        match st.superseded.get(&op.position) {
            Some(JournalEntry {
                kind: OperationKind::Invoke,
                name,
                handle: Some(child),
                state,
                ..
            }) if *name == op.name && !matches!(state, EntryState::Failed { .. }) => {
                Some(RunId(child.clone()))
            }
            _ => None,
        }
    }

    /// The id of the child an `invoke` starts anew after a restart superseded its failed
    /// child: `default` (the id derived from the position) with the restart's number,
    /// so it is not the failed child's (which exists, and whose outcome is delivered
    /// already). `default` itself when no restart superseded an invoke here.
    pub(crate) fn restarted_child_id(&self, op: &Op, default: RunId) -> RunId {
        let st = self.shared.state();
        match st.superseded.get(&op.position) {
            Some(JournalEntry {
                kind: OperationKind::Invoke,
                superseded: Some(n),
                ..
            }) => RunId(format!("{default}.r{n}")),
            _ => default,
        }
    }
}
