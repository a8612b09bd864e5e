//! What a run keeps of its restarts from a step (docs/operations.md, "Restart from a
//! step"): the mark on the run, and which journal entries a restart sets aside.

use super::*;

/// The run's latest restart from a step, in place or as a fork: who made it, from
/// where, and what the replay that follows must know (whether tool calls superseded are
/// repeated). On a fork it also names the run it was forked from; on that run, the fork.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestartMark {
    /// How many restarts the run has had, this one included: the number its superseded
    /// journal entries carry ([`JournalEntry::superseded`]).
    pub number: u32,
    /// The position it went on from; `None`: from where it stopped (nothing superseded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<Position>,
    /// Who restarted it (`dev`, an API key's fingerprint, a JWT's `sub`).
    pub by: String,
    /// When.
    pub at: Timestamp,
    /// Tool calls superseded are called again, rather than taking their recorded
    /// outcome, when the run reaches them.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub repeat_tool_calls: bool,
    /// The token the restart was asked with (a bulk action's id): a restart asked again
    /// with the same token is answered as done, not done twice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// On a fork: the run it was forked from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forked_from: Option<RunId>,
    /// On a fork: the run the chain of forks began with. Its tool calls' idempotency
    /// keys are that run's, so a call made again in a fork carries the key it had.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<RunId>,
    /// On the run a fork was made of: the fork.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fork: Option<RunId>,
}

impl Run {
    /// The run whose id a tool call's idempotency key is derived from: this one, or
    /// for a fork the run its chain of forks began with ([`RestartMark::origin`]).
    pub fn key_origin(&self) -> &RunId {
        self.restart
            .as_ref()
            .and_then(|m| m.origin.as_ref())
            .unwrap_or(&self.id)
    }
}

/// Where an entry sits in the run's order of operations: its index among its parent's
/// operations, after its ancestors' (an ancestor the journal lacks counts as 0). Two
/// entries compare as the code reached them, siblings by index, a context's operations
/// after the context and before its next sibling.
pub fn order_key(
    position: &Position,
    journal: &std::collections::HashMap<&Position, &JournalEntry>,
) -> Vec<u32> {
    let mut ancestors: Vec<Position> = position.ancestors().collect();
    ancestors.reverse();
    let mut key: Vec<u32> = ancestors
        .iter()
        .map(|a| journal.get(a).map_or(0, |e| e.index))
        .collect();
    key.push(journal.get(position).map_or(0, |e| e.index));
    key
}

/// The entries a restart from `from` sets aside: the one at `from`, everything the code
/// reached after it (later siblings and theirs, at every level up) and its ancestors
/// (a finished context would otherwise return its recorded outcome without reaching
/// `from` again). Entries superseded by an earlier restart are not counted again.
pub fn superseded_from(journal: &[JournalEntry], from: &Position) -> Vec<Position> {
    let live: std::collections::HashMap<&Position, &JournalEntry> = journal
        .iter()
        .filter(|e| e.superseded.is_none())
        .map(|e| (&e.position, e))
        .collect();
    let point = order_key(from, &live);
    let ancestors: std::collections::HashSet<Position> = from.ancestors().collect();
    let mut out: Vec<Position> = live
        .keys()
        .filter(|p| ancestors.contains(**p) || order_key(p, &live) >= point)
        .map(|p| (*p).clone())
        .collect();
    out.sort();
    out
}

/// The operation a restart goes on from when none is named: the first that failed for
/// good (the deepest, when a context failed because of an operation in it), else the
/// first tool call of unknown outcome; `None` when there is neither (the run goes on
/// from where it stopped).
pub fn first_failed(journal: &[JournalEntry]) -> Option<Position> {
    let live: std::collections::HashMap<&Position, &JournalEntry> = journal
        .iter()
        .filter(|e| e.superseded.is_none())
        .map(|e| (&e.position, e))
        .collect();
    let failed = |e: &&JournalEntry| matches!(e.state, EntryState::Failed { .. });
    let innermost = live.values().copied().filter(failed).filter(|e| {
        !live
            .values()
            .any(|other| failed(other) && other.position.ancestors().any(|a| a == e.position))
    });
    let unknown = || {
        live.values()
            .copied()
            .filter(|e| matches!(e.state, EntryState::Unknown { .. }))
            .min_by_key(|e| order_key(&e.position, &live))
            .map(|e| e.position.clone())
    };
    innermost
        .min_by_key(|e| order_key(&e.position, &live))
        .map(|e| e.position.clone())
        .or_else(unknown)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(position: &str, index: u32, state: EntryState) -> JournalEntry {
        JournalEntry {
            position: Position(position.to_owned()),
            index,
            kind: OperationKind::Step,
            name: position.to_owned(),
            state,
            consumed: Vec::new(),
            handle: None,
            minted: Vec::new(),
            within: None,
            superseded: None,
            updated_at: Timestamp(0),
        }
    }

    fn ok() -> EntryState {
        EntryState::Succeeded {
            value: Payload::Inline(serde_json::Value::Null),
            attempt: 1,
        }
    }

    fn failed() -> EntryState {
        EntryState::Failed {
            error: ErrorInfo::new("Boom", "boom", false),
            attempt: 3,
        }
    }

    fn names(positions: Vec<Position>) -> Vec<String> {
        positions.into_iter().map(|p| p.0).collect()
    }

    #[test]
    fn a_restart_sets_aside_the_point_what_follows_it_and_its_ancestors_not_what_came_before() {
        let journal = vec![
            entry("a#0", 0, ok()),
            entry("ctx#0", 1, failed()),
            entry("ctx#0/b#0", 0, ok()),
            entry("ctx#0/c#0", 1, failed()),
            entry("ctx#0/d#0", 2, ok()),
            entry("e#0", 2, ok()),
        ];
        assert_eq!(
            names(superseded_from(&journal, &Position::from("ctx#0/c#0"))),
            ["ctx#0", "ctx#0/c#0", "ctx#0/d#0", "e#0"]
        );
        assert_eq!(
            first_failed(&journal),
            Some(Position::from("ctx#0/c#0")),
            "the innermost failure, not the context it failed"
        );
    }

    #[test]
    fn entries_superseded_before_are_neither_counted_again_nor_the_first_failure() {
        let mut old = entry("b#0", 1, failed());
        old.superseded = Some(1);
        let journal = vec![entry("a#0", 0, ok()), old];
        assert_eq!(first_failed(&journal), None);
        assert!(superseded_from(&journal, &Position::from("a#0")) == [Position::from("a#0")]);
    }
}
