//! The run store ([`RunStore`]): runs, their journals, timelines and deliveries, their
//! callbacks and tool calls, the sweep's due runs. The port's methods are here; the rows
//! every write shares (a run read, rewritten, its timeline appended to) in `rows`, a
//! checkpoint's encoding and size check in `checkpoint`, the journal's rows in `journal`.

mod checkpoint;
mod journal;
mod rows;

pub(crate) use rows::{Indexed, get_keyed_run, get_run, insert_event, update_run};

use async_trait::async_trait;
use rusqlite::{OptionalExtension, params};
use siesta::ports::*;
use siesta::*;

use self::checkpoint::EncodedCheckpoint;
use self::journal::{read_journal, schema_id};
use self::rows::{conflict, insert_event_as, insert_run, run_key, update_run_as};
use crate::cursors::ListPosition;
use crate::deliveries::{apply_delivery, get_callback, put_callback_as};
use crate::{
    EmbeddedBackend, action_jobs, builds, debounces, from_json, limits, rate_turns, retention, sql,
    step_slots, stored, unfinished,
};

/// A page of a tenant's runs, newest first, after the cursor `(?4, ?5)` (its creation
/// time and run key).
const LIST_RUNS: &str = "SELECT key, tenant, run_id, status, workflow, created_at, due_at, body FROM runs INDEXED BY runs_by_tenant
    WHERE tenant = ?1 AND ?2 IS NULL AND ?3 IS NULL AND (created_at, key) < (?4, ?5)
    ORDER BY created_at DESC, key DESC LIMIT ?6";
/// [`LIST_RUNS`] in one status.
const LIST_RUNS_BY_STATUS: &str = "SELECT key, tenant, run_id, status, workflow, created_at, due_at, body FROM runs INDEXED BY runs_by_status
    WHERE tenant = ?1 AND status = ?2 AND ?3 IS NULL AND (created_at, key) < (?4, ?5)
    ORDER BY created_at DESC, key DESC LIMIT ?6";
/// [`LIST_RUNS`] of one workflow.
const LIST_RUNS_BY_WORKFLOW: &str = "SELECT key, tenant, run_id, status, workflow, created_at, due_at, body FROM runs INDEXED BY runs_by_workflow
    WHERE tenant = ?1 AND ?2 IS NULL AND workflow = ?3 AND (created_at, key) < (?4, ?5)
    ORDER BY created_at DESC, key DESC LIMIT ?6";
/// [`LIST_RUNS`] in one status and of one workflow.
const LIST_RUNS_BY_STATUS_AND_WORKFLOW: &str =
    "SELECT key, tenant, run_id, status, workflow, created_at, due_at, body FROM runs INDEXED BY runs_by_status_workflow
    WHERE tenant = ?1 AND status = ?2 AND workflow = ?3 AND (created_at, key) < (?4, ?5)
    ORDER BY created_at DESC, key DESC LIMIT ?6";

#[async_trait]
impl RunStore for EmbeddedBackend {
    async fn create_run(&self, run: &Run, started: &TimelineEvent) -> Result<(), StoreError> {
        let (run, started) = (run.clone(), started.clone());
        let reaping = self.reaping();
        self.tx_of(run.tenant.0.clone(), move |tx, _| {
            insert_run(tx, &run, &started, &reaping)
        })
        .await
    }

    async fn create_run_within(
        &self,
        run: &Run,
        started: &TimelineEvent,
        max_unfinished: u64,
    ) -> Result<(), StoreError> {
        let (run, started) = (run.clone(), started.clone());
        let reaping = self.reaping();
        self.tx_of(run.tenant.0.clone(), move |tx, _| {
            // An existing run is reported as such, whatever the count (a retried start).
            if get_run(tx, &run.tenant.0, &run.id.0)?.is_some() {
                return Err(StoreError::AlreadyExists);
            }
            let unfinished = unfinished::count(tx, &run.tenant)?;
            if unfinished >= max_unfinished {
                return Err(StoreError::OverQuota(format!(
                    "tenant {} has {unfinished} unfinished runs; its limit is {max_unfinished}",
                    run.tenant
                )));
            }
            insert_run(tx, &run, &started, &reaping)
        })
        .await
    }

    async fn admit_run(
        &self,
        run: &Run,
        started: &TimelineEvent,
        max_unfinished: Option<u64>,
    ) -> Result<Run, StoreError> {
        let (run, started) = (run.clone(), started.clone());
        let reaping = self.reaping();
        self.tx_of(run.tenant.0.clone(), move |tx, _| {
            if get_run(tx, &run.tenant.0, &run.id.0)?.is_some() {
                return Err(StoreError::AlreadyExists);
            }
            if let Some(max) = max_unfinished {
                let unfinished = unfinished::count(tx, &run.tenant)?;
                if unfinished >= max {
                    return Err(StoreError::OverQuota(format!(
                        "tenant {} has {unfinished} unfinished runs; its limit is {max}",
                        run.tenant
                    )));
                }
            }
            let run = limits::admit(tx, &run)?;
            insert_run(tx, &run, &started, &reaping)?;
            Ok(run)
        })
        .await
    }

    async fn take_step_slot(
        &self,
        key: &str,
        max: u32,
        holder: &StepSlotHolder,
        now: Timestamp,
        grant_for: std::time::Duration,
    ) -> Result<(StepSlot, Vec<HandedSlot>), StoreError> {
        let (key, holder) = (key.to_owned(), holder.clone());
        let reaping = self.reaping();
        self.tx_of(holder.tenant.0.clone(), move |tx, _| {
            step_slots::take(tx, &key, max, &holder, now, grant_for, &reaping)
        })
        .await
    }

    async fn take_rate_turn(
        &self,
        key: &str,
        interval: std::time::Duration,
        holder: &StepSlotHolder,
        now: Timestamp,
    ) -> Result<RateTurn, StoreError> {
        let (key, holder) = (key.to_owned(), holder.clone());
        self.tx_of(holder.tenant.0.clone(), move |tx, _| {
            rate_turns::take(tx, &key, interval, &holder, now)
        })
        .await
    }

    async fn get_debounce_entry(
        &self,
        tenant: &TenantId,
        name: &str,
        key: &str,
    ) -> Result<Option<DebounceEntry>, StoreError> {
        let (tenant, name, key) = (tenant.0.clone(), name.to_owned(), key.to_owned());
        self.read(move |conn| {
            let of = debounces::EntryOf {
                tenant: &tenant,
                name: &name,
                key: &key,
            };
            debounces::get(conn, &of)
        })
        .await
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
        let (tenant, name, key, run_id) = (
            tenant.0.clone(),
            name.to_owned(),
            key.to_owned(),
            run_id.clone(),
        );
        self.tx_of(tenant.clone(), move |tx, now| {
            let of = debounces::EntryOf {
                tenant: &tenant,
                name: &name,
                key: &key,
            };
            debounces::put(tx, &of, &run_id, expected, keep_until, now)
        })
        .await
    }

    async fn put_action_job(&self, job: &ActionJob, expected: u64) -> Result<u64, StoreError> {
        let job = job.clone();
        self.tx_of(job.tenant.0.clone(), move |tx, now| {
            action_jobs::put(tx, &job, expected, now)
        })
        .await
    }

    async fn get_action_job(
        &self,
        tenant: &TenantId,
        id: &str,
    ) -> Result<Option<ActionJob>, StoreError> {
        let (tenant, id) = (tenant.0.clone(), id.to_owned());
        self.read(move |conn| action_jobs::get(conn, &tenant, &id))
            .await
    }

    async fn list_action_jobs(
        &self,
        tenant: &TenantId,
        limit: usize,
    ) -> Result<Vec<ActionJob>, StoreError> {
        let tenant = tenant.0.clone();
        self.read(move |conn| action_jobs::list(conn, &tenant, limit))
            .await
    }

    async fn active_action_jobs(&self, limit: usize) -> Result<Vec<ActiveActionJob>, StoreError> {
        self.read(move |conn| action_jobs::active(conn, limit))
            .await
    }

    async fn give_back_step_slot(
        &self,
        key: &str,
        max: u32,
        holder: &StepSlotHolder,
        now: Timestamp,
        grant_for: std::time::Duration,
    ) -> Result<Vec<HandedSlot>, StoreError> {
        let (key, holder) = (key.to_owned(), holder.clone());
        let reaping = self.reaping();
        self.tx_of(holder.tenant.0.clone(), move |tx, _| {
            step_slots::give_back(tx, &key, max, &holder, now, grant_for, &reaping)
        })
        .await
    }

    async fn limit_usage(&self, tenant: &TenantId) -> Result<Vec<LimitUsage>, StoreError> {
        let tenant = tenant.clone();
        self.read(move |tx| limits::usage(tx, &tenant)).await
    }

    async fn queue_position(&self, tenant: &TenantId, at: &QueuedAt) -> Result<u64, StoreError> {
        let (tenant, at) = (tenant.clone(), at.clone());
        self.read(move |tx| limits::position(tx, &tenant, &at))
            .await
    }

    async fn unfinished_runs(&self, tenant: &TenantId) -> Result<u64, StoreError> {
        let tenant = tenant.clone();
        self.read(move |tx| unfinished::count(tx, &tenant)).await
    }

    async fn builds(&self, tenant: &TenantId) -> Result<Vec<BuildSummary>, StoreError> {
        let tenant = tenant.clone();
        self.read(move |tx| builds::of_tenant(tx, &tenant)).await
    }

    async fn get_run(&self, tenant: &TenantId, run_id: &RunId) -> Result<Option<Run>, StoreError> {
        let (tenant, run_id) = (tenant.0.clone(), run_id.0.clone());
        self.read(move |tx| get_run(tx, &tenant, &run_id)).await
    }

    async fn claim(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        claim: &Claim,
    ) -> Result<Run, StoreError> {
        let (tenant, run_id, claim) = (tenant.0.clone(), run_id.0.clone(), claim.clone());
        let reaping = self.reaping();
        self.tx_unsynced_of(tenant.clone(), move |tx, _| {
            let mut run = get_run(tx, &tenant, &run_id)?.ok_or(StoreError::NotFound)?;
            let stored = Indexed::of(&run);
            let claimable = matches!(
                run.status,
                RunStatus::Pending | RunStatus::Running | RunStatus::Waiting
            );
            if !claimable || run.is_leased(claim.now) {
                return Err(conflict(run));
            }
            let epoch = run.epoch.next();
            run.epoch = epoch;
            run.lease = Some(Lease {
                owner: claim.owner.clone(),
                expires_at: claim.expires_at,
                epoch,
            });
            run.status = RunStatus::Running;
            run.due_at = Some(claim.expires_at);
            run.resend_after = None;
            run.version += 1;
            run.updated_at = claim.now;
            update_run(tx, stored, &run, &reaping)?;
            Ok(run)
        })
        .await
    }

    async fn renew_lease(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        epoch: FencingEpoch,
        expires_at: Timestamp,
    ) -> Result<Run, StoreError> {
        let (tenant, run_id) = (tenant.0.clone(), run_id.0.clone());
        let reaping = self.reaping();
        self.tx(move |tx, _| {
            let mut run = get_run(tx, &tenant, &run_id)?.ok_or(StoreError::NotFound)?;
            let stored = Indexed::of(&run);
            match &mut run.lease {
                Some(lease) if lease.epoch == epoch => lease.expires_at = expires_at,
                _ => return Err(conflict(run)),
            }
            run.due_at = Some(expires_at);
            run.resend_after = None;
            update_run(tx, stored, &run, &reaping)?;
            Ok(run)
        })
        .await
    }

    async fn load_replay_input(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
    ) -> Result<ReplayInput, StoreError> {
        let (tenant, run_id) = (tenant.0.clone(), run_id.0.clone());
        self.read(move |tx| {
            let mut input = ReplayInput {
                journal: read_journal(tx, &tenant, &run_id)?,
                ..ReplayInput::default()
            };
            let mut stmt = tx
                .prepare_cached(
                    "SELECT deliveries.body FROM runs JOIN deliveries ON deliveries.run = runs.key
                      WHERE runs.tenant = ?1 AND runs.run_id = ?2 ORDER BY deliveries.seq",
                )
                .map_err(sql)?;
            for body in stmt
                .query_map(params![tenant, run_id], |r| r.get::<_, String>(0))
                .map_err(sql)?
            {
                input.deliveries.push(from_json(&body.map_err(sql)?)?);
            }
            Ok(input)
        })
        .await
    }

    async fn load_journal(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
    ) -> Result<Vec<JournalEntry>, StoreError> {
        let (tenant, run_id) = (tenant.0.clone(), run_id.0.clone());
        self.read(move |tx| read_journal(tx, &tenant, &run_id))
            .await
    }

    async fn checkpoint(&self, checkpoint: &Checkpoint) -> Result<(), StoreError> {
        self.checkpoint_admitting(checkpoint).await.map(drop)
    }

    async fn checkpoint_admitting(&self, checkpoint: &Checkpoint) -> Result<Vec<Run>, StoreError> {
        let cp = checkpoint.clone();
        let encoded = EncodedCheckpoint::of(&cp)?;
        let reaping = self.reaping();
        self.tx_of(cp.run.tenant.0.clone(), move |tx, _| {
                let (key, current) = get_keyed_run(tx, &cp.run.tenant.0, &cp.run.id.0)?.ok_or(StoreError::NotFound)?;
                let epoch_ok = cp.epoch.is_none_or(|e| current.lease.as_ref().is_some_and(|l| l.epoch == e));
                // Without an epoch, a lease written back as read must still be the
                // run's: a renewal since moved it without a new version.
                let lease_ok = cp.epoch.is_some()
                    || cp.run.lease.as_ref().is_none_or(|l| {
                        current.lease.as_ref().map(|c| c.expires_at) == Some(l.expires_at)
                    });
                if current.version != cp.expected_version || !epoch_ok || !lease_ok {
                    return Err(conflict(current));
                }
                update_run_as(tx, Indexed::of(&current), &cp.run, &encoded.run, &reaping)?;
                for (entry, stored) in cp.journal.iter().zip(&encoded.journal) {
                    let schema = stored.schema.as_ref().map(|s| schema_id(tx, s)).transpose()?;
                    tx.prepare_cached("INSERT OR REPLACE INTO journal (run, position, accepts, body) VALUES (?1, ?2, ?3, ?4)")
                        .map_err(sql)?
                        .execute(params![key, entry.position.0, schema, stored.body])
                        .map_err(sql)?;
                }
                for (event, body) in cp.timeline.iter().zip(&encoded.timeline) {
                    insert_event_as(tx, key, &cp.run, event.seq, body).map_err(|e| match e {
                        StoreError::Conflict(_) => conflict(current.clone()),
                        other => other,
                    })?;
                }
                for (record, body) in cp.callbacks.iter().zip(&encoded.callbacks) {
                    let owner = run_key(tx, key, &cp.run, &record.tenant, &record.run_id)?;
                    put_callback_as(tx, &record.callback_id, body, owner)?;
                }
                for (record, body) in cp.tool_calls.iter().zip(&encoded.tool_calls) {
                    let owner = run_key(tx, key, &cp.run, &record.tenant, &record.run_id)?;
                    tx.prepare_cached(
                        "INSERT OR REPLACE INTO tool_calls (tenant, key, body, run) VALUES (?1, ?2, ?3, ?4)",
                    )
                    .map_err(sql)?
                    .execute(params![record.tenant.0, record.key.0, body, owner])
                    .map_err(sql)?;
                }
                for (child, started) in &cp.child_runs {
                    insert_run(tx, child, started, &reaping)?;
                }
                if let Some(delivery) = &cp.parent_delivery {
                    match apply_delivery(tx, delivery, &reaping) {
                        Ok(_) | Err(StoreError::NotFound) | Err(StoreError::Gone(_)) => {}
                        Err(e) => return Err(e),
                    }
                }
                // A run that finishes here frees its concurrency slots in this write.
                if cp.run.status.is_finished() && !current.status.is_finished() && !current.limits.is_empty() {
                    return limits::release(tx, &current, cp.run.updated_at, &reaping);
                }
                Ok(Vec::new())
            })
            .await
    }

    async fn deliver(&self, delivery: &NewDelivery) -> Result<DeliverOutcome, StoreError> {
        let delivery = delivery.clone();
        let reaping = self.reaping();
        self.tx_of(delivery.tenant.0.clone(), move |tx, _| {
            apply_delivery(tx, &delivery, &reaping)
        })
        .await
    }

    async fn get_callback(
        &self,
        callback_id: &CallbackId,
    ) -> Result<Option<CallbackRecord>, StoreError> {
        let id = callback_id.clone();
        self.read(move |tx| get_callback(tx, &id)).await
    }

    async fn get_tool_call(
        &self,
        tenant: &TenantId,
        key: &IdempotencyKey,
    ) -> Result<Option<ToolCallRecord>, StoreError> {
        let (tenant, key) = (tenant.0.clone(), key.0.clone());
        self.read(move |tx| {
            let body: Option<String> = tx
                .query_row(
                    "SELECT body FROM tool_calls WHERE tenant = ?1 AND key = ?2",
                    params![tenant, key],
                    |r| r.get(0),
                )
                .optional()
                .map_err(sql)?;
            body.map(|b| from_json(&b)).transpose()
        })
        .await
    }

    async fn timeline(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        after: u64,
        limit: usize,
    ) -> Result<Vec<TimelineEvent>, StoreError> {
        let (tenant, run_id) = (tenant.0.clone(), run_id.0.clone());
        self.read(move |tx| {
                let mut stmt = tx
                    .prepare_cached("SELECT timeline.seq, timeline.body FROM runs JOIN timeline ON timeline.run = runs.key
                                      WHERE runs.tenant = ?1 AND runs.run_id = ?2 AND timeline.seq > ?3 ORDER BY timeline.seq LIMIT ?4")
                    .map_err(sql)?;
                let rows = stmt
                    .query_map(params![tenant, run_id, after as i64, limit as i64], |r| {
                        Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?))
                    })
                    .map_err(sql)?;
                rows.map(|row| {
                    let (seq, body) = row.map_err(sql)?;
                    stored::event(seq as u64, &body)
                })
                .collect()
            })
            .await
    }

    async fn list_runs(
        &self,
        tenant: &TenantId,
        filter: &RunFilter,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<RunPage, StoreError> {
        let tenant = tenant.0.clone();
        let status = filter.status.map(|s| s.as_str().to_owned());
        let workflow = filter.workflow.clone();
        let after = cursor.map(ListPosition::decode).transpose()?;
        let limit = limit.max(1);
        // One statement per filter, each a range seek on its own index: a filter
        // folded into one statement (`?2 IS NULL OR status = ?2`) can use none, and
        // the page would cost a walk over every run of the tenant it skips.
        let query = match (&status, &workflow) {
            (None, None) => LIST_RUNS,
            (Some(_), None) => LIST_RUNS_BY_STATUS,
            (None, Some(_)) => LIST_RUNS_BY_WORKFLOW,
            (Some(_), Some(_)) => LIST_RUNS_BY_STATUS_AND_WORKFLOW,
        };
        self.read(move |tx| {
            // Before every run: `(created_at, key) < (MAX, MAX)`.
            let (after_created, after_key) = match after {
                None => (i64::MAX, i64::MAX),
                Some(ListPosition::Keyed { created_at, key }) => (created_at, key),
                Some(ListPosition::ByRunId { created_at, run_id }) => {
                    let (key, _) = get_keyed_run(tx, &tenant, &run_id)?
                        .ok_or_else(|| StoreError::Invalid("malformed cursor".into()))?;
                    (created_at, key)
                }
            };
            let mut stmt = tx.prepare_cached(query).map_err(sql)?;
            let rows = stmt
                .query_map(
                    params![
                        tenant,
                        status,
                        workflow,
                        after_created,
                        after_key,
                        (limit + 1) as i64
                    ],
                    |r| Ok((r.get::<_, i64>(0)?, stored::RunRow::read(r, 1)?)),
                )
                .map_err(sql)?;
            let mut runs: Vec<(i64, Run)> = rows
                .map(|row| {
                    let (key, row) = row.map_err(sql)?;
                    Ok((key, row.run()?))
                })
                .collect::<Result<_, StoreError>>()?;
            let next_cursor = if runs.len() > limit {
                runs.truncate(limit);
                runs.last()
                    .map(|(key, run)| ListPosition::cursor(run.created_at.0, *key))
            } else {
                None
            };
            Ok(RunPage {
                runs: runs.into_iter().map(|(_, run)| run).collect(),
                next_cursor,
            })
        })
        .await
    }

    async fn due_runs(&self, before: Timestamp, limit: usize) -> Result<Vec<DueRun>, StoreError> {
        self.read(move |tx| {
                let mut stmt = tx
                    .prepare_cached("SELECT tenant, run_id, due_at, status, sweep_at, json_extract(body, '$.build_id') FROM runs WHERE sweep_at IS NOT NULL AND sweep_at <= ?1 ORDER BY sweep_at LIMIT ?2")
                    .map_err(sql)?;
                let rows = stmt
                    .query_map(params![before.0, limit as i64], |r| {
                        let status: String = r.get(3)?;
                        let status = RunStatus::ALL.into_iter().find(|s| s.as_str() == status).unwrap_or(RunStatus::Pending);
                        let (due_at, sweep_at) = (Timestamp(r.get(2)?), Timestamp(r.get(4)?));
                        let resend_after = (sweep_at > due_at).then_some(sweep_at);
                        Ok(DueRun { tenant: TenantId(r.get(0)?), run_id: RunId(r.get(1)?), due_at, status, resend_after, build_id: r.get(5)? })
                    })
                    .map_err(sql)?;
                rows.map(|r| r.map_err(sql)).collect()
            })
            .await
    }

    async fn reap_due(
        &self,
        rules: &siesta::RetentionRules,
        now: Timestamp,
        limit: usize,
    ) -> Result<siesta::retention::ReapReport, StoreError> {
        let rules = rules.clone();
        let report = self
            .tx(move |tx, _| retention::reap(tx, &rules, now, limit))
            .await?;
        if !report.removed.is_empty() {
            self.checkpoint_wal().await;
        }
        Ok(report)
    }

    async fn rearm_reaping(
        &self,
        rules: &siesta::RetentionRules,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        let (text, rules) = (format!("{rules:?}"), rules.clone());
        let reaping = self.reaping();
        // The runs finished from the write after this one on are scheduled by the new
        // rules: set on the writer, in order with every other write, and only once
        // the runs put back under older rules were brought forward.
        let rearmed = self
            .tx(move |tx, _| {
                retention::rearm(tx, &text, now)?;
                reaping.set(Some(rules));
                Ok(())
            })
            .await;
        if rearmed.is_err() {
            // Not stored (the group's commit failed): schedule runs at their finish
            // again, which any rules accept.
            self.reaping().set(None);
        }
        rearmed
    }

    async fn set_resend_after(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        due_at: Timestamp,
        resend_after: Option<Timestamp>,
    ) -> Result<(), StoreError> {
        let (tenant, run_id) = (tenant.0.clone(), run_id.0.clone());
        let reaping = self.reaping();
        // Bookkeeping: lost in an OS crash, it costs a duplicate wake-up or a margin.
        self.tx_unsynced(move |tx, _| match get_run(tx, &tenant, &run_id)? {
            Some(mut run) if run.due_at == Some(due_at) => {
                let stored = Indexed::of(&run);
                run.resend_after = resend_after;
                update_run(tx, stored, &run, &reaping)
            }
            _ => Ok(()),
        })
        .await
    }
}
