//! [`RunStore`] on one DynamoDB table.
//!
//! Every atomic port operation is one conditional `UpdateItem` or one
//! `TransactWriteItems`. Failed conditions come back with the item as it is
//! (`ReturnValuesOnConditionCheckFailure: ALL_OLD`), which becomes the port's
//! [`StoreError::Conflict`] carrying the current run. Transactions carry a
//! `ClientRequestToken`, so the SDK's retry after an ambiguous failure (a timeout after
//! the write may have applied) is answered by DynamoDB as the original write instead of
//! being applied twice; single-item writes resolve the same ambiguity by looking at the
//! item their condition failed on.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::query::builders::QueryFluentBuilder;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::operation::update_item::{UpdateItemError, UpdateItemOutput};
use aws_sdk_dynamodb::types::{
    ConditionCheck, ConsumedCapacity, KeysAndAttributes, Put, ReturnConsumedCapacity, ReturnValue,
    ReturnValuesOnConditionCheckFailure, TransactWriteItem, Update,
};
use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use siesta::delivery::{Accepted, CallbackChange, Decision};
use siesta::ports::*;
use siesta::*;

use crate::error::{corrupt, sdk};
use crate::item::*;
use crate::keys::*;

/// How many times a write that lost a race on a record other than the caller's run
/// (a parent run, a callback, plain contention) is re-read and retried.
const RACE_ATTEMPTS: usize = 8;

/// DynamoDB capacity consumed, in units, as DynamoDB reports it.
#[derive(Debug, Default)]
pub(crate) struct CapacityMeter {
    /// Write capacity units, in thousandths.
    write_milli: AtomicU64,
    /// Read capacity units, in thousandths.
    read_milli: AtomicU64,
    /// The items written, by request and item kind, for the cost breakdown.
    written: Mutex<BTreeMap<String, WrittenItems>>,
}

/// Items of one kind written by one kind of request, and what they cost
/// ([`crate::AwsBackend::written_items`]).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct WrittenItems {
    /// How many items were written.
    pub items: u64,
    /// Their size in bytes, as DynamoDB sizes items (attribute names and values).
    pub bytes: u64,
    /// The write units they cost: per item, its size rounded up to the next KB, twice
    /// over in a transaction. Estimated from the sizes; DynamoDB reports only totals per
    /// request.
    pub write_units: f64,
}

/// A strongly consistent read of one item, its read units counted in `capacity`: the
/// store's and the reaper's reads of a run item.
pub(crate) async fn consistent_get(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    capacity: &CapacityMeter,
    op: &str,
    key: Item,
) -> Result<Option<Item>, StoreError> {
    let out = client
        .get_item()
        .table_name(table)
        .set_key(Some(key))
        .consistent_read(true)
        .return_consumed_capacity(ReturnConsumedCapacity::Total)
        .send()
        .await
        .map_err(|e| sdk(op, e))?;
    if let Some(c) = out.consumed_capacity() {
        capacity.add(false, std::slice::from_ref(c));
    }
    Ok(out.item)
}

/// One page of a `Query` (its table and key condition already set) from `start`, its
/// read units counted in `capacity`: the items, and where the next page starts (`None`
/// after the last). Every paged query of the store and of the reaper goes through it.
pub(crate) async fn query_page(
    query: QueryFluentBuilder,
    capacity: &CapacityMeter,
    op: &str,
    start: Option<Item>,
) -> Result<(Vec<Item>, Option<Item>), StoreError> {
    let out = query
        .set_exclusive_start_key(start)
        .return_consumed_capacity(ReturnConsumedCapacity::Total)
        .send()
        .await
        .map_err(|e| sdk(op, e))?;
    if let Some(c) = out.consumed_capacity() {
        capacity.add(false, std::slice::from_ref(c));
    }
    let next = out.last_evaluated_key.filter(|k| !k.is_empty());
    Ok((out.items.unwrap_or_default(), next))
}

impl CapacityMeter {
    pub(crate) fn add(&self, write: bool, consumed: &[ConsumedCapacity]) {
        let units: f64 = consumed.iter().filter_map(|c| c.capacity_units()).sum();
        let milli = (units * 1000.0).round() as u64;
        let counter = if write {
            &self.write_milli
        } else {
            &self.read_milli
        };
        counter.fetch_add(milli, Ordering::Relaxed);
    }

    /// Note that a request `op` wrote an item of kind `what` of `bytes` bytes,
    /// `transactional` or not.
    pub(crate) fn note_write(&self, op: &str, what: &str, transactional: bool, bytes: usize) {
        let kb = bytes.div_ceil(1024).max(1) as f64;
        let label = format!(
            "{op}: {what}{}",
            if transactional {
                " (transactional)"
            } else {
                ""
            }
        );
        let mut written = self.written.lock().unwrap_or_else(|e| e.into_inner());
        let entry = written.entry(label).or_default();
        entry.items += 1;
        entry.bytes += bytes as u64;
        entry.write_units += if transactional { 2.0 * kb } else { kb };
    }

    /// Note that a single-item request `op` wrote an item of kind `what` whose size it
    /// does not see, at the capacity DynamoDB reported.
    pub(crate) fn note_update(&self, op: &str, what: &str, consumed: Option<&ConsumedCapacity>) {
        let mut written = self.written.lock().unwrap_or_else(|e| e.into_inner());
        let entry = written.entry(format!("{op}: {what}")).or_default();
        entry.items += 1;
        entry.write_units += consumed.and_then(|c| c.capacity_units()).unwrap_or(0.0);
    }

    /// The items written so far, by request and item kind.
    pub(crate) fn written(&self) -> BTreeMap<String, WrittenItems> {
        self.written
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// (write units, read units) consumed so far.
    pub(crate) fn totals(&self) -> (f64, f64) {
        (
            self.write_milli.load(Ordering::Relaxed) as f64 / 1000.0,
            self.read_milli.load(Ordering::Relaxed) as f64 / 1000.0,
        )
    }
}

/// The run store on DynamoDB.
pub(crate) struct DynamoStore {
    client: Client,
    table: String,
    retention: Duration,
    pub(crate) capacity: Arc<CapacityMeter>,
}

/// What a transaction item is, so a cancellation reason can be traced to its cause.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Run,
    Journal,
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
struct Reason {
    code: String,
    item: Option<Item>,
}

impl Reason {
    fn condition_failed(&self) -> bool {
        self.code == "ConditionalCheckFailed"
    }
}

/// A transaction under construction.
#[derive(Default)]
struct Tx {
    items: Vec<TransactWriteItem>,
    roles: Vec<Role>,
    /// The size of each item written (or checked), for the cost breakdown.
    sizes: Vec<usize>,
}

/// How a transaction ended.
enum TxOutcome {
    Committed,
    /// Cancelled: the reasons, one per item, with the roles of the items.
    Cancelled(Vec<(Role, Reason)>),
}

fn build<T, E: std::fmt::Display>(r: Result<T, E>) -> Result<T, StoreError> {
    r.map_err(|e| StoreError::Invalid(format!("building a DynamoDB request: {e}")))
}

fn names(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

impl Tx {
    fn put(
        &mut self,
        table: &str,
        role: Role,
        item: Item,
        condition: Option<(&str, HashMap<String, String>, Item)>,
    ) -> Result<(), StoreError> {
        self.sizes.push(item_size(&item));
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
    fn insert(&mut self, table: &str, role: Role, item: Item) -> Result<(), StoreError> {
        self.put(
            table,
            role,
            item,
            Some(("attribute_not_exists(pk)", HashMap::new(), HashMap::new())),
        )
    }

    /// Put a run item conditioned on the version read (and the writer's epoch); with
    /// `first_event`, also on the run's timeline not reaching that `seq` yet (an item
    /// written before the run kept its timeline seq outside the body passes).
    fn put_run(
        &mut self,
        table: &str,
        role: Role,
        item: Item,
        expected_version: u64,
        epoch: Option<FencingEpoch>,
        first_event: Option<u64>,
    ) -> Result<(), StoreError> {
        let mut values = HashMap::from([(":v".to_owned(), n(expected_version))]);
        let mut expr = "#version = :v".to_owned();
        let mut attr_names = names(&[("#version", VERSION)]);
        if let Some(epoch) = epoch {
            expr.push_str(" AND #lease_epoch = :e");
            values.insert(":e".into(), n(epoch.0));
            attr_names.insert("#lease_epoch".into(), LEASE_EPOCH.into());
        }
        if let Some(first) = first_event {
            expr.push_str(" AND (attribute_not_exists(#timeline_seq) OR #timeline_seq < :first)");
            values.insert(":first".into(), n(first));
            attr_names.insert("#timeline_seq".into(), TIMELINE_SEQ.into());
        }
        self.put(table, role, item, Some((&expr, attr_names, values)))
    }

    /// Add `delta` to the tenant's count of unfinished runs; with `below`, only while
    /// the count is under it (a missing counter is zero).
    fn count_unfinished(
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
    /// delivery changes it — else a check that it is still as read.
    fn delivery(
        &mut self,
        table: &str,
        plan: &Accepted,
        retention: Duration,
    ) -> Result<(), StoreError> {
        self.insert(table, Role::DeliveryRecord, delivery_item(&plan.delivery)?)?;
        self.insert(
            table,
            Role::DeliveryTimeline,
            timeline_item(&plan.run.tenant, &plan.run.id, &plan.event)?,
        )?;
        self.put_run(
            table,
            Role::DeliveryRun,
            run_item(&plan.run, retention)?,
            plan.read_version,
            None,
            None,
        )?;
        if let Some(change) = &plan.callback {
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
    pub(crate) fn new(client: Client, table: String, retention: Duration) -> Self {
        DynamoStore {
            client,
            table,
            retention,
            capacity: Arc::default(),
        }
    }

    /// Run one transaction; contention-only cancellations are retried a few times.
    async fn transact(&self, op: &str, tx: Tx) -> Result<TxOutcome, StoreError> {
        if tx.items.len() > MAX_TRANSACTION_ITEMS {
            return Err(StoreError::Invalid(format!(
                "{op}: {} items exceed DynamoDB's {MAX_TRANSACTION_ITEMS} per transaction",
                tx.items.len()
            )));
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
                        _ => return Err(sdk(op, e)),
                    };
                    if cancelled.iter().any(Reason::condition_failed) {
                        return Ok(TxOutcome::Cancelled(
                            tx.roles.iter().copied().zip(cancelled).collect(),
                        ));
                    }
                    if cancelled.iter().any(|r| {
                        r.code == "ValidationError" || r.code == "ItemCollectionSizeLimitExceeded"
                    }) {
                        return Err(StoreError::Invalid(format!("{op}: {cancelled:?}")));
                    }
                    // Contention or throttling only: nothing was written; try again.
                    if attempt == RACE_ATTEMPTS {
                        return Err(StoreError::Unavailable(format!(
                            "{op}: transaction kept being cancelled: {cancelled:?}"
                        )));
                    }
                    tokio::time::sleep(backoff).await;
                    backoff *= 2;
                }
            }
        }
        unreachable!("the loop returns on its last attempt")
    }

    async fn get_item(&self, op: &str, key: Item) -> Result<Option<Item>, StoreError> {
        consistent_get(&self.client, &self.table, &self.capacity, op, key).await
    }

    /// Strongly consistent reads of up to 100 keys in one request (plus retries of
    /// unprocessed keys), returned by key.
    async fn batch_get(
        &self,
        op: &str,
        keys: Vec<Item>,
    ) -> Result<HashMap<(String, String), Item>, StoreError> {
        let mut found = HashMap::new();
        let mut pending = Some(build(
            KeysAndAttributes::builder()
                .set_keys(Some(keys))
                .consistent_read(true)
                .build(),
        )?);
        let mut backoff = Duration::from_millis(10);
        while let Some(request) = pending.take() {
            let out = self
                .client
                .batch_get_item()
                .request_items(&self.table, request)
                .return_consumed_capacity(ReturnConsumedCapacity::Total)
                .send()
                .await
                .map_err(|e| sdk(op, e))?;
            self.capacity.add(false, out.consumed_capacity());
            for item in out
                .responses
                .unwrap_or_default()
                .remove(&self.table)
                .unwrap_or_default()
            {
                let key = item_key(&item)?;
                found.insert(key, item);
            }
            pending = out
                .unprocessed_keys
                .and_then(|mut u| u.remove(&self.table))
                .filter(|k| !k.keys().is_empty());
            if pending.is_some() {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
            }
        }
        Ok(found)
    }

    /// Read what a delivery decides on, in one request: the run, the dedup record and
    /// the callback record; then decide ([`siesta::delivery::decide`]).
    async fn plan(&self, d: &NewDelivery) -> Result<Decision, StoreError> {
        let run_key = key(run_pk(&d.tenant, &d.run_id), RUN_SK);
        let dedup_key = key(run_pk(&d.tenant, &d.run_id), delivery_sk(&d.id));
        let mut keys = vec![run_key.clone(), dedup_key.clone()];
        let callback_key = d
            .body
            .callback_id()
            .map(|id| key(callback_pk(id), RECORD_SK));
        keys.extend(callback_key.clone());
        let mut found = self.batch_get("deliver", keys).await?;
        let run = found
            .remove(&item_key(&run_key)?)
            .map(|i| run_from_item(&i))
            .transpose()?;
        let stored = found.contains_key(&item_key(&dedup_key)?);
        let callback = match callback_key {
            Some(k) => found
                .remove(&item_key(&k)?)
                .map(|i| callback_from_item(&i))
                .transpose()?,
            None => None,
        };
        siesta::delivery::decide(d, run, stored, callback)
    }

    async fn query_pages(
        &self,
        op: &str,
        build_query: impl Fn(QueryFluentBuilder) -> QueryFluentBuilder,
        limit: Option<usize>,
    ) -> Result<Vec<Item>, StoreError> {
        let mut items = Vec::new();
        let mut start = None;
        loop {
            let mut q = build_query(self.client.query().table_name(&self.table));
            if let Some(limit) = limit {
                q = q.limit((limit - items.len()).min(1000) as i32);
            }
            let (page, next) = query_page(q, &self.capacity, op, start).await?;
            items.extend(page);
            start = next;
            if start.is_none() || limit.is_some_and(|l| items.len() >= l) {
                return Ok(items);
            }
        }
    }

    /// The outcome of a conditional `UpdateItem` on a run item (`ALL_NEW` on success,
    /// `ALL_OLD` on a failed condition): `Ok(run after)`, `Err(run as it is)` when the
    /// condition failed, [`StoreError::NotFound`] when there is no run.
    fn updated_run(
        &self,
        op: &str,
        result: Result<UpdateItemOutput, SdkError<UpdateItemError, HttpResponse>>,
    ) -> Result<Result<Run, Box<Run>>, StoreError> {
        match result {
            Ok(out) => {
                if let Some(c) = out.consumed_capacity() {
                    self.capacity.add(true, std::slice::from_ref(c));
                }
                let item = out.attributes.unwrap_or_default();
                self.capacity.note_write(op, "Run", false, item_size(&item));
                run_from_item(&item).map(Ok)
            }
            Err(e) => match e.as_service_error() {
                Some(UpdateItemError::ConditionalCheckFailedException(c)) => {
                    match c.item().map(run_from_item).transpose()? {
                        Some(current) => Ok(Err(Box::new(current))),
                        None => Err(StoreError::NotFound),
                    }
                }
                _ => Err(sdk(op, e)),
            },
        }
    }

    /// Create a run with its first event, counted among its tenant's unfinished runs;
    /// with `max_unfinished`, only while the count is under it.
    async fn create(
        &self,
        run: &Run,
        started: &TimelineEvent,
        max_unfinished: Option<u64>,
    ) -> Result<(), StoreError> {
        // Before the run, so that every run's build is listed (a create that then
        // fails leaves a build record that counts no run).
        self.note_build(run).await?;
        let mut tx = Tx::default();
        tx.insert(&self.table, Role::Run, run_item(run, self.retention)?)?;
        tx.insert(
            &self.table,
            Role::Timeline,
            timeline_item(&run.tenant, &run.id, started)?,
        )?;
        if !run.status.is_finished() {
            tx.count_unfinished(&self.table, &run.tenant, 1, max_unfinished)?;
        }
        match self.transact("create_run", tx).await? {
            TxOutcome::Committed => Ok(()),
            TxOutcome::Cancelled(reasons) => match reason_of(&reasons, Role::Quota) {
                // The run's own condition is checked too: an existing run is reported
                // as such, whatever the count.
                Some(quota) if reason_of(&reasons, Role::Run).is_none() => {
                    Err(StoreError::OverQuota(format!(
                        "tenant {} has {} unfinished runs; its limit is {}",
                        run.tenant,
                        unfinished_of(quota.item.as_ref()),
                        max_unfinished.unwrap_or_default()
                    )))
                }
                _ => Err(StoreError::AlreadyExists),
            },
        }
    }

    /// How a checkpoint changes its tenant's count of unfinished runs: +1 per child
    /// run, -1 when it moves the run from unfinished to finished. Whether it does is
    /// read here, at the version the checkpoint is conditioned on: if the run moved on
    /// since, the checkpoint's own condition fails and the count is not touched.
    async fn unfinished_delta(&self, cp: &Checkpoint) -> Result<i64, StoreError> {
        let children = cp
            .child_runs
            .iter()
            .filter(|(child, _)| !child.status.is_finished())
            .count() as i64;
        if !cp.run.status.is_finished() {
            return Ok(children);
        }
        let finishes = match self.get_run(&cp.run.tenant, &cp.run.id).await? {
            Some(before) => before.version == cp.expected_version && !before.status.is_finished(),
            None => false,
        };
        Ok(children - i64::from(finishes))
    }

    /// Record that `run` is on its build, for [`RunStore::builds`]: the tenant's record
    /// of the build gets the run's creation time as its last seen (when later) and its
    /// first seen (when earlier, or new). One conditional `UpdateItem` for a run later
    /// than any before it (a start), a second only for an earlier one (an upgraded or
    /// late-written run); no write for a run that records no build.
    async fn note_build(&self, run: &Run) -> Result<(), StoreError> {
        let Some(build) = &run.build_id else {
            return Ok(());
        };
        let record = key(builds_pk(&run.tenant), build);
        let at = n(run.created_at.0);
        for (update, condition) in [
            (
                "SET #first = if_not_exists(#first, :at), #last = :at",
                "attribute_not_exists(#last) OR #last < :at",
            ),
            (
                "SET #first = :at",
                "attribute_exists(#last) AND #first > :at",
            ),
        ] {
            let result = self
                .client
                .update_item()
                .table_name(&self.table)
                .set_key(Some(record.clone()))
                .update_expression(update)
                .condition_expression(condition)
                .set_expression_attribute_names(Some(names(&[
                    ("#first", FIRST_SEEN),
                    ("#last", LAST_SEEN),
                ])))
                .expression_attribute_values(":at", at.clone())
                .return_consumed_capacity(ReturnConsumedCapacity::Total)
                .send()
                .await;
            match result {
                Ok(out) => {
                    if let Some(c) = out.consumed_capacity() {
                        self.capacity.add(true, std::slice::from_ref(c));
                    }
                    self.capacity
                        .note_update("note_build", "Build", out.consumed_capacity());
                    return Ok(());
                }
                Err(e) => match e.as_service_error() {
                    // Not later than the last seen: try it as an earlier first seen.
                    Some(UpdateItemError::ConditionalCheckFailedException(_)) => {}
                    _ => return Err(sdk("note_build", e)),
                },
            }
        }
        Ok(())
    }

    async fn current_run(&self, tenant: &TenantId, run_id: &RunId) -> Result<Run, StoreError> {
        self.get_run(tenant, run_id)
            .await?
            .ok_or(StoreError::NotFound)
    }
}

fn item_key(item: &Item) -> Result<(String, String), StoreError> {
    match (item.get(PK), item.get(SK)) {
        (
            Some(aws_sdk_dynamodb::types::AttributeValue::S(pk)),
            Some(aws_sdk_dynamodb::types::AttributeValue::S(sk)),
        ) => Ok((pk.clone(), sk.clone())),
        _ => Err(corrupt("table", "an item without pk/sk")),
    }
}

/// The count on a tenant's counter item (none yet: zero; below zero, after runs that
/// were started before the count was kept finished: zero).
fn unfinished_of(item: Option<&Item>) -> u64 {
    match item.and_then(|i| i.get(UNFINISHED)) {
        Some(aws_sdk_dynamodb::types::AttributeValue::N(v)) => {
            v.parse::<i64>().map_or(0, |n| n.max(0) as u64)
        }
        _ => 0,
    }
}

fn reason_of(reasons: &[(Role, Reason)], role: Role) -> Option<&Reason> {
    reasons
        .iter()
        .filter(|(r, _)| *r == role)
        .map(|(_, reason)| reason)
        .find(|r| r.condition_failed())
}

#[async_trait]
impl RunStore for DynamoStore {
    async fn create_run(&self, run: &Run, started: &TimelineEvent) -> Result<(), StoreError> {
        self.create(run, started, None).await
    }

    async fn create_run_within(
        &self,
        run: &Run,
        started: &TimelineEvent,
        max_unfinished: u64,
    ) -> Result<(), StoreError> {
        self.create(run, started, Some(max_unfinished)).await
    }

    async fn unfinished_runs(&self, tenant: &TenantId) -> Result<u64, StoreError> {
        let item = self
            .get_item("unfinished_runs", key(quota_pk(tenant), RECORD_SK))
            .await?;
        Ok(unfinished_of(item.as_ref()))
    }

    async fn builds(&self, tenant: &TenantId) -> Result<Vec<BuildSummary>, StoreError> {
        let pk = builds_pk(tenant);
        let records = self
            .query_pages(
                "builds",
                |q| {
                    q.key_condition_expression("#pk = :pk")
                        .expression_attribute_names("#pk", PK)
                        .expression_attribute_values(":pk", s(&pk))
                },
                None,
            )
            .await?;
        let mut builds = Vec::with_capacity(records.len());
        for record in records {
            let (build_id, first_seen, last_seen) = build_from_item(&record)?;
            // The index holds keys only; the runs' statuses come from batch reads.
            let bk = build_key(tenant, &build_id);
            let entries = self
                .query_pages(
                    "builds",
                    |q| {
                        q.index_name(BUILD_INDEX)
                            .key_condition_expression("#bk = :bk")
                            .expression_attribute_names("#bk", BUILD_KEY)
                            .expression_attribute_values(":bk", s(&bk))
                    },
                    None,
                )
                .await?;
            let mut unfinished = std::collections::BTreeMap::new();
            for chunk in entries.chunks(100) {
                let keys: Vec<Item> = chunk
                    .iter()
                    .map(|e| item_key(e).map(|(pk, sk)| key(pk, sk)))
                    .collect::<Result<_, _>>()?;
                for item in self.batch_get("builds", keys).await?.into_values() {
                    let run = run_from_item(&item)?;
                    // The index is eventually consistent: the run as read decides.
                    if !run.status.is_finished() && run.build_id.as_deref() == Some(&build_id) {
                        *unfinished.entry(run.status).or_insert(0) += 1;
                    }
                }
            }
            builds.push(BuildSummary {
                build_id,
                first_seen,
                last_seen,
                unfinished,
            });
        }
        Ok(builds)
    }

    async fn get_run(&self, tenant: &TenantId, run_id: &RunId) -> Result<Option<Run>, StoreError> {
        self.get_item("get_run", key(run_pk(tenant, run_id), RUN_SK))
            .await?
            .map(|i| run_from_item(&i))
            .transpose()
    }

    async fn claim(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        claim: &Claim,
    ) -> Result<Run, StoreError> {
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(key(run_pk(tenant, run_id), RUN_SK)))
            .update_expression(
                "SET #status = :running, #version = #version + :one, #epoch = #epoch + :one, \
                 #lease_epoch = #epoch + :one, #lease_owner = :owner, #lease_expires = :expires, \
                 #due_at = :expires, #sweep_at = :expires, #due_shard = :shard, \
                 #updated_at = :now REMOVE #resend_after",
            )
            .condition_expression(
                "attribute_exists(pk) AND #status IN (:pending, :running, :waiting) \
                 AND (attribute_not_exists(#lease_expires) OR #lease_expires <= :now)",
            )
            .set_expression_attribute_names(Some(names(&[
                ("#status", STATUS),
                ("#version", VERSION),
                ("#epoch", EPOCH),
                ("#lease_epoch", LEASE_EPOCH),
                ("#lease_owner", LEASE_OWNER),
                ("#lease_expires", LEASE_EXPIRES),
                ("#due_at", DUE_AT),
                ("#sweep_at", SWEEP_AT),
                ("#resend_after", RESEND_AFTER),
                ("#due_shard", DUE_SHARD),
                ("#updated_at", UPDATED_AT),
            ])))
            .set_expression_attribute_values(Some(HashMap::from([
                (":running".to_owned(), s(RunStatus::Running.as_str())),
                (":pending".to_owned(), s(RunStatus::Pending.as_str())),
                (":waiting".to_owned(), s(RunStatus::Waiting.as_str())),
                (":one".to_owned(), n(1)),
                (":owner".to_owned(), s(&claim.owner)),
                (":expires".to_owned(), n(claim.expires_at.0)),
                (":shard".to_owned(), s(due_shard(tenant, run_id))),
                (":now".to_owned(), n(claim.now.0)),
            ])))
            .return_values(ReturnValue::AllNew)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await;
        match self.updated_run("claim", result)? {
            Ok(run) => Ok(run),
            Err(current) => {
                // A retry of a claim that did apply finds its own lease.
                let ours = current
                    .lease
                    .as_ref()
                    .is_some_and(|l| l.owner == claim.owner && l.expires_at == claim.expires_at);
                if ours && current.status == RunStatus::Running {
                    Ok(*current)
                } else {
                    Err(StoreError::Conflict(Some(current)))
                }
            }
        }
    }

    async fn renew_lease(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        epoch: FencingEpoch,
        expires_at: Timestamp,
    ) -> Result<Run, StoreError> {
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(key(run_pk(tenant, run_id), RUN_SK)))
            .update_expression(
                "SET #lease_expires = :expires, #due_at = :expires, #sweep_at = :expires, \
                 #due_shard = :shard REMOVE #resend_after",
            )
            .condition_expression("#lease_epoch = :epoch")
            .set_expression_attribute_names(Some(names(&[
                ("#lease_epoch", LEASE_EPOCH),
                ("#lease_expires", LEASE_EXPIRES),
                ("#due_at", DUE_AT),
                ("#sweep_at", SWEEP_AT),
                ("#resend_after", RESEND_AFTER),
                ("#due_shard", DUE_SHARD),
            ])))
            .set_expression_attribute_values(Some(HashMap::from([
                (":expires".to_owned(), n(expires_at.0)),
                (":epoch".to_owned(), n(epoch.0)),
                (":shard".to_owned(), s(due_shard(tenant, run_id))),
            ])))
            .return_values(ReturnValue::AllNew)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await;
        self.updated_run("renew_lease", result)?
            .map_err(|current| StoreError::Conflict(Some(current)))
    }

    async fn load_history(&self, tenant: &TenantId, run_id: &RunId) -> Result<History, StoreError> {
        let pk = run_pk(tenant, run_id);
        let items = self
            .query_pages(
                "load_history",
                |q| {
                    q.key_condition_expression("pk = :pk AND begins_with(sk, :history)")
                        .expression_attribute_values(":pk", s(&pk))
                        .expression_attribute_values(":history", s(HISTORY_PREFIX))
                        .consistent_read(true)
                },
                None,
            )
            .await?;
        let mut history = History::default();
        for item in &items {
            match history_from_item(item)? {
                HistoryItem::Journal(entry) => history.journal.push(entry),
                HistoryItem::Delivery(delivery) => history.deliveries.push(delivery),
            }
        }
        history.deliveries.sort_by_key(|d| d.seq);
        Ok(history)
    }

    async fn load_journal(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
    ) -> Result<Vec<JournalEntry>, StoreError> {
        let pk = run_pk(tenant, run_id);
        let items = self
            .query_pages(
                "load_journal",
                |q| {
                    q.key_condition_expression("pk = :pk AND begins_with(sk, :journal)")
                        .expression_attribute_values(":pk", s(&pk))
                        .expression_attribute_values(":journal", s(JOURNAL_PREFIX))
                        .consistent_read(true)
                },
                None,
            )
            .await?;
        let mut journal = Vec::with_capacity(items.len());
        for item in &items {
            match history_from_item(item)? {
                HistoryItem::Journal(entry) => journal.push(entry),
                HistoryItem::Delivery(_) => {
                    return Err(corrupt(
                        "load_journal",
                        "a delivery under the journal's keys",
                    ));
                }
            }
        }
        Ok(journal)
    }

    async fn checkpoint(&self, cp: &Checkpoint) -> Result<(), StoreError> {
        let (tenant, run_id) = (&cp.run.tenant, &cp.run.id);
        // A run moved to another build (an upgrade) and child runs are on builds the
        // tenant's records must list.
        if cp
            .timeline
            .iter()
            .any(|e| e.event_type == EventType::RunUpgraded)
        {
            self.note_build(&cp.run).await?;
        }
        for (child, _) in &cp.child_runs {
            self.note_build(child).await?;
        }
        let unfinished = self.unfinished_delta(cp).await?;
        for _ in 0..RACE_ATTEMPTS {
            let mut tx = Tx::default();
            if unfinished != 0 {
                tx.count_unfinished(&self.table, tenant, unfinished, None)?;
            }
            tx.put_run(
                &self.table,
                Role::Run,
                run_item(&cp.run, self.retention)?,
                cp.expected_version,
                cp.epoch,
                cp.timeline.first().map(|e| e.seq),
            )?;
            for entry in &cp.journal {
                tx.put(
                    &self.table,
                    Role::Journal,
                    journal_item(tenant, run_id, entry)?,
                    None,
                )?;
            }
            for item in timeline_items(tenant, run_id, &cp.timeline)? {
                tx.insert(&self.table, Role::Timeline, item)?;
            }
            for record in &cp.callbacks {
                let item = callback_item(record, cp.run.updated_at, self.retention)?;
                tx.put(&self.table, Role::Callback, item, None)?;
            }
            for record in &cp.tool_calls {
                let item = tool_call_item(record, self.retention)?;
                tx.put(&self.table, Role::ToolCall, item, None)?;
            }
            for (child, started) in &cp.child_runs {
                tx.insert(
                    &self.table,
                    Role::ChildRun,
                    run_item(child, self.retention)?,
                )?;
                tx.insert(
                    &self.table,
                    Role::ChildTimeline,
                    timeline_item(&child.tenant, &child.id, started)?,
                )?;
            }
            if let Some(delivery) = &cp.parent_delivery {
                // A missing or finished parent, or a duplicate, skips the delivery.
                match self.plan(delivery).await {
                    Ok(Decision::Accept(plan)) => {
                        tx.delivery(&self.table, &plan, self.retention)?
                    }
                    Ok(Decision::Duplicate)
                    | Err(StoreError::NotFound)
                    | Err(StoreError::Gone(_)) => {}
                    Err(e) => return Err(e),
                }
            }
            let reasons = match self.transact("checkpoint", tx).await? {
                TxOutcome::Committed => return Ok(()),
                TxOutcome::Cancelled(reasons) => reasons,
            };
            if let Some(reason) = reason_of(&reasons, Role::Run) {
                let current = reason
                    .item
                    .as_ref()
                    .map(run_from_item)
                    .transpose()?
                    .ok_or(StoreError::NotFound)?;
                return Err(StoreError::Conflict(Some(Box::new(current))));
            }
            if reason_of(&reasons, Role::Timeline).is_some() {
                let current = self.current_run(tenant, run_id).await?;
                return Err(StoreError::Conflict(Some(Box::new(current))));
            }
            if reason_of(&reasons, Role::ChildRun).is_some()
                || reason_of(&reasons, Role::ChildTimeline).is_some()
            {
                return Err(StoreError::AlreadyExists);
            }
            // Only the parent's records moved since they were read: read them again.
        }
        Err(StoreError::Unavailable(
            "checkpoint: the parent run kept changing".into(),
        ))
    }

    async fn deliver(&self, delivery: &NewDelivery) -> Result<DeliverOutcome, StoreError> {
        for _ in 0..RACE_ATTEMPTS {
            let plan = match self.plan(delivery).await? {
                Decision::Duplicate => return Ok(DeliverOutcome::Duplicate),
                Decision::Accept(plan) => plan,
            };
            let mut tx = Tx::default();
            tx.delivery(&self.table, &plan, self.retention)?;
            match self.transact("deliver", tx).await? {
                TxOutcome::Committed => return Ok(DeliverOutcome::Accepted(Box::new(plan.run))),
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

    async fn get_callback(
        &self,
        callback_id: &CallbackId,
    ) -> Result<Option<CallbackRecord>, StoreError> {
        self.get_item("get_callback", key(callback_pk(callback_id), RECORD_SK))
            .await?
            .map(|i| callback_from_item(&i))
            .transpose()
    }

    async fn get_tool_call(
        &self,
        tenant: &TenantId,
        key_: &IdempotencyKey,
    ) -> Result<Option<ToolCallRecord>, StoreError> {
        self.get_item("get_tool_call", key(tool_call_pk(tenant, key_), RECORD_SK))
            .await?
            .map(|i| tool_call_from_item(&i))
            .transpose()
    }

    async fn timeline(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        after: u64,
        limit: usize,
    ) -> Result<Vec<TimelineEvent>, StoreError> {
        if limit == 0 || after == u64::MAX {
            return Ok(Vec::new());
        }
        let pk = run_pk(tenant, run_id);
        let items = self
            .query_pages(
                "timeline",
                |q| {
                    q.key_condition_expression("pk = :pk AND sk BETWEEN :from AND :to")
                        .expression_attribute_values(":pk", s(&pk))
                        .expression_attribute_values(":from", s(timeline_sk(after + 1)))
                        .expression_attribute_values(":to", s(timeline_sk(u64::MAX)))
                        .consistent_read(true)
                },
                Some(limit),
            )
            .await?;
        // An item holds one or more events, under the last one's seq: the first item
        // found may begin before `after`. Every item found holds at least one event
        // after it, so `limit` items hold at least `limit` events.
        let mut events = Vec::with_capacity(limit);
        for item in &items {
            events.extend(
                timeline_from_item(item)?
                    .into_iter()
                    .filter(|e| e.seq > after),
            );
        }
        events.truncate(limit);
        Ok(events)
    }

    async fn list_runs(
        &self,
        tenant: &TenantId,
        filter: &RunFilter,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<RunPage, StoreError> {
        let limit = limit.clamp(1, 100);
        let start = match cursor {
            None => None,
            Some(c) => {
                let c = siesta::cursor::decode(c)?;
                let (_, run) = c
                    .split_once('#')
                    .ok_or_else(|| StoreError::Invalid("malformed cursor".into()))?;
                let mut k = key(run_pk(tenant, &RunId(run.to_owned())), RUN_SK);
                k.insert(TENANT.into(), s(tenant.as_str()));
                k.insert(CREATED_KEY.into(), s(&c));
                Some(k)
            }
        };
        // One more than the page, to know whether there is a next one.
        let out = self
            .client
            .query()
            .table_name(&self.table)
            .index_name(TENANT_INDEX)
            .key_condition_expression("#tenant = :tenant")
            .expression_attribute_names("#tenant", TENANT)
            .expression_attribute_values(":tenant", s(tenant.as_str()))
            .scan_index_forward(false)
            .limit(limit as i32 + 1)
            .set_exclusive_start_key(start)
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await
            .map_err(|e| sdk("list_runs", e))?;
        if let Some(c) = out.consumed_capacity() {
            self.capacity.add(false, std::slice::from_ref(c));
        }
        let mut entries = out.items.unwrap_or_default();
        let next_cursor = if entries.len() > limit {
            entries.truncate(limit);
            match entries.last() {
                Some(last) => Some(siesta::cursor::encode(&created_key_of(last)?)),
                None => None,
            }
        } else {
            None
        };
        if entries.is_empty() {
            return Ok(RunPage {
                runs: Vec::new(),
                next_cursor,
            });
        }
        // The index holds keys only (it never changes after a run is created, so
        // checkpoints cost it nothing); the runs themselves come from one batch read.
        let keys: Vec<Item> = entries
            .iter()
            .map(|e| item_key(e).map(|(pk, sk)| key(pk, sk)))
            .collect::<Result<_, _>>()?;
        let mut found = self.batch_get("list_runs", keys).await?;
        let mut runs = Vec::with_capacity(entries.len());
        for entry in &entries {
            if let Some(item) = found.remove(&item_key(entry)?) {
                let run = run_from_item(&item)?;
                let wanted = filter.status.is_none_or(|s| s == run.status)
                    && filter.workflow.as_ref().is_none_or(|w| *w == run.workflow);
                if wanted {
                    runs.push(run);
                }
            }
        }
        Ok(RunPage { runs, next_cursor })
    }

    async fn due_runs(&self, before: Timestamp, limit: usize) -> Result<Vec<DueRun>, StoreError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        // One bounded Query per shard, concurrently; the earliest `limit` of them all.
        let shards = (0..DUE_SHARDS).map(|shard| {
            let shard = shard_name(shard);
            async move {
                self.query_pages(
                    "due_runs",
                    |q| {
                        q.index_name(DUE_INDEX)
                            .key_condition_expression("#shard = :shard AND #sweep_at <= :before")
                            .expression_attribute_names("#shard", DUE_SHARD)
                            .expression_attribute_names("#sweep_at", SWEEP_AT)
                            .expression_attribute_values(":shard", s(&shard))
                            .expression_attribute_values(":before", n(before.0))
                    },
                    Some(limit),
                )
                .await
            }
        });
        let mut due: Vec<DueRun> = Vec::new();
        for items in futures::future::try_join_all(shards).await? {
            for item in &items {
                due.push(due_from_item(item)?);
            }
        }
        due.sort_by(|a, b| {
            (a.sweep_at(), &a.tenant, &a.run_id).cmp(&(b.sweep_at(), &b.tenant, &b.run_id))
        });
        due.truncate(limit);
        Ok(due)
    }

    async fn set_resend_after(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        due_at: Timestamp,
        resend_after: Option<Timestamp>,
    ) -> Result<(), StoreError> {
        let sweep_at = siesta::sweep_at(Some(due_at), resend_after).unwrap_or(due_at);
        let update = if resend_after.is_some() {
            "SET #sweep_at = :sweep_at, #resend_after = :resend_after"
        } else {
            "SET #sweep_at = :sweep_at REMOVE #resend_after"
        };
        let mut values = HashMap::from([
            (":due".to_owned(), n(due_at.0)),
            (":sweep_at".to_owned(), n(sweep_at.0)),
        ]);
        if let Some(r) = resend_after {
            values.insert(":resend_after".to_owned(), n(r.0));
        }
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(key(run_pk(tenant, run_id), RUN_SK)))
            .update_expression(update)
            .condition_expression("#due_at = :due")
            .set_expression_attribute_names(Some(names(&[
                ("#due_at", DUE_AT),
                ("#sweep_at", SWEEP_AT),
                ("#resend_after", RESEND_AFTER),
            ])))
            .set_expression_attribute_values(Some(values))
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await;
        match result {
            Ok(out) => {
                if let Some(c) = out.consumed_capacity() {
                    self.capacity.add(true, std::slice::from_ref(c));
                }
                self.capacity
                    .note_update("set_resend_after", "Run", out.consumed_capacity());
                Ok(())
            }
            Err(e) => match e.as_service_error() {
                // No longer due then (claimed, finished, moved on), or gone: nothing to
                // note.
                Some(UpdateItemError::ConditionalCheckFailedException(_)) => Ok(()),
                _ => Err(sdk("set_resend_after", e)),
            },
        }
    }
}
