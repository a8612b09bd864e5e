//! Concurrency limits' slots in the table, by the rule of [`siesta::flow::slots`]: the
//! writes that take a run's slots in the transaction that creates it
//! ([`admission`]), and those that free them and hand each to the first in line in the
//! transaction of the checkpoint that finishes it, or cancels it while queued
//! ([`release`]).
//!
//! Three kinds of item (keys in [`crate::keys`]):
//! - a **counter** per key of a limit, in the tenant's partition of counters: how many
//!   hold the key (`holders`), how many wait (`waiters`), the line's last ticket
//!   (`last_ticket`, the highest ticket in line, 0 for an empty line), and `rev`, a
//!   fresh number every write sets;
//! - a **holder** item per run holding a slot, in the key's own partition (its *line*);
//! - a **waiter** item per run in line, in the same partition, keyed by its ticket so
//!   that the partition's sort order is the line's (with the run's id and the `max` its
//!   slot counts under).
//!
//! The invariants: no key held by more than the `max` of whoever takes it, and no
//! freed slot left while someone waits for it. They hold under any interleaving because
//! every write a plan makes is conditioned on what it decided from:
//! - taking a slot increments the counter on `holders < max AND waiters = 0` (a counter
//!   not there yet is an empty line), so racing starts of one key never over-admit and
//!   need not have read the same counter;
//! - a finish that frees a slot of a line nobody waits in decrements it on `waiters =
//!   0` (and `holders > 1`; at one, it deletes the counter on `holders = 1`), so a
//!   waiter that joined since makes it fail and read again;
//! - every other change of a counter (joining a line, leaving it, a hand-over, several
//!   changes in one write) puts the counter whole on the `rev` it read — every write
//!   of a counter sets a new `rev`, so any change since the read fails it. The line's
//!   waiters are read after its counter, so an unchanged `rev` also means the waiters
//!   read are the line's;
//! - holder and waiter items are inserted on `attribute_not_exists`, deleted on
//!   existing (a waiter on its run's id), and a run handed a slot is written on the
//!   version read.
//!
//! A plan is computed from what the store read ([`SlotReads`]); what it lacks it asks
//! for ([`Need`]), and the store reads it and plans again from the start. A failed
//! condition means something moved since: the store reads again and plans again.

use std::collections::BTreeMap;
use std::time::Duration;

use siesta::ports::StoreError;
use siesta::{LimitSlot, QueuedAt, Run, RunId, RunStatus, TenantId, Timestamp};

use super::{
    Action, Billed, Condition, Expected, PlannedWrite, Role, StatesKept, TailKept, names, run_write,
};
use crate::item::*;
use crate::keys::*;

/// A counter's attribute: how many runs hold the key.
pub(crate) const HOLDERS: &str = "holders";
/// A counter's attribute: how many runs wait in the key's line.
pub(crate) const WAITERS: &str = "waiters";
/// A counter's attribute: the highest ticket in line (0 when nobody waits).
pub(crate) const LAST_TICKET: &str = "last_ticket";
/// A counter's attribute: a number each write of it sets anew, which a write planned
/// from the counter as read is conditioned on.
pub(crate) const REV: &str = "rev";
/// A waiter's attribute: the most runs that may hold the key for it to take a slot.
pub(crate) const MAX: &str = "max";

/// One key of one limit: a line.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Line {
    /// The limit's name.
    pub(crate) limit: String,
    /// The key.
    pub(crate) key: String,
}

impl Line {
    /// The line of a run's slot.
    pub(crate) fn of(slot: &LimitSlot) -> Line {
        Line {
            limit: slot.limit.clone(),
            key: slot.key.clone(),
        }
    }

    /// The line a queued run waits in.
    pub(crate) fn at(at: &QueuedAt) -> Line {
        Line {
            limit: at.limit.clone(),
            key: at.key.clone(),
        }
    }

    /// The partition of its holders and waiters.
    pub(crate) fn pk(&self, tenant: &TenantId) -> String {
        limit_line_pk(tenant, &self.limit, &self.key)
    }

    /// The key of its counter.
    pub(crate) fn counter_key(&self, tenant: &TenantId) -> Item {
        key(limits_pk(tenant), limit_counter_sk(&self.limit, &self.key))
    }
}

/// A line's counter, as read (a missing one is an empty line).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Counter {
    /// Runs holding the key.
    pub(crate) holders: u64,
    /// Runs in line.
    pub(crate) waiters: u64,
    /// The highest ticket in line, 0 for none.
    pub(crate) last_ticket: u64,
    /// The number its last write set.
    pub(crate) rev: u64,
}

/// A counter item read back (a missing number reads as 0).
pub(crate) fn counter_from_item(item: &Item) -> Result<Counter, StoreError> {
    let number = |name: &str| -> Result<u64, StoreError> {
        match item.get(name) {
            None => Ok(0),
            Some(_) => get_n(item, name, "limit counter"),
        }
    };
    Ok(Counter {
        holders: number(HOLDERS)?,
        waiters: number(WAITERS)?,
        last_ticket: number(LAST_TICKET)?,
        rev: number(REV)?,
    })
}

/// A run in line, as its waiter item says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Waiter {
    /// Its ticket.
    pub(crate) ticket: u64,
    /// The run.
    pub(crate) run: RunId,
    /// The most runs that may hold the key for it to take a slot.
    pub(crate) max: u32,
}

/// A waiter item read back.
pub(crate) fn waiter_from_item(item: &Item) -> Result<Waiter, StoreError> {
    let sk = get_s(item, SK, "limit waiter")?;
    Ok(Waiter {
        ticket: ticket_of_waiter_sk(sk).ok_or_else(|| {
            crate::error::corrupt("limit waiter", format!("{sk} is not a waiter's key"))
        })?,
        run: RunId(get_s(item, RUN_ID, "limit waiter")?.to_owned()),
        max: get_n(item, MAX, "limit waiter")?,
    })
}

/// What the store read for a plan, each read once.
#[derive(Debug, Clone, Default)]
pub(crate) struct SlotReads {
    /// Lines' counters (`None`: no counter, an empty line).
    pub(crate) counters: BTreeMap<Line, Option<Counter>>,
    /// The first waiter of a line with a ticket above the one given (`None`: none).
    pub(crate) waiters_after: BTreeMap<(Line, u64), Option<Waiter>>,
    /// The highest ticket in a line below the one given (`None`: none).
    pub(crate) tickets_before: BTreeMap<(Line, u64), Option<u64>>,
    /// Queued runs' items, read back, with their size (`None`: no such run).
    pub(crate) runs: BTreeMap<RunId, Option<(Run, usize)>>,
}

/// What a plan needs read before it can be made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Need {
    /// These lines' counters (one `BatchGetItem`).
    Counters(Vec<Line>),
    /// The first waiter of the line with a ticket above this one (a `Query`, `Limit 1`).
    WaiterAfter(Line, u64),
    /// The highest ticket of the line below this one (a `Query` backwards, `Limit 1`).
    TicketBefore(Line, u64),
    /// A queued run's item (a `GetItem`).
    Run(RunId),
}

/// The writes of a plan of the slots, beside the create's or the checkpoint's own.
#[derive(Debug, Clone)]
pub(crate) struct SlotPlan {
    /// The writes, all in the transaction.
    pub(crate) writes: Vec<PlannedWrite>,
    /// The runs it admits (pending, due at the write's time), as written.
    pub(crate) admitted: Vec<Run>,
}

/// A plan, or what it needs read first.
#[derive(Debug, Clone)]
pub(crate) enum Planned<T> {
    /// Made.
    Ready(T),
    /// Not yet: read this, and plan again.
    Need(Need),
}

/// The run `run` as created under its limits (pending as given when it holds every
/// slot; else queued where it waits, not due) and the writes that take its slots, by
/// the rule: in order, hold while the line is empty and the key has room, else join
/// the line. `rev` is the fresh number its counters' writes set.
pub(crate) fn admission(
    run: &Run,
    reads: &SlotReads,
    rev: u64,
    retention: Duration,
) -> Result<Planned<(Run, SlotPlan)>, StoreError> {
    let mut view = View::new(&run.tenant, run.updated_at, reads);
    let mut created = run.clone();
    if let Err(need) = view.take_from(&mut created, 0) {
        return Ok(Planned::Need(need));
    }
    let plan = view.plan(rev, retention)?;
    Ok(Planned::Ready((created, plan)))
}

/// The writes by which `stored` — the run as it was before the write that finishes it,
/// or cancels it while queued — leaves every line it is in, and the slots it held go
/// to the first in line, at `now` (the checkpoint's time). A run handed its last slot
/// is admitted: pending, due at `now`.
pub(crate) fn release(
    stored: &Run,
    now: Timestamp,
    reads: &SlotReads,
    rev: u64,
    retention: Duration,
) -> Result<Planned<SlotPlan>, StoreError> {
    let mut view = View::new(&stored.tenant, now, reads);
    if let Err(need) = view.release(stored) {
        return Ok(Planned::Need(need));
    }
    view.plan(rev, retention).map(Planned::Ready)
}

/// How many of `run`'s slots it holds: all, but from the one it waits for.
pub(crate) fn held(run: &Run) -> usize {
    match (&run.queued, run.status) {
        (Some(at), RunStatus::Queued) => run
            .limits
            .iter()
            .position(|s| s.limit == at.limit)
            .unwrap_or(run.limits.len()),
        _ => run.limits.len(),
    }
}

/// The most items a run's slots may add to its create's transaction: one counter and
/// one holder or waiter per slot.
pub(crate) fn admission_items(run: &Run) -> usize {
    2 * run.limits.len()
}

/// What a plan did to a counter, which decides the condition it is written on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    /// A run took a slot under this max.
    Hold(u32),
    /// A run holding a slot left.
    Leave,
    /// A run joined the line.
    Join,
    /// A run in line left it.
    Unjoin,
    /// The first in line was handed a slot (or dropped, a waiter whose run is not there).
    HandOver,
}

/// A line as the plan leaves it.
#[derive(Debug)]
struct LineState {
    read: Option<Counter>,
    now: Counter,
    ops: Vec<Op>,
    /// Holder items put (true) or deleted (false).
    holders: BTreeMap<RunId, bool>,
    /// Waiter items put: ticket → run, max.
    joined: BTreeMap<u64, (RunId, u32)>,
    /// Waiter items read and deleted: ticket → run.
    left: BTreeMap<u64, RunId>,
}

/// A queued run the plan changes: as read, its size, as the plan leaves it.
#[derive(Debug)]
struct Changed {
    read: Run,
    bytes: usize,
    now: Run,
}

/// The lines and runs a plan touches, as it changes them.
struct View<'a> {
    tenant: TenantId,
    now: Timestamp,
    reads: &'a SlotReads,
    lines: BTreeMap<Line, LineState>,
    runs: BTreeMap<RunId, Changed>,
    admitted: Vec<RunId>,
}

impl<'a> View<'a> {
    fn new(tenant: &TenantId, now: Timestamp, reads: &'a SlotReads) -> Self {
        View {
            tenant: tenant.clone(),
            now,
            reads,
            lines: BTreeMap::new(),
            runs: BTreeMap::new(),
            admitted: Vec::new(),
        }
    }

    /// The line `line`, from its counter as read; when it was not read, the counters of
    /// `also` not read yet are asked for with it.
    fn line(&mut self, line: &Line, also: &[LimitSlot]) -> Result<&mut LineState, Need> {
        // A line the plan has is one whose counter was read: reads only grow.
        let Some(read) = self.reads.counters.get(line).copied() else {
            let mut missing: Vec<Line> = also
                .iter()
                .map(Line::of)
                .filter(|l| !self.reads.counters.contains_key(l))
                .collect();
            if !missing.contains(line) {
                missing.insert(0, line.clone());
            }
            return Err(Need::Counters(missing));
        };
        Ok(self.lines.entry(line.clone()).or_insert_with(|| LineState {
            read,
            now: read.unwrap_or_default(),
            ops: Vec::new(),
            holders: BTreeMap::new(),
            joined: BTreeMap::new(),
            left: BTreeMap::new(),
        }))
    }

    /// Take `run`'s slots from its `from`-th on: whether it now holds them all (else it
    /// is queued where it joined a line).
    fn take_from(&mut self, run: &mut Run, from: usize) -> Result<bool, Need> {
        let slots = run.limits.clone();
        for slot in &slots[from.min(slots.len())..] {
            let line = Line::of(slot);
            let state = self.line(&line, &slots[from..])?;
            if state.now.waiters == 0 && state.now.holders < u64::from(slot.max) {
                state.now.holders += 1;
                state.holders.insert(run.id.clone(), true);
                state.ops.push(Op::Hold(slot.max));
                continue;
            }
            let ticket = state.now.last_ticket + 1;
            state.now.last_ticket = ticket;
            state.now.waiters += 1;
            state.joined.insert(ticket, (run.id.clone(), slot.max));
            state.ops.push(Op::Join);
            run.status = RunStatus::Queued;
            run.queued = Some(QueuedAt {
                limit: slot.limit.clone(),
                key: slot.key.clone(),
                ticket,
            });
            run.due_at = None;
            run.resend_after = None;
            return Ok(false);
        }
        run.queued = None;
        Ok(true)
    }

    /// `stored` leaves every line; the slots it held go to the first in line.
    fn release(&mut self, stored: &Run) -> Result<(), Need> {
        let held = held(stored);
        let all = stored.limits.clone();
        for slot in &stored.limits[..held] {
            let state = self.line(&Line::of(slot), &all)?;
            state.now.holders = state.now.holders.saturating_sub(1);
            state.holders.insert(stored.id.clone(), false);
            state.ops.push(Op::Leave);
        }
        if let (Some(at), RunStatus::Queued) = (&stored.queued, stored.status) {
            let line = Line::at(at);
            let reads = self.reads;
            let state = self.line(&line, &all)?;
            state.now.waiters = state.now.waiters.saturating_sub(1);
            state.left.insert(at.ticket, stored.id.clone());
            state.ops.push(Op::Unjoin);
            if at.ticket == state.now.last_ticket {
                // The last in line left: the line's last ticket is the one before it.
                state.now.last_ticket = match state.now.waiters {
                    0 => 0,
                    _ => match reads.tickets_before.get(&(line.clone(), at.ticket)) {
                        Some(before) => before.unwrap_or(0),
                        None => return Err(Need::TicketBefore(line, at.ticket)),
                    },
                };
            }
        }
        for slot in &stored.limits[..held] {
            self.hand_over(&Line::of(slot))?;
        }
        Ok(())
    }

    /// The first in `line`: (ticket, run, max, whether its waiter item was read).
    fn first_waiter(&self, line: &Line) -> Result<Option<(u64, RunId, u32, bool)>, Need> {
        let state = &self.lines[line];
        let stored = state.read.map_or(0, |c| c.waiters);
        if stored > state.left.len() as u64 {
            let mut after = 0;
            loop {
                match self.reads.waiters_after.get(&(line.clone(), after)) {
                    None => return Err(Need::WaiterAfter(line.clone(), after)),
                    Some(None) => break,
                    Some(Some(w)) if state.left.contains_key(&w.ticket) => after = w.ticket,
                    Some(Some(w)) => return Ok(Some((w.ticket, w.run.clone(), w.max, true))),
                }
            }
        }
        Ok(state
            .joined
            .iter()
            .next()
            .map(|(ticket, (run, max))| (*ticket, run.clone(), *max, false)))
    }

    /// The queued run `id` as the plan has it (`None`: there is no such run).
    fn queued_run(&mut self, id: &RunId) -> Result<Option<&mut Changed>, Need> {
        if !self.runs.contains_key(id) {
            match self.reads.runs.get(id) {
                None => return Err(Need::Run(id.clone())),
                Some(None) => return Ok(None),
                Some(Some((run, bytes))) => {
                    self.runs.insert(
                        id.clone(),
                        Changed {
                            read: run.clone(),
                            bytes: *bytes,
                            now: run.clone(),
                        },
                    );
                }
            }
        }
        Ok(self.runs.get_mut(id))
    }

    /// Give the freed slots of `line` to the first in line while its max lets one more
    /// hold the key; a run handed its last slot is admitted, one handed another goes on
    /// to take its next.
    fn hand_over(&mut self, line: &Line) -> Result<(), Need> {
        loop {
            let Some((ticket, id, max, was_read)) = self.first_waiter(line)? else {
                return Ok(());
            };
            if self.lines[line].now.holders >= u64::from(max) {
                return Ok(());
            }
            let now = self.now;
            let waiting = self.queued_run(&id)?.and_then(|changed| {
                let here = changed.now.status == RunStatus::Queued
                    && changed.now.queued.as_ref().is_some_and(|q| {
                        q.ticket == ticket && q.limit == line.limit && q.key == line.key
                    });
                here.then(|| changed.now.clone())
            });
            let Some(state) = self.lines.get_mut(line) else {
                return Ok(());
            };
            if was_read {
                state.left.insert(ticket, id.clone());
            } else {
                state.joined.remove(&ticket);
            }
            state.now.waiters = state.now.waiters.saturating_sub(1);
            if state.now.waiters == 0 {
                state.now.last_ticket = 0;
            }
            state.ops.push(Op::HandOver);
            // A waiter whose run does not wait here (none should be): dropped, so that
            // the line does not stall behind it.
            let Some(mut run) = waiting else { continue };
            state.now.holders += 1;
            state.holders.insert(id.clone(), true);
            let index = held(&run);
            let read_version = self.runs[&id].read.version;
            run.version = read_version + 1;
            run.updated_at = now;
            if self.take_from(&mut run, index + 1)? {
                run.status = RunStatus::Pending;
                run.due_at = Some(now);
                run.resend_after = None;
                self.admitted.push(id.clone());
            }
            if let Some(changed) = self.runs.get_mut(&id) {
                changed.now = run;
            }
        }
    }

    /// The writes: per line its counter's, its holders' and its waiters'; per run
    /// handed a slot, its run item's.
    fn plan(self, rev: u64, retention: Duration) -> Result<SlotPlan, StoreError> {
        let mut writes = Vec::new();
        for (line, state) in &self.lines {
            writes.extend(counter_write(&self.tenant, line, state, rev));
            let pk = line.pk(&self.tenant);
            for (run, holds) in &state.holders {
                let key = key(pk.clone(), limit_holder_sk(run));
                writes.push(match holds {
                    true => PlannedWrite::insert(Role::LimitHolder, key),
                    false => delete(
                        Role::LimitHolder,
                        key,
                        Condition {
                            expression: "attribute_exists(pk)".into(),
                            ..Condition::default()
                        },
                    ),
                });
            }
            let was = |run: &RunId| Condition {
                expression: "#run_id = :run_id".into(),
                names: names(&[("#run_id", RUN_ID)]),
                values: Item::from([(":run_id".to_owned(), s(run.as_str()))]),
            };
            // A ticket given again in the write that took it back (the line emptied,
            // or its last left) is one item: put over the one read.
            for (ticket, (run, max)) in &state.joined {
                let item = waiter_item(&pk, *ticket, run, *max);
                writes.push(match state.left.get(ticket) {
                    Some(before) => {
                        PlannedWrite::put(Role::LimitWaiter, item, Some(was(before)), true)
                    }
                    None => PlannedWrite::insert(Role::LimitWaiter, item),
                });
            }
            for (ticket, run) in &state.left {
                if state.joined.contains_key(ticket) {
                    continue;
                }
                writes.push(delete(
                    Role::LimitWaiter,
                    key(pk.clone(), limit_waiter_sk(*ticket)),
                    was(run),
                ));
            }
        }
        let mut admitted = Vec::new();
        for (id, changed) in &self.runs {
            if changed.now == changed.read {
                continue;
            }
            let expected = Expected {
                version: changed.read.version,
                epoch: None,
                first_event: None,
                lease_expires: None,
            };
            let states = StatesKept {
                before_bytes: changed.bytes,
                ..StatesKept::default()
            };
            writes.push(run_write(
                Role::AdmittedRun,
                &run_item(&changed.now, retention)?,
                &expected,
                TailKept::Kept,
                &states,
                true,
            )?);
            if self.admitted.contains(id) {
                admitted.push(changed.now.clone());
            }
        }
        // In the order they were admitted.
        admitted.sort_by_key(|r| self.admitted.iter().position(|id| *id == r.id));
        Ok(SlotPlan { writes, admitted })
    }
}

/// A waiter item.
fn waiter_item(pk: &str, ticket: u64, run: &RunId, max: u32) -> Item {
    let mut item = key(pk.to_owned(), limit_waiter_sk(ticket));
    item.insert(RUN_ID.into(), s(run.as_str()));
    item.insert(MAX.into(), n(max));
    item
}

/// A counter item as a whole.
fn counter_item(tenant: &TenantId, line: &Line, counter: &Counter) -> Item {
    let mut item = line.counter_key(tenant);
    item.insert(HOLDERS.into(), n(counter.holders));
    item.insert(WAITERS.into(), n(counter.waiters));
    item.insert(LAST_TICKET.into(), n(counter.last_ticket));
    item.insert(REV.into(), n(counter.rev));
    item
}

/// A delete in the transaction, on `condition`, billed by the item's size (a counter's,
/// a holder's or a waiter's: well under a unit).
fn delete(role: Role, key: Item, condition: Condition) -> PlannedWrite {
    PlannedWrite {
        role,
        billed: Billed::Bytes(item_size(&key) + 40),
        action: Action::Delete { key },
        condition: Some(condition),
        transactional: true,
        run_after: None,
    }
}

/// The write of `line`'s counter, as the plan changed it (none when it did not).
fn counter_write(
    tenant: &TenantId,
    line: &Line,
    state: &LineState,
    rev: u64,
) -> Option<PlannedWrite> {
    let whole = counter_item(tenant, line, &Counter { rev, ..state.now });
    let bytes = item_size(&whole);
    // Its names serve the condition too (one request holds both; none may go unused).
    let update = |expression: &str, attrs: &[(&str, &str)], values: Item, condition| PlannedWrite {
        role: Role::LimitCounter,
        action: Action::Update {
            key: line.counter_key(tenant),
            expression: expression.to_owned(),
            names: names(attrs),
            values,
        },
        condition: Some(condition),
        transactional: true,
        billed: Billed::Bytes(bytes),
        run_after: None,
    };
    let read = state.read;
    let empty_line = read.is_none_or(|c| c.waiters == 0);
    match (state.ops.as_slice(), read) {
        ([], _) => None,
        // One slot taken of a line nobody waits in: an increment, on room and an empty
        // line at the write, whatever the counter was when read.
        ([Op::Hold(max)], _) if empty_line => Some(update(
            "ADD #holders :one SET #rev = :rev, #waiters = if_not_exists(#waiters, :zero), \
             #last = if_not_exists(#last, :zero)",
            &[
                ("#holders", HOLDERS),
                ("#waiters", WAITERS),
                ("#last", LAST_TICKET),
                ("#rev", REV),
            ],
            Item::from([
                (":one".to_owned(), n(1)),
                (":zero".to_owned(), n(0)),
                (":rev".to_owned(), n(rev)),
            ]),
            Condition {
                expression: "attribute_not_exists(pk) OR (#holders < :max AND #waiters = :zero)"
                    .into(),
                names: Default::default(),
                values: Item::from([(":max".to_owned(), n(*max))]),
            },
        )),
        // One slot freed of a line nobody waits in: a decrement while nobody waits.
        ([Op::Leave], Some(c)) if c.waiters == 0 && c.holders > 1 => Some(update(
            "ADD #holders :minus_one SET #rev = :rev",
            &[("#holders", HOLDERS), ("#waiters", WAITERS), ("#rev", REV)],
            Item::from([
                (":minus_one".to_owned(), n(-1)),
                (":rev".to_owned(), n(rev)),
            ]),
            Condition {
                expression: "#holders > :one AND #waiters = :zero".into(),
                names: Default::default(),
                values: Item::from([(":one".to_owned(), n(1)), (":zero".to_owned(), n(0))]),
            },
        )),
        // The last holder of a line nobody waits in: the counter goes.
        ([Op::Leave], Some(c)) if c.waiters == 0 => Some(delete(
            Role::LimitCounter,
            line.counter_key(tenant),
            Condition {
                expression: "#holders = :one AND #waiters = :zero".into(),
                names: names(&[("#holders", HOLDERS), ("#waiters", WAITERS)]),
                values: Item::from([(":one".to_owned(), n(1)), (":zero".to_owned(), n(0))]),
            },
        )),
        // Anything else: the counter as the plan leaves it, on the counter as read.
        (_, read) => {
            let condition = match read {
                Some(c) => Condition {
                    expression: "#rev = :read_rev".into(),
                    names: names(&[("#rev", REV)]),
                    values: Item::from([(":read_rev".to_owned(), n(c.rev))]),
                },
                None => Condition::new_item(),
            };
            if state.now.holders == 0 && state.now.waiters == 0 {
                return read
                    .map(|_| delete(Role::LimitCounter, line.counter_key(tenant), condition));
            }
            Some(PlannedWrite::put(
                Role::LimitCounter,
                whole,
                Some(condition),
                true,
            ))
        }
    }
}

#[cfg(test)]
mod tests;
