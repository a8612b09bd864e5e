//! A workflow's pause: what `POST /workflows/{name}/pause` takes, and what it, `POST
//! /workflows/{name}/resume` and `GET /workflows/{name}/pause` answer
//! (docs/operations.md, "Pause a workflow").

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::time::Rfc3339;

/// The body of `POST /workflows/{name}/pause` (optional).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PauseWorkflowBody {
    /// What new starts get while it is paused: `queue` (default: created `paused`, they
    /// begin on resume) or `refuse` (`409 workflow_paused`; a schedule's tick is
    /// skipped).
    #[serde(default)]
    #[schema(value_type = Option<String>, example = "queue")]
    pub starts: Option<String>,
}

/// A workflow's pause, as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct WorkflowPauseView {
    /// The workflow.
    pub workflow: String,
    /// Paused now.
    pub paused: bool,
    /// What new starts get while paused: `queue` or `refuse`.
    pub starts: String,
    /// Who paused or last resumed it; absent when it was never paused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    /// When.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<Rfc3339>,
    /// The bulk action pausing (or resuming) its runs, when this answers a pause or a
    /// resume: follow it at `GET /runs/actions/{job}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
}
