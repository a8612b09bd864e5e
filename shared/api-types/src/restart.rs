//! `POST /runs/{id}/restart`: what it takes, and what a run's view says of its
//! restarts (docs/operations.md, "Restart from a step").

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::time::Rfc3339;

/// The body of `POST /runs/{id}/restart`; none (or `{}`) restarts the run in place from
/// the first operation that failed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RestartBody {
    /// The position to go on from (an operation's timeline `Id`, e.g. `notify_team#0` or
    /// `pay#0/charge#1`); default: the first operation that failed, else where the run
    /// stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// Restart as a new run forked from this one (answered `201` with the fork), rather
    /// than in place.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub as_new: bool,
    /// Make the tool calls after the point again (with the same idempotency keys)
    /// rather than answer them from their recorded outcome.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub repeat_tool_calls: bool,
}

/// A run's latest restart from a step, or the fork made of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct RestartView {
    /// How many restarts the run has had.
    pub number: u32,
    /// The position it went on from; absent: from where it stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// Who restarted it.
    pub by: String,
    /// When.
    pub at: Rfc3339,
    /// Tool calls after the point were made again.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub repeat_tool_calls: bool,
    /// On a fork: the run it was forked from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forked_from: Option<String>,
    /// On the run a fork was made of: the fork.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fork: Option<String>,
}

impl From<&siesta::RestartMark> for RestartView {
    fn from(mark: &siesta::RestartMark) -> Self {
        RestartView {
            number: mark.number,
            from: mark.from.as_ref().map(|p| p.to_string()),
            by: mark.by.clone(),
            at: mark.at.into(),
            repeat_tool_calls: mark.repeat_tool_calls,
            forked_from: mark.forked_from.as_ref().map(|id| id.to_string()),
            fork: mark.fork.as_ref().map(|id| id.to_string()),
        }
    }
}
