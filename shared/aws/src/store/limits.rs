//! Concurrency limits' slots: what the plans of [`crate::layout`]'s `limits.rs` ask for
//! read (counters in one `BatchGetItem`, a line's first waiter by a `Query` with
//! `Limit 1`, a queued run's item), the start of a run under its limits (its slots in
//! its create's transaction, planned again from a fresh read when a condition fails),
//! and the two reads of the limits' state: a tenant's usage (one `Query` of its
//! counters) and a queued run's place in line (a `Query` that counts).

use aws_sdk_dynamodb::types::{ReturnConsumedCapacity, Select};
use siesta::ports::*;
use siesta::*;

use super::DynamoStore;
use super::tx::{TxOutcome, reason_of};
use crate::error::sdk;
use crate::item::*;
use crate::keys::*;
use crate::layout::{
    self, Line, Need, Planned, Role, SlotReads, counter_from_item, waiter_from_item,
};

/// How many reads one plan may ask for before the store gives up on it: far more than
/// a finish that hands slots on through a few lines needs.
const PLAN_READS: usize = 200;

/// How many times a write that changes a limit's line is planned again after another
/// writer changed the line first: a busy key's line takes one joiner per round, so more
/// than [`super::RACE_ATTEMPTS`], each after a short random pause ([`line_backoff`]).
pub(super) const LINE_ATTEMPTS: usize = 32;

/// The pause before the `attempt`-th plan of a write that lost a line to another
/// writer: random, so that racing writers spread out, and growing (up to about 100 ms).
pub(super) async fn line_backoff(attempt: usize) {
    let ceiling = 5u64 << attempt.min(4);
    let ms = fresh_rev() % ceiling.max(1);
    tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
}

/// A fresh number for the counters a write changes (their `rev`): a condition on the
/// one read fails after any other write of the counter.
pub(super) fn fresh_rev() -> u64 {
    uuid::Uuid::new_v4().as_u64_pair().0
}

impl DynamoStore {
    /// Read what `need` names into `reads`.
    async fn read_for_slots(
        &self,
        op: &str,
        tenant: &TenantId,
        need: Need,
        reads: &mut SlotReads,
    ) -> Result<(), StoreError> {
        match need {
            Need::Counters(lines) => {
                let keys = lines.iter().map(|l| l.counter_key(tenant)).collect();
                let found = self.batch_get(op, keys).await?;
                for line in lines {
                    let counter_key = (limits_pk(tenant), limit_counter_sk(&line.limit, &line.key));
                    let counter = found.get(&counter_key).map(counter_from_item).transpose()?;
                    reads.counters.insert(line, counter);
                }
            }
            Need::WaiterAfter(line, after) => {
                let pk = line.pk(tenant);
                let items = self
                    .query_pages(
                        op,
                        |q| {
                            q.key_condition_expression("pk = :pk AND sk BETWEEN :from AND :to")
                                .expression_attribute_values(":pk", s(&pk))
                                .expression_attribute_values(
                                    ":from",
                                    s(limit_waiter_sk(after.saturating_add(1))),
                                )
                                .expression_attribute_values(":to", s(limit_waiter_sk(u64::MAX)))
                                .consistent_read(true)
                        },
                        Some(1),
                    )
                    .await?;
                let first = items.first().map(waiter_from_item).transpose()?;
                reads.waiters_after.insert((line, after), first);
            }
            Need::TicketBefore(line, ticket) => {
                let pk = line.pk(tenant);
                let before = match ticket {
                    0 | 1 => None,
                    _ => {
                        let items = self
                            .query_pages(
                                op,
                                |q| {
                                    q.key_condition_expression(
                                        "pk = :pk AND sk BETWEEN :from AND :to",
                                    )
                                    .expression_attribute_values(":pk", s(&pk))
                                    .expression_attribute_values(":from", s(limit_waiter_sk(0)))
                                    .expression_attribute_values(
                                        ":to",
                                        s(limit_waiter_sk(ticket - 1)),
                                    )
                                    .scan_index_forward(false)
                                    .consistent_read(true)
                                },
                                Some(1),
                            )
                            .await?;
                        items
                            .first()
                            .map(waiter_from_item)
                            .transpose()?
                            .map(|w| w.ticket)
                    }
                };
                reads.tickets_before.insert((line, ticket), before);
            }
            Need::Run(id) => {
                let item = self.get_item(op, key(run_pk(tenant, &id), RUN_SK)).await?;
                let run = item
                    .map(|i| Ok::<_, StoreError>((run_from_item(&i)?, item_size(&i))))
                    .transpose()?;
                reads.runs.insert(id, run);
            }
        }
        Ok(())
    }

    /// Make a plan of `tenant`'s slots, reading what it asks for until it can be made.
    pub(super) async fn plan_slots<T>(
        &self,
        op: &str,
        tenant: &TenantId,
        mut reads: SlotReads,
        plan: impl Fn(&SlotReads) -> Result<Planned<T>, StoreError>,
    ) -> Result<T, StoreError> {
        for _ in 0..PLAN_READS {
            match plan(&reads)? {
                Planned::Ready(planned) => return Ok(planned),
                Planned::Need(need) => self.read_for_slots(op, tenant, need, &mut reads).await?,
            }
        }
        Err(StoreError::Unavailable(format!(
            "{op}: the limits' lines needed more than {PLAN_READS} reads"
        )))
    }

    /// What `stored`, finished (or cancelled while queued) by a write at `now`, frees
    /// and hands on: the writes beside the checkpoint's and the runs admitted.
    pub(super) async fn plan_release(
        &self,
        stored: &Run,
        now: Timestamp,
    ) -> Result<layout::SlotPlan, StoreError> {
        let rev = fresh_rev();
        self.plan_slots(
            "checkpoint",
            &stored.tenant,
            SlotReads::default(),
            |reads| layout::release(stored, now, reads, rev, self.retention),
        )
        .await
    }

    /// [`RunStore::admit_run`]: the run's create and its slots in one transaction.
    pub(super) async fn admit(
        &self,
        run: &Run,
        started: &TimelineEvent,
        max_unfinished: Option<u64>,
    ) -> Result<Run, StoreError> {
        if run.limits.is_empty() {
            self.create(run, started, max_unfinished).await?;
            return Ok(run.clone());
        }
        // The run, its first event, the tenant's count, and its slots' items.
        let items = 3 + layout::admission_items(run);
        if items > MAX_TRANSACTION_ITEMS {
            return Err(StoreError::Invalid(format!(
                "admit_run: {} concurrency limits take {items} items, over DynamoDB's {MAX_TRANSACTION_ITEMS} per transaction",
                run.limits.len()
            )));
        }
        self.note_build(run).await?;
        for attempt in 0..LINE_ATTEMPTS {
            if attempt > 0 {
                line_backoff(attempt).await;
            }
            let rev = fresh_rev();
            let (created, slots) = self
                .plan_slots("admit_run", &run.tenant, SlotReads::default(), |reads| {
                    layout::admission(run, reads, rev, self.retention)
                })
                .await?;
            let mut plan = layout::create(&created, started, max_unfinished, self.retention)?;
            plan.writes.extend(slots.writes);
            let reasons = match self.transact("admit_run", &plan).await? {
                TxOutcome::Committed => return Ok(created),
                TxOutcome::NotWritten(e) => return Err(e),
                TxOutcome::Cancelled(reasons) => reasons,
            };
            if reason_of(&reasons, Role::Run).is_some() {
                return Err(StoreError::AlreadyExists);
            }
            if let Some(quota) = reason_of(&reasons, Role::Quota) {
                return Err(StoreError::OverQuota(format!(
                    "tenant {} has {} unfinished runs; its limit is {}",
                    run.tenant,
                    super::unfinished_of(quota.item.as_ref()),
                    max_unfinished.unwrap_or_default()
                )));
            }
            // A line moved since it was read: read it again.
        }
        Err(StoreError::Unavailable(format!(
            "admit_run: the lines of {}'s limits kept changing",
            run.id
        )))
    }

    /// [`RunStore::limit_usage`]: one `Query` (paged) of the tenant's counters.
    pub(super) async fn usage(&self, tenant: &TenantId) -> Result<Vec<LimitUsage>, StoreError> {
        let pk = limits_pk(tenant);
        let items = self
            .query_pages(
                "limit_usage",
                |q| {
                    q.key_condition_expression("pk = :pk AND begins_with(sk, :counters)")
                        .expression_attribute_values(":pk", s(&pk))
                        .expression_attribute_values(":counters", s(LIMIT_COUNTER_PREFIX))
                        .consistent_read(true)
                },
                None,
            )
            .await?;
        let mut usage = Vec::new();
        for item in &items {
            let sk = get_s(item, SK, "limit counter")?;
            let Some((limit, key)) = limit_of_counter_sk(sk) else {
                continue;
            };
            let counter = counter_from_item(item)?;
            if counter.holders == 0 && counter.waiters == 0 {
                continue;
            }
            usage.push(LimitUsage {
                limit,
                key,
                holders: counter.holders,
                waiters: counter.waiters,
            });
        }
        usage.sort_by(|a, b| (&a.limit, &a.key).cmp(&(&b.limit, &b.key)));
        Ok(usage)
    }

    /// [`RunStore::queue_position`]: how many wait in the line at or before the ticket,
    /// by a `Query` that counts (paged).
    pub(super) async fn position(
        &self,
        tenant: &TenantId,
        at: &QueuedAt,
    ) -> Result<u64, StoreError> {
        let pk = Line::at(at).pk(tenant);
        let mut count = 0u64;
        let mut start = None;
        loop {
            let out = self
                .client
                .query()
                .table_name(&self.table)
                .key_condition_expression("pk = :pk AND sk BETWEEN :from AND :to")
                .expression_attribute_values(":pk", s(&pk))
                .expression_attribute_values(":from", s(limit_waiter_sk(0)))
                .expression_attribute_values(":to", s(limit_waiter_sk(at.ticket)))
                .select(Select::Count)
                .consistent_read(true)
                .set_exclusive_start_key(start)
                .return_consumed_capacity(ReturnConsumedCapacity::Total)
                .send()
                .await
                .map_err(|e| sdk("queue_position", e))?;
            self.capacity.add(false, out.consumed_capacity());
            count += out.count().max(0) as u64;
            start = out.last_evaluated_key.filter(|k| !k.is_empty());
            if start.is_none() {
                return Ok(count);
            }
        }
    }
}
