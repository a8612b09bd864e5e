//! One run of a job's slice: the action done to it through the engine's own call
//! (cancel, pause, resume, restart, upgrade, redrive), and what came of it — done,
//! skipped with why (the run is already in the state asked for, or in none the action
//! applies to), or failed (storage, after the engine's own retries).
//!
//! A slice done twice (its process died before it recorded its progress) meets the
//! runs it acted on already: each action recognises them — a cancelled run, a paused
//! one, a resumed one (not parked any more), one on this build — and skips them,
//! saying why, so no run is acted on twice.

use crate::dead_letters::is_dead_lettered;
use crate::engine::{Engine, EngineError, RestartRequest};
use crate::model::*;

/// What acting on one run came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Acted {
    /// The action was done.
    Done,
    /// Left alone, for this reason.
    Skipped(String),
    /// The action failed, for this reason.
    Failed(String),
}

/// An engine error as the job counts it: storage is a failure, anything else says why
/// the run was left alone.
fn verdict(error: EngineError) -> Acted {
    match error {
        EngineError::Store(e) => Acted::Failed(e.to_string()),
        EngineError::AlreadyFinished(status) => Acted::Skipped(format!("already {}", name(status))),
        EngineError::NotParked(status) => {
            Acted::Skipped(format!("not parked or paused ({})", name(status)))
        }
        EngineError::NotFound => Acted::Skipped("not found (removed meanwhile)".to_owned()),
        EngineError::Leased => Acted::Skipped("running right now (leased)".to_owned()),
        EngineError::Diverged(d) => Acted::Skipped(format!("diverged: {d}")),
        other => Acted::Skipped(other.to_string()),
    }
}

/// A status as the API writes it.
fn name(status: RunStatus) -> String {
    serde_json::to_value(status)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_else(|| format!("{status:?}"))
}

impl Engine {
    /// Do `job`'s action to `run` (as listed: the engine's call reads it again).
    pub(super) async fn act_on(&self, job: &ActionJob, run: &Run) -> Acted {
        let (tenant, id) = (&job.tenant, &run.id);
        let result = match job.action {
            BulkAction::Cancel => {
                if run.status.is_finished() {
                    return Acted::Skipped(format!("already {}", name(run.status)));
                }
                if run.cancel_requested {
                    return Acted::Skipped("cancel already requested".to_owned());
                }
                self.cancel_as(tenant, id, None, Some(&job.by))
                    .await
                    .map(drop)
            }
            BulkAction::Pause => {
                if run.status == RunStatus::Paused {
                    return Acted::Skipped("already paused".to_owned());
                }
                if run.pause_requested.is_some() {
                    return Acted::Skipped("pause already requested".to_owned());
                }
                match self.pause(tenant, id, None, &job.by).await {
                    // Paused by someone else between the listing and the call.
                    Ok(paused) if paused.version == run.version => {
                        return Acted::Skipped("already paused".to_owned());
                    }
                    other => other.map(drop),
                }
            }
            BulkAction::Resume => self
                .resume_as(tenant, id, None, Some(&job.by))
                .await
                .map(drop),
            BulkAction::Upgrade => {
                let to = self.config.build_id.as_str();
                let parked_for_code = run.status == RunStatus::Parked
                    && run
                        .error
                        .as_ref()
                        .is_some_and(|e| e.kind == "NonDeterminism" || e.kind == crate::PANICKED);
                if run.build_id.as_deref() == Some(to) && !parked_for_code {
                    return Acted::Skipped(format!("already on build {to}"));
                }
                self.upgrade_as(tenant, id, None, Some(&job.by))
                    .await
                    .map(drop)
            }
            BulkAction::Redrive => {
                if !is_dead_lettered(run) {
                    return Acted::Skipped("not parked by a dead letter".to_owned());
                }
                match self
                    .redrive_dead_letter_as(tenant, id, None, Some(&job.by))
                    .await
                {
                    // Resumed or changed since it was listed.
                    Err(EngineError::NotFound) => {
                        return Acted::Skipped("not parked by a dead letter any more".to_owned());
                    }
                    other => other.map(drop),
                }
            }
            BulkAction::Restart => self.restart_for_job(job, run).await,
        };
        match result {
            Ok(()) => Acted::Done,
            Err(e) => verdict(e),
        }
    }

    /// A bulk restart of one run, with the job's id as the restart's token: a run this
    /// job restarted already (a slice done again after a crash) is answered as done by
    /// the restart itself, not restarted twice.
    async fn restart_for_job(&self, job: &ActionJob, run: &Run) -> Result<(), EngineError> {
        let request = RestartRequest {
            from: job.restart.from.clone(),
            as_new: job.restart.as_new,
            repeat_tool_calls: job.restart.repeat_tool_calls,
            token: Some(job.id.clone()),
        };
        self.restart(&job.tenant, &run.id, request, None, &job.by)
            .await
            .map(drop)
    }
}
