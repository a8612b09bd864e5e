//! Schedules' states ([`ScheduleStore`]): one row per tenant and schedule, its body the
//! state's JSON and its version beside it. A write is one savepoint of the writer,
//! conditioned on the version read, as DynamoDB's conditional put would be; durable
//! like every other write.

use async_trait::async_trait;
use rusqlite::{OptionalExtension, params};
use siesta::ports::*;
use siesta::*;

use crate::{EmbeddedBackend, from_json, sql, to_json};

/// Schema version 10: schedules' states.
pub(crate) const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS schedules (
    tenant TEXT NOT NULL, name TEXT NOT NULL, version INTEGER NOT NULL, body TEXT NOT NULL,
    PRIMARY KEY (tenant, name)) WITHOUT ROWID;
";

/// What a file that holds runs needs for version 10: nothing, no schedule has a state yet.
pub(crate) const BACKFILL: &str = "";

#[async_trait]
impl ScheduleStore for EmbeddedBackend {
    async fn get_schedule_state(
        &self,
        tenant: &TenantId,
        name: &str,
    ) -> Result<Option<ScheduleState>, StoreError> {
        let (tenant, name) = (tenant.as_str().to_owned(), name.to_owned());
        self.read(move |conn| {
            let row: Option<(i64, String)> = conn
                .prepare_cached(
                    "SELECT version, body FROM schedules WHERE tenant = ?1 AND name = ?2",
                )
                .map_err(sql)?
                .query_row(params![tenant, name], |r| Ok((r.get(0)?, r.get(1)?)))
                .optional()
                .map_err(sql)?;
            row.map(|(version, body)| {
                let mut state: ScheduleState = from_json(&body)?;
                state.version = version.max(0) as u64;
                Ok(state)
            })
            .transpose()
        })
        .await
    }

    async fn put_schedule_state(
        &self,
        tenant: &TenantId,
        name: &str,
        state: &ScheduleState,
    ) -> Result<u64, StoreError> {
        let body = to_json(state)?;
        let expected = state.version as i64;
        let (tenant, name) = (tenant.as_str().to_owned(), name.to_owned());
        self.tx_of(tenant.clone(), move |tx, _| {
            let changed = if expected == 0 {
                tx.prepare_cached(
                    "INSERT INTO schedules (tenant, name, version, body) VALUES (?1, ?2, 1, ?3)
                     ON CONFLICT (tenant, name) DO NOTHING",
                )
                .map_err(sql)?
                .execute(params![tenant, name, body])
                .map_err(sql)?
            } else {
                tx.prepare_cached(
                    "UPDATE schedules SET version = ?3 + 1, body = ?4
                     WHERE tenant = ?1 AND name = ?2 AND version = ?3",
                )
                .map_err(sql)?
                .execute(params![tenant, name, expected, body])
                .map_err(sql)?
            };
            if changed == 0 {
                return Err(StoreError::Conflict(None));
            }
            Ok(expected as u64 + 1)
        })
        .await
    }

    async fn get_workflow_pause(
        &self,
        tenant: &TenantId,
        workflow: &str,
    ) -> Result<Option<WorkflowPause>, StoreError> {
        self.workflow_pause(tenant, workflow).await
    }

    async fn put_workflow_pause(
        &self,
        tenant: &TenantId,
        workflow: &str,
        pause: &WorkflowPause,
    ) -> Result<u64, StoreError> {
        self.write_workflow_pause(tenant, workflow, pause).await
    }
}
