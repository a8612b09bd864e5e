//! Step limits' slots in the table ([`siesta::ports::RunStore::take_step_slot`],
//! [`siesta::ports::RunStore::give_back_step_slot`]): at most `max` attempts in flight
//! per key, by the rule of [`siesta::flow::slots`] with holders that lapse.
//!
//! Three kinds of item, in the key's own partition ([`step_slot_pk`]):
//! - the **line** item ([`RECORD_SK`]): `rev`, a fresh number every write of the
//!   partition sets;
//! - a **holder** per attempt holding a slot ([`step_holder_sk`]): whose (`of_tenant`,
//!   `run_id`, `position`) and under which lease (`epoch`) or, a slot handed to a
//!   waiting run, until when (`granted_until`);
//! - a **waiter** per attempt in line ([`step_waiter_sk`], by ticket: the partition's
//!   order is the line's), whose.
//!
//! The invariant (never more than `max` holders that hold, no free slot while someone
//! waits) holds under any interleaving because every plan that writes puts the line
//! item on the `rev` it read before it read the partition: a write since fails it, and
//! the store reads and plans again. A run handed a slot while it waits is made due on
//! the version (and lease expiry) read, in the same transaction.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use siesta::ports::{HandedSlot, StepSlot, StepSlotHolder, StoreError};
use siesta::{Run, RunId, RunStatus, TenantId, Timestamp};

use super::{
    Action, Billed, Condition, Expected, PlannedWrite, Role, StatesKept, TailKept, WritePlan,
    names, run_write,
};
use crate::item::*;
use crate::keys::*;

/// The line item's attribute: a number each write of the partition sets anew.
pub(crate) const STEP_REV: &str = "rev";
/// A holder's or waiter's attribute: its run's tenant.
pub(crate) const OF_TENANT: &str = "of_tenant";
/// A holder's or waiter's attribute: its step's position.
pub(crate) const POSITION: &str = "position";
/// A holder's attribute: the epoch of the lease it holds under.
pub(crate) const EPOCH_HELD: &str = "epoch";
/// A holder's attribute: the end of the grant of a slot handed to a waiting run (ms).
pub(crate) const GRANTED_UNTIL: &str = "granted_until";

/// Whose attempt: tenant, run, position.
pub(crate) type Whose = (String, String, String);

fn whose(holder: &StepSlotHolder) -> Whose {
    (
        holder.tenant.0.clone(),
        holder.run_id.0.clone(),
        holder.position.0.clone(),
    )
}

/// A holder item read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Holding {
    /// Whose.
    pub(crate) whose: Whose,
    /// The epoch of the lease it holds under.
    pub(crate) epoch: Option<u64>,
    /// The end of its grant.
    pub(crate) granted_until: Option<Timestamp>,
}

/// A waiter item read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Waiting {
    /// Its ticket.
    pub(crate) ticket: u64,
    /// Whose.
    pub(crate) whose: Whose,
}

/// What the store read for a plan.
#[derive(Debug, Clone, Default)]
pub(crate) struct StepSlotReads {
    /// The line item's `rev` (`None`: no line item).
    pub(crate) rev: Option<u64>,
    /// The holders.
    pub(crate) holders: Vec<Holding>,
    /// The waiters, by ticket.
    pub(crate) waiters: Vec<Waiting>,
    /// Runs' items with their size, by (tenant, run) (`None`: no such run).
    pub(crate) runs: BTreeMap<(String, String), Option<(Run, usize)>>,
}

/// A plan, or the run it needs read first.
#[derive(Debug, Clone)]
pub(crate) enum StepPlanned {
    /// Made.
    Ready(StepSlotPlan),
    /// Not yet: read this run's item, and plan again.
    NeedRun(TenantId, RunId),
}

/// A plan: the answer and the writes (none when nothing changes).
#[derive(Debug, Clone)]
pub(crate) struct StepSlotPlan {
    /// The attempt's slot (for a take).
    pub(crate) slot: StepSlot,
    /// The runs handed a slot.
    pub(crate) handed: Vec<HandedSlot>,
    /// The writes, all in one transaction.
    pub(crate) plan: WritePlan,
}

/// The partition's items read back into `reads` (the line item, holders, waiters).
pub(crate) fn step_slot_reads(items: &[Item]) -> Result<StepSlotReads, StoreError> {
    let what = "step slot";
    let mut reads = StepSlotReads::default();
    for item in items {
        let sk = get_s(item, SK, what)?;
        if sk == RECORD_SK {
            reads.rev = Some(get_n(item, STEP_REV, what)?);
            continue;
        }
        let who = (
            get_s(item, OF_TENANT, what)?.to_owned(),
            get_s(item, RUN_ID, what)?.to_owned(),
            get_s(item, POSITION, what)?.to_owned(),
        );
        if let Some(ticket) = ticket_of_step_waiter_sk(sk) {
            reads.waiters.push(Waiting { ticket, whose: who });
        } else {
            reads.holders.push(Holding {
                whose: who,
                epoch: item
                    .get(EPOCH_HELD)
                    .map(|_| get_n(item, EPOCH_HELD, what))
                    .transpose()?,
                granted_until: item
                    .get(GRANTED_UNTIL)
                    .map(|_| get_n(item, GRANTED_UNTIL, what).map(Timestamp))
                    .transpose()?,
            });
        }
    }
    reads.waiters.sort_by_key(|w| w.ticket);
    Ok(reads)
}

/// The plan's state as it goes.
struct Line<'a> {
    key: &'a str,
    reads: &'a StepSlotReads,
    now: Timestamp,
    writes: Vec<PlannedWrite>,
    holders: BTreeMap<Whose, Holding>,
    waiters: Vec<Waiting>,
    handed: Vec<HandedSlot>,
    made_due: BTreeSet<(String, String)>,
    retention: Duration,
}

/// The run of `whose` as read, or what to read.
fn run_of<'a>(
    reads: &'a StepSlotReads,
    whose: &Whose,
) -> Result<Option<&'a (Run, usize)>, (String, String)> {
    let id = (whose.0.clone(), whose.1.clone());
    match reads.runs.get(&id) {
        Some(run) => Ok(run.as_ref()),
        None => Err(id),
    }
}

impl<'a> Line<'a> {
    fn new(key: &'a str, reads: &'a StepSlotReads, now: Timestamp, retention: Duration) -> Self {
        Line {
            key,
            reads,
            now,
            writes: Vec::new(),
            holders: reads
                .holders
                .iter()
                .map(|h| (h.whose.clone(), h.clone()))
                .collect(),
            waiters: reads.waiters.clone(),
            handed: Vec::new(),
            made_due: BTreeSet::new(),
            retention,
        }
    }

    fn unhold(&mut self, whose: &Whose) {
        if self.holders.remove(whose).is_some() {
            self.writes.push(PlannedWrite {
                role: Role::StepHolder,
                action: Action::Delete {
                    key: key(
                        step_slot_pk(self.key),
                        step_holder_sk(&whose.0, &whose.1, &whose.2),
                    ),
                },
                condition: None,
                transactional: true,
                billed: Billed::Bytes(WRITE_UNIT),
                run_after: None,
            });
        }
    }

    fn hold(&mut self, whose: &Whose, epoch: Option<u64>, granted_until: Option<Timestamp>) {
        let mut item = key(
            step_slot_pk(self.key),
            step_holder_sk(&whose.0, &whose.1, &whose.2),
        );
        item.insert(OF_TENANT.into(), s(&whose.0));
        item.insert(RUN_ID.into(), s(&whose.1));
        item.insert(POSITION.into(), s(&whose.2));
        if let Some(epoch) = epoch {
            item.insert(EPOCH_HELD.into(), n(epoch));
        }
        if let Some(until) = granted_until {
            item.insert(GRANTED_UNTIL.into(), n(until.0));
        }
        self.writes
            .push(PlannedWrite::put(Role::StepHolder, item, None, true));
        self.holders.insert(
            whose.clone(),
            Holding {
                whose: whose.clone(),
                epoch,
                granted_until,
            },
        );
    }

    /// Let go every holder that no longer holds.
    fn lapse(&mut self) -> Result<(), (String, String)> {
        let mut missing = Vec::new();
        let mut lapsed = Vec::new();
        for held in self.holders.values() {
            let holds = match held.epoch {
                None => held.granted_until.is_some_and(|until| until > self.now),
                Some(epoch) => match run_of(self.reads, &held.whose) {
                    Err(id) => {
                        missing.push(id);
                        continue;
                    }
                    Ok(run) => run.is_some_and(|(run, _)| {
                        !run.status.is_finished()
                            && run
                                .lease
                                .as_ref()
                                .is_some_and(|l| l.epoch.0 == epoch && l.expires_at > self.now)
                    }),
                },
            };
            if !holds {
                lapsed.push(held.whose.clone());
            }
        }
        if let Some(id) = missing.into_iter().next() {
            return Err(id);
        }
        for whose in lapsed {
            self.unhold(&whose);
        }
        Ok(())
    }

    /// Hand free slots to the first in line.
    fn hand_over(
        &mut self,
        max: u32,
        grant_for: Duration,
    ) -> Result<Result<(), NeedRun>, StoreError> {
        while (self.holders.len() as u64) < u64::from(max) && !self.waiters.is_empty() {
            let first = self.waiters[0].clone();
            let run = match run_of(self.reads, &first.whose) {
                Err(id) => return Ok(Err(id)),
                Ok(run) => run.cloned(),
            };
            self.waiters.remove(0);
            self.writes.push(PlannedWrite {
                role: Role::StepWaiter,
                action: Action::Delete {
                    key: key(step_slot_pk(self.key), step_waiter_sk(first.ticket)),
                },
                condition: None,
                transactional: true,
                billed: Billed::Bytes(WRITE_UNIT),
                run_after: None,
            });
            let Some((run, bytes)) = run.filter(|(r, _)| !r.status.is_finished()) else {
                continue;
            };
            self.hold(&first.whose, None, Some(self.now.plus(grant_for)));
            let id = (run.tenant.0.clone(), run.id.0.clone());
            // A waiting run is made due now. So is a running one, between its look at
            // the line and its suspension: its suspension keeps a due time at or
            // before now that it finds written, rather than sleeping past the slot.
            let waiting =
                run.status == RunStatus::Waiting && run.due_at.is_none_or(|d| d > self.now);
            if (waiting || run.status == RunStatus::Running) && self.made_due.insert(id) {
                let mut due = run.clone();
                due.due_at = Some(self.now);
                due.resend_after = None;
                due.version += 1;
                let expected = Expected {
                    version: run.version,
                    epoch: None,
                    first_event: None,
                    lease_expires: Some(run.lease.as_ref().map(|l| l.expires_at)),
                };
                let states = StatesKept {
                    before_bytes: bytes,
                    ..StatesKept::default()
                };
                self.writes.push(run_write(
                    Role::AdmittedRun,
                    &run_item(&due, self.retention)?,
                    &expected,
                    TailKept::Kept,
                    &states,
                    true,
                )?);
            }
            let handed = HandedSlot {
                tenant: run.tenant.clone(),
                run_id: run.id.clone(),
            };
            if !self.handed.contains(&handed) {
                self.handed.push(handed);
            }
        }
        Ok(Ok(()))
    }

    /// The plan: the line item put on the `rev` read when anything is written.
    fn finish(mut self, slot: StepSlot, rev: u64) -> StepSlotPlan {
        // One write per item in a transaction: an item written twice (a holder let go
        // and handed a slot again) keeps its last.
        let mut seen = BTreeSet::new();
        let mut writes: Vec<PlannedWrite> = self
            .writes
            .into_iter()
            .rev()
            .filter(|w| seen.insert(written_key(w)))
            .collect();
        writes.reverse();
        self.writes = writes;
        if !self.writes.is_empty() {
            let mut line = key(step_slot_pk(self.key), RECORD_SK);
            line.insert(STEP_REV.into(), n(rev));
            let condition = match self.reads.rev {
                Some(read) => Condition {
                    expression: "#rev = :rev".into(),
                    names: names(&[("#rev", STEP_REV)]),
                    values: [(":rev".to_owned(), n(read))].into_iter().collect(),
                },
                None => Condition::new_item(),
            };
            self.writes.push(PlannedWrite::put(
                Role::StepLine,
                line,
                Some(condition),
                true,
            ));
        }
        StepSlotPlan {
            slot,
            handed: self.handed,
            plan: WritePlan {
                writes: self.writes,
            },
        }
    }
}

/// What a holder or waiter item is billed: a small item, one unit.
const WRITE_UNIT: usize = 200;

/// The (tenant, run) whose item a plan needs read.
pub(crate) type NeedRun = (String, String);

/// [`siesta::ports::RunStore::take_step_slot`]'s plan from `reads`; `rev` is the fresh
/// number the line item's write sets.
#[allow(clippy::too_many_arguments)]
pub(crate) fn take_step_slot(
    key: &str,
    max: u32,
    holder: &StepSlotHolder,
    now: Timestamp,
    grant_for: Duration,
    reads: &StepSlotReads,
    rev: u64,
    retention: Duration,
) -> Result<StepPlanned, StoreError> {
    let mut line = Line::new(key, reads, now, retention);
    if let Err(id) = line.lapse() {
        return Ok(need(id));
    }
    if let Err(id) = line.hand_over(max, grant_for)? {
        return Ok(need(id));
    }
    let mine = whose(holder);
    line.handed
        .retain(|h| !(h.tenant == holder.tenant && h.run_id == holder.run_id));
    if let Some(held) = line.holders.get(&mine) {
        if held.epoch != Some(holder.epoch.0) || held.granted_until.is_some() {
            line.hold(&mine, Some(holder.epoch.0), None);
        }
        return Ok(StepPlanned::Ready(line.finish(StepSlot::Held, rev)));
    }
    let ticket = match line.waiters.iter().find(|w| w.whose == mine) {
        Some(w) => w.ticket,
        None => {
            if line.waiters.is_empty() && (line.holders.len() as u64) < u64::from(max) {
                line.hold(&mine, Some(holder.epoch.0), None);
                return Ok(StepPlanned::Ready(line.finish(StepSlot::Held, rev)));
            }
            let ticket = line.waiters.last().map_or(1, |w| w.ticket + 1);
            let mut item = key_of_waiter(key, ticket);
            item.insert(OF_TENANT.into(), s(&mine.0));
            item.insert(RUN_ID.into(), s(&mine.1));
            item.insert(POSITION.into(), s(&mine.2));
            line.writes
                .push(PlannedWrite::insert(Role::StepWaiter, item));
            line.waiters.push(Waiting {
                ticket,
                whose: mine,
            });
            ticket
        }
    };
    let position = line.waiters.iter().filter(|w| w.ticket <= ticket).count() as u64;
    Ok(StepPlanned::Ready(
        line.finish(StepSlot::Queued { position }, rev),
    ))
}

/// [`siesta::ports::RunStore::give_back_step_slot`]'s plan from `reads`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn give_back_step_slot(
    key: &str,
    max: u32,
    holder: &StepSlotHolder,
    now: Timestamp,
    grant_for: Duration,
    reads: &StepSlotReads,
    rev: u64,
    retention: Duration,
) -> Result<StepPlanned, StoreError> {
    let mut line = Line::new(key, reads, now, retention);
    line.unhold(&whose(holder));
    if let Err(id) = line.lapse() {
        return Ok(need(id));
    }
    if let Err(id) = line.hand_over(max, grant_for)? {
        return Ok(need(id));
    }
    Ok(StepPlanned::Ready(line.finish(StepSlot::Held, rev)))
}

fn key_of_waiter(slot_key: &str, ticket: u64) -> Item {
    key(step_slot_pk(slot_key), step_waiter_sk(ticket))
}

fn need((tenant, run): NeedRun) -> StepPlanned {
    StepPlanned::NeedRun(TenantId(tenant), RunId(run))
}

/// The item a write writes: its key.
fn written_key(write: &PlannedWrite) -> (String, String) {
    let item = match &write.action {
        Action::Put(item) => item,
        Action::Update { key, .. } | Action::Check { key } | Action::Delete { key } => key,
    };
    let part = |name: &str| get_s(item, name, "write").unwrap_or_default().to_owned();
    (part(PK), part(SK))
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{RETENTION, run};
    use super::*;
    use siesta::{FencingEpoch, Lease, Position};

    const NOW: Timestamp = Timestamp(1_000_000);
    const GRANT: Duration = Duration::from_secs(30);

    fn holder(run: &str, epoch: u64) -> StepSlotHolder {
        StepSlotHolder {
            tenant: TenantId("t".into()),
            run_id: RunId(run.into()),
            position: Position("call#0".into()),
            epoch: FencingEpoch(epoch),
        }
    }

    /// Run `id` of tenant `t` in `status`, leased at `epoch` until `until` if given.
    fn leased(id: &str, status: RunStatus, lease: Option<(u64, Timestamp)>) -> (Run, usize) {
        let mut r = run(status);
        r.id = RunId(id.into());
        if status == RunStatus::Waiting {
            // Waiting on nothing but its slot: not due.
            r.due_at = None;
        }
        r.lease = lease.map(|(epoch, expires_at)| Lease {
            owner: "x".into(),
            expires_at,
            epoch: FencingEpoch(epoch),
        });
        (r, 300)
    }

    fn held_by(id: &str, epoch: u64) -> Holding {
        Holding {
            whose: whose(&holder(id, epoch)),
            epoch: Some(epoch),
            granted_until: None,
        }
    }

    fn take(reads: &StepSlotReads, id: &str, max: u32) -> StepPlanned {
        take_step_slot("k", max, &holder(id, 1), NOW, GRANT, reads, 7, RETENTION).unwrap()
    }

    fn ready(planned: StepPlanned) -> StepSlotPlan {
        match planned {
            StepPlanned::Ready(plan) => plan,
            StepPlanned::NeedRun(t, r) => panic!("needs {t:?} {r:?}"),
        }
    }

    fn line_write(plan: &StepSlotPlan) -> &PlannedWrite {
        plan.plan.of(Role::StepLine).expect("the line item")
    }

    #[test]
    fn a_free_slot_is_held_and_the_line_item_written_on_its_absence() {
        // GIVEN an empty line WHEN an attempt asks THEN it holds: its holder and the
        // line item, inserted (no line item read)
        let plan = ready(take(&StepSlotReads::default(), "a", 2));
        assert_eq!(plan.slot, StepSlot::Held);
        let held = plan.plan.of(Role::StepHolder).unwrap().item().unwrap();
        assert_eq!(held.get(EPOCH_HELD), Some(&n(1)));
        assert_eq!(line_write(&plan).condition, Some(Condition::new_item()));
        assert_eq!(line_write(&plan).item().unwrap().get(STEP_REV), Some(&n(7)));
        assert!(plan.plan.writes.iter().all(|w| w.transactional));
    }

    #[test]
    fn a_full_key_queues_and_asking_again_keeps_the_place_writing_nothing() {
        // GIVEN two live holders of a key of two
        let alive = Some((1, NOW.plus(GRANT)));
        let mut reads = StepSlotReads {
            rev: Some(5),
            holders: vec![held_by("a", 1), held_by("b", 1)],
            ..StepSlotReads::default()
        };
        for id in ["a", "b"] {
            reads.runs.insert(
                ("t".into(), id.into()),
                Some(leased(id, RunStatus::Running, alive)),
            );
        }
        // WHEN a third asks THEN it joins the line, on the rev read
        let plan = ready(take(&reads, "c", 2));
        assert_eq!(plan.slot, StepSlot::Queued { position: 1 });
        let waiter = plan.plan.of(Role::StepWaiter).unwrap().item().unwrap();
        assert_eq!(waiter.get(SK), Some(&s(step_waiter_sk(1))));
        assert_eq!(
            line_write(&plan)
                .condition
                .as_ref()
                .unwrap()
                .values
                .get(":rev"),
            Some(&n(5))
        );
        // WHEN it asks again THEN the same place, nothing written
        reads.waiters.push(Waiting {
            ticket: 1,
            whose: whose(&holder("c", 1)),
        });
        let again = ready(take(&reads, "c", 2));
        assert_eq!(again.slot, StepSlot::Queued { position: 1 });
        assert!(again.plan.writes.is_empty());
    }

    #[test]
    fn a_lapsed_holder_is_let_go_and_its_slot_handed_to_the_first_waiting_run_made_due() {
        // GIVEN a holder whose lease moved to another epoch, and a waiting run in line
        let mut reads = StepSlotReads {
            rev: Some(5),
            holders: vec![held_by("a", 1)],
            waiters: vec![Waiting {
                ticket: 3,
                whose: whose(&holder("w", 1)),
            }],
            ..StepSlotReads::default()
        };
        let planned = take(&reads, "z", 1);
        // THEN the plan first asks for the holder's run
        assert!(matches!(planned, StepPlanned::NeedRun(_, ref r) if r.0 == "a"));
        reads.runs.insert(
            ("t".into(), "a".into()),
            Some(leased("a", RunStatus::Running, Some((2, NOW.plus(GRANT))))),
        );
        reads.runs.insert(
            ("t".into(), "w".into()),
            Some(leased("w", RunStatus::Waiting, None)),
        );
        // WHEN another attempt asks
        let plan = ready(take(&reads, "z", 1));
        // THEN the waiting run is handed the slot (granted), made due on its version,
        // and the asker queues behind no one but holds nothing
        assert_eq!(
            plan.handed,
            vec![HandedSlot {
                tenant: TenantId("t".into()),
                run_id: RunId("w".into()),
            }]
        );
        assert_eq!(plan.slot, StepSlot::Queued { position: 1 });
        let due = plan.plan.of(Role::AdmittedRun).unwrap();
        assert_eq!(
            due.condition.as_ref().unwrap().values.get(":v"),
            Some(&n(3))
        );
        let holders: Vec<_> = plan
            .plan
            .writes
            .iter()
            .filter(|w| w.role == Role::StepHolder)
            .collect();
        assert_eq!(holders.len(), 2, "a's deleted, w's put");
        let granted = holders.iter().find_map(|w| w.item()).unwrap();
        assert_eq!(granted.get(GRANTED_UNTIL), Some(&n(NOW.plus(GRANT).0)));
    }

    #[test]
    fn an_item_let_go_and_written_again_is_written_once() {
        // GIVEN a holder of an old epoch WHEN its run's step asks at its new epoch
        let mut reads = StepSlotReads {
            rev: Some(1),
            holders: vec![held_by("a", 1)],
            ..StepSlotReads::default()
        };
        reads.runs.insert(
            ("t".into(), "a".into()),
            Some(leased("a", RunStatus::Running, Some((2, NOW.plus(GRANT))))),
        );
        let plan = ready(
            take_step_slot("k", 1, &holder("a", 2), NOW, GRANT, &reads, 9, RETENTION).unwrap(),
        );
        // THEN it holds, its holder item put once at the new epoch
        assert_eq!(plan.slot, StepSlot::Held);
        let writes: Vec<_> = plan
            .plan
            .writes
            .iter()
            .filter(|w| w.role == Role::StepHolder)
            .collect();
        assert_eq!(writes.len(), 1);
        assert_eq!(writes[0].item().unwrap().get(EPOCH_HELD), Some(&n(2)));
    }

    #[test]
    fn giving_back_hands_the_slot_on_and_a_finished_waiter_is_skipped() {
        let mut reads = StepSlotReads {
            rev: Some(1),
            holders: vec![held_by("a", 1)],
            waiters: vec![
                Waiting {
                    ticket: 1,
                    whose: whose(&holder("gone", 1)),
                },
                Waiting {
                    ticket: 2,
                    whose: whose(&holder("w", 1)),
                },
            ],
            ..StepSlotReads::default()
        };
        reads.runs.insert(
            ("t".into(), "gone".into()),
            Some(leased("gone", RunStatus::Completed, None)),
        );
        reads.runs.insert(
            ("t".into(), "w".into()),
            Some(leased("w", RunStatus::Running, Some((1, NOW.plus(GRANT))))),
        );
        let plan = ready(
            give_back_step_slot("k", 1, &holder("a", 1), NOW, GRANT, &reads, 2, RETENTION).unwrap(),
        );
        assert_eq!(plan.handed.len(), 1);
        assert_eq!(plan.handed[0].run_id, RunId("w".into()));
        // A running run, between its look at the line and its suspension, is made due
        // now, on its lease as read: its suspension keeps that due time.
        let made_due = plan
            .plan
            .of(Role::AdmittedRun)
            .expect("the run is made due");
        let (indexed, _) = made_due.run_after.as_ref().expect("a run item's write");
        assert_eq!(indexed.get(DUE_AT), Some(&n(NOW.0)));
        let condition = made_due.condition.as_ref().unwrap();
        assert!(
            condition
                .expression
                .contains("#lease_expires = :lease_expires"),
            "{}",
            condition.expression
        );
        let waiters_deleted = plan
            .plan
            .writes
            .iter()
            .filter(|w| w.role == Role::StepWaiter)
            .count();
        assert_eq!(waiters_deleted, 2);
    }

    #[test]
    fn the_partition_reads_back_into_holders_waiters_and_rev() {
        let pk = step_slot_pk("k");
        let mut line = key(pk.clone(), RECORD_SK);
        line.insert(STEP_REV.into(), n(4));
        let mut waiter = key(pk.clone(), step_waiter_sk(2));
        let mut held = key(pk, step_holder_sk("t", "a", "call#0"));
        for item in [&mut waiter, &mut held] {
            item.insert(OF_TENANT.into(), s("t"));
            item.insert(RUN_ID.into(), s("a"));
            item.insert(POSITION.into(), s("call#0"));
        }
        held.insert(EPOCH_HELD.into(), n(3));
        let reads = step_slot_reads(&[held, waiter, line]).unwrap();
        assert_eq!(reads.rev, Some(4));
        assert_eq!(reads.holders, vec![held_by("a", 3)]);
        assert_eq!(reads.waiters[0].ticket, 2);
    }
}
