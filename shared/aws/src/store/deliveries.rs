//! Deliveries: read what the core's delivery decision needs (the run, the dedup record,
//! the callback record) in one request, decide ([`siesta::delivery::decide`]), and write
//! the accepted delivery in one transaction, as [`crate::layout::delivery()`] plans it.
//!
//! A delivery on its own ([`deliver`]) does not read its dedup record first: the write
//! inserts it only if new, and a duplicate is told by that condition failing, or, when
//! the decision refuses the delivery as gone (a retried webhook after the callback
//! closed or the run finished), by reading it then. One read unit fewer per delivery.

use siesta::delivery::Decision;
use siesta::ports::*;

use super::reads::item_key;
use super::tx::{TxOutcome, reason_of};
use super::{DynamoStore, RACE_ATTEMPTS, run_lookup_key};
use crate::callback_state::{is_in_run, with_state};
use crate::item::*;
use crate::keys::*;
use crate::layout::{self, Role, WritePlan};

/// A delivery decided: the decision, the run item as read (for the history tail it
/// holds), and whether the callback it names keeps its state in the run item
/// ([`crate::callback_state`]).
pub(super) struct Planned {
    pub(super) decision: Decision,
    pub(super) read: Option<Item>,
    pub(super) callback_in_run: bool,
}

/// What a webhook's lookup read just before the delivery: the callback record and, for
/// a callback whose state is in the run item, the run item.
struct LookedUp {
    record: Item,
    run: Option<Item>,
}

impl DynamoStore {
    /// Read what a delivery decides on, in one request: the run, the dedup record
    /// (unless `dedup` says the write tells it) and the callback record; then decide
    /// ([`siesta::delivery::decide`]).
    ///
    /// What a webhook's lookup just read (the callback record, and the run item with
    /// it when the callback's state is there) stands in for reading it again when the
    /// decision lets the delivery through: the write checks the callback is still open
    /// and in time (or that the run, which holds its state, is at the version read),
    /// and a refused write decides again. A decision it refuses is made again on a
    /// fresh read, as the records may have changed since the lookup.
    pub(super) async fn plan(&self, d: &NewDelivery, dedup: Dedup) -> Result<Planned, StoreError> {
        let looked_up = d.body.callback_id().and_then(|id| {
            let pk = callback_pk(id);
            let record = self.looked_up.take(&pk)?;
            let run = self.looked_up.take(&run_lookup_key(&pk));
            Some(LookedUp { record, run })
        });
        if let Some(looked_up) = looked_up {
            match self.plan_with(d, dedup, Some(&looked_up)).await {
                // Decided again below; the dedup record, if need be, read then.
                Err(StoreError::Gone(_) | StoreError::NotFound) => {}
                planned => return planned,
            }
        }
        self.plan_with(d, dedup, None).await
    }

    /// [`plan`](Self::plan) with what the lookup read, else read. Only on a fresh read
    /// does a delivery refused (`Dedup::ByWrite`) read its dedup record to tell a
    /// duplicate: one refused on `looked_up` is decided again first.
    async fn plan_with(
        &self,
        d: &NewDelivery,
        dedup: Dedup,
        looked_up: Option<&LookedUp>,
    ) -> Result<Planned, StoreError> {
        let run_key = key(run_pk(&d.tenant, &d.run_id), RUN_SK);
        let dedup_key = key(run_pk(&d.tenant, &d.run_id), delivery_sk(&d.id));
        // The run item the lookup read, if it is this delivery's run's.
        let looked_up_run = looked_up
            .and_then(|l| l.run.as_ref())
            .filter(|run| run.get(PK) == run_key.get(PK));
        let mut keys = Vec::new();
        if looked_up_run.is_none() {
            keys.push(run_key.clone());
        }
        if dedup == Dedup::Read {
            keys.push(dedup_key.clone());
        }
        let callback_key = d
            .body
            .callback_id()
            .filter(|_| looked_up.is_none())
            .map(|id| key(callback_pk(id), RECORD_SK));
        keys.extend(callback_key.clone());
        let mut found = match keys.is_empty() {
            true => Default::default(),
            false => self.batch_get("deliver", keys).await?,
        };
        let read = match looked_up_run {
            Some(run) => Some(run.clone()),
            None => found.remove(&item_key(&run_key)?),
        };
        let run = read.as_ref().map(run_from_item).transpose()?;
        let stored = found.contains_key(&item_key(&dedup_key)?);
        let callback_item = match (looked_up, callback_key) {
            (Some(l), _) => Some(l.record.clone()),
            (None, Some(k)) => found.remove(&item_key(&k)?),
            (None, None) => None,
        };
        let callback_in_run = callback_item.as_ref().is_some_and(is_in_run);
        let callback = match callback_item {
            Some(item) if callback_in_run => {
                Some(with_state(callback_from_item(&item)?, read.as_ref())?)
            }
            Some(item) => Some(callback_from_item(&item)?),
            None => None,
        };
        let planned = |decision| Planned {
            decision,
            read: read.clone(),
            callback_in_run,
        };
        match siesta::delivery::decide(d, run, stored, callback) {
            Ok(decision) => Ok(planned(decision)),
            // Refused as gone (or its callback record not found, expired past the
            // retention), it may be a retry of a delivery that was stored: one that
            // closed its callback, or came before the run finished.
            Err(e @ (StoreError::Gone(_) | StoreError::NotFound))
                if dedup == Dedup::ByWrite && looked_up.is_none() && read.is_some() =>
            {
                match self
                    .get_item("deliver: the dedup record", dedup_key)
                    .await?
                {
                    Some(_) => Ok(planned(Decision::Duplicate)),
                    None => Err(e),
                }
            }
            Err(e) => Err(e),
        }
    }
}

/// How a delivery tells a duplicate (a delivery id stored before).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Dedup {
    /// By reading the dedup record before deciding: for a delivery written inside
    /// another transaction (a child's result in its checkpoint), which cannot tell
    /// which of its items' conditions failed apart from a lost race.
    Read,
    /// By the write's condition that the dedup record is new, or by reading it when the
    /// delivery is refused as gone.
    ByWrite,
}

/// [`RunStore::deliver`]: read, decide, and one `TransactWriteItems`.
pub(super) async fn deliver(
    store: &DynamoStore,
    delivery: &NewDelivery,
) -> Result<DeliverOutcome, StoreError> {
    for _ in 0..RACE_ATTEMPTS {
        let planned = store.plan(delivery, Dedup::ByWrite).await?;
        let plan = match planned.decision {
            Decision::Duplicate => return Ok(DeliverOutcome::Duplicate),
            Decision::Accept(plan) => plan,
        };
        let writes = layout::delivery(
            &plan,
            planned.read.as_ref(),
            store.retention,
            planned.callback_in_run,
        )?;
        match store.transact("deliver", &WritePlan { writes }).await? {
            TxOutcome::Committed => return Ok(DeliverOutcome::Accepted(Box::new(plan.run))),
            TxOutcome::NotWritten(e) => return Err(e),
            TxOutcome::Cancelled(reasons) => {
                if reason_of(&reasons, Role::DeliveryRecord).is_some() {
                    return Ok(DeliverOutcome::Duplicate);
                }
                // The run or the callback changed since the read: decide again.
            }
        }
    }
    Err(StoreError::Unavailable(
        "deliver: the run kept changing".into(),
    ))
}
