//! Bulk actions by filter: an operator's action (cancel, pause, resume, restart,
//! upgrade, redrive) on every run of a tenant that a filter matches, done by a durable
//! job ([`ActionJob`]) a slice of runs at a time. The job's record is the store's
//! (`RunStore::put_action_job`), written on its version; the engine's side is
//! `engine/actions/`. This file holds the record and the filter's pure rules.

use serde::{Deserialize, Serialize};

use super::{Position, RunId, RunStatus, TenantId};
use crate::time::Timestamp;

/// What a bulk action does to each run its filter matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BulkAction {
    /// Cancel it ([`crate::Engine::cancel`]).
    Cancel,
    /// Pause it ([`crate::Engine::pause`]).
    Pause,
    /// Resume a parked or paused run ([`crate::Engine::resume`]).
    Resume,
    /// Restart it from a step (the engine's restart, with [`RestartOptions`]).
    Restart,
    /// Move it to the build now serving when its journal replays there
    /// ([`crate::Engine::upgrade`]).
    Upgrade,
    /// Resume a run a dead letter parked ([`crate::Engine::redrive_dead_letter`]).
    Redrive,
}

impl BulkAction {
    /// Every action, for listings and tests.
    pub const ALL: [BulkAction; 6] = [
        BulkAction::Cancel,
        BulkAction::Pause,
        BulkAction::Resume,
        BulkAction::Restart,
        BulkAction::Upgrade,
        BulkAction::Redrive,
    ];

    /// Its wire name: `cancel`, `pause`, `resume`, `restart`, `upgrade`, `redrive`.
    pub fn as_str(self) -> &'static str {
        match self {
            BulkAction::Cancel => "cancel",
            BulkAction::Pause => "pause",
            BulkAction::Resume => "resume",
            BulkAction::Restart => "restart",
            BulkAction::Upgrade => "upgrade",
            BulkAction::Redrive => "redrive",
        }
    }
}

impl std::fmt::Display for BulkAction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for BulkAction {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        BulkAction::ALL
            .into_iter()
            .find(|a| a.as_str() == s)
            .ok_or_else(|| {
                format!("unknown action '{s}' (cancel, pause, resume, restart, upgrade, redrive)")
            })
    }
}

/// How a bulk restart restarts each run (see the engine's restart).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestartOptions {
    /// The position to go on from; `None`: the first operation that failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<Position>,
    /// Fork a new run instead of restarting in place.
    #[serde(default)]
    pub as_new: bool,
    /// Make tool calls after the point again even when their outcome was recorded.
    #[serde(default)]
    pub repeat_tool_calls: bool,
}

/// Which of a tenant's runs a bulk action acts on: every field given must match.
/// `workflow` and `status` are the store's listing filter; the others are checked on
/// each run listed (`engine/actions/filter.rs`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActionFilter {
    /// Runs of this workflow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow: Option<String>,
    /// Runs in this status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<RunStatus>,
    /// Runs that record this build ([`super::Run::build_id`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build: Option<String>,
    /// Runs created at or after this instant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_after: Option<Timestamp>,
    /// Runs created before this instant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_before: Option<Timestamp>,
    /// Failed runs whose last change (their failure) is at or after this instant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_after: Option<Timestamp>,
    /// Failed runs whose last change (their failure) is before this instant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_before: Option<Timestamp>,
    /// Runs whose error is of this kind ([`super::ErrorInfo::kind`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_kind: Option<String>,
    /// Only the runs a dead letter parked, as `GET /dead-letters` lists them.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dead_lettered: bool,
}

impl ActionFilter {
    /// Whether it names nothing at all (every run of the tenant), which a job refuses:
    /// an empty filter is more likely a mistake than a wish.
    pub fn is_empty(&self) -> bool {
        *self == ActionFilter::default()
    }

    /// Why no run can match it, if so (a status other than failed with a failure
    /// time, or other than parked with `dead_lettered`).
    pub fn contradiction(&self) -> Option<String> {
        let failed = self.failed_after.is_some() || self.failed_before.is_some();
        match self.status {
            Some(s) if failed && s != RunStatus::Failed => Some(format!(
                "failed_after/failed_before match failed runs only, and the status asked is {s:?}"
            )),
            Some(s) if self.dead_lettered && s != RunStatus::Parked => Some(format!(
                "dead_lettered runs are parked, and the status asked is {s:?}"
            )),
            _ if failed && self.dead_lettered => {
                Some("a dead-lettered run is parked, not failed".to_owned())
            }
            _ => None,
        }
    }
}

/// Where a job is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ActionJobStatus {
    /// Acting on runs, a slice at a time.
    Running,
    /// Every matching run was looked at.
    Done,
    /// Stopped for good: its slices kept failing ([`ActionJob::error`] says why).
    Failed,
    /// Stopped by an operator; the runs acted on stay acted on.
    Cancelled,
}

impl ActionJobStatus {
    /// Whether it will act on no more runs.
    pub fn is_finished(self) -> bool {
        self != ActionJobStatus::Running
    }

    /// Its wire name: `running`, `done`, `failed`, `cancelled`.
    pub fn as_str(self) -> &'static str {
        match self {
            ActionJobStatus::Running => "running",
            ActionJobStatus::Done => "done",
            ActionJobStatus::Failed => "failed",
            ActionJobStatus::Cancelled => "cancelled",
        }
    }
}

/// A run a job skipped or failed to act on, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActionNote {
    /// The run.
    pub run_id: RunId,
    /// Why: "already cancelled", "not parked (running)", the store's error...
    pub why: String,
}

/// How many runs skipped (and how many failed) a job keeps with their reasons: a
/// sample, so that the record stays small however many runs it looks at.
pub const ACTION_NOTES_KEPT: usize = 20;

/// How long a finished job's record is kept after its last write; a store may forget
/// it then (DynamoDB's TTL, the embedded store's later writes).
pub const ACTION_JOB_RETENTION: std::time::Duration =
    std::time::Duration::from_secs(30 * 24 * 3600);

/// The hold of one invocation on a job while it acts on a slice: a second
/// invocation (a duplicate wake-up, the sweep's re-send) leaves the job alone until
/// it lapses.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActionJobLease {
    /// Which invocation holds it.
    pub owner: String,
    /// When it lapses (the holder died, or its write was lost).
    pub until: Timestamp,
}

/// A bulk action's durable job: what it does, to which runs, how far it got. Written
/// whole on its version ([`crate::ports::RunStore::put_action_job`]); a job that is
/// [`ActionJobStatus::Running`] is *active*, and the store can list the active ones
/// of the whole deployment for the sweep.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ActionJob {
    /// Its tenant: the job acts on that tenant's runs only.
    pub tenant: TenantId,
    /// Its id (time-ordered: a tenant's jobs list newest first by id).
    pub id: String,
    /// What it does to each run.
    pub action: BulkAction,
    /// How a restart restarts (for [`BulkAction::Restart`]).
    #[serde(default)]
    pub restart: RestartOptions,
    /// Which runs.
    pub filter: ActionFilter,
    /// At most this many runs per second.
    pub rate: u32,
    /// Who started it (as the API names a caller); each run's action is by them.
    pub by: String,
    /// Where it is.
    pub status: ActionJobStatus,
    /// Runs the filter matched so far (`done + skipped + failed`).
    pub matched: u64,
    /// Runs acted on.
    pub done: u64,
    /// Runs left alone: already in the state asked for, or not in one the action
    /// applies to.
    pub skipped: u64,
    /// Runs the action failed on (storage), after the engine's own retries.
    pub failed: u64,
    /// The first skipped runs, with why (at most [`ACTION_NOTES_KEPT`]).
    #[serde(default)]
    pub skipped_sample: Vec<ActionNote>,
    /// The first runs it failed on, with why (at most [`ACTION_NOTES_KEPT`]).
    #[serde(default)]
    pub failures: Vec<ActionNote>,
    /// Where its listing of runs goes on (the store's cursor); `None` before the
    /// first page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
    /// When it was started.
    pub created_at: Timestamp,
    /// Its last change.
    pub updated_at: Timestamp,
    /// When its next slice is due (pacing).
    pub next_at: Timestamp,
    /// The invocation acting on a slice now, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<ActionJobLease>,
    /// Slices in a row that stopped on an error (a listing that failed); reset by one
    /// that went through.
    #[serde(default)]
    pub errors_in_a_row: u32,
    /// Why it failed, or the last error a slice stopped on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Who cancelled it, when someone did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancelled_by: Option<String>,
    /// The build whose engines act on it, for an upgrade or a restart (both replay a
    /// run's journal on the code of the engine acting, and an upgrade moves the run to
    /// that engine's build): the build of the engine that started it. `None`: any
    /// build's engine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build: Option<String>,
    /// The stored record's version: each write adds one (0: not stored). Kept beside
    /// the record by the stores, not in it.
    #[serde(skip)]
    pub version: u64,
}

impl ActionJob {
    /// Note a run skipped, keeping the sample bounded.
    pub fn note_skipped(&mut self, run_id: RunId, why: String) {
        self.matched += 1;
        self.skipped += 1;
        if self.skipped_sample.len() < ACTION_NOTES_KEPT {
            self.skipped_sample.push(ActionNote { run_id, why });
        }
    }

    /// Note a run the action failed on, keeping the sample bounded.
    pub fn note_failed(&mut self, run_id: RunId, why: String) {
        self.matched += 1;
        self.failed += 1;
        if self.failures.len() < ACTION_NOTES_KEPT {
            self.failures.push(ActionNote { run_id, why });
        }
    }

    /// Note a run acted on.
    pub fn note_done(&mut self) {
        self.matched += 1;
        self.done += 1;
    }

    /// Until when a store keeps it: [`ACTION_JOB_RETENTION`] after its last write once
    /// finished; for ever while it runs (`None`).
    pub fn keep_until(&self) -> Option<Timestamp> {
        self.status
            .is_finished()
            .then(|| self.updated_at.plus(ACTION_JOB_RETENTION))
    }

    /// Whether an invocation holds it at `now`.
    pub fn is_leased(&self, now: Timestamp) -> bool {
        self.lease.as_ref().is_some_and(|l| l.until > now)
    }
}

/// An active job, as the store lists them for the sweep
/// ([`crate::ports::RunStore::active_action_jobs`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActiveActionJob {
    /// Its tenant.
    pub tenant: TenantId,
    /// Its id.
    pub id: String,
}
