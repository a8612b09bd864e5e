//! Schedules' states ([`ScheduleStore`]) on the table: a `GetItem` to read one, a
//! conditional `PutItem` to write it (the plan is `layout/schedules.rs`'s).

use async_trait::async_trait;
use siesta::ports::*;
use siesta::*;

use super::DynamoStore;
use crate::layout::{
    schedule_key, schedule_state_of, schedule_state_write, workflow_pause_key, workflow_pause_of,
    workflow_pause_write,
};

#[async_trait]
impl ScheduleStore for DynamoStore {
    async fn get_schedule_state(
        &self,
        tenant: &TenantId,
        name: &str,
    ) -> Result<Option<ScheduleState>, StoreError> {
        self.get_item("get_schedule_state", schedule_key(tenant, name))
            .await?
            .map(|item| schedule_state_of(&item))
            .transpose()
    }

    async fn put_schedule_state(
        &self,
        tenant: &TenantId,
        name: &str,
        state: &ScheduleState,
    ) -> Result<u64, StoreError> {
        let write = schedule_state_write(tenant, name, state)?;
        if self.put_plain("put_schedule_state", &write).await? {
            Ok(state.version + 1)
        } else {
            Err(StoreError::Conflict(None))
        }
    }

    async fn get_workflow_pause(
        &self,
        tenant: &TenantId,
        workflow: &str,
    ) -> Result<Option<WorkflowPause>, StoreError> {
        self.get_item("get_workflow_pause", workflow_pause_key(tenant, workflow))
            .await?
            .map(|item| workflow_pause_of(&item))
            .transpose()
    }

    async fn put_workflow_pause(
        &self,
        tenant: &TenantId,
        workflow: &str,
        pause: &WorkflowPause,
    ) -> Result<u64, StoreError> {
        let write = workflow_pause_write(tenant, workflow, pause)?;
        if self.put_plain("put_workflow_pause", &write).await? {
            Ok(pause.version + 1)
        } else {
            Err(StoreError::Conflict(None))
        }
    }
}
