//! Concurrency limits as they stand: what `GET /limits` answers.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Every concurrency limit of the deployment, with the caller's keys in use.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct LimitList {
    /// By name.
    pub limits: Vec<LimitView>,
}

/// One concurrency limit (docs/flow-control.md).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct LimitView {
    /// Its name, as declared in code.
    pub name: String,
    /// What holds a slot: `runs` (an unfinished run, from its start to its finish).
    pub scope: String,
    /// The most holders per key on this deployment; left out for a limit no longer
    /// declared whose slots runs still hold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<u32>,
    /// Where the key comes from: `input:<JSON pointer>`, `given` (at start) or `none`
    /// (one count for all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// The workflows it applies to.
    pub workflows: Vec<String>,
    /// Each key held or waited for by the caller's runs, by key; a key no run holds
    /// or waits for is left out.
    pub keys: Vec<LimitKeyView>,
}

/// One key of a limit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct LimitKeyView {
    /// The key (`""` for a limit without one).
    pub key: String,
    /// Runs holding a slot.
    pub holders: u64,
    /// Runs queued for one.
    pub waiters: u64,
}
