//! The slot rule as plain data: what every store does, atomically, when a run with
//! concurrency limits is created and when it finishes. The stores keep the same state
//! in their own form (rows, items); their tests replay random histories on both and
//! compare.
//!
//! The rule:
//! - A run takes its slots in the order of its [`Run::limits`](crate::Run::limits). At
//!   each it holds a slot when the key's line is empty and fewer than the slot's `max`
//!   hold the key; otherwise it joins the end of the line (its ticket one more than the
//!   last one's, 1 for an empty line), keeps the slots taken before, and is queued.
//! - A run that finishes (or a queued run cancelled) leaves every line and key it was
//!   in. Each key it held then goes to the first in line while fewer than that run's
//!   `max` hold it; a run handed a slot goes on taking its next ones by the same rule,
//!   and is admitted (pending) when it holds them all.
//!
//! Taking slots in one global order (limit names) means a run only ever waits for runs
//! that hold a slot it comes to later, so no two runs wait for each other. Handing a
//! freed slot to the first in line, never to a newcomer, keeps the order per key; each
//! key has its own line, so keys do not wait for each other.

use std::collections::{BTreeMap, BTreeSet};

use crate::model::{LimitSlot, QueuedAt, RunId};

/// What happened to a run at its start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// It holds every slot: pending, as a run without limits.
    Admitted,
    /// It waits in this line, holding the slots before it.
    Queued(QueuedAt),
}

/// One key of one limit: who holds it and who waits, by ticket.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Line {
    /// The runs holding a slot.
    pub holders: BTreeSet<RunId>,
    /// The runs waiting, by ticket.
    pub waiters: BTreeMap<u64, RunId>,
}

/// What the book knows of a run: its slots, how many it holds (the first ones).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    slots: Vec<LimitSlot>,
    held: usize,
}

/// Every line of one tenant's limits, and the runs in them.
#[derive(Debug, Clone, Default)]
pub struct SlotBook {
    lines: BTreeMap<(String, String), Line>,
    runs: BTreeMap<RunId, Entry>,
}

impl SlotBook {
    /// An empty book.
    pub fn new() -> Self {
        SlotBook::default()
    }

    /// A run created with `slots`: takes what it can, in order.
    pub fn admit(&mut self, run: &RunId, slots: &[LimitSlot]) -> Admission {
        self.runs.insert(
            run.clone(),
            Entry {
                slots: slots.to_vec(),
                held: 0,
            },
        );
        self.take_from(run)
    }

    /// `run` finished (or was cancelled): it leaves every line; the slots it held go to
    /// the first in line. The runs admitted by it, in the order they were.
    pub fn release(&mut self, run: &RunId) -> Vec<RunId> {
        let Some(entry) = self.runs.remove(run) else {
            return Vec::new();
        };
        let mut freed = Vec::new();
        for (i, slot) in entry.slots.iter().enumerate() {
            let id = (slot.limit.clone(), slot.key.clone());
            let Some(line) = self.lines.get_mut(&id) else {
                continue;
            };
            if i < entry.held {
                line.holders.remove(run);
                freed.push(id);
            } else {
                line.waiters.retain(|_, w| w != run);
            }
        }
        let mut admitted = Vec::new();
        for id in freed {
            self.hand_over(&id, &mut admitted);
        }
        self.lines
            .retain(|_, line| !line.holders.is_empty() || !line.waiters.is_empty());
        admitted
    }

    /// The line of `limit`'s `key`, if anyone holds or waits for it.
    pub fn line(&self, limit: &str, key: &str) -> Option<&Line> {
        self.lines.get(&(limit.to_owned(), key.to_owned()))
    }

    /// Every line anyone holds or waits in, by limit and key.
    pub fn lines(&self) -> impl Iterator<Item = (&(String, String), &Line)> {
        self.lines.iter()
    }

    /// Where `run` waits: its line and ticket, or `None` when it is not queued.
    pub fn queued_at(&self, run: &RunId) -> Option<QueuedAt> {
        let entry = self.runs.get(run)?;
        let slot = entry.slots.get(entry.held)?;
        let line = self.line(&slot.limit, &slot.key)?;
        let ticket = line.waiters.iter().find(|(_, w)| *w == run)?.0;
        Some(QueuedAt {
            limit: slot.limit.clone(),
            key: slot.key.clone(),
            ticket: *ticket,
        })
    }

    /// Give the freed slots of the line `id` to the first in line, while the first's
    /// `max` lets one more hold it.
    fn hand_over(&mut self, id: &(String, String), admitted: &mut Vec<RunId>) {
        loop {
            let Some(line) = self.lines.get_mut(id) else {
                return;
            };
            let Some((&ticket, first)) = line.waiters.iter().next() else {
                return;
            };
            let first = first.clone();
            let max = self.runs[&first].slots[self.runs[&first].held].max;
            if line.holders.len() >= max as usize {
                return;
            }
            line.waiters.remove(&ticket);
            line.holders.insert(first.clone());
            if let Some(entry) = self.runs.get_mut(&first) {
                entry.held += 1;
            }
            if self.take_from(&first) == Admission::Admitted {
                admitted.push(first);
            }
        }
    }

    /// Take `run`'s slots from the first it does not hold, by the rule.
    fn take_from(&mut self, run: &RunId) -> Admission {
        loop {
            let entry = &self.runs[run];
            let Some(slot) = entry.slots.get(entry.held).cloned() else {
                return Admission::Admitted;
            };
            let line = self
                .lines
                .entry((slot.limit.clone(), slot.key.clone()))
                .or_default();
            if line.waiters.is_empty() && line.holders.len() < slot.max as usize {
                line.holders.insert(run.clone());
                if let Some(entry) = self.runs.get_mut(run) {
                    entry.held += 1;
                }
                continue;
            }
            let ticket = line.waiters.keys().next_back().map_or(1, |t| t + 1);
            line.waiters.insert(ticket, run.clone());
            return Admission::Queued(QueuedAt {
                limit: slot.limit,
                key: slot.key,
                ticket,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn slot(limit: &str, key: &str, max: u32) -> LimitSlot {
        LimitSlot {
            limit: limit.into(),
            key: key.into(),
            max,
        }
    }

    fn id(n: usize) -> RunId {
        RunId(format!("r{n}"))
    }

    #[test]
    fn a_run_over_its_limit_waits_and_the_finish_of_a_holder_admits_it() {
        let mut book = SlotBook::new();
        let one = [slot("per-customer", "acme", 1)];
        assert_eq!(book.admit(&id(1), &one), Admission::Admitted);
        let Admission::Queued(at) = book.admit(&id(2), &one) else {
            panic!("the second run should wait");
        };
        assert_eq!(
            (at.limit.as_str(), at.key.as_str(), at.ticket),
            ("per-customer", "acme", 1)
        );
        assert_eq!(
            book.admit(&id(3), &[slot("per-customer", "other", 1)]),
            Admission::Admitted
        );
        assert_eq!(book.release(&id(1)), vec![id(2)]);
        assert!(book.queued_at(&id(2)).is_none());
        assert_eq!(book.release(&id(2)), Vec::<RunId>::new());
        assert!(book.line("per-customer", "acme").is_none());
    }

    #[test]
    fn a_run_handed_one_slot_goes_on_to_wait_for_its_next() {
        let mut book = SlotBook::new();
        let both = [slot("a", "", 1), slot("b", "", 1)];
        assert_eq!(book.admit(&id(1), &[slot("b", "", 1)]), Admission::Admitted);
        assert_eq!(book.admit(&id(2), &[slot("a", "", 1)]), Admission::Admitted);
        assert!(matches!(book.admit(&id(3), &both), Admission::Queued(q) if q.limit == "a"));
        assert_eq!(book.release(&id(2)), Vec::<RunId>::new());
        assert_eq!(
            book.queued_at(&id(3)).map(|q| q.limit),
            Some("b".to_owned())
        );
        assert_eq!(book.release(&id(1)), vec![id(3)]);
    }

    #[test]
    fn a_cancelled_waiter_leaves_its_line_and_frees_what_it_held() {
        let mut book = SlotBook::new();
        let both = [slot("a", "", 1), slot("b", "", 1)];
        book.admit(&id(1), &[slot("b", "", 1)]);
        book.admit(&id(2), &both); // holds a, waits at b
        assert!(matches!(
            book.admit(&id(3), &[slot("a", "", 1)]),
            Admission::Queued(_)
        ));
        assert_eq!(book.release(&id(2)), vec![id(3)]);
        assert_eq!(book.line("b", "").unwrap().waiters.len(), 0);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Start(Vec<(usize, usize)>),
        Finish(usize),
    }

    const LIMITS: [(&str, u32); 3] = [("a", 1), ("b", 2), ("c", 3)];

    fn ops() -> impl Strategy<Value = Vec<Op>> {
        let start = proptest::collection::btree_set((0..3usize, 0..2usize), 1..=3)
            .prop_map(|s| Op::Start(s.into_iter().collect()));
        let finish = (0..64usize).prop_map(Op::Finish);
        proptest::collection::vec(prop_oneof![start, finish], 1..80)
    }

    proptest! {
        /// Over any history: no key is held by more than its max, a line never waits
        /// while its key has room for its first, every run is exactly one of admitted
        /// or queued, and only unfinished runs hold or wait.
        #[test]
        fn no_key_is_ever_over_its_max_and_no_line_waits_with_room(history in ops()) {
            let mut book = SlotBook::new();
            let mut started: Vec<RunId> = Vec::new();
            let mut alive: BTreeSet<RunId> = BTreeSet::new();
            for op in history {
                match op {
                    Op::Start(picks) => {
                        let run = id(started.len());
                        let mut slots: Vec<LimitSlot> = picks
                            .iter()
                            .map(|(l, k)| slot(LIMITS[*l].0, &k.to_string(), LIMITS[*l].1))
                            .collect();
                        slots.sort();
                        slots.dedup_by(|x, y| x.limit == y.limit);
                        let admission = book.admit(&run, &slots);
                        prop_assert_eq!(admission == Admission::Admitted, book.queued_at(&run).is_none());
                        started.push(run.clone());
                        alive.insert(run);
                    }
                    Op::Finish(n) => {
                        let Some(run) = started.get(n).cloned() else { continue };
                        if !alive.remove(&run) { continue; }
                        for admitted in book.release(&run) {
                            prop_assert!(alive.contains(&admitted));
                            prop_assert!(book.queued_at(&admitted).is_none());
                        }
                    }
                }
                for ((limit, key), line) in book.lines() {
                    let max = LIMITS.iter().find(|(l, _)| l == limit).unwrap().1 as usize;
                    prop_assert!(line.holders.len() <= max, "{limit}/{key} over its max");
                    prop_assert!(
                        line.waiters.is_empty() || line.holders.len() == max,
                        "{limit}/{key} has room while {} wait", line.waiters.len()
                    );
                    for w in line.waiters.values() {
                        prop_assert!(alive.contains(w));
                        prop_assert!(book.queued_at(w).is_some_and(|q| &q.limit == limit && &q.key == key));
                    }
                    for h in &line.holders {
                        prop_assert!(alive.contains(h));
                    }
                }
            }
        }
    }
}
