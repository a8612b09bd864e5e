//! What each write of the run store puts in the table, decided in one place: pure
//! functions that turn a create, a claim or a renewal, a checkpoint and a delivery into
//! a [`WritePlan`] — the items, update expressions and conditions it writes, whether in
//! a transaction, what each is billed, and the run item it leaves for the indexes — so
//! that `store/` only sends what they return and the cost breakdown
//! ([`crate::AwsBackend::written_items`]) is tallied from the same plans.
//!
//! The size rules live here too: DynamoDB bills a write by the item's size rounded up
//! to [`WRITE_UNIT_BYTES`] (twice in a transaction), so a plan keeps the run item —
//! which every claim, renewal and delivery rewrites — within one unit where it can,
//! with [`CLAIM_ROOM`] to spare for the lease a claim adds.
//!
//! A file per write: `create.rs` (a run and its first event, a child run, the tenant's
//! count of unfinished runs), `claim.rs` (the claim and the lease renewal),
//! `checkpoint.rs` (a step's checkpoint kept in the run item as its tail, and the
//! checkpoint in a transaction — a finishing checkpoint is one of those), `delivery.rs`
//! (an accepted delivery), `run.rs` (a whole run item written over the stored one, what
//! the delivery and the checkpoint share), `limits.rs` (concurrency limits' slots:
//! taken in a create's transaction, freed and handed on in a finishing checkpoint's),
//! `rate_turns.rs` (step rate limits' turns: the key's last turn, the turns kept),
//! `step_slots.rs` (step limits' slots: holders that lapse, a line handed slots),
//! `schedules.rs` (a schedule's state, one conditional put), `action_jobs.rs` (a bulk
//! action's job: a conditional put, in a transaction with its place among the active
//! jobs when it starts or ends).
//! Nothing here sends a request.

mod action_jobs;
mod checkpoint;
mod claim;
mod create;
mod debounces;
mod delivery;
#[cfg(test)]
mod fixtures;
mod limits;
mod rate_turns;
mod run;
mod schedules;
mod step_slots;
mod workflow_pauses;

pub(crate) use action_jobs::*;
pub(crate) use checkpoint::*;
pub(crate) use claim::*;
pub(crate) use create::*;
pub(crate) use debounces::*;
pub(crate) use delivery::*;
pub(crate) use limits::*;
pub(crate) use rate_turns::*;
pub(crate) use run::*;
pub(crate) use schedules::*;
pub(crate) use step_slots::*;
pub(crate) use workflow_pauses::*;

use std::collections::HashMap;

use crate::index_writes::{IndexWrite, index_writes, indexed_part};
use crate::item::{Item, item_size};

/// DynamoDB's write unit: an item's size is billed rounded up to it.
pub(crate) const WRITE_UNIT_BYTES: usize = 1024;

/// Room a run item holding a tail leaves under [`WRITE_UNIT_BYTES`] for the lease the
/// claim that follows adds (owner, expiry, epoch: about 70 bytes), so that the claim
/// stays one unit too.
pub(crate) const CLAIM_ROOM: usize = 100;

/// The largest item DynamoDB stores.
#[cfg(test)]
pub(crate) const MAX_ITEM_BYTES: usize = 400 * 1024;

/// What a planned write is, so that a cancellation reason can be traced to its cause
/// and the cost breakdown can name it ([`Role::label`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// The run item, in a transaction (a create's or a checkpoint's), or a claim's or
    /// a renewal's update.
    Run,
    /// The run item written by a step's checkpoint, holding its tail.
    RunWithTail,
    /// A tail archived as the checkpoint item it stands for, before the run item's
    /// write replaces it.
    TailArchived,
    /// A checkpoint item: the checkpoint's journal entries and timeline events.
    Checkpoint,
    /// A run's first timeline event in an item of its own (when the run item has no room
    /// for it).
    Timeline,
    /// A callback record a checkpoint closes.
    Callback,
    /// A callback record a checkpoint opens, put before its transaction.
    CallbackOpened,
    /// A tool call's record.
    ToolCall,
    /// A child run's run item.
    ChildRun,
    /// A child run's first event in an item of its own.
    ChildTimeline,
    /// A delivery's dedup record.
    DeliveryRecord,
    /// A delivery's timeline event in an item of its own.
    DeliveryTimeline,
    /// The run a delivery is delivered to.
    DeliveryRun,
    /// The callback record a delivery closes or checks.
    DeliveryCallback,
    /// The tenant's count of unfinished runs.
    Quota,
    /// The counter of one key of a concurrency limit: how many hold it, how many wait.
    LimitCounter,
    /// A run's hold on a slot of a key of a limit.
    LimitHolder,
    /// A run's place in the line of a key of a limit.
    LimitWaiter,
    /// A queued run a finishing checkpoint hands a slot to (admitted, or queued for its
    /// next limit).
    AdmittedRun,
    /// A step rate limit's key: its last turn.
    RateKey,
    /// A turn kept for a step waiting for it under a rate limit.
    RateTurn,
    /// A step limit's line item (its `rev`).
    StepLine,
    /// A step attempt's hold on a slot of a step limit.
    StepHolder,
    /// A step attempt's place in the line of a step limit.
    StepWaiter,
    /// A schedule's state.
    Schedule,
    /// A debounce's entry for a key: the run its starts join.
    DebounceEntry,
    /// A bulk action's job.
    ActionJob,
    /// A running job's place in the deployment's list of active jobs.
    ActiveActionJob,
    /// A workflow's pause.
    WorkflowPause,
}

impl Role {
    /// Its name in the cost breakdown: the variant's, but for the plain writes of a
    /// checkpoint, named as the bench has always shown them.
    pub(crate) fn label(self) -> String {
        match self {
            Role::RunWithTail => "Run with tail".into(),
            Role::TailArchived => "Tail archived".into(),
            Role::CallbackOpened => "Callback opened".into(),
            Role::LimitCounter => "Limit counter".into(),
            Role::LimitHolder => "Limit holder".into(),
            Role::LimitWaiter => "Limit waiter".into(),
            Role::AdmittedRun => "Admitted run".into(),
            Role::RateKey => "Rate key".into(),
            Role::RateTurn => "Rate turn".into(),
            Role::StepLine => "Step line".into(),
            Role::StepHolder => "Step holder".into(),
            Role::StepWaiter => "Step waiter".into(),
            other => format!("{other:?}"),
        }
    }
}

/// A condition expression with its attribute names and values.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Condition {
    /// The expression.
    pub(crate) expression: String,
    /// Its `#name` placeholders.
    pub(crate) names: HashMap<String, String>,
    /// Its `:value` placeholders.
    pub(crate) values: Item,
}

impl Condition {
    /// That no item has the written item's key yet.
    pub(crate) fn new_item() -> Self {
        Condition {
            expression: "attribute_not_exists(pk)".into(),
            ..Condition::default()
        }
    }
}

/// What a planned write does to its item.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Action {
    /// Put the whole item.
    Put(Item),
    /// Update the item under `key`: `expression` with its names and values (the
    /// condition's, if any, are the [`Condition`]'s).
    Update {
        /// The item's key.
        key: Item,
        /// The update expression.
        expression: String,
        /// Its `#name` placeholders.
        names: HashMap<String, String>,
        /// Its `:value` placeholders.
        values: Item,
    },
    /// Check the item under `key` against the condition, writing nothing (in a
    /// transaction only).
    Check {
        /// The item's key.
        key: Item,
    },
    /// Delete the item under `key` (in a transaction, or on its own: a used rate turn).
    Delete {
        /// The item's key.
        key: Item,
    },
}

/// What a planned write is billed by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Billed {
    /// An item of this many bytes (for an update, the larger of the item before and
    /// after it, as DynamoDB bills it).
    Bytes(usize),
    /// The item after the write, which the write asks DynamoDB to return (`ALL_NEW`):
    /// a claim's or a renewal's, which do not read the item they update.
    Returned,
}

/// One item's write, as a plan decides it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PlannedWrite {
    /// What it is.
    pub(crate) role: Role,
    /// What it does.
    pub(crate) action: Action,
    /// What the item must be for it to apply.
    pub(crate) condition: Option<Condition>,
    /// Whether it is sent in the plan's transaction; else on its own, before it.
    pub(crate) transactional: bool,
    /// What it is billed by.
    pub(crate) billed: Billed,
    /// For a write of a run item whose attributes the plan knows: what the indexes hold
    /// of it after the write ([`indexed_part`]), and whether the run is new — its index
    /// effects.
    pub(crate) run_after: Option<(Item, bool)>,
}

impl PlannedWrite {
    /// Put `item`, on `condition` if any.
    pub(crate) fn put(
        role: Role,
        item: Item,
        condition: Option<Condition>,
        transactional: bool,
    ) -> Self {
        let run_after =
            matches!(role, Role::Run | Role::ChildRun).then(|| (indexed_part(&item), true));
        PlannedWrite {
            role,
            billed: Billed::Bytes(item_size(&item)),
            action: Action::Put(item),
            condition,
            transactional,
            run_after,
        }
    }

    /// Put `item` in the transaction only if nothing has its key yet.
    pub(crate) fn insert(role: Role, item: Item) -> Self {
        PlannedWrite::put(role, item, Some(Condition::new_item()), true)
    }

    #[cfg(test)]
    /// The item it writes whole, if it puts one.
    pub(crate) fn item(&self) -> Option<&Item> {
        match &self.action {
            Action::Put(item) => Some(item),
            _ => None,
        }
    }

    #[cfg(test)]
    /// The write units it costs once billed `bytes` ([`Billed::Bytes`], or the item
    /// returned).
    pub(crate) fn write_units_of(&self, bytes: usize) -> f64 {
        write_units(bytes, self.transactional)
    }

    /// The index writes a run item's write makes over the run item `before` (as the
    /// indexes hold it; `None` for a new run): none for a write that is not of a run
    /// item the plan knows.
    pub(crate) fn index_effects(&self, before: Option<&Item>) -> Vec<IndexWrite> {
        match &self.run_after {
            Some((after, _)) => index_writes(before.map(indexed_part).as_ref(), Some(after)),
            None => Vec::new(),
        }
    }
}

/// The writes of one port operation, in the order they are sent: the plain ones one by
/// one, then the transactional ones in one `TransactWriteItems`.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct WritePlan {
    /// The writes.
    pub(crate) writes: Vec<PlannedWrite>,
}

impl WritePlan {
    /// The writes sent on their own, in order.
    pub(crate) fn plain(&self) -> impl Iterator<Item = &PlannedWrite> {
        self.writes.iter().filter(|w| !w.transactional)
    }

    /// The writes of its transaction, in order.
    pub(crate) fn transaction(&self) -> impl Iterator<Item = &PlannedWrite> {
        self.writes.iter().filter(|w| w.transactional)
    }

    /// The write of the role `role`, if it has one.
    pub(crate) fn of(&self, role: Role) -> Option<&PlannedWrite> {
        self.writes.iter().find(|w| w.role == role)
    }

    #[cfg(test)]
    /// The write units its writes of known size cost: the sum over them.
    pub(crate) fn write_units(&self) -> f64 {
        self.writes
            .iter()
            .filter_map(|w| match w.billed {
                Billed::Bytes(bytes) => Some(w.write_units_of(bytes)),
                Billed::Returned => None,
            })
            .sum()
    }

    #[cfg(test)]
    /// The items it puts whole that DynamoDB would refuse as too large, if any: a
    /// plan's own check, for the tests (a request holding one fails as a whole).
    pub(crate) fn oversized(&self) -> Vec<(Role, usize)> {
        self.writes
            .iter()
            .filter_map(|w| Some((w.role, item_size(w.item()?))))
            .filter(|(_, size)| *size > MAX_ITEM_BYTES)
            .collect()
    }
}

/// The write units a write of an item of `bytes` bytes costs: per KB rounded up, at
/// least one, twice in a transaction.
pub(crate) fn write_units(bytes: usize, transactional: bool) -> f64 {
    let kb = bytes.div_ceil(WRITE_UNIT_BYTES).max(1) as f64;
    if transactional { 2.0 * kb } else { kb }
}

/// `#name` placeholders from pairs.
pub(crate) fn names(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::fixtures::*;
    use super::*;
    use crate::store::CapacityMeter;
    use proptest::prelude::*;
    use siesta::RunStatus;

    proptest! {
        /// The cost breakdown is the plans' own: noted into the meter, a create's and a
        /// delivery's writes tally the items, bytes and write units the plans bill — the
        /// sum over their writes — beside the index writes of the run items they write.
        #[test]
        fn the_cost_breakdown_is_the_sum_over_the_planned_writes(
            note in 0usize..2_000,
            seed in any::<u64>(),
        ) {
            let mut waiting = run(RunStatus::Waiting);
            waiting.timeline_seq = 1;
            let started = event(1, serde_json::json!({ "note": noise(note, seed) }));
            let created = create(&waiting, &started, None, RETENTION).unwrap();
            let read = crate::item::run_item(&waiting, RETENTION).unwrap();
            let accepted = accepted(&waiting, an_event(), &noise(note, seed ^ 1), None);
            let delivered = WritePlan { writes: delivery(&accepted, Some(&read), RETENTION, false).unwrap() };
            let meter = CapacityMeter::default();
            for (op, plan) in [("create_run", &created), ("deliver", &delivered)] {
                for write in &plan.writes {
                    meter.note_planned(op, write, None);
                }
            }
            let written = meter.written();
            for (op, plan) in [("create_run", &created), ("deliver", &delivered)] {
                let items: Vec<_> = written
                    .iter()
                    .filter(|(label, _)| label.starts_with(op) && !label.contains(" index"))
                    .map(|(_, w)| *w)
                    .collect();
                let bytes: usize = plan.writes.iter().map(|w| match w.billed {
                    Billed::Bytes(b) => b,
                    Billed::Returned => 0,
                }).sum();
                prop_assert_eq!(items.iter().map(|w| w.items).sum::<u64>(), plan.writes.len() as u64);
                prop_assert_eq!(items.iter().map(|w| w.bytes).sum::<u64>(), bytes as u64);
                prop_assert_eq!(items.iter().map(|w| w.write_units).sum::<f64>(), plan.write_units());
            }
            // The new run's index entries are the create's plan's index effects.
            let entered = created.of(Role::Run).unwrap().index_effects(None);
            let noted: u64 = written
                .iter()
                .filter(|(label, _)| label.starts_with("create_run") && label.contains(" index"))
                .map(|(_, w)| w.items)
                .sum();
            prop_assert_eq!(noted, entered.iter().map(|w| u64::from(w.writes)).sum::<u64>());
        }
    }
}
