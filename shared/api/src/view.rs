//! What the API shows of a run.

use serde::Serialize;
use siesta::ports::History;
use siesta::*;
use utoipa::ToSchema;

use crate::schema::{ErrorInfoSchema, RunStatusSchema, TimelineEventSchema};

/// A run as the API shows it.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(as = Run)]
pub struct RunView {
    /// The run's id.
    pub id: String,
    /// The workflow it runs.
    pub workflow: String,
    /// The tenant it belongs to (the caller's: another tenant's run is not found).
    pub tenant: String,
    /// Where it is in its life.
    #[schema(value_type = RunStatusSchema)]
    pub status: RunStatus,
    /// Its version (the `ETag`).
    pub version: u64,
    /// Its input; a large one is `{"value_ref": ValueRef}`, fetched from
    /// `GET /runs/{id}/values/{sha256}`.
    pub input: serde_json::Value,
    /// Its output, once completed (a large one as for `input`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<serde_json::Value>,
    /// Its error, once failed, parked or cancelled.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<ErrorInfoSchema>)]
    pub error: Option<ErrorInfo>,
    /// Cancellation was requested and will be honoured at the next boundary.
    pub cancel_requested: bool,
    /// When it was created (ms since the epoch).
    pub created_at: i64,
    /// When it last changed (ms since the epoch).
    pub updated_at: i64,
    /// The build of the code it started on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub build_id: Option<String>,
    /// What it waits for now.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub waits: Vec<WaitView>,
    /// Counts of its operations by state.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub operations: Option<OperationsSummary>,
}

/// One pending wait.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct WaitView {
    /// The operation's position.
    pub operation: String,
    /// `timer`, `callback`, `event`, `child` or `retry`.
    #[schema(value_type = String)]
    pub kind: &'static str,
    /// The callback's id, for callbacks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub callback_id: Option<String>,
    /// The callback's public webhook URL, for callbacks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// The event's name, for events.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event: Option<String>,
    /// When it gives up or fires (ms since the epoch).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deadline: Option<i64>,
}

/// Operations by state.
#[derive(Debug, Clone, Default, Serialize, ToSchema)]
pub struct OperationsSummary {
    /// All journaled operations.
    pub total: usize,
    /// Finished with a value.
    pub succeeded: usize,
    /// Finished with an error.
    pub failed: usize,
    /// Suspended, retrying, polling or started.
    pub pending: usize,
}

/// A page of the caller's runs.
#[derive(Debug, Serialize, ToSchema)]
pub struct RunPage {
    /// The runs, without their waits and operations.
    pub runs: Vec<RunView>,
    /// Pass as `cursor` for the next page; `null` on the last page.
    pub next_cursor: Option<String>,
}

/// A finished run's outcome.
#[derive(Debug, Serialize, ToSchema)]
pub struct RunResult {
    /// The run's id.
    pub id: String,
    /// `completed`, `failed` or `cancelled`.
    #[schema(value_type = RunStatusSchema)]
    pub status: RunStatus,
    /// Its output, when completed; a large one is `{"value_ref": ValueRef}`.
    pub output: Option<serde_json::Value>,
    /// Its error, when failed or cancelled.
    #[schema(value_type = Option<ErrorInfoSchema>)]
    pub error: Option<ErrorInfo>,
}

/// A page of a run's timeline.
#[derive(Debug, Serialize, ToSchema)]
pub struct Timeline {
    /// The events, in `seq` order. A large value in their details is
    /// `{"value_ref": ValueRef}`.
    #[schema(value_type = Vec<TimelineEventSchema>)]
    pub events: Vec<TimelineEvent>,
    /// Pass as `after` for the next page.
    pub next_after: u64,
}

/// A delivery through the authenticated API (event, message, callback outcome) was
/// durably recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
pub struct Accepted {
    /// Always `true`.
    pub accepted: bool,
    /// It had been delivered before (same delivery id); nothing changed.
    pub duplicate: bool,
}

/// A webhook was durably recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
pub struct Received {
    /// Always `true`.
    pub received: bool,
    /// It had been delivered before (same delivery id); nothing changed.
    pub duplicate: bool,
}

/// The answer of `/healthz`.
#[derive(Debug, Serialize, ToSchema)]
pub struct Health {
    /// `ok`.
    pub status: String,
}

/// A stored value as the API shows it: the value, or for a large one kept in the
/// artifact store, `{"value_ref": ...}` ([`crate::ValueRef`]) to fetch it by.
pub(crate) fn payload_json(run_id: &str, p: &Payload) -> serde_json::Value {
    match p {
        Payload::Inline(v) => v.clone(),
        Payload::Artifact(a) => crate::ValueRef::new(run_id, a).to_json(),
    }
}

impl RunView {
    /// The view of `run`; with its history, also its waits and operations.
    pub fn new(run: &Run, history: Option<&History>, callback_base_url: &str) -> RunView {
        let mut view = RunView {
            id: run.id.to_string(),
            workflow: run.workflow.clone(),
            tenant: run.tenant.to_string(),
            status: run.status,
            version: run.version,
            input: payload_json(run.id.as_str(), &run.input),
            output: run
                .output
                .as_ref()
                .map(|p| payload_json(run.id.as_str(), p)),
            error: run.error.clone(),
            cancel_requested: run.cancel_requested && !run.status.is_finished(),
            created_at: run.created_at.millis(),
            updated_at: run.updated_at.millis(),
            build_id: run.build_id.clone(),
            waits: Vec::new(),
            operations: None,
        };
        let Some(history) = history else { return view };
        let mut summary = OperationsSummary {
            total: history.journal.len(),
            ..Default::default()
        };
        let mut entries: Vec<&JournalEntry> = history.journal.iter().collect();
        entries.sort_by(|a, b| a.position.cmp(&b.position));
        for entry in entries {
            match &entry.state {
                EntryState::Succeeded { .. } => summary.succeeded += 1,
                EntryState::Failed { .. } => summary.failed += 1,
                state => {
                    summary.pending += 1;
                    if run.status.is_finished() {
                        continue;
                    }
                    if let Some(wait) = wait_view(entry, state, callback_base_url) {
                        view.waits.push(wait);
                    }
                }
            }
        }
        view.operations = Some(summary);
        view
    }
}

fn wait_view(entry: &JournalEntry, state: &EntryState, base: &str) -> Option<WaitView> {
    let mut view = WaitView {
        operation: entry.position.to_string(),
        kind: "timer",
        callback_id: None,
        url: None,
        event: None,
        deadline: None,
    };
    match state {
        EntryState::Waiting(wait) => {
            view.deadline = wait.deadline.map(|d| d.millis());
            match &wait.kind {
                WaitKind::Timer => {}
                WaitKind::Callback { callback_id, .. } => {
                    view.kind = "callback";
                    view.url = Some(format!(
                        "{}/hooks/{callback_id}",
                        base.trim_end_matches('/')
                    ));
                    view.callback_id = Some(callback_id.to_string());
                }
                WaitKind::Event { name, .. } => {
                    view.kind = "event";
                    view.event = Some(name.clone());
                }
                WaitKind::Child { .. } => view.kind = "child",
            }
        }
        EntryState::Retrying { retry_at, .. } => {
            view.kind = "retry";
            view.deadline = Some(retry_at.millis());
        }
        EntryState::Polling { next_check_at, .. } => {
            view.kind = "retry";
            view.deadline = Some(next_check_at.millis());
        }
        _ => return None,
    }
    Some(view)
}
