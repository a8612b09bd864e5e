//! What a run records of the concurrency limits it counts against: the slots it holds
//! or waits for, and where it waits while queued (docs/flow-control.md).

use serde::{Deserialize, Serialize};

/// One concurrency limit a run counts against while it is unfinished: the limit's
/// name, the key it was counted under and the most runs the limit let hold that key
/// when the run started. A run's slots are taken in the order of its
/// [`Run::limits`](crate::Run::limits) (sorted by limit name), so two runs never wait
/// for each other's slots.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct LimitSlot {
    /// The limit's name, as declared on the registry.
    pub limit: String,
    /// The key the run counts under (from its input, given at start, or `""` for a
    /// limit without a key: one count for all).
    pub key: String,
    /// How many unfinished runs may hold the key at once.
    pub max: u32,
}

/// Where a queued run waits: the limit and key whose slot it waits for, and its
/// ticket in that key's line (lower goes first).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueuedAt {
    /// The limit's name.
    pub limit: String,
    /// The key.
    pub key: String,
    /// Its ticket in the key's line: the store hands a freed slot to the lowest.
    pub ticket: u64,
}

/// Why a queued run's start is held back until an instant rather than a slot: a
/// debounce gathering starts, or a start rate whose turn has not come
/// (docs/flow-control.md). Its wake-up is sent for `until`; at or after it the run is
/// released ([`crate::lifecycle::LifecycleEvent::Admit`]) and begins.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldStart {
    /// What holds it.
    pub reason: HoldReason,
    /// When it is released: for a debounce, a period after its last start (at most its
    /// maximum delay after its first); for a rate, its turn.
    pub until: crate::time::Timestamp,
}

/// What holds a queued run's start ([`HeldStart`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HoldReason {
    /// A debounce gathers the starts that share its key into this run.
    Debounce {
        /// The debounce's name.
        name: String,
        /// The key its starts share (`""` for a debounce without one).
        key: String,
        /// When its first start came: it is released at most the debounce's maximum
        /// delay after.
        first_at: crate::time::Timestamp,
        /// How many starts it gathered (for a batch, its input's length).
        starts: u32,
    },
    /// A start rate whose turn for this run is at `until`.
    Rate {
        /// The start rate's name.
        name: String,
        /// The key the run counts under (`""` for a rate without one).
        key: String,
    },
}

impl HoldReason {
    /// `debounce` or `rate`, as the timeline and logs name it.
    pub fn kind(&self) -> &'static str {
        match self {
            HoldReason::Debounce { .. } => "debounce",
            HoldReason::Rate { .. } => "rate",
        }
    }
}
