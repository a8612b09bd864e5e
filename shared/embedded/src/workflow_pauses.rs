//! Workflows' pauses ([`ScheduleStore::get_workflow_pause`]): one row per tenant and
//! workflow, its body the pause's JSON and its version beside it, written like a
//! schedule's state (one savepoint of the writer, conditioned on the version read).

use rusqlite::{OptionalExtension, params};
use siesta::ports::*;
use siesta::*;

use crate::{EmbeddedBackend, from_json, sql, to_json};

/// Schema version 13: workflows' pauses.
pub(crate) const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS workflow_pauses (
    tenant TEXT NOT NULL, workflow TEXT NOT NULL, version INTEGER NOT NULL, body TEXT NOT NULL,
    PRIMARY KEY (tenant, workflow)) WITHOUT ROWID;
";

/// What a file that holds runs needs for version 13: nothing, no workflow is paused yet.
pub(crate) const BACKFILL: &str = "";

impl EmbeddedBackend {
    /// [`ScheduleStore::get_workflow_pause`].
    pub(crate) async fn workflow_pause(
        &self,
        tenant: &TenantId,
        workflow: &str,
    ) -> Result<Option<WorkflowPause>, StoreError> {
        let (tenant, workflow) = (tenant.as_str().to_owned(), workflow.to_owned());
        self.read(move |conn| {
            let row: Option<(i64, String)> = conn
                .prepare_cached(
                    "SELECT version, body FROM workflow_pauses WHERE tenant = ?1 AND workflow = ?2",
                )
                .map_err(sql)?
                .query_row(params![tenant, workflow], |r| Ok((r.get(0)?, r.get(1)?)))
                .optional()
                .map_err(sql)?;
            row.map(|(version, body)| {
                let mut pause: WorkflowPause = from_json(&body)?;
                pause.version = version.max(0) as u64;
                Ok(pause)
            })
            .transpose()
        })
        .await
    }

    /// [`ScheduleStore::put_workflow_pause`].
    pub(crate) async fn write_workflow_pause(
        &self,
        tenant: &TenantId,
        workflow: &str,
        pause: &WorkflowPause,
    ) -> Result<u64, StoreError> {
        let body = to_json(pause)?;
        let expected = pause.version as i64;
        let (tenant, workflow) = (tenant.as_str().to_owned(), workflow.to_owned());
        self.tx_of(tenant.clone(), move |tx, _| {
            let changed = if expected == 0 {
                tx.prepare_cached(
                    "INSERT INTO workflow_pauses (tenant, workflow, version, body) VALUES (?1, ?2, 1, ?3)
                     ON CONFLICT (tenant, workflow) DO NOTHING",
                )
                .map_err(sql)?
                .execute(params![tenant, workflow, body])
                .map_err(sql)?
            } else {
                tx.prepare_cached(
                    "UPDATE workflow_pauses SET version = ?3 + 1, body = ?4
                     WHERE tenant = ?1 AND workflow = ?2 AND version = ?3",
                )
                .map_err(sql)?
                .execute(params![tenant, workflow, expected, body])
                .map_err(sql)?
            };
            if changed == 0 {
                return Err(StoreError::Conflict(None));
            }
            Ok(expected as u64 + 1)
        })
        .await
    }
}
