//! Callback records, deliveries and tool-call records.

use super::*;

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
        /// When the parent was created ([`ParentLink::created_at`]): a later run under
        /// the parent's id (an `Idempotency-Key` replayed after the parent was removed)
        /// is not the parent, and refuses the outcome as gone. `None` from a child
        /// whose link records no creation time.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        parent_created_at: Option<Timestamp>,
    },
}

/// The id of the delivery that tells a parent its child `child` finished: one per
/// child, so a repeat of it is a duplicate.
pub fn child_finished_id(child: &RunId) -> DeliveryId {
    DeliveryId(format!("child-finished:{child}"))
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

    /// The callback this delivery answers (a success or a failure; not a heartbeat).
    pub fn answered_callback(&self) -> Option<&CallbackId> {
        match self {
            DeliveryBody::CallbackSucceeded { callback_id, .. }
            | DeliveryBody::CallbackFailed { callback_id, .. } => Some(callback_id),
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
