//! Bulk actions by filter: what `POST /runs/actions` takes (an action and a filter)
//! and what it, `GET /runs/actions`, `GET /runs/actions/{id}` and
//! `POST /runs/actions/{id}/cancel` answer (the job's view: where it is and what it
//! did so far). The job is the engine's (`siesta::ActionJob`); these are its API shapes.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::schema::RunStatusSchema;
use crate::time::Rfc3339;

/// What a bulk action does to each run its filter matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RunsActionKind {
    /// Cancel it.
    Cancel,
    /// Pause it (a running run at its next boundary).
    Pause,
    /// Resume a parked or paused run.
    Resume,
    /// Restart it from a step (`from`, `as_new`, `repeat_tool_calls`).
    Restart,
    /// Move it to the build now serving, when its journal replays there.
    Upgrade,
    /// Resume a run a dead letter parked.
    Redrive,
}

/// Which runs of the caller's tenant: every field given must match; at least one
/// must be given.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RunsActionFilter {
    /// The caller's tenant, if named: a job acts on the caller's tenant's runs only, and
    /// another tenant is refused (422). Not a field that narrows the runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// Runs of this workflow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow: Option<String>,
    /// Runs in this status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<RunStatusSchema>)]
    pub status: Option<siesta::RunStatus>,
    /// Runs started on this build.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build: Option<String>,
    /// Runs created at or after this instant.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "rfc3339_text"
    )]
    pub created_after: Option<Rfc3339>,
    /// Runs created before this instant.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "rfc3339_text"
    )]
    pub created_before: Option<Rfc3339>,
    /// Failed runs whose failure (their last change) is at or after this instant.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "rfc3339_text"
    )]
    pub failed_after: Option<Rfc3339>,
    /// Failed runs whose failure (their last change) is before this instant.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "rfc3339_text"
    )]
    pub failed_before: Option<Rfc3339>,
    /// Runs whose error is of this kind (`ErrorInfo.kind`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_kind: Option<String>,
    /// Only the runs a dead letter parked (what `GET /dead-letters` lists).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dead_lettered: bool,
}

/// The body of `POST /runs/actions`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StartRunsAction {
    /// What to do to each run.
    pub action: RunsActionKind,
    /// Which runs.
    pub filter: RunsActionFilter,
    /// For `restart`: the position to go on from (default: the first operation that
    /// failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// For `restart`: fork new runs instead of restarting in place.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub as_new: bool,
    /// For `restart`: make tool calls after the point again even when their outcome
    /// was recorded.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub repeat_tool_calls: bool,
    /// Runs acted on per second, 1 to 1 000 (default 50), so that live traffic keeps
    /// its latency.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 1000)]
    pub rate: Option<u32>,
}

/// Where a job is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RunsActionStatus {
    /// Acting on runs, a slice at a time.
    Running,
    /// Every matching run was looked at.
    Done,
    /// Stopped for good: its slices kept failing (`error` says why).
    Failed,
    /// Cancelled; the runs acted on stay acted on.
    Cancelled,
}

impl RunsActionStatus {
    /// Whether the job will act on no more runs.
    pub fn is_finished(self) -> bool {
        self != RunsActionStatus::Running
    }
}

/// A run a job skipped or failed on, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct RunsActionNote {
    /// The run.
    pub run_id: String,
    /// Why: `already cancelled`, `not parked or paused (running)`, a storage error...
    pub why: String,
}

/// A bulk action's job: what it does, to which runs, how far it got.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct RunsActionView {
    /// The job's id (`GET /runs/actions/{id}`).
    pub id: String,
    /// What it does to each run.
    pub action: RunsActionKind,
    /// Which runs.
    pub filter: RunsActionFilter,
    /// For `restart`: the position it goes on from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// For `restart`: new runs forked rather than restarted in place.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub as_new: bool,
    /// For `restart`: tool calls made again.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub repeat_tool_calls: bool,
    /// Runs acted on per second at most.
    pub rate: u32,
    /// For `upgrade` and `restart`: the build whose engines act on it (the one serving
    /// the API when it started; the runs replay on its code). Only that build's
    /// engines advance it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build: Option<String>,
    /// Where it is.
    pub status: RunsActionStatus,
    /// Runs the filter matched so far: `done + skipped + failed`.
    pub matched: u64,
    /// Runs acted on.
    pub done: u64,
    /// Runs left alone (already in the state asked for, or in none the action applies
    /// to).
    pub skipped: u64,
    /// Runs the action failed on (storage).
    pub failed: u64,
    /// The first skipped runs with why (at most 20).
    pub skipped_reasons: Vec<RunsActionNote>,
    /// The first runs it failed on with why (at most 20).
    pub failures: Vec<RunsActionNote>,
    /// Why it failed, or the last error a slice stopped on (it tries again).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Who started it: each run's action is theirs in the run's timeline.
    pub by: String,
    /// Who cancelled it, if someone did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancelled_by: Option<String>,
    /// When it was started.
    pub created_at: Rfc3339,
    /// Its last progress.
    pub updated_at: Rfc3339,
}

/// The caller's jobs, newest first (`GET /runs/actions`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct RunsActionList {
    /// The jobs.
    pub jobs: Vec<RunsActionView>,
}

/// A filter's time, as the document describes it: RFC 3339 text only (a number of
/// milliseconds, which `Rfc3339` reads elsewhere, is refused here: the request's schema
/// says a string).
fn rfc3339_text<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Rfc3339>, D::Error> {
    let text: Option<String> = Deserialize::deserialize(deserializer)?;
    text.map(|t| t.parse().map_err(serde::de::Error::custom))
        .transpose()
}
