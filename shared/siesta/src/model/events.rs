//! The timeline: its events, their types and sub-types (their details are
//! [`crate::timeline::EventDetails`]).

use super::*;

/// One event of a run's append-only timeline, in the vocabulary of AWS Lambda durable
/// execution histories.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct TimelineEvent {
    /// Gapless sequence number within the run, from 1.
    pub seq: u64,
    /// When it happened.
    #[serde(rename = "EventTimestamp")]
    pub at: Timestamp,
    /// What happened.
    pub event_type: EventType,
    /// The operation's sub-type, for operation events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
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
    /// Details: result, error, attempt, deadline...
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub details: serde_json::Value,
}

impl TimelineEvent {
    /// The first event of a run (`seq` 1).
    pub fn execution_started(
        at: Timestamp,
        workflow: &str,
        details: serde_json::Value,
    ) -> TimelineEvent {
        TimelineEvent {
            seq: 1,
            at,
            event_type: EventType::ExecutionStarted,
            sub_type: None,
            id: None,
            parent_id: None,
            name: Some(workflow.to_owned()),
            details,
        }
    }
}

/// Timeline event types: AWS durable execution history types plus Siesta's own.
#[allow(missing_docs)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum EventType {
    ExecutionStarted,
    ExecutionSucceeded,
    ExecutionFailed,
    ExecutionCancelled,
    StepStarted,
    StepSucceeded,
    StepFailed,
    WaitStarted,
    WaitSucceeded,
    WaitFailed,
    CallbackStarted,
    CallbackSucceeded,
    CallbackFailed,
    CallbackTimedOut,
    ContextStarted,
    ContextSucceeded,
    ContextFailed,
    ChainedInvokeStarted,
    ChainedInvokeSucceeded,
    ChainedInvokeFailed,
    InvocationCompleted,
    /// A webhook or API call completed, failed or heartbeated a callback.
    CallbackDelivered,
    /// A named event was delivered.
    EventDelivered,
    /// A message was injected.
    MessageInjected,
    /// A stored delivery did not decode as the type its wait takes: it was set aside
    /// and the wait goes on.
    DeliveryRejected,
    /// A side-effecting tool call was recorded (running, succeeded, failed, unknown).
    ToolCallRecorded,
    /// The run needs an operator.
    RunParked,
    /// An operator resumed a parked or paused run.
    RunResumed,
    /// An operator paused the run (`PausedBy`): it takes no turn until resumed.
    RunPaused,
    /// An operator restarted the run from a step, in place or as a fork
    /// (`RestartedBy`, `From`, `Restart`, `SetAside`, `Replayed`, `Fork`, `ForkedFrom`).
    RunRestarted,
    /// Cancellation was requested.
    CancelRequested,
    /// The run was moved to another build after its journal replayed there
    /// (`From`, `To`, `Replayed`).
    RunUpgraded,
    /// A marker was journaled: a `patched` call recorded its patch (`Patch`).
    MarkerRecorded,
    /// A later start was gathered into this queued run by its debounce
    /// (`Debounce`, `Key`, `Starts`, `ReleaseAt`).
    StartJoined,
    /// What held the run's start back — a debounce or a start rate — let it begin
    /// (`HeldBy`, `Name`, `Key`, `Starts`).
    StartReleased,
    /// A step's attempt waits, its run suspended: for its turn under a rate limit, or
    /// a slot of a step limit (`Reason`, `Key`, `Until`, `Place`).
    StepDelayed,
}

/// Operation sub-types, as in AWS durable execution histories.
#[allow(missing_docs)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum SubType {
    Step,
    Wait,
    Callback,
    WaitForCallback,
    WaitForCondition,
    WaitForEvent,
    ToolCall,
    Artifact,
    RunInChildContext,
    Parallel,
    ParallelBranch,
    Map,
    MapIteration,
    ChainedInvoke,
    Patch,
    /// A call to a language model (`siesta-ai`): a step whose result is the model's
    /// reply with its usage.
    ModelCall,
}
