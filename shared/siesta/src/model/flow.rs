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
