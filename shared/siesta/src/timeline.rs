//! The details of a timeline event, typed: one variant of [`EventDetails`] per
//! [`EventType`], each a struct whose fields are the event's `Details` keys on the wire
//! (`docs/timeline.md` shows each and is checked against this file by a test).
//!
//! The operations build an [`EventDetails`]; the stored event keeps its JSON form
//! ([`TimelineEvent::details`]), so timelines written by earlier releases read as
//! before. Read back, [`EventDetails::parse`] chooses the variant by the event type and
//! falls back to [`EventDetails::Other`], the raw JSON, for a shape it does not know
//! (an earlier or later release's). Instants are [`Timestamp`]s (milliseconds in the
//! store; the API shows them as RFC 3339 through [`EventDetails::instants`]); durations
//! are milliseconds, with `Ms` in their name.

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use crate::model::{ErrorInfo, EventType, FencingEpoch, IdempotencyKey, RunStatus, TimelineEvent};
use crate::time::Timestamp;

/// A field that is written even when empty (`null`), but only by some shapes of its
/// event type: `None` leaves it out, `Some(None)` writes `null`.
fn some<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

/// `ExecutionStarted`: the workflow and its build, or for a child run its parent.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct ExecutionStarted {
    /// The workflow started (a run started by the API).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow: Option<String>,
    /// The run that invoked this one (a child run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_run_id: Option<String>,
    /// The parent's invoke operation (a child run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_operation_id: Option<String>,
    /// The build that started it, `null` when unnamed.
    #[serde(default)]
    pub build_id: Option<String>,
}

/// `ExecutionSucceeded`: the run's output.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct ExecutionSucceeded {
    /// The output inline, or `{"Artifact": …}` for a large one.
    pub result: Value,
}

/// An event that carries an error only (`ExecutionFailed`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct Failure {
    /// What failed.
    pub error: ErrorInfo,
}

/// `StepStarted`: one attempt of a step or a condition's check begins.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct StepStarted {
    /// The attempt, from 1.
    pub attempt: u32,
}

/// `StepSucceeded` / `StepFailed`: an attempt's outcome.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct StepEnded {
    /// The attempt, from 1 (absent on a result replaced by its artifact).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
    /// The value it returned, inline (or `{"Artifact": …}` for a condition's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// A step's value too large to show inline: its artifact.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_artifact: Option<Value>,
    /// A value moved to the artifact store after the fact: its artifact.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact: Option<Value>,
    /// The state a condition's check produced when it said "not yet".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<Value>,
    /// The attempt's error (`StepFailed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorInfo>,
    /// When the next attempt is due, while retrying.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_attempt_at: Option<Timestamp>,
    /// The delay before the next attempt, in milliseconds, while retrying.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_attempt_delay_ms: Option<u64>,
    /// The same delay in seconds, as timelines of earlier releases wrote it (read only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_attempt_delay_seconds: Option<f64>,
    /// `true` while another attempt follows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retrying: Option<bool>,
    /// Who resolved an unknown tool call to this outcome.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved_by: Option<String>,
}

/// `WaitStarted`: a timer (`ScheduledEndTimestamp`) or a wait for an event.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct WaitStarted {
    /// When a timer fires.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduled_end_timestamp: Option<Timestamp>,
    /// The event waited for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<String>,
    /// The event wait's deadline, `null` without one.
    #[serde(
        default,
        deserialize_with = "some",
        skip_serializing_if = "Option::is_none"
    )]
    pub timeout: Option<Option<Timestamp>>,
}

/// `WaitSucceeded` / `WaitFailed` of a wait for an event (a timer's carry nothing).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct WaitEnded {
    /// The event waited for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<String>,
    /// The delivery it took.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery_id: Option<String>,
    /// Why it failed (timed out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorInfo>,
}

/// `CallbackStarted`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct CallbackStarted {
    /// The callback's id.
    pub callback_id: String,
    /// Its deadline, `null` without one.
    #[serde(default)]
    pub timeout: Option<Timestamp>,
    /// Its heartbeat timeout in milliseconds, `null` without one.
    #[serde(default)]
    pub heartbeat_timeout_ms: Option<u64>,
}

/// `CallbackSucceeded` / `CallbackFailed` / `CallbackTimedOut`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct CallbackEnded {
    /// The callback's id.
    pub callback_id: String,
    /// The delivery that completed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery_id: Option<String>,
    /// Which deadline passed (`CallbackTimedOut`: `timeout` or `heartbeat`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// `CallbackDelivered` (Siesta's): a completion, failure or heartbeat arrived.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct CallbackDelivered {
    /// The callback's id.
    pub callback_id: String,
    /// `succeeded`, `failed` or `heartbeat`.
    pub outcome: String,
    /// The delivery (absent for a heartbeat).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery_id: Option<String>,
    /// The callback's operation.
    pub operation_id: String,
}

/// `EventDelivered`, `MessageInjected`, `DeliveryRejected` (Siesta's).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct Delivered {
    /// The event's name (`EventDelivered`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<String>,
    /// The delivery.
    pub delivery_id: String,
    /// Why it was refused (`DeliveryRejected`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// `ContextStarted` / `ContextSucceeded` / `ContextFailed` of a `parallel`, `map` or
/// combinator (a child context's carry nothing).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct ContextDetails {
    /// The combinator (`join_all`, `try_join_all`, `select_ok`, `race`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub combinator: Option<String>,
    /// How many futures a combinator combines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub futures: Option<u64>,
    /// Branches or items in all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<u64>,
    /// The concurrency limit, `null` without one.
    #[serde(
        default,
        deserialize_with = "some",
        skip_serializing_if = "Option::is_none"
    )]
    pub max_concurrency: Option<Option<u64>>,
    /// Why a batch completed (`AllCompleted`, `MinSuccessful`, `FailureTolerance`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_reason: Option<CompletionReason>,
    /// How many succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub succeeded: Option<u64>,
    /// How many failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<u64>,
    /// The index of a `race`'s or `select_ok`'s winner.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub winner: Option<u64>,
    /// The index of the future whose failure decided a failed combinator, `null` when
    /// none did (no futures).
    #[serde(
        default,
        deserialize_with = "some",
        skip_serializing_if = "Option::is_none"
    )]
    pub decided_by: Option<Option<u64>>,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorInfo>,
}

/// `ChainedInvokeStarted` / `ChainedInvokeSucceeded` / `ChainedInvokeFailed`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct ChainedInvoke {
    /// The child's workflow.
    pub workflow: String,
    /// The child run.
    pub child_run_id: String,
    /// How the child ended (`completed`, `failed`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<RunStatus>,
}

/// `InvocationCompleted`: one engine invocation ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct InvocationCompleted {
    /// The run's status then.
    pub status: RunStatus,
    /// When it is due next, `null` when nothing is scheduled.
    #[serde(default)]
    pub next_wake_at: Option<Timestamp>,
    /// The fencing epoch of the invocation (0 in timelines of releases without one).
    #[serde(default)]
    pub epoch: FencingEpoch,
}

/// `ToolCallRecorded` (Siesta's): a tool call found unknown, or an operator's resolution.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct ToolCallRecorded {
    /// `unknown`, or the resolution (`succeeded`, `failed`, `retry`).
    pub status: String,
    /// The operator's resolution.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolution: Option<String>,
    /// Who resolved it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved_by: Option<String>,
    /// The call's idempotency key.
    #[serde(default)]
    pub idempotency_key: Option<IdempotencyKey>,
}

/// `RunParked` (Siesta's): the run needs an operator.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct RunParked {
    /// Why (non-determinism, retries exhausted, a dead-lettered wake-up, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorInfo>,
    /// Why, as text (an unknown side effect).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The dead-lettered wake-up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wake_up: Option<Value>,
}

/// `RunResumed` (Siesta's): an operator resumed a parked run.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct RunResumed {
    /// Why it had been parked, `null` when unknown.
    #[serde(default)]
    pub parked_for: Option<ErrorInfo>,
    /// Who resumed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved_by: Option<String>,
}

/// `RunUpgraded` (Siesta's): the run moved to another build.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct RunUpgraded {
    /// The build it ran on, `null` when unnamed.
    #[serde(default)]
    pub from: Option<String>,
    /// The build it runs on now.
    pub to: String,
    /// How many journal entries the new build replayed to check it.
    pub replayed: u64,
    /// Who upgraded it, when an operator did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upgraded_by: Option<String>,
}

/// `ExecutionCancelled` and `CancelRequested`: who cancelled the run, when an operator
/// did (Siesta's; AWS's events carry no details). `null` when no one is named.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct Cancelled {
    /// Who cancelled it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancelled_by: Option<String>,
}

/// `MarkerRecorded`: a patch marker.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct MarkerRecorded {
    /// The patch's id.
    pub patch: String,
    /// Which call recorded it.
    pub call: String,
}

/// `RunPaused` (Siesta's): an operator paused the run; it takes no turn until resumed.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct RunPaused {
    /// Who paused it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused_by: Option<String>,
}

/// `RunRestarted` (Siesta's): an operator restarted the run from a step
/// (docs/operations.md). In place, the run goes on from `From` with the journal from
/// there superseded; as a fork, the run it was made of records `Fork` and the fork
/// `ForkedFrom`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct RunRestarted {
    /// Who restarted it.
    pub restarted_by: String,
    /// The position it goes on from; absent: from where it stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// The restart's number: its superseded journal entries carry it.
    pub restart: u32,
    /// How many journal entries were superseded.
    #[serde(default)]
    pub superseded: u64,
    /// How many journal entries before the point replayed on this build to check it.
    #[serde(default)]
    pub replayed: u64,
    /// Tool calls superseded are made again rather than answered from their outcome.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub repeat_tool_calls: bool,
    /// On the run a fork was made of: the fork's id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fork: Option<String>,
    /// On a fork: the run it was made of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forked_from: Option<String>,
}

/// `StartJoined` (Siesta's): a later start was gathered into this queued run by its
/// debounce; the run's release moved.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct StartJoined {
    /// The debounce's name.
    pub debounce: String,
    /// The key its starts share (`""` without one).
    #[serde(default)]
    pub key: String,
    /// How many starts the run holds now.
    pub starts: u32,
    /// When it is released now.
    pub release_at: Timestamp,
}

/// `StartReleased` (Siesta's): what held the run's start back let it begin.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct StartReleased {
    /// `debounce` or `rate`.
    pub held_by: String,
    /// The debounce's or the start rate's name.
    pub name: String,
    /// The key (`""` without one).
    #[serde(default)]
    pub key: String,
    /// For a debounce, how many starts the run gathered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub starts: Option<u32>,
}

/// `StepDelayed` (Siesta's): a step's attempt waits, its run suspended, for its turn
/// under a rate limit or a slot of a step limit (docs/flow-control.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct StepDelayed {
    /// `rate` (its turn) or `limit` (a slot).
    pub reason: String,
    /// The rate limit's or step limit's key.
    pub key: String,
    /// For a rate, its turn; for a limit, when it looks again (a slot handed to it
    /// wakes it sooner).
    pub until: Timestamp,
    /// For a limit, its place in the key's line (1: next).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub place: Option<u64>,
}

/// A timeline event's details, one variant per [`EventType`] (events that carry none
/// are [`EventDetails::None`]). Serialised as the variant's fields alone: the event
/// type beside it says which variant it is.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
#[allow(missing_docs)]
pub enum EventDetails {
    ExecutionStarted(ExecutionStarted),
    ExecutionSucceeded(ExecutionSucceeded),
    ExecutionFailed(Failure),
    StepStarted(StepStarted),
    StepSucceeded(StepEnded),
    StepFailed(StepEnded),
    WaitStarted(WaitStarted),
    WaitSucceeded(WaitEnded),
    WaitFailed(WaitEnded),
    CallbackStarted(CallbackStarted),
    CallbackSucceeded(CallbackEnded),
    CallbackFailed(CallbackEnded),
    CallbackTimedOut(CallbackEnded),
    ContextStarted(ContextDetails),
    ContextSucceeded(ContextDetails),
    ContextFailed(ContextDetails),
    ChainedInvokeStarted(ChainedInvoke),
    ChainedInvokeSucceeded(ChainedInvoke),
    ChainedInvokeFailed(ChainedInvoke),
    InvocationCompleted(InvocationCompleted),
    CallbackDelivered(CallbackDelivered),
    EventDelivered(Delivered),
    MessageInjected(Delivered),
    DeliveryRejected(Delivered),
    ToolCallRecorded(ToolCallRecorded),
    RunParked(RunParked),
    RunResumed(RunResumed),
    RunPaused(RunPaused),
    RunRestarted(RunRestarted),
    RunUpgraded(RunUpgraded),
    Cancelled(Cancelled),
    MarkerRecorded(MarkerRecorded),
    StartJoined(StartJoined),
    StartReleased(StartReleased),
    StepDelayed(StepDelayed),
    /// No details (`ExecutionCancelled` and `CancelRequested` naming no one, a timer's `WaitSucceeded`,
    /// a child context's start and end): `null`, left out on the wire.
    None,
    /// Details of a shape this release does not know (written by an earlier or a
    /// later one), kept as they are.
    Other(Value),
}

impl EventDetails {
    /// Read `details` as stored with an event of `event_type`; a shape this release
    /// does not know is [`EventDetails::Other`].
    pub fn parse(event_type: EventType, details: &Value) -> EventDetails {
        use EventDetails as D;
        use EventType as T;
        if details.is_null() {
            return D::None;
        }
        fn read<T: serde::de::DeserializeOwned>(
            v: &Value,
            wrap: impl FnOnce(T) -> EventDetails,
        ) -> EventDetails {
            match T::deserialize(v) {
                Ok(t) => wrap(t),
                Err(_) => EventDetails::Other(v.clone()),
            }
        }
        let v = details;
        match event_type {
            T::ExecutionStarted => read(v, D::ExecutionStarted),
            T::ExecutionSucceeded => read(v, D::ExecutionSucceeded),
            T::ExecutionFailed => read(v, D::ExecutionFailed),
            T::StepStarted => read(v, D::StepStarted),
            T::StepSucceeded => read(v, D::StepSucceeded),
            T::StepFailed => read(v, D::StepFailed),
            T::WaitStarted => read(v, D::WaitStarted),
            T::WaitSucceeded => read(v, D::WaitSucceeded),
            T::WaitFailed => read(v, D::WaitFailed),
            T::CallbackStarted => read(v, D::CallbackStarted),
            T::CallbackSucceeded => read(v, D::CallbackSucceeded),
            T::CallbackFailed => read(v, D::CallbackFailed),
            T::CallbackTimedOut => read(v, D::CallbackTimedOut),
            T::ContextStarted => read(v, D::ContextStarted),
            T::ContextSucceeded => read(v, D::ContextSucceeded),
            T::ContextFailed => read(v, D::ContextFailed),
            T::ChainedInvokeStarted => read(v, D::ChainedInvokeStarted),
            T::ChainedInvokeSucceeded => read(v, D::ChainedInvokeSucceeded),
            T::ChainedInvokeFailed => read(v, D::ChainedInvokeFailed),
            T::InvocationCompleted => read(v, D::InvocationCompleted),
            T::CallbackDelivered => read(v, D::CallbackDelivered),
            T::EventDelivered => read(v, D::EventDelivered),
            T::MessageInjected => read(v, D::MessageInjected),
            T::DeliveryRejected => read(v, D::DeliveryRejected),
            T::ToolCallRecorded => read(v, D::ToolCallRecorded),
            T::RunParked => read(v, D::RunParked),
            T::RunResumed => read(v, D::RunResumed),
            T::RunPaused => read(v, D::RunPaused),
            T::RunRestarted => read(v, D::RunRestarted),
            T::RunUpgraded => read(v, D::RunUpgraded),
            T::MarkerRecorded => read(v, D::MarkerRecorded),
            T::StartJoined => read(v, D::StartJoined),
            T::StartReleased => read(v, D::StartReleased),
            T::StepDelayed => read(v, D::StepDelayed),
            T::ExecutionCancelled | T::CancelRequested if v.is_null() => D::None,
            T::ExecutionCancelled | T::CancelRequested => read(v, D::Cancelled),
        }
    }

    /// The details as stored: JSON, `null` for [`EventDetails::None`].
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    /// The instants among the details, by their key: what the API shows as RFC 3339.
    pub fn instants(&self) -> Vec<(&'static str, Timestamp)> {
        let mut out = Vec::new();
        match self {
            EventDetails::StepSucceeded(s) | EventDetails::StepFailed(s) => {
                out.extend(s.next_attempt_at.map(|t| ("NextAttemptAt", t)));
            }
            EventDetails::WaitStarted(w) => {
                out.extend(
                    w.scheduled_end_timestamp
                        .map(|t| ("ScheduledEndTimestamp", t)),
                );
                out.extend(w.timeout.flatten().map(|t| ("Timeout", t)));
            }
            EventDetails::CallbackStarted(c) => out.extend(c.timeout.map(|t| ("Timeout", t))),
            EventDetails::InvocationCompleted(i) => {
                out.extend(i.next_wake_at.map(|t| ("NextWakeAt", t)));
            }
            EventDetails::StartJoined(j) => out.push(("ReleaseAt", j.release_at)),
            EventDetails::StepDelayed(d) => out.push(("Until", d.until)),
            _ => {}
        }
        out
    }
}

/// Every event type, in the order of [`EventType`]'s declaration.
pub const EVENT_TYPES: [EventType; 36] = {
    use EventType as T;
    [
        T::ExecutionStarted,
        T::ExecutionSucceeded,
        T::ExecutionFailed,
        T::ExecutionCancelled,
        T::StepStarted,
        T::StepSucceeded,
        T::StepFailed,
        T::WaitStarted,
        T::WaitSucceeded,
        T::WaitFailed,
        T::CallbackStarted,
        T::CallbackSucceeded,
        T::CallbackFailed,
        T::CallbackTimedOut,
        T::ContextStarted,
        T::ContextSucceeded,
        T::ContextFailed,
        T::ChainedInvokeStarted,
        T::ChainedInvokeSucceeded,
        T::ChainedInvokeFailed,
        T::InvocationCompleted,
        T::CallbackDelivered,
        T::EventDelivered,
        T::MessageInjected,
        T::DeliveryRejected,
        T::ToolCallRecorded,
        T::RunParked,
        T::RunResumed,
        T::RunPaused,
        T::RunRestarted,
        T::CancelRequested,
        T::RunUpgraded,
        T::MarkerRecorded,
        T::StartJoined,
        T::StartReleased,
        T::StepDelayed,
    ]
};

impl EventDetails {
    /// The keys the details of an event of `event_type` may hold, as the type declares
    /// them (empty for an event without details). The OpenAPI document and the test
    /// that holds `docs/timeline.md` to this type read them here.
    pub fn fields(event_type: EventType) -> &'static [&'static str] {
        use EventType as T;
        match event_type {
            T::ExecutionStarted => fields_of::<ExecutionStarted>(),
            T::ExecutionSucceeded => fields_of::<ExecutionSucceeded>(),
            T::ExecutionFailed => fields_of::<Failure>(),
            T::StepStarted => fields_of::<StepStarted>(),
            T::StepSucceeded | T::StepFailed => fields_of::<StepEnded>(),
            T::WaitStarted => fields_of::<WaitStarted>(),
            T::WaitSucceeded | T::WaitFailed => fields_of::<WaitEnded>(),
            T::CallbackStarted => fields_of::<CallbackStarted>(),
            T::CallbackSucceeded | T::CallbackFailed | T::CallbackTimedOut => {
                fields_of::<CallbackEnded>()
            }
            T::ContextStarted | T::ContextSucceeded | T::ContextFailed => {
                fields_of::<ContextDetails>()
            }
            T::ChainedInvokeStarted | T::ChainedInvokeSucceeded | T::ChainedInvokeFailed => {
                fields_of::<ChainedInvoke>()
            }
            T::InvocationCompleted => fields_of::<InvocationCompleted>(),
            T::CallbackDelivered => fields_of::<CallbackDelivered>(),
            T::EventDelivered | T::MessageInjected | T::DeliveryRejected => {
                fields_of::<Delivered>()
            }
            T::ToolCallRecorded => fields_of::<ToolCallRecorded>(),
            T::RunParked => fields_of::<RunParked>(),
            T::RunResumed => fields_of::<RunResumed>(),
            T::RunPaused => fields_of::<RunPaused>(),
            T::RunRestarted => fields_of::<RunRestarted>(),
            T::RunUpgraded => fields_of::<RunUpgraded>(),
            T::MarkerRecorded => fields_of::<MarkerRecorded>(),
            T::StartJoined => fields_of::<StartJoined>(),
            T::StartReleased => fields_of::<StartReleased>(),
            T::StepDelayed => fields_of::<StepDelayed>(),
            T::ExecutionCancelled | T::CancelRequested => fields_of::<Cancelled>(),
        }
    }
}

/// The field names a struct's `Deserialize` declares (its serde names), read by asking
/// it to deserialise from a deserializer that only notes them.
fn fields_of<T: serde::de::DeserializeOwned>() -> &'static [&'static str] {
    let mut fields: &'static [&'static str] = &[];
    let _ = T::deserialize(FieldNames(&mut fields));
    fields
}

/// A deserializer that records the fields of the struct asked of it, then stops.
struct FieldNames<'a>(&'a mut &'static [&'static str]);

impl<'de> Deserializer<'de> for FieldNames<'_> {
    type Error = serde::de::value::Error;

    fn deserialize_any<V: serde::de::Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
        Err(serde::de::Error::custom(
            "only a struct's field names are read",
        ))
    }

    fn deserialize_struct<V: serde::de::Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        _visitor: V,
    ) -> Result<V::Value, Self::Error> {
        *self.0 = fields;
        Err(serde::de::Error::custom(
            "only a struct's field names are read",
        ))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
        byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map enum
        identifier ignored_any
    }
}

impl From<EventDetails> for Value {
    fn from(details: EventDetails) -> Value {
        details.to_value()
    }
}

impl TimelineEvent {
    /// The event's details, typed ([`EventDetails::parse`]).
    pub fn typed_details(&self) -> EventDetails {
        EventDetails::parse(self.event_type, &self.details)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Every shape the operations write reads back as its own variant and writes the
    /// same JSON again; an unknown one is kept as it is.
    #[test]
    fn the_shapes_on_the_wire_read_back_typed_and_write_the_same_json() {
        let error = json!({"kind": "Boom", "message": "boom", "retryable": false});
        let cases = [
            (
                EventType::ExecutionStarted,
                json!({"Workflow": "order", "BuildId": null}),
            ),
            (
                EventType::ExecutionStarted,
                json!({"ParentRunId": "r1", "ParentOperationId": "a#0", "BuildId": "b"}),
            ),
            (
                EventType::ExecutionSucceeded,
                json!({"Result": {"ok": true}}),
            ),
            (EventType::ExecutionFailed, json!({"Error": error})),
            (EventType::StepStarted, json!({"Attempt": 1})),
            (EventType::StepSucceeded, json!({"Attempt": 1, "Result": 3})),
            (
                EventType::StepSucceeded,
                json!({"Attempt": 1, "State": 1, "NextAttemptAt": 5, "NextAttemptDelayMs": 5000, "Retrying": true}),
            ),
            (
                EventType::StepFailed,
                json!({"Attempt": 1, "Error": error, "NextAttemptAt": 5, "NextAttemptDelaySeconds": 1.0, "Retrying": true}),
            ),
            (EventType::WaitStarted, json!({"ScheduledEndTimestamp": 9})),
            (
                EventType::WaitStarted,
                json!({"Event": "go", "Timeout": null}),
            ),
            (
                EventType::WaitSucceeded,
                json!({"Event": "go", "DeliveryId": "d"}),
            ),
            (
                EventType::CallbackStarted,
                json!({"CallbackId": "cb", "Timeout": 7, "HeartbeatTimeoutMs": null}),
            ),
            (
                EventType::CallbackTimedOut,
                json!({"CallbackId": "cb", "Reason": "timeout"}),
            ),
            (
                EventType::CallbackDelivered,
                json!({"CallbackId": "cb", "Outcome": "heartbeat", "OperationId": "a#0"}),
            ),
            (
                EventType::ContextStarted,
                json!({"Total": 2, "MaxConcurrency": null}),
            ),
            (
                EventType::ContextFailed,
                json!({"Combinator": "race", "DecidedBy": null, "Error": error}),
            ),
            (
                EventType::InvocationCompleted,
                json!({"Status": "waiting", "NextWakeAt": null, "Epoch": 3}),
            ),
            (
                EventType::ToolCallRecorded,
                json!({"Status": "unknown", "IdempotencyKey": null}),
            ),
            (
                EventType::RunResumed,
                json!({"ParkedFor": null, "ResolvedBy": "dev"}),
            ),
            (
                EventType::RunUpgraded,
                json!({"From": null, "To": "b2", "Replayed": 2}),
            ),
            (
                EventType::MarkerRecorded,
                json!({"Patch": "p", "Call": "patched"}),
            ),
        ];
        for (t, v) in cases {
            let typed = EventDetails::parse(t, &v);
            assert!(!matches!(typed, EventDetails::Other(_)), "{t:?} {v}");
            assert_eq!(typed.to_value(), v, "{t:?}");
        }
        let odd = json!({"Something": "else"});
        assert_eq!(
            EventDetails::parse(EventType::StepStarted, &odd),
            EventDetails::Other(odd.clone())
        );
        assert_eq!(
            EventDetails::parse(EventType::StepStarted, &odd).to_value(),
            odd
        );
        assert_eq!(
            EventDetails::parse(EventType::WaitSucceeded, &Value::Null),
            EventDetails::None
        );
    }

    #[test]
    fn the_fields_of_each_event_type_are_its_structs_serde_names() {
        assert_eq!(EventDetails::fields(EventType::StepStarted), ["Attempt"]);
        assert_eq!(
            EventDetails::fields(EventType::CallbackStarted),
            ["CallbackId", "Timeout", "HeartbeatTimeoutMs"]
        );
        assert_eq!(
            EventDetails::fields(EventType::CancelRequested),
            ["CancelledBy"]
        );
        for t in EVENT_TYPES {
            assert!(
                EventDetails::fields(t)
                    .iter()
                    .all(|f| f.starts_with(char::is_uppercase)),
                "{t:?}"
            );
        }
    }
}

/// Why a batch completed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum CompletionReason {
    /// Every branch finished.
    AllCompleted,
    /// Enough branches succeeded.
    MinSuccessfulReached,
    /// Too many branches failed.
    FailureToleranceExceeded,
}
