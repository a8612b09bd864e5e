//! The journal: operation kinds, journal entries and their states, and waits.

use super::*;

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
    /// A decided combinator's record of the operations its futures created while it
    /// decided (a future built lazily, inside an `async` block, takes its position when
    /// first polled). Replay does not poll a decided combinator's futures, so it takes
    /// these positions from here: the operations after it keep the positions they had,
    /// and a dropped wait's position is never handed to a later wait (which would take
    /// the delivery meant for the wait live then, vercel/workflow#4264).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub minted: Vec<MintedPosition>,
    /// The combinator whose future created this operation while the combinator was
    /// being decided (the operation's future was built lazily, inside the combinator's
    /// future). A combinator decided in a later invocation than the one that created
    /// its futures' operations finds them by this, since the futures it does not poll
    /// again before deciding do not mint them again (see [`JournalEntry::minted`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub within: Option<Position>,
    /// Set aside by the run's restart with this number (docs/operations.md, "Restart
    /// from a step"): kept readable where it was, never replayed. Its operation is
    /// done again when the code reaches it; a tool call's recorded outcome and a child
    /// run are taken over from it then (see `context::carried`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub superseded: Option<u32>,
    /// When it last changed.
    pub updated_at: Timestamp,
}

/// A position an operation took, with its index among its parent's operations: what a
/// combinator records of the operations its futures created ([`JournalEntry::minted`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MintedPosition {
    /// The operation's position.
    pub position: Position,
    /// Its index among its parent's operations.
    pub index: u32,
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

/// Where a run's journal and the code replaying it part ways: what a replay check
/// reports and what parks a run for non-determinism.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Divergence {
    /// The position the code reached when it left the journal (or, when the code
    /// finished without reaching part of the journal, the first position it missed).
    pub position: Position,
    /// The operation the journal holds there (none: the journal holds nothing there).
    pub journal_kind: Option<OperationKind>,
    /// The operation the code runs there (none: the code no longer reaches it).
    pub code_kind: Option<OperationKind>,
    /// The whole story, as a run parked for it would tell it.
    pub message: String,
}

impl std::fmt::Display for Divergence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = |k: Option<OperationKind>| k.map_or("nothing", OperationKind::as_str);
        write!(
            f,
            "at {}: journal {} vs code {} ({})",
            self.position,
            kind(self.journal_kind),
            kind(self.code_kind),
            self.message
        )
    }
}
