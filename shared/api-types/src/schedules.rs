//! `GET /schedules` and the operator's actions on one (`POST /schedules/{name}/pause`,
//! `/resume`, `/trigger`): the caller's schedules, each with its next tick
//! (`docs/flow-control.md`, "Schedules").

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::time::Rfc3339;

/// A schedule: a workflow started on a cron pattern in a time zone, declared in the
/// app's code.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ScheduleView {
    /// Its name (`nightly-report`).
    pub name: String,
    /// The workflow each tick starts.
    pub workflow: String,
    /// Its cron pattern (minute, hour, day of month, month, day of week).
    pub cron: String,
    /// The IANA time zone whose wall clock the pattern is read on (`UTC`,
    /// `Europe/Paris`).
    pub timezone: String,
    /// The next tick that will fire; `null` while the schedule is paused.
    pub next: Option<Rfc3339>,
    /// Whether it fires nothing now: paused by an operator, or disabled on this
    /// deployment (`disabled`).
    pub paused: bool,
    /// Disabled on this deployment by its configuration (`--schedules-disabled`);
    /// resuming does not enable it.
    #[serde(default)]
    pub disabled: bool,
    /// The last tick whose run was started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_fired: Option<Rfc3339>,
    /// The run of that tick.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_run_id: Option<String>,
    /// A tick waiting for that run to finish (overlap `buffer_one`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub buffered: Option<Rfc3339>,
    /// What a tick does while the previous tick's run is unfinished: `skip`, `allow`
    /// or `buffer_one`.
    pub overlap: String,
    /// Which ticks missed while nothing was serving still fire: `skip`, `latest` or
    /// `all`.
    pub catch_up: String,
}

/// The caller's schedules, by name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ScheduleList {
    /// Its schedules.
    pub schedules: Vec<ScheduleView>,
}
