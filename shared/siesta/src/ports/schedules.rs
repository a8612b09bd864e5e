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

/// Where schedules' states are kept: one small record per tenant and schedule, written
/// with a condition on its version (on DynamoDB, one conditional `PutItem`).
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
