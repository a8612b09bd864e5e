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

mod actions;
mod deliveries;
mod events;
mod flow;
mod journal;
mod restart;
mod trace;

pub use actions::*;
pub use deliveries::*;
pub use events::*;
pub use flow::{HeldStart, HoldReason, LimitSlot, QueuedAt};
pub use journal::*;
pub use restart::{
    RestartMark, first_failed, is_archived, order_key, restarts_of, superseded_from,
};
pub use trace::{TraceParent, root_span_id_for, trace_id_for};

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
    /// Created, but over one of its concurrency limits: it waits in line for a slot
    /// ([`Run::queued`] says where) and costs nothing meanwhile; the write that frees
    /// the slot makes it pending.
    Queued,
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
    /// Held by an operator: it takes no turn until resumed. Deliveries are recorded
    /// meanwhile; timers and deadlines that fall due take effect on resume.
    Paused,
}

impl RunStatus {
    /// Every status, for exhaustive tests and listings.
    pub const ALL: [RunStatus; 9] = [
        RunStatus::Queued,
        RunStatus::Pending,
        RunStatus::Running,
        RunStatus::Waiting,
        RunStatus::Completed,
        RunStatus::Failed,
        RunStatus::Cancelled,
        RunStatus::Parked,
        RunStatus::Paused,
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
            RunStatus::Queued => "queued",
            RunStatus::Pending => "pending",
            RunStatus::Running => "running",
            RunStatus::Waiting => "waiting",
            RunStatus::Completed => "completed",
            RunStatus::Failed => "failed",
            RunStatus::Cancelled => "cancelled",
            RunStatus::Parked => "parked",
            RunStatus::Paused => "paused",
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
    /// A pause was asked for while it was running, by this operator (`dev`, an API
    /// key's fingerprint, a JWT's `sub`); honoured at the next boundary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause_requested: Option<String>,
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
    pub trace_parent: Option<TraceParent>,
    /// The concurrency limits the run counts against until it finishes, in the order
    /// its slots are taken (docs/flow-control.md); empty for a run under none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub limits: Vec<LimitSlot>,
    /// Where it waits while [`RunStatus::Queued`]; `None` otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queued: Option<QueuedAt>,
    /// What holds its start back while [`RunStatus::Queued`] for an instant rather than
    /// a slot: a debounce or a start rate; `None` otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held: Option<HeldStart>,
    /// Its latest restart from a step, or the fork made of it
    /// (docs/operations.md); `None` for a run never restarted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart: Option<RestartMark>,
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
            pause_requested: None,
            parent: None,
            build_id: None,
            trace_parent: None,
            limits: Vec::new(),
            queued: None,
            held: None,
            restart: None,
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
                    || self.pause_requested.is_some()
                    || self.due_at.is_some_and(|d| d <= now)
            }
            // A queued run is admitted by the write that frees its slot, not by a
            // wake-up.
            RunStatus::Queued
            | RunStatus::Completed
            | RunStatus::Failed
            | RunStatus::Cancelled
            | RunStatus::Parked
            // A paused run takes no turn until an operator resumes it.
            | RunStatus::Paused => false,
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
    /// When the parent was created, which tells it apart from a later run under its id
    /// (an `Idempotency-Key` replayed after the parent was removed). `None` in links
    /// written before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<Timestamp>,
}

impl ParentLink {
    /// Whether `parent`, a run under this link's id, is the run this link names (and
    /// not a later one under the same id). A link that records no creation time
    /// names whichever run holds the id.
    pub fn names(&self, parent: &Run) -> bool {
        parent.id == self.run_id && self.created_at.is_none_or(|c| c == parent.created_at)
    }
}
