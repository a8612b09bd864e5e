//! Pausing a whole workflow (docs/operations.md, "Pause a workflow"): its runs are held
//! and its new starts are queued or refused until it is resumed.
//!
//! The pause is a record per tenant and workflow (`ScheduleStore::put_workflow_pause`,
//! on its version). Pausing writes it and starts a bulk pause of the workflow's runs;
//! resuming writes it back unpaused and starts a bulk resume of its paused runs (both
//! are bulk action jobs, with their progress, see `actions`). Meanwhile a start of the
//! workflow — from the API or a schedule's tick — is created `paused` (it begins with
//! the resume's job) or refused, as the pause says: a schedule therefore follows its
//! workflow's pause, its ticks queued or skipped.
//!
//! A start reads the record at most once a second per process and workflow: what a
//! process read is kept that long ([`PAUSE_CACHE_MS`]), and the process that writes a
//! pause forgets what it kept at once. So a pause takes effect on this process's starts
//! at once and on another's (another Lambda's) within a second; the bulk pause then
//! holds any run started in between.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use super::{ActionRequest, Engine, EngineError};
use crate::model::*;
use crate::ports::*;
use crate::time::Timestamp;

/// How long a process keeps what it read of a workflow's pause, in milliseconds.
pub const PAUSE_CACHE_MS: i64 = 1_000;

/// What a process read of one tenant's workflows' pauses, by workflow, with when.
type TenantPauses = HashMap<String, (Timestamp, Option<Held>)>;

/// What a process read of workflows' pauses, by tenant and workflow, with when. Looked
/// up by reference: a start that finds its answer kept allocates nothing.
#[derive(Default)]
pub(crate) struct PauseCache(Mutex<HashMap<TenantId, TenantPauses>>);

/// What a start of a paused workflow gets, and who paused it (for its `RunPaused`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Held {
    /// Queued paused, or refused.
    pub(crate) starts: PausedStarts,
    /// Who paused the workflow.
    pub(crate) by: String,
}

impl PauseCache {
    fn get(&self, tenant: &TenantId, workflow: &str, now: Timestamp) -> Option<Option<Held>> {
        let kept = self.0.lock().unwrap_or_else(|e| e.into_inner());
        kept.get(tenant)?
            .get(workflow)
            .filter(|(at, _)| now.0 - at.0 < PAUSE_CACHE_MS)
            .map(|(_, held)| held.clone())
    }

    fn put(&self, tenant: &TenantId, workflow: &str, now: Timestamp, held: Option<Held>) {
        let mut kept = self.0.lock().unwrap_or_else(|e| e.into_inner());
        kept.entry(tenant.clone())
            .or_default()
            .insert(workflow.to_owned(), (now, held));
    }

    fn forget(&self, tenant: &TenantId, workflow: &str) {
        let mut kept = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(pauses) = kept.get_mut(tenant) {
            pauses.remove(workflow);
        }
    }
}

/// What pausing or resuming a workflow did: the pause as stored now, and the bulk job
/// that holds (or lets go) its runs.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkflowPaused {
    /// The workflow's pause record.
    pub pause: WorkflowPause,
    /// The bulk action pausing or resuming its runs.
    pub job: ActionJob,
}

/// The bulk `action` on the runs of `workflow` (in `status`, when given), at the
/// default rate.
fn on_runs_of(workflow: &str, action: BulkAction, status: Option<RunStatus>) -> ActionRequest {
    ActionRequest {
        action,
        filter: ActionFilter {
            workflow: Some(workflow.to_owned()),
            status,
            ..ActionFilter::default()
        },
        restart: RestartOptions::default(),
        rate: None,
    }
}

impl Engine {
    /// Pause `workflow` for `tenant`, by `by`: its new starts are created paused
    /// ([`PausedStarts::Queue`]) or refused ([`PausedStarts::Refuse`]), its schedules'
    /// ticks likewise, and a bulk pause holds its runs. Pausing a paused workflow
    /// again changes what its starts get and pauses again what was started since.
    pub async fn pause_workflow(
        &self,
        tenant: &TenantId,
        workflow: &str,
        starts: PausedStarts,
        by: &str,
    ) -> Result<WorkflowPaused, EngineError> {
        let pause = self
            .write_workflow_pause(tenant, workflow, true, starts, by)
            .await?;
        let job = self
            .turn_workflow_runs(tenant, workflow, BulkAction::Pause, None, by)
            .await?;
        Ok(WorkflowPaused { pause, job })
    }

    /// Resume `workflow` for `tenant`, by `by`: its starts begin again, and a bulk
    /// resume lets its paused runs go on — those a start queued while it was paused,
    /// and those paused one by one.
    pub async fn resume_workflow(
        &self,
        tenant: &TenantId,
        workflow: &str,
        by: &str,
    ) -> Result<WorkflowPaused, EngineError> {
        let pause = self
            .write_workflow_pause(tenant, workflow, false, PausedStarts::Queue, by)
            .await?;
        let job = self
            .turn_workflow_runs(
                tenant,
                workflow,
                BulkAction::Resume,
                Some(RunStatus::Paused),
                by,
            )
            .await?;
        Ok(WorkflowPaused { pause, job })
    }

    /// Start the bulk pause or resume of `workflow`'s runs, once the pause's record is
    /// written: a job of the other way still running is cancelled first (a resume must
    /// not be undone by the pause before it), and the job lists runs only once every
    /// process has read the record ([`PAUSE_CACHE_MS`] and a second for clocks): every
    /// run started after that gets the new answer at its start, every one before is
    /// listed.
    async fn turn_workflow_runs(
        &self,
        tenant: &TenantId,
        workflow: &str,
        action: BulkAction,
        status: Option<RunStatus>,
        by: &str,
    ) -> Result<ActionJob, EngineError> {
        for job in self.action_jobs(tenant, 100).await? {
            let ours = matches!(job.action, BulkAction::Pause | BulkAction::Resume)
                && job.filter.workflow.as_deref() == Some(workflow)
                && !job.status.is_finished();
            if ours {
                self.cancel_action_job(tenant, &job.id, by).await?;
            }
        }
        let settle = Duration::from_millis(PAUSE_CACHE_MS as u64 + 1_000);
        self.start_action_job_after(tenant, on_runs_of(workflow, action, status), by, settle)
            .await
    }

    /// The pause of `tenant`'s `workflow` as stored (`None`: never paused).
    pub async fn workflow_pause(
        &self,
        tenant: &TenantId,
        workflow: &str,
    ) -> Result<Option<WorkflowPause>, EngineError> {
        if self.registry.get(workflow).is_none() {
            return Err(EngineError::UnknownWorkflow(workflow.to_owned()));
        }
        Ok(self
            .backend
            .schedules
            .get_workflow_pause(tenant, workflow)
            .await?)
    }

    /// Write the pause record of `workflow`, on the version read (read again on a race).
    async fn write_workflow_pause(
        &self,
        tenant: &TenantId,
        workflow: &str,
        paused: bool,
        starts: PausedStarts,
        by: &str,
    ) -> Result<WorkflowPause, EngineError> {
        for _ in 0..8 {
            let version = self
                .workflow_pause(tenant, workflow)
                .await?
                .map_or(0, |p| p.version);
            let mut pause = WorkflowPause {
                paused,
                starts,
                by: by.to_owned(),
                at: self.clock.now(),
                version,
            };
            match self
                .backend
                .schedules
                .put_workflow_pause(tenant, workflow, &pause)
                .await
            {
                Ok(version) => {
                    pause.version = version;
                    self.workflow_pauses.forget(tenant, workflow);
                    tracing::info!(tenant = %tenant, workflow, paused, %by, "workflow pause written");
                    return Ok(pause);
                }
                Err(StoreError::Conflict(_)) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(EngineError::Store(StoreError::Unavailable(
            "the workflow's pause kept changing".to_owned(),
        )))
    }

    /// What a start of `workflow` gets now: `None` when it is not paused. A store
    /// without pauses (or one that cannot be read) pauses nothing: a start is not
    /// refused because the record could not be read, it is logged.
    pub(super) async fn paused_starts(&self, tenant: &TenantId, workflow: &str) -> Option<Held> {
        let now = self.clock.now();
        if let Some(kept) = self.workflow_pauses.get(tenant, workflow, now) {
            return kept;
        }
        let read = match self
            .backend
            .schedules
            .get_workflow_pause(tenant, workflow)
            .await
        {
            Ok(pause) => pause.filter(|p| p.paused).map(|p| Held {
                starts: p.starts,
                by: p.by,
            }),
            Err(StoreError::Unsupported(_)) => None,
            Err(e) => {
                tracing::warn!(tenant = %tenant, workflow, error = %e, "could not read the workflow's pause; the start goes ahead");
                return None;
            }
        };
        self.workflow_pauses
            .put(tenant, workflow, now, read.clone());
        read
    }

    /// The follow-up write of a run a paused workflow's start created paused: its
    /// `RunPaused` event, naming the workflow's pause (`by` paused it). Best effort: the
    /// run is paused whether or not it is written.
    pub(super) async fn note_held_by_workflow_pause(&self, run: &Run, by: &str) {
        let mut next = run.clone();
        next.version += 1;
        next.timeline_seq += 1;
        let mut checkpoint = Checkpoint::new(next.clone(), run.version, None);
        checkpoint.timeline.push(TimelineEvent {
            seq: next.timeline_seq,
            at: run.created_at,
            event_type: EventType::RunPaused,
            sub_type: None,
            id: None,
            parent_id: None,
            name: Some(run.workflow.clone()),
            details: crate::timeline::EventDetails::RunPaused(crate::timeline::RunPaused {
                paused_by: Some(format!("{by} (workflow {} paused)", run.workflow)),
            })
            .to_value(),
        });
        if let Err(e) = self.backend.store.checkpoint(&checkpoint).await {
            tracing::debug!(run_id = %run.id, error = %e, "a held start's RunPaused was not written");
        }
    }
}
