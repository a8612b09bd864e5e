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
//!
//! What each write puts in the table is decided in [`crate::layout`]; the files here
//! read what a plan needs, send what it returns and act on the answer. A file per job:
//! [`capacity`] (what the requests cost, tallied from the plans), [`reads`] (gets and
//! paged queries), [`tx`] (sending a plan: plain puts and updates, transactions, the
//! roles of their items), [`lifecycle`] (create, claim, renew), [`replay_input`] (what a
//! replay loads), [`checkpoint`] (and [`tail`], a checkpoint kept in the run item),
//! [`deliveries`], [`builds`] (the tenant's build records), [`queries`] (timeline and
//! run listings), [`due`] (the sweep's index), [`limits`] (concurrency limits: a start
//! under them, what their plans read, usage and places in line), [`rate_turns`] (step
//! rate limits' turns) and [`step_slots`] (step limits' slots). The [`RunStore`] impl
//! here only routes each call to its file, but for the one-item reads.

mod action_jobs;
mod builds;
mod capacity;
mod checkpoint;
mod debounces;
mod deliveries;
mod due;
mod just_read;
mod lifecycle;
mod limits;
mod openings;
mod queries;
mod rate_turns;
mod reads;
mod replay_input;
mod schedules;
mod step_slots;
mod tail;
mod tx;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_dynamodb::Client;
use siesta::ports::*;
use siesta::*;

use crate::callback_state::{is_in_run, with_state};
use crate::item::*;
use crate::keys::*;

pub(crate) use capacity::CapacityMeter;
pub use capacity::WrittenItems;
use lifecycle::unfinished_of;
pub(crate) use reads::{consistent_get, query_page};

/// How many times a write that lost a race on a record other than the caller's run
/// (a parent run, a callback, plain contention) is re-read and retried.
const RACE_ATTEMPTS: usize = 8;

/// Under which key [`DynamoStore::looked_up`] keeps the run item a lookup of the
/// callback record under `callback_pk` read with it.
fn run_lookup_key(callback_pk: &str) -> String {
    format!("{callback_pk}#run")
}

/// The run store on DynamoDB.
pub(crate) struct DynamoStore {
    client: Client,
    table: String,
    retention: Duration,
    pub(crate) capacity: Arc<CapacityMeter>,
    /// The checkpoint tails of the runs it read or wrote last.
    tails: tail::Tails,
    /// The run items its claims returned, for the replays that follow.
    claimed: just_read::JustRead,
    /// The callback records its lookups read (and the run items they read with them),
    /// for the deliveries that follow.
    looked_up: just_read::JustRead,
}

impl DynamoStore {
    pub(crate) fn new(client: Client, table: String, retention: Duration) -> Self {
        DynamoStore {
            client,
            table,
            retention,
            capacity: Arc::default(),
            tails: tail::Tails::default(),
            claimed: just_read::JustRead::default(),
            looked_up: just_read::JustRead::default(),
        }
    }
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

    async fn admit_run(
        &self,
        run: &Run,
        started: &TimelineEvent,
        max_unfinished: Option<u64>,
    ) -> Result<Run, StoreError> {
        self.admit(run, started, max_unfinished).await
    }

    async fn limit_usage(&self, tenant: &TenantId) -> Result<Vec<LimitUsage>, StoreError> {
        self.usage(tenant).await
    }

    async fn queue_position(&self, tenant: &TenantId, at: &QueuedAt) -> Result<u64, StoreError> {
        self.position(tenant, at).await
    }

    async fn take_step_slot(
        &self,
        key: &str,
        max: u32,
        holder: &StepSlotHolder,
        now: Timestamp,
        grant_for: Duration,
    ) -> Result<(StepSlot, Vec<HandedSlot>), StoreError> {
        DynamoStore::take_step_slot(self, key, max, holder, now, grant_for).await
    }

    async fn give_back_step_slot(
        &self,
        key: &str,
        max: u32,
        holder: &StepSlotHolder,
        now: Timestamp,
        grant_for: Duration,
    ) -> Result<Vec<HandedSlot>, StoreError> {
        DynamoStore::give_back_step_slot(self, key, max, holder, now, grant_for).await
    }

    async fn take_rate_turn(
        &self,
        key: &str,
        interval: Duration,
        holder: &StepSlotHolder,
        now: Timestamp,
    ) -> Result<RateTurn, StoreError> {
        DynamoStore::take_rate_turn(self, key, interval, holder, now).await
    }

    async fn get_debounce_entry(
        &self,
        tenant: &TenantId,
        name: &str,
        key: &str,
    ) -> Result<Option<DebounceEntry>, StoreError> {
        self.debounce_entry(tenant, name, key).await
    }

    async fn put_debounce_entry(
        &self,
        tenant: &TenantId,
        name: &str,
        key: &str,
        run_id: &RunId,
        expected: u64,
        keep_until: Timestamp,
    ) -> Result<u64, StoreError> {
        self.point_debounce_entry(tenant, (name, key), run_id, expected, keep_until)
            .await
    }

    async fn put_action_job(&self, job: &ActionJob, expected: u64) -> Result<u64, StoreError> {
        self.write_action_job(job, expected).await
    }

    async fn get_action_job(
        &self,
        tenant: &TenantId,
        id: &str,
    ) -> Result<Option<ActionJob>, StoreError> {
        self.read_action_job(tenant, id).await
    }

    async fn list_action_jobs(
        &self,
        tenant: &TenantId,
        limit: usize,
    ) -> Result<Vec<ActionJob>, StoreError> {
        self.tenant_action_jobs(tenant, limit).await
    }

    async fn active_action_jobs(&self, limit: usize) -> Result<Vec<ActiveActionJob>, StoreError> {
        self.running_action_jobs(limit).await
    }

    async fn unfinished_runs(&self, tenant: &TenantId) -> Result<u64, StoreError> {
        let item = self
            .get_item("unfinished_runs", key(quota_pk(tenant), RECORD_SK))
            .await?;
        Ok(unfinished_of(item.as_ref()))
    }

    async fn builds(&self, tenant: &TenantId) -> Result<Vec<BuildSummary>, StoreError> {
        builds::builds(self, tenant).await
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
        lifecycle::claim(self, tenant, run_id, claim).await
    }

    async fn renew_lease(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        epoch: FencingEpoch,
        expires_at: Timestamp,
    ) -> Result<Run, StoreError> {
        lifecycle::renew_lease(self, tenant, run_id, epoch, expires_at).await
    }

    async fn load_replay_input(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
    ) -> Result<ReplayInput, StoreError> {
        replay_input::load_replay_input(self, tenant, run_id).await
    }

    async fn load_claimed_replay_input(&self, run: &Run) -> Result<ReplayInput, StoreError> {
        replay_input::load_claimed_replay_input(self, run).await
    }

    async fn load_journal(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
    ) -> Result<Vec<JournalEntry>, StoreError> {
        replay_input::load_journal(self, tenant, run_id).await
    }

    async fn checkpoint(&self, cp: &Checkpoint) -> Result<(), StoreError> {
        checkpoint::checkpoint(self, cp).await.map(drop)
    }

    async fn checkpoint_admitting(&self, cp: &Checkpoint) -> Result<Vec<Run>, StoreError> {
        checkpoint::checkpoint(self, cp).await
    }

    async fn deliver(&self, delivery: &NewDelivery) -> Result<DeliverOutcome, StoreError> {
        deliveries::deliver(self, delivery).await
    }

    async fn get_callback(
        &self,
        callback_id: &CallbackId,
    ) -> Result<Option<CallbackRecord>, StoreError> {
        let pk = callback_pk(callback_id);
        let Some(item) = self
            .get_item("get_callback", key(pk.clone(), RECORD_SK))
            .await?
        else {
            return Ok(None);
        };
        let mut record = callback_from_item(&item)?;
        if is_in_run(&item) {
            // Its state is in the run item: read it too, and keep it for the delivery.
            let run_key = key(run_pk(&record.tenant, &record.run_id), RUN_SK);
            let run = self.get_item("get_callback: its run", run_key).await?;
            record = with_state(record, run.as_ref())?;
            if let Some(run) = run {
                self.looked_up.keep(run_lookup_key(&pk), run);
            }
        }
        // A webhook's lookup, read again by the delivery that follows (`plan`).
        self.looked_up.keep(pk, item);
        Ok(Some(record))
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
        queries::timeline(self, tenant, run_id, after, limit).await
    }

    async fn list_runs(
        &self,
        tenant: &TenantId,
        filter: &RunFilter,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<RunPage, StoreError> {
        queries::list_runs(self, tenant, filter, cursor, limit).await
    }

    async fn due_runs(&self, before: Timestamp, limit: usize) -> Result<Vec<DueRun>, StoreError> {
        due::due_runs(self, before, limit).await
    }

    async fn set_resend_after(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        due_at: Timestamp,
        resend_after: Option<Timestamp>,
    ) -> Result<(), StoreError> {
        due::set_resend_after(self, tenant, run_id, due_at, resend_after).await
    }
}
