//! Transactions: a `TransactWriteItems` under construction ([`Tx`]), each item with its
//! role so that a cancellation reason can be traced to its cause, and its run, retried
//! while only contention cancels it.

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{
    ConditionCheck, Put, ReturnConsumedCapacity, ReturnValuesOnConditionCheckFailure,
    TransactWriteItem, Update,
};
use siesta::delivery::{Accepted, CallbackChange};
use siesta::ports::*;
use siesta::*;

use super::{DynamoStore, RACE_ATTEMPTS};
use crate::callback_state::{kept_state_bytes, put_state, state_attr};
use crate::error::sdk;
use crate::history_item::{CLAIM_ROOM, WRITE_UNIT_BYTES, archived_tail, tail_with_event};
use crate::index_writes::indexed_part;
use crate::item::*;
use crate::keys::*;

/// What a transaction item is, so a cancellation reason can be traced to its cause.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Role {
    Run,
    /// A checkpoint item: the checkpoint's journal entries and timeline events.
    Checkpoint,
    /// A run's first timeline event in an item of its own (when the run item has no room
    /// for it).
    Timeline,
    Callback,
    ToolCall,
    ChildRun,
    ChildTimeline,
    DeliveryRecord,
    DeliveryTimeline,
    DeliveryRun,
    DeliveryCallback,
    /// The tenant's count of unfinished runs.
    Quota,
}

/// One reason a transaction was cancelled, for the item at the same index.
#[derive(Debug)]
pub(super) struct Reason {
    pub(super) code: String,
    pub(super) item: Option<Item>,
}

impl Reason {
    fn condition_failed(&self) -> bool {
        self.code == "ConditionalCheckFailed"
    }
}

/// A transaction under construction.
#[derive(Default)]
pub(super) struct Tx {
    items: Vec<TransactWriteItem>,
    roles: Vec<Role>,
    /// The size of each item written (or checked), for the cost breakdown.
    sizes: Vec<usize>,
    /// The run items it writes (whether each is new), for their index writes in the
    /// cost breakdown.
    runs: Vec<(Item, bool)>,
}

/// How a transaction ended. (An `Err` from [`DynamoStore::transact`] is an outcome
/// not known: the transaction may have committed.)
pub(super) enum TxOutcome {
    Committed,
    /// Cancelled: the reasons, one per item, with the roles of the items.
    Cancelled(Vec<(Role, Reason)>),
    /// Not written, for certain, and not for a condition: refused before it was sent,
    /// invalid, or cancelled for contention or throttling every time it was tried.
    NotWritten(StoreError),
}

pub(super) fn build<T, E: std::fmt::Display>(r: Result<T, E>) -> Result<T, StoreError> {
    r.map_err(|e| StoreError::Invalid(format!("building a DynamoDB request: {e}")))
}

pub(super) fn names(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

impl Tx {
    pub(super) fn put(
        &mut self,
        table: &str,
        role: Role,
        item: Item,
        condition: Option<(&str, HashMap<String, String>, Item)>,
    ) -> Result<(), StoreError> {
        self.sizes.push(item_size(&item));
        if matches!(role, Role::Run | Role::ChildRun) {
            self.runs.push((indexed_part(&item), true));
        }
        let mut put = Put::builder().table_name(table).set_item(Some(item));
        if let Some((expr, names, values)) = condition {
            put = put
                .condition_expression(expr)
                .set_expression_attribute_names(Some(names).filter(|n| !n.is_empty()))
                .set_expression_attribute_values(Some(values).filter(|v| !v.is_empty()))
                .return_values_on_condition_check_failure(
                    ReturnValuesOnConditionCheckFailure::AllOld,
                );
        }
        self.items.push(
            TransactWriteItem::builder()
                .put(build(put.build())?)
                .build(),
        );
        self.roles.push(role);
        Ok(())
    }

    /// Put `item` only if nothing has its key yet.
    pub(super) fn insert(&mut self, table: &str, role: Role, item: Item) -> Result<(), StoreError> {
        self.put(
            table,
            role,
            item,
            Some(("attribute_not_exists(pk)", HashMap::new(), HashMap::new())),
        )
    }

    /// Write a whole run item over the one stored (an `UpdateItem`, [`run_update`])
    /// on the condition `expected`, keeping its history tail or dropping it.
    pub(super) fn put_run(
        &mut self,
        table: &str,
        role: Role,
        item: Item,
        expected: Expected,
        tail: TailKept,
        states: &StatesKept,
    ) -> Result<(), StoreError> {
        // An update is billed by the item before or after, whichever is larger.
        let tail_bytes = match tail {
            TailKept::Kept => 0,
            TailKept::Dropped { bytes } => bytes,
        };
        // The item before: as read when known, else the item written with the tail it
        // drops and without the states it adds.
        let after = item_size(&item) + states.kept_bytes;
        let before = match states.before_bytes {
            0 => after + tail_bytes - states.added_bytes.min(after),
            read => read,
        };
        self.sizes.push(after.max(before));
        self.runs.push((indexed_part(&item), false));
        let write = RunWrite::new(
            &item,
            &expected,
            matches!(tail, TailKept::Dropped { .. }),
            &states.removed,
        );
        let update = Update::builder()
            .table_name(table)
            .set_key(Some(key(get_s(&item, PK, "run")?.to_owned(), RUN_SK)))
            .update_expression(write.update)
            .condition_expression(write.condition)
            .set_expression_attribute_names(Some(write.names))
            .set_expression_attribute_values(Some(write.values))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
        self.items.push(
            TransactWriteItem::builder()
                .update(build(update.build())?)
                .build(),
        );
        self.roles.push(role);
        Ok(())
    }

    /// Add `delta` to the tenant's count of unfinished runs; with `below`, only while
    /// the count is under it (a missing counter is zero).
    pub(super) fn count_unfinished(
        &mut self,
        table: &str,
        tenant: &TenantId,
        delta: i64,
        below: Option<u64>,
    ) -> Result<(), StoreError> {
        let counter = key(quota_pk(tenant), RECORD_SK);
        // The counter item: its key and one number.
        self.sizes.push(item_size(&counter) + UNFINISHED.len() + 4);
        let mut update = Update::builder()
            .table_name(table)
            .set_key(Some(counter))
            .update_expression("ADD #unfinished :delta")
            .expression_attribute_names("#unfinished", UNFINISHED)
            .expression_attribute_values(":delta", n(delta));
        if let Some(max) = below {
            update = update
                .condition_expression("attribute_not_exists(#unfinished) OR #unfinished < :max")
                .expression_attribute_values(":max", n(max))
                .return_values_on_condition_check_failure(
                    ReturnValuesOnConditionCheckFailure::AllOld,
                );
        }
        self.items.push(
            TransactWriteItem::builder()
                .update(build(update.build())?)
                .build(),
        );
        self.roles.push(Role::Quota);
        Ok(())
    }

    /// The writes of an accepted delivery (see [`siesta::delivery`]): the delivery, its
    /// event, the run under the version read, and the callback record only if the
    /// delivery changes it — else a check that it is still as read. A callback whose
    /// state the run item holds (`callback_in_run`, [`crate::callback_state`]) changes
    /// in the run item alone.
    ///
    /// The delivery's event joins the run item's history tail (see [`tail_with_event`])
    /// while the run item stays under a write unit: one item fewer in the transaction.
    /// Else it has a timeline item of its own.
    pub(super) fn delivery(
        &mut self,
        table: &str,
        plan: &Accepted,
        read: Option<&Item>,
        retention: Duration,
        callback_in_run: bool,
    ) -> Result<(), StoreError> {
        self.insert(table, Role::DeliveryRecord, delivery_item(&plan.delivery)?)?;
        let mut item = run_item(&plan.run, retention)?;
        // A callback whose state the run item holds changes there, under the run's
        // version condition, which covers it: nothing else of it is written or checked.
        let mut states = StatesKept::default();
        // The state this delivery writes (set or removed); one it only requires is kept.
        let mut own_state = Vec::new();
        if let Some(CallbackChange::Write(record)) =
            plan.callback.as_ref().filter(|_| callback_in_run)
        {
            let attr = state_attr(&record.callback_id);
            match record.status {
                CallbackStatus::Open => put_state(&mut item, record),
                _ => states.removed.push(attr.clone()),
            }
            own_state.push(attr);
        }
        if let Some(read) = read {
            states.kept_bytes = kept_state_bytes(read, &own_state);
            states.before_bytes = item_size(read);
        }
        let tail = match read {
            Some(read) => tail_with_event(
                &plan.run,
                plan.read_version,
                archived_tail(read)?.as_ref(),
                &plan.event,
            )?,
            None => None,
        };
        let in_tail = match tail {
            Some(tail) => {
                let mut with_tail = item.clone();
                tail.put_in(&mut with_tail);
                // With room for the lease the claim that follows adds (owner, expiry,
                // epoch: about 70 bytes), so that the claim stays one unit too.
                let stored = item_size(&with_tail) + states.kept_bytes;
                let fits = stored + CLAIM_ROOM <= WRITE_UNIT_BYTES;
                if fits {
                    item = with_tail;
                }
                fits
            }
            None => false,
        };
        if !in_tail {
            self.insert(
                table,
                Role::DeliveryTimeline,
                timeline_item(&plan.run.tenant, &plan.run.id, &plan.event)?,
            )?;
        }
        self.put_run(
            table,
            Role::DeliveryRun,
            item,
            Expected {
                version: plan.read_version,
                epoch: None,
                first_event: None,
                // The lease as read: the delivery writes it back.
                lease_expires: Some(plan.run.lease.as_ref().map(|l| l.expires_at)),
            },
            TailKept::Kept,
            &states,
        )?;
        if let Some(change) = plan.callback.as_ref().filter(|_| !callback_in_run) {
            // Open, and neither its deadline nor its heartbeat deadline passed when the
            // delivery was received: a completion or heartbeat after either is refused
            // even if the run has not yet recorded the timeout. The decision was made on
            // a read outside this transaction, so the write checks it again.
            let open = (
                "#callback_status = :open AND (attribute_not_exists(#callback_deadline) OR #callback_deadline > :received) AND (attribute_not_exists(#heartbeat_deadline) OR #heartbeat_deadline > :received)",
                names(&[
                    ("#callback_status", CALLBACK_STATUS),
                    ("#callback_deadline", CALLBACK_DEADLINE),
                    ("#heartbeat_deadline", CALLBACK_HEARTBEAT_DEADLINE),
                ]),
                HashMap::from([
                    (":open".to_owned(), open_callback_status()),
                    (
                        ":received".to_owned(),
                        n(plan.delivery.received_at.millis()),
                    ),
                ]),
            );
            match change {
                CallbackChange::Write(record) => {
                    let item = callback_item(record, plan.delivery.received_at, retention)?;
                    self.put(table, Role::DeliveryCallback, item, Some(open))?;
                }
                CallbackChange::RequireOpen(record) => {
                    let checked = callback_item(record, plan.delivery.received_at, retention)?;
                    self.sizes.push(item_size(&checked));
                    let check = ConditionCheck::builder()
                        .table_name(table)
                        .set_key(Some(key(callback_pk(&record.callback_id), RECORD_SK)))
                        .condition_expression(open.0)
                        .set_expression_attribute_names(Some(open.1))
                        .set_expression_attribute_values(Some(open.2));
                    self.items.push(
                        TransactWriteItem::builder()
                            .condition_check(build(check.build())?)
                            .build(),
                    );
                    self.roles.push(Role::DeliveryCallback);
                }
            }
        }
        Ok(())
    }
}

impl DynamoStore {
    /// Run one transaction; contention-only cancellations are retried a few times.
    pub(super) async fn transact(&self, op: &str, tx: Tx) -> Result<TxOutcome, StoreError> {
        if tx.items.len() > MAX_TRANSACTION_ITEMS {
            return Ok(TxOutcome::NotWritten(StoreError::Invalid(format!(
                "{op}: {} items exceed DynamoDB's {MAX_TRANSACTION_ITEMS} per transaction",
                tx.items.len()
            ))));
        }
        let mut backoff = Duration::from_millis(10);
        for attempt in 1..=RACE_ATTEMPTS {
            let result = self
                .client
                .transact_write_items()
                .set_transact_items(Some(tx.items.clone()))
                // Idempotency window: an SDK retry of this very call after a timeout is
                // answered as the original, never applied twice.
                .client_request_token(uuid::Uuid::new_v4().to_string())
                .return_consumed_capacity(ReturnConsumedCapacity::Total)
                .send()
                .await;
            match result {
                Ok(out) => {
                    self.capacity.add(true, out.consumed_capacity());
                    for (role, size) in tx.roles.iter().zip(&tx.sizes) {
                        self.capacity
                            .note_write(op, &format!("{role:?}"), true, *size);
                    }
                    for (run, new) in &tx.runs {
                        self.capacity.note_run(op, run, *new);
                    }
                    return Ok(TxOutcome::Committed);
                }
                Err(e) => {
                    let cancelled = match e.as_service_error() {
                        Some(TransactWriteItemsError::TransactionCanceledException(c)) => c
                            .cancellation_reasons()
                            .iter()
                            .map(|r| Reason {
                                code: r.code().unwrap_or("None").to_owned(),
                                item: r.item().cloned(),
                            })
                            .collect::<Vec<_>>(),
                        _ => {
                            // Refused for what the request is, which every attempt
                            // of it would have drawn: it was not written. Any other
                            // error may follow an attempt that committed.
                            let refused = matches!(e, SdkError::ConstructionFailure(_))
                                || e.as_service_error().and_then(|s| s.meta().code())
                                    == Some("ValidationException");
                            let error = sdk(op, e);
                            return match refused {
                                true => Ok(TxOutcome::NotWritten(error)),
                                false => Err(error),
                            };
                        }
                    };
                    if cancelled.iter().any(Reason::condition_failed) {
                        return Ok(TxOutcome::Cancelled(
                            tx.roles.iter().copied().zip(cancelled).collect(),
                        ));
                    }
                    if cancelled.iter().any(|r| {
                        r.code == "ValidationError" || r.code == "ItemCollectionSizeLimitExceeded"
                    }) {
                        return Ok(TxOutcome::NotWritten(StoreError::Invalid(format!(
                            "{op}: {cancelled:?}"
                        ))));
                    }
                    // Contention or throttling only: nothing was written; try again.
                    if attempt == RACE_ATTEMPTS {
                        return Ok(TxOutcome::NotWritten(StoreError::Unavailable(format!(
                            "{op}: transaction kept being cancelled: {cancelled:?}"
                        ))));
                    }
                    tokio::time::sleep(backoff).await;
                    backoff *= 2;
                }
            }
        }
        unreachable!("the loop returns on its last attempt")
    }
}

/// What a write of a whole run item expects of the run item it writes over.
pub(super) struct Expected {
    /// The version read.
    pub(super) version: u64,
    /// The writer's fencing epoch, if it holds a lease.
    pub(super) epoch: Option<FencingEpoch>,
    /// The seq of the first event it writes: the run's timeline must not reach it yet.
    pub(super) first_event: Option<u64>,
    /// The lease expiry the run must still have (`Some(None)`: no lease), for a writer
    /// without the lease that writes the run's lease back as it read it (a delivery):
    /// a lease renewal moves it without a new version, and must not be undone.
    pub(super) lease_expires: Option<Option<Timestamp>>,
}

impl Expected {
    /// What a checkpoint expects. One without an epoch (the control plane's) that
    /// writes a lease writes it back as it read it: the run must still have it.
    pub(super) fn of(cp: &Checkpoint) -> Self {
        Expected {
            version: cp.expected_version,
            epoch: cp.epoch,
            first_event: cp.timeline.first().map(|e| e.seq),
            lease_expires: match (cp.epoch, &cp.run.lease) {
                (None, Some(lease)) => Some(Some(lease.expires_at)),
                _ => None,
            },
        }
    }

    /// The condition expression, with its names and values.
    fn condition(&self) -> (String, HashMap<String, String>, Item) {
        let mut values = HashMap::from([(":v".to_owned(), n(self.version))]);
        let mut expr = "#version = :v".to_owned();
        let mut attr_names = names(&[("#version", VERSION)]);
        if let Some(epoch) = self.epoch {
            expr.push_str(" AND #lease_epoch = :e");
            values.insert(":e".into(), n(epoch.0));
            attr_names.insert("#lease_epoch".into(), LEASE_EPOCH.into());
        }
        if let Some(first) = self.first_event {
            expr.push_str(" AND #timeline_seq < :first");
            values.insert(":first".into(), n(first));
            attr_names.insert("#timeline_seq".into(), TIMELINE_SEQ.into());
        }
        if let Some(lease_expires) = self.lease_expires {
            attr_names.insert("#lease_expires".into(), LEASE_EXPIRES.into());
            match lease_expires {
                Some(at) => {
                    expr.push_str(" AND #lease_expires = :lease_expires");
                    values.insert(":lease_expires".into(), n(at.0));
                }
                None => expr.push_str(" AND attribute_not_exists(#lease_expires)"),
            }
        }
        (expr, attr_names, values)
    }
}

/// A write of the whole run `item` over the one stored ([`run_update`], dropping its
/// history tail or not) on the condition `expected`: the update and condition
/// expressions, with their names and values. In a transaction ([`Tx::put_run`]) and
/// alone (a step's checkpoint, `super::tail`).
pub(super) struct RunWrite {
    pub(super) update: String,
    pub(super) condition: String,
    pub(super) names: HashMap<String, String>,
    pub(super) values: Item,
}

impl RunWrite {
    pub(super) fn new(
        item: &Item,
        expected: &Expected,
        drop_tail: bool,
        removed: &[String],
    ) -> Self {
        let (update, mut names, mut values) = run_update(item, drop_tail, removed);
        let (condition, condition_names, condition_values) = expected.condition();
        names.extend(condition_names);
        values.extend(condition_values);
        RunWrite {
            update,
            condition,
            names,
            values,
        }
    }
}

/// What a write of a whole run item does with the callback states the stored item holds
/// ([`crate::callback_state`]), which [`run_item`] knows nothing of, and the sizes they
/// add for the cost breakdown.
#[derive(Default)]
pub(super) struct StatesKept {
    /// The states it removes (the callbacks it closes).
    pub(super) removed: Vec<String>,
    /// The bytes of the states it keeps, beside the item it writes.
    pub(super) kept_bytes: usize,
    /// The size of the item it writes over, when known (billed if larger).
    pub(super) before_bytes: usize,
    /// The bytes of the states it adds (in the item it writes, not in the one before).
    pub(super) added_bytes: usize,
}

/// What a write of a whole run item does with the history tail the item holds.
pub(super) enum TailKept {
    /// Keeps it.
    Kept,
    /// Removes it (it was written into checkpoint items beside), its size known.
    Dropped { bytes: usize },
}

pub(super) fn reason_of(reasons: &[(Role, Reason)], role: Role) -> Option<&Reason> {
    reasons
        .iter()
        .filter(|(r, _)| *r == role)
        .map(|(_, reason)| reason)
        .find(|r| r.condition_failed())
}
