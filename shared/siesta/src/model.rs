//! The durable model: runs, journal entries, waits, deliveries, tool-call records,
//! the timeline and artifacts.
//!
//! Everything here is plain data that a storage backend persists as it is. Every item
//! belongs to one tenant and (but for the callback index) one run, and every key
//! starts with the tenant.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::time::Timestamp;

macro_rules! string_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub String);

        impl $name {
            /// The id as a string slice.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl From<&str> for $name {
            fn from(s: &str) -> Self {
                $name(s.to_owned())
            }
        }

        impl From<String> for $name {
            fn from(s: String) -> Self {
                $name(s)
            }
        }
    };
}

string_id!(
    /// The tenant that owns a run; the first part of every key.
    TenantId
);
string_id!(
    /// A run's id, unique within its tenant.
    RunId
);
string_id!(
    /// A callback's id; also the unguessable capability token of its webhook URL.
    CallbackId
);
string_id!(
    /// The id of something delivered to a run (a webhook delivery id, an event id).
    /// Two deliveries with the same id are one delivery.
    DeliveryId
);
string_id!(
    /// The stable position of a durable operation: the path of its parents and its
    /// own `name#occurrence`, e.g. `checkout#0/charge#1`.
    Position
);
string_id!(
    /// A business-derived key that makes a side-effecting tool call idempotent, handed
    /// to the tool so the far side can dedupe too.
    IdempotencyKey
);

impl RunId {
    /// A fresh, time-ordered run id.
    pub fn generate() -> RunId {
        RunId(uuid::Uuid::now_v7().to_string())
    }
}

impl CallbackId {
    /// A fresh callback id with 160 bits of randomness.
    pub fn generate() -> CallbackId {
        let bytes: [u8; 20] = rand::random();
        CallbackId(format!("cb_{}", hex::encode(bytes)))
    }
}

impl Position {
    /// The position's parent, `None` at the top level.
    pub fn parent(&self) -> Option<Position> {
        self.0.rsplit_once('/').map(|(p, _)| Position(p.to_owned()))
    }

    /// Every ancestor, nearest first.
    pub fn ancestors(&self) -> impl Iterator<Item = Position> + '_ {
        let s = &self.0;
        s.match_indices('/')
            .rev()
            .map(move |(i, _)| Position(s[..i].to_owned()))
    }
}

/// A monotonically increasing number handed out with each lease. Every checkpoint is
/// conditioned on it, so a holder whose lease was taken over can write nothing.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, Default,
)]
#[serde(transparent)]
pub struct FencingEpoch(pub u64);

impl FencingEpoch {
    /// The epoch that follows this one.
    pub fn next(self) -> FencingEpoch {
        FencingEpoch(self.0 + 1)
    }
}

/// Where a run is in its life. See [`crate::lifecycle`] for the allowed moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Created or yielded; runnable, waiting for an engine to claim it.
    Pending,
    /// Claimed by an engine that is advancing it.
    Running,
    /// Suspended until a callback, event, timer or retry delay wakes it.
    Waiting,
    /// Finished with an output.
    Completed,
    /// Finished with an error.
    Failed,
    /// Cancelled.
    Cancelled,
    /// Stopped; needs an operator (non-determinism, an unknown side effect, retries
    /// exhausted on a step marked `park_on_exhaustion`).
    Parked,
}

impl RunStatus {
    /// Every status, for exhaustive tests and listings.
    pub const ALL: [RunStatus; 7] = [
        RunStatus::Pending,
        RunStatus::Running,
        RunStatus::Waiting,
        RunStatus::Completed,
        RunStatus::Failed,
        RunStatus::Cancelled,
        RunStatus::Parked,
    ];

    /// Completed, failed or cancelled: nothing will change it any more.
    pub fn is_finished(self) -> bool {
        matches!(
            self,
            RunStatus::Completed | RunStatus::Failed | RunStatus::Cancelled
        )
    }

    /// The status as its wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Pending => "pending",
            RunStatus::Running => "running",
            RunStatus::Waiting => "waiting",
            RunStatus::Completed => "completed",
            RunStatus::Failed => "failed",
            RunStatus::Cancelled => "cancelled",
            RunStatus::Parked => "parked",
        }
    }
}

impl fmt::Display for RunStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A claim on a run by one engine invocation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    /// Who holds it (an invocation id).
    pub owner: String,
    /// When it lapses unless renewed.
    pub expires_at: Timestamp,
    /// The fencing epoch this lease was granted with.
    pub epoch: FencingEpoch,
}

/// A serialisable error, as recorded in the journal and shown to users.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorInfo {
    /// A stable, machine-readable kind (`timeout`, `validation`, `NonDeterminism`...).
    pub kind: String,
    /// What happened, for a person.
    pub message: String,
    /// Whether trying again may succeed.
    #[serde(default)]
    pub retryable: bool,
    /// The error underneath, e.g. the last attempt's error of a failed step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<Box<ErrorInfo>>,
    /// How long the far side asked to be left alone before the next attempt (an HTTP
    /// `Retry-After`), in milliseconds: a retried step waits that long instead of its
    /// policy's backoff.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
}

impl ErrorInfo {
    /// An error of `kind` with `message`.
    pub fn new(kind: impl Into<String>, message: impl Into<String>, retryable: bool) -> Self {
        ErrorInfo {
            kind: kind.into(),
            message: message.into(),
            retryable,
            cause: None,
            retry_after_ms: None,
        }
    }
}

impl fmt::Display for ErrorInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind, self.message)
    }
}

/// A reference to an artifact: a blob stored by content address.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ArtifactRef {
    /// Lower-case hex SHA-256 of the content.
    pub sha256: String,
    /// Size in bytes.
    pub size: u64,
    /// IANA media type, e.g. `application/json`.
    pub media_type: String,
    /// Where the blob is, as the artifact store names it (`tenant/run/sha256`).
    pub location: String,
}

/// A value as stored: inline JSON, or a reference to an artifact when it is large.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Payload {
    /// The value itself.
    Inline(serde_json::Value),
    /// The value's JSON, stored as an artifact because it was over the inline limit.
    Artifact(ArtifactRef),
}

/// A run: one execution of a workflow.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Run {
    /// The owning tenant.
    pub tenant: TenantId,
    /// The run's id.
    pub id: RunId,
    /// The registered name of the workflow it executes.
    pub workflow: String,
    /// The workflow's input.
    pub input: Payload,
    /// Where it is in its life.
    pub status: RunStatus,
    /// Optimistic-concurrency version: bumped by every write to the run.
    pub version: u64,
    /// The output, once completed.
    pub output: Option<Payload>,
    /// The error, once failed or parked.
    pub error: Option<ErrorInfo>,
    /// When it was created.
    pub created_at: Timestamp,
    /// When it last changed.
    pub updated_at: Timestamp,
    /// The current claim, if any.
    pub lease: Option<Lease>,
    /// The highest fencing epoch ever granted for this run.
    pub epoch: FencingEpoch,
    /// How many deliveries (callback outcomes, events, messages, child results) it has
    /// received.
    pub inbox_seq: u64,
    /// `inbox_seq` when the engine last looked at its deliveries.
    pub inbox_seen: u64,
    /// The sequence number of its last timeline event.
    pub timeline_seq: u64,
    /// When it next needs attention (a timer, a deadline, a lease expiry, or now when it
    /// is runnable). `None` when finished: the due index is sparse.
    pub due_at: Option<Timestamp>,
    /// A wake-up for the run is on its way (queued, or delayed until `due_at`): the
    /// sweep sends another only after this time, so a wake-up that merely waits behind
    /// a backlog is not duplicated. `None`: the sweep wakes the run as soon as it is
    /// due. Set with the write that makes the run due when a wake-up follows it, and by
    /// the sweep when it sends one; cleared by a claim (the wake-up arrived) and when a
    /// send fails.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resend_after: Option<Timestamp>,
    /// Cancellation was asked for while it was running; honoured at the next boundary.
    pub cancel_requested: bool,
    /// The parent run and position when this run was started by `invoke`.
    pub parent: Option<ParentLink>,
    /// The build of the code the run started on ([`crate::EngineConfig::build_id`]);
    /// `None` for runs started before builds were recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build_id: Option<String>,
    /// The W3C trace context it was started with (`traceparent` on `POST /runs`): its
    /// wake-ups' spans join that trace. `None`: the trace derived from the run
    /// (see [`crate::telemetry`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_parent: Option<crate::telemetry::TraceParent>,
}

impl Run {
    /// A new pending run, due at once.
    pub fn new(
        tenant: TenantId,
        id: RunId,
        workflow: impl Into<String>,
        input: Payload,
        now: Timestamp,
    ) -> Run {
        Run {
            tenant,
            id,
            workflow: workflow.into(),
            input,
            status: RunStatus::Pending,
            version: 1,
            output: None,
            error: None,
            created_at: now,
            updated_at: now,
            lease: None,
            epoch: FencingEpoch(0),
            inbox_seq: 0,
            inbox_seen: 0,
            timeline_seq: 0,
            due_at: Some(now),
            resend_after: None,
            cancel_requested: false,
            parent: None,
            build_id: None,
            trace_parent: None,
        }
    }

    /// When the sweep next looks at the run: its due time, or later when a wake-up is
    /// on its way ([`Run::resend_after`]). `None` when nothing is due. What the due
    /// index is ordered by.
    pub fn sweep_at(&self) -> Option<Timestamp> {
        sweep_at(self.due_at, self.resend_after)
    }

    /// Whether a live lease (not expired at `now`) is held on the run.
    pub fn is_leased(&self, now: Timestamp) -> bool {
        self.lease.as_ref().is_some_and(|l| l.expires_at > now)
    }

    /// Whether a wake-up at `now` would find something to do: a runnable or crashed
    /// run, a new delivery, a due timer or deadline, or a cancellation.
    pub fn needs_attention(&self, now: Timestamp) -> bool {
        match self.status {
            RunStatus::Pending => !self.is_leased(now),
            RunStatus::Running => !self.is_leased(now),
            RunStatus::Waiting => {
                self.inbox_seq != self.inbox_seen
                    || self.cancel_requested
                    || self.due_at.is_some_and(|d| d <= now)
            }
            RunStatus::Completed | RunStatus::Failed | RunStatus::Cancelled | RunStatus::Parked => {
                false
            }
        }
    }
}

/// When the sweep looks at a run due at `due_at` whose wake-up is on its way until
/// `resend_after`: the later of the two; `None` when it is not due.
pub fn sweep_at(due_at: Option<Timestamp>, resend_after: Option<Timestamp>) -> Option<Timestamp> {
    due_at.map(|due| resend_after.map_or(due, |r| r.max(due)))
}

/// The run (and position) that started a child run with `invoke`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParentLink {
    /// The parent run.
    pub run_id: RunId,
    /// The parent's `invoke` operation.
    pub position: Position,
}

/// The kind of a durable operation, as the journal records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OperationKind {
    /// `step`.
    Step,
    /// A side-effecting tool call with an idempotency key.
    ToolCall,
    /// `sleep` / `wait`: a durable timer.
    Wait,
    /// `create_callback` / `wait_for_callback`.
    Callback,
    /// `wait_for_event`.
    Event,
    /// `wait_for_condition`.
    Condition,
    /// `run_in_child_context`, and each branch of `parallel` / `map`.
    Context,
    /// `parallel`.
    Parallel,
    /// `map`.
    Map,
    /// `invoke`: a child run.
    Invoke,
    /// `put_artifact`.
    Artifact,
    /// The marker of `patched` / `deprecate_patch`: the run reached this point on
    /// code that has the patch.
    Patch,
}

impl OperationKind {
    /// The kind's wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            OperationKind::Step => "step",
            OperationKind::ToolCall => "tool_call",
            OperationKind::Wait => "wait",
            OperationKind::Callback => "callback",
            OperationKind::Event => "event",
            OperationKind::Condition => "condition",
            OperationKind::Context => "context",
            OperationKind::Parallel => "parallel",
            OperationKind::Map => "map",
            OperationKind::Invoke => "invoke",
            OperationKind::Artifact => "artifact",
            OperationKind::Patch => "patch",
        }
    }
}

impl fmt::Display for OperationKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One durable operation's record in the run's journal, keyed by its position.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JournalEntry {
    /// Stable position: parent path plus `name#occurrence`.
    pub position: Position,
    /// The operation's index among its parent's operations, in creation order; used to
    /// name what the code now does differently when it no longer matches.
    pub index: u32,
    /// The kind of operation.
    pub kind: OperationKind,
    /// The name the workflow gave it.
    pub name: String,
    /// Where it is.
    pub state: EntryState,
    /// Deliveries this operation consumed (a callback outcome, an event, messages
    /// drained at this step boundary, a child result), so none is consumed twice.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub consumed: Vec<DeliveryId>,
    /// What the operation created and must keep after it finishes: a callback's id, a
    /// child run's id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handle: Option<String>,
    /// When it last changed.
    pub updated_at: Timestamp,
}

/// The state of one durable operation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "status")]
pub enum EntryState {
    /// An attempt was started (at-most-once steps and tool calls record this before
    /// running); finding it on replay means the attempt's outcome is unknown.
    Started {
        /// Attempt number, from 1.
        attempt: u32,
        /// The tool call's idempotency key, when it is one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        key: Option<IdempotencyKey>,
    },
    /// An attempt failed with a retryable error; the next one is due at `retry_at`.
    Retrying {
        /// The attempt that failed.
        attempt: u32,
        /// Its error.
        error: ErrorInfo,
        /// When the next attempt may start.
        retry_at: Timestamp,
    },
    /// Suspended on something outside the run.
    Waiting(Wait),
    /// A `wait_for_condition` between checks.
    Polling {
        /// Checks done so far.
        attempt: u32,
        /// The state threaded from the last check.
        state: Payload,
        /// When the next check is due.
        next_check_at: Timestamp,
        /// Checks in a row that returned an error; the retry policy decides on them.
        #[serde(default, skip_serializing_if = "is_zero")]
        failures: u32,
    },
    /// Finished with a value.
    Succeeded {
        /// The value.
        value: Payload,
        /// Attempts it took (steps).
        #[serde(default)]
        attempt: u32,
    },
    /// Finished with an error.
    Failed {
        /// The error.
        error: ErrorInfo,
        /// Attempts it took (steps).
        #[serde(default)]
        attempt: u32,
    },
    /// A tool call found `running` after a crash, with no way to find out whether it
    /// happened: an operator must decide.
    Unknown {
        /// The call's idempotency key.
        key: IdempotencyKey,
        /// The attempt whose outcome is unknown.
        #[serde(default)]
        attempt: u32,
    },
}

impl EntryState {
    /// Succeeded or failed: replay returns the recorded outcome.
    pub fn is_finished(&self) -> bool {
        matches!(
            self,
            EntryState::Succeeded { .. } | EntryState::Failed { .. }
        )
    }
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// Something a suspended operation waits for, and until when.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Wait {
    /// What it waits for.
    pub kind: WaitKind,
    /// When it gives up (timers: when they fire).
    pub deadline: Option<Timestamp>,
    /// When it was registered.
    pub started_at: Timestamp,
}

/// What a wait waits for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "wait")]
pub enum WaitKind {
    /// A durable timer; fires at the deadline.
    Timer,
    /// A callback completed from outside.
    Callback {
        /// The callback's id (its webhook token).
        callback_id: CallbackId,
        /// If set, a heartbeat must arrive at least this often (milliseconds).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        heartbeat_timeout_ms: Option<u64>,
    },
    /// A named event delivered through the API.
    Event {
        /// The event's name.
        name: String,
        /// The JSON Schema its payload must match (see [`crate::accepts`]); none for an
        /// untyped wait.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        accepts: Option<serde_json::Value>,
    },
    /// A child run started by `invoke`.
    Child {
        /// The child run.
        run_id: RunId,
    },
}

/// The index entry that lets a callback id (a webhook token) find its run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallbackRecord {
    /// The callback id.
    pub callback_id: CallbackId,
    /// The owning tenant.
    pub tenant: TenantId,
    /// The waiting run.
    pub run_id: RunId,
    /// The callback operation's position.
    pub position: Position,
    /// Open until completed, failed or timed out; a closed callback answers 410.
    pub status: CallbackStatus,
    /// When it times out.
    pub deadline: Option<Timestamp>,
    /// When it was created.
    pub created_at: Timestamp,
    /// The JSON Schema a success payload must match (see [`crate::accepts`]); none for
    /// an untyped callback.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accepts: Option<serde_json::Value>,
    /// Its heartbeat timeout and the deadline it sets, for a callback that must hear a
    /// heartbeat (or its outcome) at least that often.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heartbeat: Option<CallbackHeartbeat>,
}

/// A callback's heartbeat timeout, kept on its record so that the store refuses what
/// arrives after it, as it does after the callback's deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallbackHeartbeat {
    /// How long the callback waits for the next heartbeat (milliseconds).
    pub timeout_ms: u64,
    /// The last heartbeat accepted (or the callback's creation) plus the timeout.
    pub deadline: Timestamp,
}

impl CallbackHeartbeat {
    /// A heartbeat timeout of `timeout` counted from `from` (the callback's creation).
    pub fn new(timeout: Duration, from: Timestamp) -> Self {
        CallbackHeartbeat {
            timeout_ms: timeout.as_millis() as u64,
            deadline: from.plus(timeout),
        }
    }
}

impl CallbackRecord {
    /// Why a delivery received at `at` is too late for this callback: its deadline or
    /// its heartbeat deadline has passed (at the deadline is too late). The stores
    /// check this in the write's condition, so it holds even before the run has
    /// recorded the timeout.
    pub fn too_late(&self, at: Timestamp) -> Option<String> {
        if let Some(deadline) = self.deadline.filter(|d| *d <= at) {
            return Some(format!(
                "callback {} timed out at {}",
                self.callback_id,
                deadline.millis()
            ));
        }
        self.heartbeat.filter(|h| h.deadline <= at).map(|h| {
            format!(
                "callback {} passed its heartbeat timeout at {}",
                self.callback_id,
                h.deadline.millis()
            )
        })
    }

    /// A heartbeat received at `at` was accepted: the heartbeat deadline moves to `at`
    /// plus the timeout (never back).
    pub fn heartbeat_received(&mut self, at: Timestamp) {
        if let Some(h) = self.heartbeat.as_mut() {
            h.deadline = h.deadline.max(at.plus(Duration::from_millis(h.timeout_ms)));
        }
    }
}

/// Whether a callback still accepts an outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallbackStatus {
    /// Accepts success, failure and heartbeats.
    Open,
    /// An outcome has been delivered (single use).
    Completed,
    /// Its run gave up waiting.
    TimedOut,
    /// Its run finished or was cancelled first.
    Closed,
}

/// Something delivered to a run from outside; immutable once stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Delivery {
    /// Dedup id: a second delivery with this id is a duplicate.
    pub id: DeliveryId,
    /// The owning tenant.
    pub tenant: TenantId,
    /// The run it is for.
    pub run_id: RunId,
    /// Order of arrival at the run (its `inbox_seq` after this delivery).
    pub seq: u64,
    /// What it is.
    pub body: DeliveryBody,
    /// When it was received.
    pub received_at: Timestamp,
}

/// The content of a delivery.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "type")]
pub enum DeliveryBody {
    /// A callback succeeded with a value.
    CallbackSucceeded {
        /// The callback.
        callback_id: CallbackId,
        /// Its result.
        value: Payload,
    },
    /// A callback failed.
    CallbackFailed {
        /// The callback.
        callback_id: CallbackId,
        /// The failure.
        error: ErrorInfo,
    },
    /// A callback is still being worked on.
    CallbackHeartbeat {
        /// The callback.
        callback_id: CallbackId,
    },
    /// A named event (an approval, a signal).
    Event {
        /// The event's name.
        name: String,
        /// Its payload.
        value: Payload,
    },
    /// A message injected into the running run; drained at step boundaries.
    Message {
        /// The message.
        value: Payload,
    },
    /// A child run finished.
    ChildFinished {
        /// The parent's `invoke` position.
        position: Position,
        /// The child's output, or its error.
        outcome: Result<Payload, ErrorInfo>,
    },
}

impl DeliveryBody {
    /// The callback this delivery addresses, if any.
    pub fn callback_id(&self) -> Option<&CallbackId> {
        match self {
            DeliveryBody::CallbackSucceeded { callback_id, .. }
            | DeliveryBody::CallbackFailed { callback_id, .. }
            | DeliveryBody::CallbackHeartbeat { callback_id } => Some(callback_id),
            _ => None,
        }
    }
}

/// The outcome of a side-effecting tool call, keyed by its idempotency key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCallRecord {
    /// The key handed to the tool.
    pub key: IdempotencyKey,
    /// The owning tenant.
    pub tenant: TenantId,
    /// The calling run.
    pub run_id: RunId,
    /// The tool-call operation's position.
    pub position: Position,
    /// Where the call is.
    pub status: ToolCallStatus,
    /// The tool's result once succeeded, its error once failed.
    pub outcome: Option<Result<Payload, ErrorInfo>>,
    /// When it last changed.
    pub updated_at: Timestamp,
}

/// Where a side-effecting tool call is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolCallStatus {
    /// Recorded before the call was made; if found after a crash, the call may or may
    /// not have happened.
    Running,
    /// The call returned a result.
    Succeeded,
    /// The call returned an error.
    Failed,
    /// Found running after a crash and nothing could tell whether it happened.
    Unknown,
}

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
    /// An operator resumed a parked run.
    RunResumed,
    /// Cancellation was requested.
    CancelRequested,
    /// The run was moved to another build after its journal replayed there
    /// (`From`, `To`, `Replayed`).
    RunUpgraded,
    /// A marker was journaled: a `patched` call recorded its patch (`Patch`).
    MarkerRecorded,
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
