//! The schedule store: what the sweep remembers of each schedule between ticks.

use super::*;

/// A schedule's state: whether an operator paused it, and which ticks were dealt
/// with. Its declaration (pattern, zone, policies) is code, in the registry; only this
/// is stored, per tenant and schedule name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScheduleState {
    /// Paused by an operator: it fires nothing until resumed.
    #[serde(default)]
    pub paused: bool,
    /// Every tick at or before this instant has been dealt with: fired, skipped,
    /// buffered, or dropped as missed or paused.
    pub through: Timestamp,
    /// The last tick whose run was started (its run's id is derived from it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_fired: Option<Timestamp>,
    /// A tick waiting for the run of `last_fired` to finish
    /// ([`Overlap::BufferOne`](crate::schedule::Overlap::BufferOne)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub buffered: Option<Timestamp>,
    /// The stored state's version: 0 for a state not stored yet; each write adds one.
    /// Not part of the stored body (the store keeps it beside it).
    #[serde(skip)]
    pub version: u64,
}

impl Default for ScheduleState {
    /// Not paused, nothing dealt with (`through` the epoch), not stored.
    fn default() -> Self {
        ScheduleState {
            paused: false,
            through: Timestamp(0),
            last_fired: None,
            buffered: None,
            version: 0,
        }
    }
}

/// What a paused workflow does with a new start (docs/operations.md, "Pause a
/// workflow").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PausedStarts {
    /// Accepted and created `paused`: it begins when the workflow is resumed.
    #[default]
    Queue,
    /// Refused (`409 workflow_paused`); a schedule's tick is skipped.
    Refuse,
}

/// A workflow's pause, per tenant: while `paused`, its runs are held (a bulk pause
/// holds those that exist) and its new starts are queued or refused. Kept beside the
/// schedules' states, written on its version like them; a resume writes `paused:
/// false` rather than removing it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkflowPause {
    /// Paused now.
    pub paused: bool,
    /// What new starts get while paused.
    #[serde(default)]
    pub starts: PausedStarts,
    /// Who paused or last resumed it.
    pub by: String,
    /// When.
    pub at: Timestamp,
    /// The stored record's version: 0 for one not stored yet. Not part of the stored
    /// body (the store keeps it beside it).
    #[serde(skip)]
    pub version: u64,
}

/// Where schedules' states are kept: one small record per tenant and schedule, written
/// with a condition on its version (on DynamoDB, one conditional `PutItem`). Workflows'
/// pauses are kept the same way, one record per tenant and workflow.
#[async_trait]
pub trait ScheduleStore: Send + Sync {
    /// The state of `tenant`'s schedule `name`, with its version; `None` if none was
    /// ever stored.
    async fn get_schedule_state(
        &self,
        tenant: &TenantId,
        name: &str,
    ) -> Result<Option<ScheduleState>, StoreError>;

    /// Store `state` as the state of `tenant`'s schedule `name`, if the stored one is
    /// at `state.version` (0: none stored); answers the version written
    /// (`state.version + 1`). [`StoreError::Conflict`] (with no run) if another write
    /// came first: read it again.
    async fn put_schedule_state(
        &self,
        tenant: &TenantId,
        name: &str,
        state: &ScheduleState,
    ) -> Result<u64, StoreError>;

    /// The pause of `tenant`'s workflow `workflow`, with its version; `None` if none was
    /// ever stored. [`StoreError::Unsupported`] from a store without pauses.
    async fn get_workflow_pause(
        &self,
        _tenant: &TenantId,
        _workflow: &str,
    ) -> Result<Option<WorkflowPause>, StoreError> {
        Err(StoreError::Unsupported("workflow pauses".into()))
    }

    /// Store `pause` for `tenant`'s workflow `workflow`, if the stored one is at
    /// `pause.version` (0: none stored); answers the version written. [`StoreError::
    /// Conflict`] (with no run) if another write came first.
    async fn put_workflow_pause(
        &self,
        _tenant: &TenantId,
        _workflow: &str,
        _pause: &WorkflowPause,
    ) -> Result<u64, StoreError> {
        Err(StoreError::Unsupported("workflow pauses".into()))
    }
}

/// A schedule store that keeps nothing: every call answers
/// [`StoreError::Unsupported`]. For a backend without schedules, so that the engine's
/// other work goes on (its sweep logs the error and wakes due runs as before).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoSchedules;

#[async_trait]
impl ScheduleStore for NoSchedules {
    async fn get_schedule_state(
        &self,
        _: &TenantId,
        _: &str,
    ) -> Result<Option<ScheduleState>, StoreError> {
        Err(StoreError::Unsupported("schedules".into()))
    }

    async fn put_schedule_state(
        &self,
        _: &TenantId,
        _: &str,
        _: &ScheduleState,
    ) -> Result<u64, StoreError> {
        Err(StoreError::Unsupported("schedules".into()))
    }
}
