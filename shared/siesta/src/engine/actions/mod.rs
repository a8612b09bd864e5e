//! Bulk actions by filter: a durable job that cancels, pauses, resumes, restarts,
//! upgrades or redrives every run of a tenant that its filter matches.
//!
//! The job is a record in the store ([`ActionJob`]), written on its version. It is
//! advanced a *slice* at a time (`slice.rs`): a wake-up of the queue
//! ([`WakeReason::Action`], the job's id in its `run_id`) takes the job's lease (one
//! conditional write), lists the next page of runs from the cursor the record keeps,
//! acts on each that matches (`act.rs`, the filter's rules in `filter.rs`), and writes
//! its progress and the new cursor back (one more), then sends the next slice's
//! wake-up delayed by what the slice did at the job's rate: pacing, so that live
//! traffic keeps its latency. Nothing lives in a process: a process killed mid-slice
//! leaves the record at the slice's start, and the sweep re-sends the wake-up of an
//! active job whose progress stalled (`resend_stale_action_jobs`). The slice is then
//! done again, and each action recognises a run already in the state it asks for (a
//! skip with why), so no run is acted on twice.

mod act;
mod filter;
mod slice;

use std::time::Duration;

use super::{Engine, EngineError};
use crate::model::*;
use crate::ports::*;

/// The rate of a job that names none: runs acted on per second.
pub const DEFAULT_ACTION_RATE: u32 = 50;

/// The highest rate a job may ask for.
pub const MAX_ACTION_RATE: u32 = 1000;

/// How many jobs the sweep looks at per sweep.
const ACTIVE_JOBS_PER_SWEEP: usize = 100;

/// What an operator asks a bulk action to do ([`Engine::start_action_job`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActionRequest {
    /// The action.
    pub action: BulkAction,
    /// Which runs.
    pub filter: ActionFilter,
    /// How a restart restarts (for [`BulkAction::Restart`]).
    pub restart: RestartOptions,
    /// Runs per second; `None`: [`DEFAULT_ACTION_RATE`].
    pub rate: Option<u32>,
}

impl Engine {
    /// Start a job that does `request`'s action to every run of `tenant` its filter
    /// matches, by `by` (the caller, as the API names it): the job is stored, then
    /// woken; it goes on from there a slice at a time (see the module's notes). An empty
    /// filter, one no run can match, or a rate of 0 or over [`MAX_ACTION_RATE`] is
    /// [`EngineError::InvalidInput`], and nothing is stored.
    pub async fn start_action_job(
        &self,
        tenant: &TenantId,
        request: ActionRequest,
        by: &str,
    ) -> Result<ActionJob, EngineError> {
        self.start_action_job_after(tenant, request, by, Duration::ZERO)
            .await
    }

    /// [`Engine::start_action_job`], its first slice `after` from now (a workflow's
    /// pause waits until every process has read it before it lists the runs to hold).
    pub(crate) async fn start_action_job_after(
        &self,
        tenant: &TenantId,
        request: ActionRequest,
        by: &str,
        after: Duration,
    ) -> Result<ActionJob, EngineError> {
        if request.filter.is_empty() {
            return Err(EngineError::InvalidInput(
                "a bulk action needs a filter: name at least a workflow, a status or another field"
                    .to_owned(),
            ));
        }
        if let Some(why) = request.filter.contradiction() {
            return Err(EngineError::InvalidInput(why));
        }
        let rate = request.rate.unwrap_or(DEFAULT_ACTION_RATE);
        if rate == 0 || rate > MAX_ACTION_RATE {
            return Err(EngineError::InvalidInput(format!(
                "rate {rate}: runs per second, 1 to {MAX_ACTION_RATE}"
            )));
        }
        let now = self.clock.now();
        let mut job = ActionJob {
            tenant: tenant.clone(),
            // Time-ordered, so a tenant's jobs list newest first by id.
            id: format!("job-{}", uuid::Uuid::now_v7()),
            action: request.action,
            restart: request.restart,
            filter: request.filter,
            rate,
            by: by.to_owned(),
            status: ActionJobStatus::Running,
            matched: 0,
            done: 0,
            skipped: 0,
            failed: 0,
            skipped_sample: Vec::new(),
            failures: Vec::new(),
            cursor: None,
            created_at: now,
            updated_at: now,
            next_at: now.plus(after),
            lease: None,
            errors_in_a_row: 0,
            error: None,
            cancelled_by: None,
            // An upgrade or a restart replays runs on the code of the engine acting: the
            // build the operator started it on, not whichever takes its wake-up.
            build: matches!(request.action, BulkAction::Upgrade | BulkAction::Restart)
                .then(|| self.config.build_id.clone()),
            version: 0,
        };
        job.version = self.backend.store.put_action_job(&job, 0).await?;
        tracing::info!(tenant = %tenant, job = %job.id, action = %job.action, %by, "bulk action started");
        // A lost send is healed by the sweep: the job is active and due now.
        self.send_action_wake(&job, after).await;
        Ok(job)
    }

    /// The job `id` of `tenant`; [`EngineError::NotFound`] when it has none.
    pub async fn action_job(&self, tenant: &TenantId, id: &str) -> Result<ActionJob, EngineError> {
        self.backend
            .store
            .get_action_job(tenant, id)
            .await?
            .ok_or(EngineError::NotFound)
    }

    /// `tenant`'s jobs, newest first, at most `limit`.
    pub async fn action_jobs(
        &self,
        tenant: &TenantId,
        limit: usize,
    ) -> Result<Vec<ActionJob>, EngineError> {
        Ok(self.backend.store.list_action_jobs(tenant, limit).await?)
    }

    /// Cancel the job `id` for `by`: a slice in flight stops within ten runs (it reads
    /// its job again every ten), and no slice follows; the runs acted on stay acted on,
    /// and are counted. A finished job is answered as it is.
    pub async fn cancel_action_job(
        &self,
        tenant: &TenantId,
        id: &str,
        by: &str,
    ) -> Result<ActionJob, EngineError> {
        for _ in 0..8 {
            let job = self.action_job(tenant, id).await?;
            if job.status.is_finished() {
                return Ok(job);
            }
            let mut next = job.clone();
            next.status = ActionJobStatus::Cancelled;
            next.cancelled_by = Some(by.to_owned());
            next.updated_at = self.clock.now();
            // The lease is left as it is: the slice in flight, if any, recognises it
            // as its own and adds its progress to the cancelled job.
            match self.backend.store.put_action_job(&next, job.version).await {
                Ok(version) => {
                    next.version = version;
                    tracing::info!(tenant = %tenant, job = %id, %by, "bulk action cancelled");
                    return Ok(next);
                }
                Err(StoreError::Conflict(_)) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(EngineError::Store(StoreError::Unavailable(
            "the job kept changing while being cancelled".to_owned(),
        )))
    }

    /// The sweep's part: send a wake-up for every active job that stalled — the
    /// process acting on a slice died (its lease on the job lapsed), or the job's
    /// wake-up was lost (its next slice is overdue by more than the start margin, the
    /// time a wake-up behind a backlog is given). A duplicate finds the job taken or
    /// not due, and does nothing. Returns how many were sent.
    pub(super) async fn resend_stale_action_jobs(&self) -> usize {
        let active = match self
            .backend
            .store
            .active_action_jobs(ACTIVE_JOBS_PER_SWEEP)
            .await
        {
            Ok(active) => active,
            Err(e) => {
                tracing::warn!(error = %e, "could not list active bulk actions");
                return 0;
            }
        };
        let now = self.clock.now();
        let margin = self
            .config
            .start_resend_margin
            .min(self.config.resend_margin);
        let mut sent = 0;
        for ActiveActionJob { tenant, id } in active {
            let job = match self.backend.store.get_action_job(&tenant, &id).await {
                Ok(Some(job)) => job,
                Ok(None) => continue,
                Err(e) => {
                    tracing::warn!(tenant = %tenant, job = %id, error = %e, "could not read a bulk action");
                    continue;
                }
            };
            if self.config.sweep_other_builds == super::OtherBuilds::Leave
                && job
                    .build
                    .as_ref()
                    .is_some_and(|b| *b != self.config.build_id)
            {
                // Its build's own sweep wakes it (as a run of another build).
                continue;
            }
            let stalled = job.status == ActionJobStatus::Running
                && match &job.lease {
                    Some(lease) => lease.until <= now,
                    None => job.next_at.plus(margin) <= now,
                };
            if stalled {
                self.send_action_wake(&job, Duration::ZERO).await;
                sent += 1;
            }
        }
        sent
    }

    /// Send the wake-up of `job`'s next slice, visible after `delay`. A lost one is
    /// re-sent by the sweep once the job looks stalled.
    async fn send_action_wake(&self, job: &ActionJob, delay: Duration) {
        let wake = WakeUp::new(
            job.tenant.clone(),
            RunId(job.id.clone()),
            WakeReason::Action,
        );
        if let Err(e) = self
            .backend
            .queue
            .send(&wake, delay.min(MAX_QUEUE_DELAY))
            .await
        {
            tracing::warn!(tenant = %job.tenant, job = %job.id, error = %e, "bulk action's wake-up not sent; the sweep resends it");
        }
    }
}
