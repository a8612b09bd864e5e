//! The slots' plans against a table kept in memory: each plan's reads answered from
//! it, its conditions checked on it and its writes applied to it, over random histories
//! compared with the rule's book ([`SlotBook`]) — also when two writes are planned from
//! the same reads and one commits first, as racing writers do.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use serde_json::json;
use siesta::flow::slots::{Admission, SlotBook};
use siesta::{Payload, RunStatus};

use super::*;
use crate::layout::fixtures::{RETENTION, written_item};
use crate::layout::write_units;

fn tenant() -> TenantId {
    TenantId("t".into())
}

fn slot(limit: &str, key: &str, max: u32) -> LimitSlot {
    LimitSlot {
        limit: limit.into(),
        key: key.into(),
        max,
    }
}

/// Run `n`, created at `n` ms with `slots`: pending, due, version 1.
fn limited(n: usize, slots: &[LimitSlot]) -> Run {
    let mut run = Run::new(
        tenant(),
        RunId(format!("r{n}")),
        "limited",
        Payload::Inline(json!(null)),
        Timestamp(n as i64),
    );
    run.version = 1;
    run.timeline_seq = 1;
    run.due_at = Some(run.created_at);
    run.limits = slots.to_vec();
    run
}

fn value<'a>(write: &'a PlannedWrite, name: &str) -> &'a AttributeValue {
    let condition = write
        .condition
        .as_ref()
        .expect("every slot write has a condition");
    condition
        .values
        .get(name)
        .or(match &write.action {
            Action::Update { values, .. } => values.get(name),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no value {name} in {write:?}"))
}

fn number(v: &AttributeValue) -> i64 {
    v.as_n().expect("a number").parse().expect("a number")
}

use aws_sdk_dynamodb::types::AttributeValue;

/// The table: the limits' items by key, and the runs.
#[derive(Debug, Clone, Default)]
struct Table {
    items: BTreeMap<(String, String), Item>,
    runs: BTreeMap<RunId, Run>,
}

fn key_of(item: &Item) -> (String, String) {
    (
        get_s(item, PK, "key").unwrap().to_owned(),
        get_s(item, SK, "key").unwrap().to_owned(),
    )
}

impl Table {
    fn get(&self, key: &Item) -> Option<&Item> {
        self.items.get(&key_of(key))
    }

    /// Answer `need` as the store reads it.
    fn read(&self, need: Need, reads: &mut SlotReads) {
        match need {
            Need::Counters(lines) => {
                for line in lines {
                    let counter = self
                        .get(&line.counter_key(&tenant()))
                        .map(|i| counter_from_item(i).unwrap());
                    reads.counters.insert(line, counter);
                }
            }
            Need::WaiterAfter(line, after) => {
                let pk = line.pk(&tenant());
                let first = self
                    .items
                    .range(
                        (pk.clone(), limit_waiter_sk(after + 1))..=(pk, limit_waiter_sk(u64::MAX)),
                    )
                    .next()
                    .map(|(_, i)| waiter_from_item(i).unwrap());
                reads.waiters_after.insert((line, after), first);
            }
            Need::TicketBefore(line, ticket) => {
                let pk = line.pk(&tenant());
                let before = self
                    .items
                    .range((pk.clone(), limit_waiter_sk(0))..(pk, limit_waiter_sk(ticket)))
                    .next_back()
                    .map(|(_, i)| waiter_from_item(i).unwrap().ticket);
                reads.tickets_before.insert((line, ticket), before);
            }
            Need::Run(id) => {
                let run = self.runs.get(&id).map(|r| (r.clone(), 600));
                reads.runs.insert(id, run);
            }
        }
    }

    /// Whether `write`'s condition holds on the table.
    fn holds(&self, write: &PlannedWrite) -> bool {
        let condition = &write.condition.as_ref().expect("a condition").expression;
        if write.role == Role::AdmittedRun {
            let Action::Update { key, .. } = &write.action else {
                panic!("a run's update")
            };
            let id = self.run_of_key(key);
            return self.runs[&id].version == number(value(write, ":v")) as u64;
        }
        let key = match &write.action {
            Action::Put(item) => key(
                get_s(item, PK, "").unwrap().into(),
                get_s(item, SK, "").unwrap(),
            ),
            Action::Update { key, .. } | Action::Delete { key } | Action::Check { key } => {
                key.clone()
            }
        };
        let item = self.get(&key);
        let counter = item.map(|i| counter_from_item(i).unwrap());
        match condition.as_str() {
            "attribute_not_exists(pk)" => item.is_none(),
            "attribute_exists(pk)" => item.is_some(),
            "#run_id = :run_id" => {
                item.is_some_and(|i| i.get(RUN_ID) == Some(value(write, ":run_id")))
            }
            "attribute_not_exists(pk) OR (#holders < :max AND #waiters = :zero)" => counter
                .is_none_or(|c| c.holders < number(value(write, ":max")) as u64 && c.waiters == 0),
            "#holders > :one AND #waiters = :zero" => {
                counter.is_some_and(|c| c.holders > 1 && c.waiters == 0)
            }
            "#holders = :one AND #waiters = :zero" => {
                counter.is_some_and(|c| c.holders == 1 && c.waiters == 0)
            }
            "#rev = :read_rev" => {
                counter.is_some_and(|c| c.rev == number(value(write, ":read_rev")) as u64)
            }
            other => panic!("a condition the table does not know: {other}"),
        }
    }

    fn run_of_key(&self, key: &Item) -> RunId {
        let pk = get_s(key, PK, "").unwrap();
        self.runs
            .keys()
            .find(|id| run_pk(&tenant(), id) == pk)
            .cloned()
            .expect("a known run")
    }

    fn apply(&mut self, write: &PlannedWrite) {
        match &write.action {
            Action::Put(item) => {
                self.items.insert(key_of(item), item.clone());
            }
            Action::Delete { key } => {
                self.items.remove(&key_of(key));
            }
            Action::Update {
                key, expression, ..
            } if write.role == Role::LimitCounter => {
                let mut counter = self
                    .get(key)
                    .map(|i| counter_from_item(i).unwrap())
                    .unwrap_or_default();
                if expression.starts_with("ADD #holders :one") {
                    counter.holders += 1;
                } else if expression.starts_with("ADD #holders :minus_one") {
                    counter.holders -= 1;
                } else {
                    panic!("an update the table does not know: {expression}");
                }
                counter.rev = number(value(write, ":rev")) as u64;
                let line = limit_of_counter_sk(get_s(key, SK, "").unwrap()).unwrap();
                let line = Line {
                    limit: line.0,
                    key: line.1,
                };
                let item = counter_item(&tenant(), &line, &counter);
                self.items.insert(key_of(&item), item);
            }
            Action::Update { key, .. } => {
                assert_eq!(write.role, Role::AdmittedRun);
                let id = self.run_of_key(key);
                let mut item = written_item(write);
                item.extend(key.clone());
                self.runs.insert(id, run_from_item(&item).unwrap());
            }
            Action::Check { .. } => {}
        }
    }

    /// Commit `writes` if every condition holds (as a transaction does): whether it did.
    fn commit(&mut self, writes: &[PlannedWrite]) -> bool {
        let keys: BTreeSet<_> = writes.iter().map(target).collect();
        assert_eq!(
            keys.len(),
            writes.len(),
            "one write per item in a transaction"
        );
        if !writes.iter().all(|w| self.holds(w)) {
            return false;
        }
        for write in writes {
            self.apply(write);
        }
        true
    }
}

fn target(write: &PlannedWrite) -> (String, String) {
    match &write.action {
        Action::Put(item) => key_of(item),
        Action::Update { key, .. } | Action::Delete { key } | Action::Check { key } => key_of(key),
    }
}

/// A start planned on `table` as it is: the run as created and its writes (the run's
/// own item stands for the create's).
fn plan_start(table: &Table, run: &Run, rev: u64) -> (Run, SlotPlan) {
    let mut reads = SlotReads::default();
    for _ in 0..100 {
        match admission(run, &reads, rev, RETENTION).unwrap() {
            Planned::Ready(planned) => return planned,
            Planned::Need(need) => table.read(need, &mut reads),
        }
    }
    panic!("a start that kept asking for reads");
}

/// A finish of `id` planned on `table`: the run as read, and the writes.
fn plan_finish(table: &Table, id: &RunId, rev: u64) -> (Run, SlotPlan) {
    let stored = table.runs[id].clone();
    let mut reads = SlotReads::default();
    for _ in 0..100 {
        match release(&stored, Timestamp(9_999), &reads, rev, RETENTION).unwrap() {
            Planned::Ready(plan) => return (stored, plan),
            Planned::Need(need) => table.read(need, &mut reads),
        }
    }
    panic!("a finish that kept asking for reads");
}

/// Commit a planned start: its run created (unless it exists) with the slot writes.
fn commit_start(table: &mut Table, (run, plan): &(Run, SlotPlan)) -> bool {
    if table.runs.contains_key(&run.id) || !table.commit(&plan.writes) {
        return false;
    }
    table.runs.insert(run.id.clone(), run.clone());
    true
}

/// Commit a planned finish: the run finished (on the version read) with the slot
/// writes.
fn commit_finish(table: &mut Table, (stored, plan): &(Run, SlotPlan)) -> bool {
    if table.runs[&stored.id].version != stored.version || !table.commit(&plan.writes) {
        return false;
    }
    let mut done = stored.clone();
    done.status = match stored.status {
        RunStatus::Queued => RunStatus::Cancelled,
        _ => RunStatus::Completed,
    };
    done.queued = None;
    done.version += 1;
    table.runs.insert(stored.id.clone(), done);
    true
}

/// The table holds what the book holds: every line's holders and waiters (as items and
/// as counts, its last ticket the highest in line), no counter of an empty line, and
/// every unfinished run queued where the book says.
fn agrees(table: &Table, book: &SlotBook) -> Result<(), TestCaseError> {
    let mut lines: BTreeMap<Line, (BTreeSet<String>, BTreeMap<u64, String>)> = BTreeMap::new();
    let mut counters = BTreeMap::new();
    for ((pk, sk), item) in &table.items {
        if pk == &limits_pk(&tenant()) {
            let (limit, key) = limit_of_counter_sk(sk).unwrap();
            counters.insert(Line { limit, key }, counter_from_item(item).unwrap());
            continue;
        }
        let line = book
            .lines()
            .map(|((l, k), _)| Line {
                limit: l.clone(),
                key: k.clone(),
            })
            .find(|l| &l.pk(&tenant()) == pk);
        let Some(line) = line else {
            return Err(TestCaseError::fail(format!("{pk}/{sk} left in no line")));
        };
        let entry = lines.entry(line).or_default();
        if let Some(ticket) = ticket_of_waiter_sk(sk) {
            entry
                .1
                .insert(ticket, get_s(item, RUN_ID, "").unwrap().to_owned());
        } else {
            entry.0.insert(sk.clone());
        }
    }
    let expected: BTreeMap<Line, (BTreeSet<String>, BTreeMap<u64, String>)> = book
        .lines()
        .map(|((l, k), line)| {
            (
                Line {
                    limit: l.clone(),
                    key: k.clone(),
                },
                (
                    line.holders.iter().map(limit_holder_sk).collect(),
                    line.waiters
                        .iter()
                        .map(|(t, r)| (*t, r.0.clone()))
                        .collect(),
                ),
            )
        })
        .collect();
    prop_assert_eq!(&lines, &expected);
    let counted: BTreeMap<Line, (u64, u64, u64)> = counters
        .iter()
        .map(|(l, c)| (l.clone(), (c.holders, c.waiters, c.last_ticket)))
        .collect();
    let expected: BTreeMap<Line, (u64, u64, u64)> = expected
        .iter()
        .map(|(l, (h, w))| {
            let last = w.keys().next_back().copied().unwrap_or(0);
            (l.clone(), (h.len() as u64, w.len() as u64, last))
        })
        .collect();
    prop_assert_eq!(counted, expected);
    for run in table.runs.values().filter(|r| !r.status.is_finished()) {
        prop_assert_eq!(
            &run.queued,
            &book.queued_at(&run.id),
            "where {} waits",
            run.id
        );
        let status = match run.queued {
            Some(_) => RunStatus::Queued,
            None => RunStatus::Pending,
        };
        prop_assert_eq!(run.status, status, "{}", run.id);
        prop_assert_eq!(
            run.due_at.is_some(),
            status == RunStatus::Pending,
            "{}",
            run.id
        );
    }
    Ok(())
}

#[test]
fn a_start_on_a_free_key_increments_its_counter_on_room_and_an_empty_line() {
    let table = Table::default();
    let run = limited(1, &[slot("per-customer", "acme", 2)]);
    let (created, plan) = plan_start(&table, &run, 7);
    assert_eq!(created, run, "admitted: as given");
    let roles: Vec<Role> = plan.writes.iter().map(|w| w.role).collect();
    assert_eq!(roles, [Role::LimitCounter, Role::LimitHolder]);
    let counter = &plan.writes[0];
    assert_eq!(
        counter.condition.as_ref().unwrap().expression,
        "attribute_not_exists(pk) OR (#holders < :max AND #waiters = :zero)"
    );
    assert_eq!(number(value(counter, ":max")), 2);
    assert_eq!(plan.writes[1].condition, Some(Condition::new_item()));
    // Two small items in the transaction: 4 write units beside the create's.
    let units: f64 = plan
        .writes
        .iter()
        .map(|w| match w.billed {
            Billed::Bytes(b) => write_units(b, w.transactional),
            Billed::Returned => 0.0,
        })
        .sum();
    assert_eq!(units, 4.0);
}

#[test]
fn a_start_over_its_limit_joins_the_line_on_the_counter_as_read_and_is_not_due() {
    let mut table = Table::default();
    let one = [slot("per-customer", "acme", 1)];
    let planned = plan_start(&table, &limited(1, &one), 1);
    assert!(commit_start(&mut table, &planned));
    let (queued, plan) = plan_start(&table, &limited(2, &one), 2);
    assert_eq!(queued.status, RunStatus::Queued);
    assert_eq!(queued.due_at, None, "a queued run is not due");
    assert_eq!(
        queued.queued,
        Some(QueuedAt {
            limit: "per-customer".into(),
            key: "acme".into(),
            ticket: 1
        })
    );
    let counter = plan.of_role(Role::LimitCounter);
    assert_eq!(
        counter.condition.as_ref().unwrap().expression,
        "#rev = :read_rev"
    );
    assert_eq!(number(value(counter, ":read_rev")), 1);
    let waiter = plan.of_role(Role::LimitWaiter).item().unwrap();
    assert_eq!(get_s(waiter, SK, "").unwrap(), limit_waiter_sk(1));
    assert_eq!(get_s(waiter, RUN_ID, "").unwrap(), "r2");
    assert!(commit_start(&mut table, &(queued, plan)));
}

#[test]
fn a_finish_hands_its_slot_to_the_first_in_line_in_its_own_write() {
    let mut table = Table::default();
    let one = [slot("per-customer", "acme", 1)];
    for n in 1..=3 {
        let planned = plan_start(&table, &limited(n, &one), n as u64);
        assert!(commit_start(&mut table, &planned));
    }
    let finish = plan_finish(&table, &RunId("r1".into()), 10);
    let plan = &finish.1;
    assert_eq!(
        plan.admitted
            .iter()
            .map(|r| r.id.0.as_str())
            .collect::<Vec<_>>(),
        ["r2"]
    );
    let admitted = &plan.admitted[0];
    assert_eq!(admitted.status, RunStatus::Pending);
    assert_eq!(admitted.due_at, Some(Timestamp(9_999)), "due at the finish");
    assert_eq!(admitted.version, 2);
    assert_eq!(admitted.queued, None);
    let mut roles: Vec<Role> = plan.writes.iter().map(|w| w.role).collect();
    roles.sort_by_key(|r| format!("{r:?}"));
    assert_eq!(
        roles,
        [
            Role::AdmittedRun,
            Role::LimitCounter,
            Role::LimitHolder,
            Role::LimitHolder,
            Role::LimitWaiter
        ]
    );
    // One leaves, one joins: the counter's holders unchanged, one waiter fewer.
    let counter = plan.of_role(Role::LimitCounter).item().unwrap();
    assert_eq!(counter_from_item(counter).unwrap().holders, 1);
    assert_eq!(counter_from_item(counter).unwrap().waiters, 1);
    assert_eq!(
        plan.of_role(Role::AdmittedRun)
            .condition
            .as_ref()
            .unwrap()
            .expression,
        "#version = :v"
    );
    assert!(commit_finish(&mut table, &finish));
    assert_eq!(table.runs[&RunId("r2".into())].status, RunStatus::Pending);
}

#[test]
fn a_finish_planned_before_a_waiter_joined_is_refused() {
    let mut table = Table::default();
    let one = [slot("per-customer", "acme", 1)];
    let planned = plan_start(&table, &limited(1, &one), 1);
    assert!(commit_start(&mut table, &planned));
    // The finish read an empty line; a start joins it before the finish commits.
    let finish = plan_finish(&table, &RunId("r1".into()), 2);
    let planned = plan_start(&table, &limited(2, &one), 3);
    assert!(commit_start(&mut table, &planned));
    assert!(
        !commit_finish(&mut table, &finish),
        "the waiter would be left behind"
    );
    let finish = plan_finish(&table, &RunId("r1".into()), 4);
    assert_eq!(finish.1.admitted.len(), 1);
    assert!(commit_finish(&mut table, &finish));
}

impl SlotPlan {
    fn of_role(&self, role: Role) -> &PlannedWrite {
        self.writes
            .iter()
            .find(|w| w.role == role)
            .expect("a write of the role")
    }
}

#[derive(Debug, Clone)]
enum Op {
    Start(Vec<(usize, usize)>),
    Finish(usize),
}

const LIMITS: [(&str, u32); 3] = [("a", 1), ("b", 2), ("c", 3)];

fn ops() -> impl Strategy<Value = Vec<(Op, bool)>> {
    let start = proptest::collection::btree_set((0..3usize, 0..2usize), 1..=3)
        .prop_map(|s| Op::Start(s.into_iter().collect()));
    let finish = (0..48usize).prop_map(Op::Finish);
    proptest::collection::vec((prop_oneof![start, finish], any::<bool>()), 1..60)
}

/// A planned write of either kind.
enum Plan {
    Start((Run, SlotPlan)),
    Finish((Run, SlotPlan)),
}

struct History {
    table: Table,
    book: SlotBook,
    started: usize,
    rev: u64,
}

impl History {
    fn plan(&mut self, op: &Op) -> Option<Plan> {
        self.rev += 1;
        match op {
            Op::Start(picks) => {
                let mut slots: Vec<LimitSlot> = picks
                    .iter()
                    .map(|(l, k)| slot(LIMITS[*l].0, &k.to_string(), LIMITS[*l].1))
                    .collect();
                slots.sort();
                slots.dedup_by(|x, y| x.limit == y.limit);
                self.started += 1;
                let run = limited(self.started, &slots);
                Some(Plan::Start(plan_start(&self.table, &run, self.rev)))
            }
            Op::Finish(n) => {
                let id = RunId(format!("r{}", n + 1));
                let run = self.table.runs.get(&id)?;
                (!run.status.is_finished())
                    .then(|| Plan::Finish(plan_finish(&self.table, &id, self.rev)))
            }
        }
    }

    /// Commit `plan`, or when its conditions fail, plan it again on the table as it is
    /// now and commit that (as the store does); the book does the same.
    fn commit(&mut self, plan: Plan) -> Result<(), TestCaseError> {
        match plan {
            Plan::Start(planned) => {
                let run = planned.0.clone();
                let committed = commit_start(&mut self.table, &planned) || {
                    self.rev += 1;
                    let mut fresh = run.clone();
                    (fresh.status, fresh.queued, fresh.due_at) =
                        (RunStatus::Pending, None, Some(run.created_at));
                    let again = plan_start(&self.table, &fresh, self.rev);
                    commit_start(&mut self.table, &again)
                };
                prop_assert!(committed, "a start planned on the table as it is commits");
                let stored = &self.table.runs[&run.id];
                match self.book.admit(&run.id, &run.limits) {
                    Admission::Admitted => prop_assert_eq!(stored.status, RunStatus::Pending),
                    Admission::Queued(at) => prop_assert_eq!(stored.queued.as_ref(), Some(&at)),
                }
            }
            Plan::Finish(planned) => {
                let id = planned.0.id.clone();
                let admitted = match commit_finish(&mut self.table, &planned) {
                    true => planned.1.admitted,
                    false => {
                        if self.table.runs[&id].status.is_finished() {
                            return Ok(());
                        }
                        self.rev += 1;
                        let again = plan_finish(&self.table, &id, self.rev);
                        prop_assert!(
                            commit_finish(&mut self.table, &again),
                            "a finish planned on the table as it is commits"
                        );
                        again.1.admitted
                    }
                };
                let admitted: Vec<RunId> = admitted.into_iter().map(|r| r.id).collect();
                prop_assert_eq!(admitted, self.book.release(&id), "admitted by {}", id);
            }
        }
        Ok(())
    }
}

proptest! {
    /// Over any history of starts and finishes, some of them planned from the same
    /// reads as the write before them (racing it): the table holds exactly what the
    /// rule's book holds after every write — no key over its max, no line waiting
    /// with room, every queued run where the book has it — and a write planned before
    /// another committed either still holds or is refused and planned again.
    #[test]
    fn the_plans_keep_the_table_as_the_rule_keeps_its_book(history in ops()) {
        let mut h = History {
            table: Table::default(),
            book: SlotBook::new(),
            started: 0,
            rev: 0,
        };
        let mut pending: Option<Plan> = None;
        for (op, races_next) in history {
            let plan = h.plan(&op);
            if let Some(earlier) = pending.take() {
                h.commit(earlier)?;
            }
            let Some(plan) = plan else { continue };
            if races_next {
                // Planned now, committed after the next one is planned.
                pending = Some(plan);
            } else {
                h.commit(plan)?;
            }
            if pending.is_none() {
                agrees(&h.table, &h.book)?;
            }
        }
        if let Some(last) = pending {
            h.commit(last)?;
        }
        agrees(&h.table, &h.book)?;
    }
}
