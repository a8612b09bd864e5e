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

/// Whether `position` is where a restart keeps an entry for good (`<position>~r<n>`,
/// see `engine::archived_position`): never an operation's, so never replayed.
pub fn is_archived(position: &Position) -> bool {
    position
        .as_str()
        .rsplit_once("~r")
        .is_some_and(|(_, n)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

impl JournalEntry {
    /// Whether a restart took it out of replay, for a run that has had `restarts`
    /// restarts: an entry marked by a restart whose final write has not landed yet (its
    /// marks are written first when they do not fit in one write) is still live, so a
    /// restart cut off half-way changes nothing replay sees. An archived copy never is.
    pub fn is_superseded(&self, restarts: u32) -> bool {
        is_archived(&self.position) || self.superseded.is_some_and(|n| n <= restarts)
    }
}

/// How many restarts `run` has had: what its entries' marks are read against.
pub fn restarts_of(run: &Run) -> u32 {
    run.restart.as_ref().map_or(0, |m| m.number)
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

/// The live entries of `journal` (for a run of `restarts` restarts), and every entry
/// by position (the superseded too: an ancestor's index is read from whichever the
/// store holds).
fn live_and_all(
    journal: &[JournalEntry],
    restarts: u32,
) -> (
    std::collections::HashMap<&Position, &JournalEntry>,
    std::collections::HashMap<&Position, &JournalEntry>,
) {
    let all = journal
        .iter()
        .filter(|e| !is_archived(&e.position))
        .map(|e| (&e.position, e))
        .collect();
    let live = journal
        .iter()
        .filter(|e| !e.is_superseded(restarts))
        .map(|e| (&e.position, e))
        .collect();
    (live, all)
}

/// The entries a restart from `from` supersedes: the one at `from`, everything the code
/// reached after it (later siblings and theirs, at every level up), its ancestors (a
/// finished context would otherwise return its recorded outcome without reaching
/// `from` again) and the combinators whose futures built it lazily (`within`, and
/// theirs: a decided combinator replays its decision without polling its futures).
/// Entries superseded by an earlier restart are not counted again.
pub fn superseded_from(journal: &[JournalEntry], from: &Position, restarts: u32) -> Vec<Position> {
    let (live, all) = live_and_all(journal, restarts);
    let point = order_key(from, &all);
    let mut enclosing: std::collections::HashSet<Position> = std::collections::HashSet::new();
    let mut pending = vec![from.clone()];
    while let Some(p) = pending.pop() {
        for a in p
            .ancestors()
            .chain(all.get(&p).and_then(|e| e.within.clone()))
        {
            if enclosing.insert(a.clone()) {
                pending.push(a);
            }
        }
    }
    let mut out: Vec<Position> = live
        .keys()
        .filter(|p| enclosing.contains(**p) || order_key(p, &all) >= point)
        .map(|p| (*p).clone())
        .collect();
    out.sort();
    out
}

/// The operation a restart goes on from when none is named: the first that failed for
/// good (the deepest, when a context failed because of an operation in it), else the
/// first tool call of unknown outcome; `None` when there is neither (the run goes on
/// from where it stopped).
pub fn first_failed(journal: &[JournalEntry], restarts: u32) -> Option<Position> {
    let (live, all) = live_and_all(journal, restarts);
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
            .min_by_key(|e| order_key(&e.position, &all))
            .map(|e| e.position.clone())
    };
    innermost
        .min_by_key(|e| order_key(&e.position, &all))
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
            names(superseded_from(&journal, &Position::from("ctx#0/c#0"), 0)),
            ["ctx#0", "ctx#0/c#0", "ctx#0/d#0", "e#0"]
        );
        assert_eq!(
            first_failed(&journal, 0),
            Some(Position::from("ctx#0/c#0")),
            "the innermost failure, not the context it failed"
        );
    }

    #[test]
    fn a_mark_whose_restart_is_not_written_yet_is_live_and_an_archived_copy_never_is() {
        let mut marked = entry("b#0", 1, failed());
        marked.superseded = Some(2);
        assert!(!marked.is_superseded(1), "restart 2 has not landed");
        assert!(marked.is_superseded(2));
        let mut archived = entry("b#0~r2", 1, failed());
        archived.superseded = Some(2);
        assert!(archived.is_superseded(0));
        assert!(is_archived(&Position::from("a#0/b#0~r12")));
        assert!(!is_archived(&Position::from("x~r#0")), "a name with ~r");
        let journal = vec![entry("a#0", 0, ok()), marked, archived];
        assert_eq!(first_failed(&journal, 1), Some(Position::from("b#0")));
    }

    #[test]
    fn a_combinator_that_built_the_point_lazily_is_superseded_with_it() {
        let mut race = entry("race#0", 1, ok());
        race.kind = OperationKind::Parallel;
        let mut lazy = entry("work#0", 2, ok());
        lazy.within = Some(Position::from("race#0"));
        let journal = vec![entry("a#0", 0, ok()), race, lazy];
        assert_eq!(
            names(superseded_from(&journal, &Position::from("work#0"), 0)),
            ["race#0", "work#0"],
            "the decided combinator would replay its decision without reaching work#0"
        );
    }

    #[test]
    fn entries_superseded_before_are_neither_counted_again_nor_the_first_failure() {
        let mut old = entry("b#0", 1, failed());
        old.superseded = Some(1);
        let journal = vec![entry("a#0", 0, ok()), old];
        assert_eq!(first_failed(&journal, 1), None);
        assert!(superseded_from(&journal, &Position::from("a#0"), 1) == [Position::from("a#0")]);
    }
}
