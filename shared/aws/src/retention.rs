//! The reaper: a finished run, once its retention has passed, removed with everything
//! that is its own — on DynamoDB and in S3.
//!
//! **What finds a finished run.** The checkpoint that finishes a run puts its item into
//! the sparse `reap` index ([`REAP_INDEX`]), keyed by shard and by when the reaper looks
//! at it ([`REAP_AT`]): its finish plus the shortest retention the deployment has. So
//! the reaper's query is one bounded `Query` per shard (`reap_at <= now`), never a scan,
//! and a run still pending, running, waiting or parked is never in it, however old.
//!
//! **What the reaper decides.** It reads the run and takes its own retention
//! ([`RetentionRules::of`]: the workflow's, else the tenant's, else the deployment's):
//! - not passed yet: the run is put back in the index at its retention's end;
//! - kept for ever: put back [`FOREVER_RECHECK`] ahead (it stays);
//! - a child run whose parent still exists: looked at again a day later, or when its
//!   parent is due if that is later (the parent may still read the child's outcome and
//!   the values it offloaded);
//! - passed: the run is **claimed** (its `reap_at` moved [`CLAIM`] ahead under a token,
//!   conditioned on the version read) and removed: its callback records and the
//!   records of tool calls it left started or of unknown outcome (found through its
//!   journal), its S3 objects (everything under `<tenant>/<run>/`), every other item
//!   of its partition (`BatchWriteItem`, 25 deletes a request), and last the run item
//!   itself, conditioned on the claim.
//!
//! **Killed half-way** (a timeout, a crash), nothing is lost: the run item, still in
//! the index, comes due again when the claim runs out, and the next pass deletes what is
//! left — deletes are idempotent, and the run item goes last, so the run is never lost
//! track of. A claim outlives any invocation (Lambda's longest is 15 minutes), so two
//! reapers never work on one run: none can delete an item of a new run started with the
//! same `Idempotency-Key` once the old one is gone.
//!
//! **Why deletes and not TTL stamps.** DynamoDB bills an `UpdateItem` that sets
//! `expires_at` by the item's size, exactly like a `DeleteItem` of it; a delete in a
//! `BatchWriteItem` takes 1/25th of a request, and the item is gone at once rather than
//! within TTL's days. TTL is free only when the stamp rides on a write that happens
//! anyway: closed callback records and finished tool-call records get theirs when they
//! are written (a tool-call record's key hashes the call's input, which is not kept,
//! so the reaper could not find it).
//!
//! **Why S3 deletes and not a lifecycle rule.** S3 counts a rule's days from an
//! object's creation: a run that waits longer than the retention would lose the values
//! it offloaded while it still needs them. Tags would not help (a rule's days still
//! count from creation) and cost a request per object; a run's objects share its prefix,
//! so a `ListObjectsV2` and one `DeleteObjects` per 1 000 remove them.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::operation::delete_item::DeleteItemError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{DeleteRequest, ReturnConsumedCapacity, WriteRequest};
use aws_sdk_s3::types::{Delete, ObjectIdentifier};
use futures::StreamExt;
use siesta::ports::{StoreError, artifact_location};
use siesta::{CallbackId, EntryState, OperationKind, Run, RunId, TenantId, Timestamp, Verdict};

use crate::checkpoint_item::{Journal, replay_item, with_tail};
use crate::error::{corrupt, sdk};
use crate::item::{Item, REAP_CLAIM, VERSION, key, n, run_from_item, s};
use crate::keys::*;
use crate::store::{CapacityMeter, consistent_get, query_page};

/// How long a claimed run is left to the reaper that claimed it: longer than any Lambda
/// invocation can last, so a reaper killed half-way is dead before another takes over.
pub const CLAIM: Duration = Duration::from_secs(20 * 60);

/// When a finished run its rules keep for ever is looked at again. The table's index is
/// not re-armed when the rules change (that would take a write per run kept), so a run
/// leaving it for good would be kept for ever even after its workflow or tenant were
/// given a retention: looked at yearly, it goes within a year of that. One read and a
/// write a year per run kept.
pub const FOREVER_RECHECK: Duration = Duration::from_secs(365 * 24 * 60 * 60);

pub use siesta::retention::{PARENT_RECHECK, RetentionRules};
use siesta::retention::{millis, parent_recheck_at};

/// How many runs are worked on at once.
const CONCURRENCY: usize = 4;

/// What one [`Reaper::reap`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReapReport {
    /// Finished runs the index gave this pass.
    pub looked_at: usize,
    /// Runs removed, with everything that was their own.
    pub removed: Vec<(TenantId, RunId)>,
    /// Runs whose retention has not passed: put back at its end.
    pub rescheduled: usize,
    /// Runs kept for ever: looked at again after [`FOREVER_RECHECK`].
    pub kept_for_ever: usize,
    /// Child runs whose parent still exists: looked at again later.
    pub waiting_for_parent: usize,
    /// Items of the removed runs' partitions deleted (the run items included).
    pub items_deleted: usize,
    /// Records outside the runs' partitions deleted (callback records, tool-call
    /// records of calls left started or of unknown outcome).
    pub records_deleted: usize,
    /// S3 objects deleted.
    pub objects_deleted: usize,
    /// Whether the index gave a full page: more may be due, call again.
    pub more: bool,
}

impl ReapReport {
    fn add(&mut self, other: ReapReport) {
        self.removed.extend(other.removed);
        self.rescheduled += other.rescheduled;
        self.kept_for_ever += other.kept_for_ever;
        self.waiting_for_parent += other.waiting_for_parent;
        self.items_deleted += other.items_deleted;
        self.records_deleted += other.records_deleted;
        self.objects_deleted += other.objects_deleted;
    }
}

/// Removes finished runs past their retention from the runs table and the artifacts
/// bucket (see the module's documentation). Made by
/// [`AwsBackend::reaper`](crate::AwsBackend::reaper).
#[derive(Clone)]
pub struct Reaper {
    dynamodb: aws_sdk_dynamodb::Client,
    s3: aws_sdk_s3::Client,
    table: String,
    bucket: String,
    rules: Arc<RetentionRules>,
    capacity: Arc<CapacityMeter>,
}

fn string_of(item: &Item, name: &str) -> Result<String, StoreError> {
    match item.get(name) {
        Some(aws_sdk_dynamodb::types::AttributeValue::S(v)) => Ok(v.clone()),
        _ => Err(corrupt("reap index", format!("no string attribute {name}"))),
    }
}

fn number_of(item: &Item, name: &str) -> Result<i64, StoreError> {
    match item.get(name) {
        Some(aws_sdk_dynamodb::types::AttributeValue::N(v)) => v
            .parse()
            .map_err(|_| corrupt("reap index", format!("{name} = {v}"))),
        _ => Err(corrupt("reap index", format!("no number attribute {name}"))),
    }
}

/// An entry of the reap index.
struct Due {
    pk: String,
    reap_at: i64,
}

impl Reaper {
    pub(crate) fn new(
        dynamodb: aws_sdk_dynamodb::Client,
        s3: aws_sdk_s3::Client,
        table: String,
        bucket: String,
        rules: RetentionRules,
        capacity: Arc<CapacityMeter>,
    ) -> Self {
        Reaper {
            dynamodb,
            s3,
            table,
            bucket,
            rules: Arc::new(rules),
            capacity,
        }
    }

    /// The rules this reaper decides by.
    pub fn rules(&self) -> &RetentionRules {
        &self.rules
    }

    /// Look at up to `limit` finished runs whose `reap_at` is at or before `now`, the
    /// earliest first, and do with each what its retention says (see the module's
    /// documentation). Bounded: one `Query` per shard, then per run a read, one
    /// conditional write and — for a run removed — its items' deletes. Call again while
    /// the report says `more`. A call must not outlive [`CLAIM`] (a Lambda invocation
    /// cannot): past it, another reaper may take its runs over.
    pub async fn reap(&self, now: Timestamp, limit: usize) -> Result<ReapReport, StoreError> {
        let limit = limit.max(1);
        let due = self.due(now, limit).await?;
        let mut report = ReapReport {
            looked_at: due.len(),
            more: due.len() >= limit,
            ..ReapReport::default()
        };
        let mut outcomes = futures::stream::iter(due)
            .map(|d| self.look_at(d, now))
            .buffer_unordered(CONCURRENCY);
        // Every run is worked to its end before an error is returned: a run left
        // half-removed would only wait for its claim to run out.
        let mut failed = None;
        while let Some(outcome) = outcomes.next().await {
            match outcome {
                Ok(done) => report.add(done),
                Err(e) => failed = failed.or(Some(e)),
            }
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(report),
        }
    }

    /// The earliest `limit` entries of the reap index due at `now`, over every shard.
    async fn due(&self, now: Timestamp, limit: usize) -> Result<Vec<Due>, StoreError> {
        let shards = (0..DUE_SHARDS).map(|shard| {
            let shard = shard_name(shard);
            async move {
                let query = self
                    .dynamodb
                    .query()
                    .table_name(&self.table)
                    .index_name(REAP_INDEX)
                    .key_condition_expression("#shard = :shard AND #reap_at <= :now")
                    .expression_attribute_names("#shard", REAP_SHARD)
                    .expression_attribute_names("#reap_at", REAP_AT)
                    .expression_attribute_values(":shard", s(&shard))
                    .expression_attribute_values(":now", n(now.0))
                    .limit(limit.min(1000) as i32);
                // One page: the earliest `limit` of the shard are all the pass wants.
                let (page, _) =
                    query_page(query, &self.capacity, "reap: query the reap index", None).await?;
                page.iter()
                    .map(|i| {
                        Ok(Due {
                            pk: string_of(i, PK)?,
                            reap_at: number_of(i, REAP_AT)?,
                        })
                    })
                    .collect::<Result<Vec<_>, StoreError>>()
            }
        });
        let mut due: Vec<Due> = futures::future::try_join_all(shards)
            .await?
            .into_iter()
            .flatten()
            .collect();
        due.sort_by(|a, b| (a.reap_at, &a.pk).cmp(&(b.reap_at, &b.pk)));
        due.truncate(limit);
        Ok(due)
    }

    async fn get(&self, op: &str, key: Item) -> Result<Option<Item>, StoreError> {
        consistent_get(&self.dynamodb, &self.table, &self.capacity, op, key).await
    }

    /// Decide on one run and do it.
    async fn look_at(&self, due: Due, now: Timestamp) -> Result<ReapReport, StoreError> {
        let mut report = ReapReport::default();
        let Some(item) = self
            .get("reap: read the run", key(due.pk.clone(), RUN_SK))
            .await?
        else {
            return Ok(report);
        };
        let run = run_from_item(&item)?;
        if !run.status.is_finished() || number_of(&item, REAP_AT).ok() != Some(due.reap_at) {
            // Not what the index said (it lags the table): the next pass sees it as it is.
            return Ok(report);
        }
        let seen = (due.reap_at, run.version);
        match self
            .rules
            .verdict(&run.tenant, &run.workflow, run.updated_at, now)
        {
            Verdict::KeepForEver => {
                let later = now.0.saturating_add(millis(FOREVER_RECHECK));
                if self.move_to(&due.pk, seen, later, None).await? {
                    report.kept_for_ever += 1;
                }
                return Ok(report);
            }
            Verdict::LookAgainAt(end) => {
                if self.move_to(&due.pk, seen, end.0, None).await? {
                    report.rescheduled += 1;
                }
                return Ok(report);
            }
            Verdict::Remove => {}
        }
        if let Some(parent) = &run.parent {
            let parent_key = key(run_pk(&run.tenant, &parent.run_id), RUN_SK);
            // A run under the parent's id may be a new one under a reused id (an
            // `Idempotency-Key` replayed after the parent was removed): not its parent.
            let holder = match self.get("reap: read the parent", parent_key).await? {
                Some(item) => Some((run_from_item(&item)?, number_of(&item, REAP_AT).ok())),
                None => None,
            };
            if let Some((holder, holder_due)) = holder
                && parent.names(&holder)
            {
                let later = parent_recheck_at(now, holder_due);
                if self.move_to(&due.pk, seen, later, None).await? {
                    report.waiting_for_parent += 1;
                }
                return Ok(report);
            }
        }
        let token = uuid::Uuid::new_v4().to_string();
        let claim_end = now.0.saturating_add(millis(CLAIM));
        if !self.move_to(&due.pk, seen, claim_end, Some(&token)).await? {
            return Ok(report);
        }
        if self.remove(&run, &item, &token, &mut report).await? {
            report.removed.push((run.tenant.clone(), run.id.clone()));
        }
        Ok(report)
    }

    /// Move the run's `reap_at` to `to`, with a claim token when given, if it is still as
    /// `seen` (its `reap_at` and version). Whether it was.
    async fn move_to(
        &self,
        pk: &str,
        seen: (i64, u64),
        to: i64,
        claim: Option<&str>,
    ) -> Result<bool, StoreError> {
        let mut update = self
            .dynamodb
            .update_item()
            .table_name(&self.table)
            .set_key(Some(key(pk.to_owned(), RUN_SK)))
            .condition_expression("#reap_at = :seen AND #version = :version")
            .expression_attribute_names("#reap_at", REAP_AT)
            .expression_attribute_names("#version", VERSION)
            .expression_attribute_values(":seen", n(seen.0))
            .expression_attribute_values(":version", n(seen.1))
            .return_consumed_capacity(ReturnConsumedCapacity::Total);
        update = match claim {
            None => update
                .update_expression("SET #reap_at = :at")
                .expression_attribute_values(":at", n(to)),
            Some(token) => update
                .update_expression("SET #reap_at = :at, #claim = :token")
                .expression_attribute_names("#claim", REAP_CLAIM)
                .expression_attribute_values(":at", n(to))
                .expression_attribute_values(":token", s(token)),
        };
        match update.send().await {
            Ok(out) => {
                self.capacity.add(true, out.consumed_capacity());
                Ok(true)
            }
            Err(e) => match e.as_service_error() {
                // Another reaper moved it first, or it changed: the next pass decides
                // again on what it is then.
                Some(UpdateItemError::ConditionalCheckFailedException(_)) => Ok(false),
                _ => Err(sdk("reap: move the run in the reap index", e)),
            },
        }
    }

    /// Remove a claimed run: its records outside its partition, its objects, its
    /// partition, and its run item last (under the claim). Whether the run item went:
    /// not when the claim ran out and another reaper took the run over (it removes it).
    async fn remove(
        &self,
        run: &Run,
        run_item: &Item,
        token: &str,
        report: &mut ReapReport,
    ) -> Result<bool, StoreError> {
        let pk = run_pk(&run.tenant, &run.id);
        // The records outside the partition first: the journal that names them goes
        // with the partition.
        let keys = self.records_of(&run.tenant, &pk, run_item).await?;
        report.records_deleted += keys.len();
        self.delete_items(keys).await?;
        report.objects_deleted += self.delete_objects(&run.tenant, &run.id).await?;
        // The partition, page by page, all but the run item.
        let mut start = None;
        loop {
            let query = self
                .dynamodb
                .query()
                .table_name(&self.table)
                .key_condition_expression("#pk = :pk")
                .expression_attribute_names("#pk", PK)
                .expression_attribute_names("#sk", SK)
                .projection_expression("#pk, #sk")
                .expression_attribute_values(":pk", s(&pk))
                .consistent_read(true);
            let (page, next) =
                query_page(query, &self.capacity, "reap: list the run's items", start).await?;
            let keys: Vec<Item> = page
                .into_iter()
                .filter(|i| i.get(SK) != Some(&s(RUN_SK)))
                .collect();
            report.items_deleted += keys.len();
            self.delete_items(keys).await?;
            start = next;
            if start.is_none() {
                break;
            }
        }
        let result = self
            .dynamodb
            .delete_item()
            .table_name(&self.table)
            .set_key(Some(key(pk, RUN_SK)))
            .condition_expression("#claim = :token")
            .expression_attribute_names("#claim", REAP_CLAIM)
            .expression_attribute_values(":token", s(token))
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await;
        match result {
            Ok(out) => {
                self.capacity.add(true, out.consumed_capacity());
                report.items_deleted += 1;
                Ok(true)
            }
            Err(e) => match e.as_service_error() {
                Some(DeleteItemError::ConditionalCheckFailedException(_)) => Ok(false),
                _ => Err(sdk("reap: delete the run item", e)),
            },
        }
    }

    /// The keys of the records outside the run's partition that its journal names: its
    /// callbacks' records, and the tool-call records of calls it left started or of
    /// unknown outcome (a finished call's record expires by TTL, and its entry no
    /// longer holds the key).
    async fn records_of(
        &self,
        tenant: &TenantId,
        pk: &str,
        run_item: &Item,
    ) -> Result<Vec<Item>, StoreError> {
        let mut journal = Journal::default();
        let mut items = Vec::new();
        let mut start = None;
        loop {
            let query = self
                .dynamodb
                .query()
                .table_name(&self.table)
                .key_condition_expression("#pk = :pk AND #sk BETWEEN :journal AND :end")
                .expression_attribute_names("#pk", PK)
                .expression_attribute_names("#sk", SK)
                .expression_attribute_values(":pk", s(pk))
                .expression_attribute_values(":journal", s(CHECKPOINT_PREFIX))
                .expression_attribute_values(":end", s(CHECKPOINT_END))
                .consistent_read(true);
            let (page, next) =
                query_page(query, &self.capacity, "reap: read the run's journal", start).await?;
            items.extend(page);
            start = next;
            if start.is_none() {
                break;
            }
        }
        for item in &with_tail(items, Some(run_item))? {
            // Nothing else is under the journal's keys; were a delivery there, it
            // would name no record.
            let _ = journal.take(replay_item(item)?);
        }
        // Each position's last entry: a call that finished no longer holds its key.
        let mut ids = BTreeSet::new();
        let mut tool_calls = BTreeSet::new();
        for entry in journal.into_entries() {
            match (&entry.kind, &entry.state, &entry.handle) {
                (OperationKind::Callback, _, Some(handle)) => {
                    ids.insert(CallbackId(handle.clone()));
                }
                (_, EntryState::Started { key: Some(k), .. }, _)
                | (_, EntryState::Unknown { key: k, .. }, _) => {
                    tool_calls.insert(k.clone());
                }
                _ => {}
            }
        }
        Ok(ids
            .iter()
            .map(|id| key(callback_pk(id), RECORD_SK))
            .chain(
                tool_calls
                    .iter()
                    .map(|k| key(tool_call_pk(tenant, k), RECORD_SK)),
            )
            .collect())
    }

    /// Delete `keys`, 25 a request, until none is left unprocessed.
    async fn delete_items(&self, keys: Vec<Item>) -> Result<(), StoreError> {
        for chunk in keys.chunks(25) {
            let mut requests = chunk
                .iter()
                .map(|k| {
                    let delete = DeleteRequest::builder()
                        .set_key(Some(k.clone()))
                        .build()
                        .map_err(|e| StoreError::Invalid(format!("a delete request: {e}")))?;
                    Ok(WriteRequest::builder().delete_request(delete).build())
                })
                .collect::<Result<Vec<_>, StoreError>>()?;
            let mut backoff = Duration::from_millis(10);
            while !requests.is_empty() {
                let out = self
                    .dynamodb
                    .batch_write_item()
                    .request_items(&self.table, requests)
                    .return_consumed_capacity(ReturnConsumedCapacity::Total)
                    .send()
                    .await
                    .map_err(|e| sdk("reap: delete the run's items", e))?;
                self.capacity.add(true, out.consumed_capacity());
                requests = out
                    .unprocessed_items
                    .and_then(|mut u| u.remove(&self.table))
                    .unwrap_or_default();
                if !requests.is_empty() {
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(1));
                }
            }
        }
        Ok(())
    }

    /// Delete every object under the run's prefix; how many.
    async fn delete_objects(&self, tenant: &TenantId, run_id: &RunId) -> Result<usize, StoreError> {
        // `<tenant>/<run>/<sha256>`: the prefix is the location of an empty digest.
        let prefix = artifact_location(tenant, run_id, "");
        let mut deleted = 0;
        let mut token = None;
        loop {
            let out = self
                .s3
                .list_objects_v2()
                .bucket(&self.bucket)
                .prefix(&prefix)
                .set_continuation_token(token.take())
                .send()
                .await
                .map_err(|e| sdk("reap: list the run's objects", e))?;
            let ids = out
                .contents()
                .iter()
                .filter_map(|o| o.key())
                .map(|k| ObjectIdentifier::builder().key(k).build())
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| StoreError::Invalid(format!("an object to delete: {e}")))?;
            if !ids.is_empty() {
                let count = ids.len();
                let delete = Delete::builder()
                    .set_objects(Some(ids))
                    .quiet(true)
                    .build()
                    .map_err(|e| StoreError::Invalid(format!("a delete of objects: {e}")))?;
                let out = self
                    .s3
                    .delete_objects()
                    .bucket(&self.bucket)
                    .delete(delete)
                    .send()
                    .await
                    .map_err(|e| sdk("reap: delete the run's objects", e))?;
                if let Some(error) = out.errors().first() {
                    return Err(StoreError::Unavailable(format!(
                        "reap: deleting {}: {}",
                        error.key().unwrap_or("an object"),
                        error.message().unwrap_or("failed")
                    )));
                }
                deleted += count;
            }
            match out.next_continuation_token {
                Some(t) if out.is_truncated == Some(true) => token = Some(t),
                _ => return Ok(deleted),
            }
        }
    }
}
