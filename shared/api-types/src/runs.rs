//! The runs: what `POST /runs` takes, what `GET /runs`, `GET /runs/{id}`, its result and
//! its timeline answer.

use serde::{Deserialize, Serialize};
use siesta::{ErrorInfo, EventType, RunStatus, SubType};
use utoipa::{IntoParams, ToSchema};

use crate::schema::{ErrorInfoSchema, RunStatusSchema};
use crate::time::Rfc3339;

/// The body of `POST /runs`.
// Its `Default` (no workflow) is never a start: the server's body reader asks for one,
// and a start's body is required.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StartRun {
    /// The registered workflow to run.
    pub workflow: String,
    /// Its input (any JSON; `null` when left out).
    #[serde(default)]
    pub input: serde_json::Value,
    /// The key the run counts under for the workflow's concurrency limits whose key
    /// is given at start (docs/flow-control.md); refused as invalid when such a limit
    /// applies and none is given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency_key: Option<String>,
}

/// Filters and paging of `GET /runs`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct RunListQuery {
    /// Only runs in this status.
    #[param(value_type = Option<crate::schema::RunStatusSchema>)]
    pub status: Option<String>,
    /// Only runs of this workflow.
    pub workflow: Option<String>,
    /// Where the previous page ended (its `next_cursor`).
    pub cursor: Option<String>,
    /// Runs per page, 1 to 200 (default 50).
    #[param(minimum = 1, maximum = 200)]
    pub limit: Option<u32>,
}

/// Paging of `GET /runs/{id}/timeline`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct TimelineQuery {
    /// Events after this `seq` (default 0: from the first).
    pub after: Option<u64>,
    /// Events per page, 1 to 1000 (default 100).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<u32>,
}

/// A run as the API shows it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
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
    /// A pause was requested, by this operator, and will be honoured at the next
    /// boundary (the run is still running).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause_requested: Option<String>,
    /// When it was created.
    pub created_at: Rfc3339,
    /// When it last changed.
    pub updated_at: Rfc3339,
    /// The build of the code it started on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub build_id: Option<String>,
    /// The build the run waits for: set when it started on another build than the one
    /// serving this API and is not finished. Such a run is not replayed on this
    /// build's code: it stays as it is (deliveries to it are recorded) until its own
    /// build serves it, or it is upgraded to this one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub awaiting_build: Option<String>,
    /// Where it waits while `queued`: the concurrency limit and key whose slot it
    /// waits for, and its place in that key's line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queued: Option<QueuedView>,
    /// Its latest restart from a step (docs/operations.md), or the fork made of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart: Option<crate::RestartView>,
    /// What it waits for now.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub waits: Vec<WaitView>,
    /// Counts of its operations by state.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub operations: Option<OperationsSummary>,
}

/// Why a queued run waits (docs/flow-control.md): for a slot of a concurrency limit
/// (`limit`, `key`, `position`), for its turn under a start rate (`limit`, `key`,
/// `next_at`), or for a debounce to gather starts (`debounce`, `key`, `next_at`,
/// `starts`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct QueuedView {
    /// The concurrency limit whose slot it waits for, or the start rate whose turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<String>,
    /// The debounce gathering the starts of its key into it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub debounce: Option<String>,
    /// The key it counts under (`""` for a limit, rate or debounce without one).
    pub key: String,
    /// Its place in the key's line: 1 is next. Left out when it could not be read, and
    /// for a run that waits for an instant rather than a slot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub position: Option<u64>,
    /// When it begins: its turn under a start rate, or a debounce's release (moved by
    /// each start that joins it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_at: Option<Rfc3339>,
    /// How many starts a debounce gathered into it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub starts: Option<u32>,
}

/// One pending wait.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct WaitView {
    /// The operation's position.
    pub operation: String,
    /// `timer`, `callback`, `event`, `child` or `retry`.
    pub kind: String,
    /// The callback's id, for callbacks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub callback_id: Option<String>,
    /// The callback's public webhook URL, for callbacks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// The event's name, for events.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event: Option<String>,
    /// When it gives up or fires.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deadline: Option<Rfc3339>,
}

/// Operations by state.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct OperationsSummary {
    /// All journaled operations (those a restart superseded left out).
    pub total: usize,
    /// Finished with a value.
    pub succeeded: usize,
    /// Finished with an error.
    pub failed: usize,
    /// Suspended, retrying, polling or started.
    pub pending: usize,
}

/// A page of the caller's runs.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct RunPage {
    /// The runs, without their waits and operations.
    pub runs: Vec<RunView>,
    /// Pass as `cursor` for the next page; `null` on the last page.
    pub next_cursor: Option<String>,
}

/// A finished run's outcome.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
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
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Timeline {
    /// The events, in `seq` order. A large value in their details is
    /// `{"value_ref": ValueRef}`.
    pub events: Vec<TimelineEventView>,
    /// Pass as `after` for the next page.
    pub next_after: u64,
}

/// One event of a run's timeline, in the vocabulary of AWS Lambda durable execution
/// histories; its time and the instants among its details are RFC 3339.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "PascalCase")]
#[schema(as = TimelineEvent)]
pub struct TimelineEventView {
    /// Gapless sequence number within the run, from 1.
    pub seq: u64,
    /// When it happened.
    pub event_timestamp: Rfc3339,
    /// What happened (`ExecutionStarted`, `StepSucceeded`, `CallbackStarted`...).
    #[schema(value_type = String)]
    pub event_type: EventType,
    /// The operation's sub-type (`Step`, `Wait`, `Callback`...), for operation events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub sub_type: Option<SubType>,
    /// The operation's id (its position).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The parent operation's id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_id: Option<String>,
    /// The operation's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Details: result, error, attempt, deadline... Its instants
    /// (`ScheduledEndTimestamp`, `Timeout`, `NextAttemptAt`, `NextWakeAt`) are RFC 3339
    /// too; its durations are milliseconds (`…Ms`). Its keys are those of the event
    /// type's [`siesta::timeline::EventDetails`] variant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(schema_with = crate::schema::event_details)]
    pub details: Option<serde_json::Value>,
}
