//! Bulk actions' jobs ([`RunStore::put_action_job`](siesta::ports::RunStore)): one row
//! per tenant and job, its record as JSON and its version beside it, written on the
//! version read as DynamoDB's conditional put would be. A partial index of the running
//! ones is the deployment's list of active jobs the sweep reads. A finished job is kept
//! until its `keep_until` ([`ActionJob::keep_until`]); the writes after it drop it.

use rusqlite::{Connection, OptionalExtension, params};
use siesta::ports::StoreError;
use siesta::*;

use crate::{from_json, sql, to_json};

/// Schema version 12: bulk actions' jobs.
pub(crate) const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS action_jobs (
    tenant TEXT NOT NULL, id TEXT NOT NULL, version INTEGER NOT NULL,
    status TEXT NOT NULL, body TEXT NOT NULL,
    PRIMARY KEY (tenant, id)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS action_jobs_active ON action_jobs (status, tenant, id)
    WHERE status = 'running';
";

/// What a file that holds runs needs for version 12: nothing, no job exists yet.
pub(crate) const BACKFILL: &str = "";

/// Schema version 14: until when a finished job is kept.
pub(crate) const KEEP_SCHEMA: &str = "
ALTER TABLE action_jobs ADD COLUMN keep_until INTEGER;
CREATE INDEX IF NOT EXISTS action_jobs_by_keep_until ON action_jobs (keep_until)
    WHERE keep_until IS NOT NULL;
";

/// What a file with jobs needs for version 14: its finished jobs kept as long after
/// their last write as the ones finished from now on (30 days, in ms).
pub(crate) const KEEP_BACKFILL: &str = "
UPDATE action_jobs SET keep_until = json_extract(body, '$.updated_at') + 2592000000
    WHERE status != 'running';
";

/// How many forgotten jobs one write drops at most (the rest go with later writes).
const DROPPED_PER_WRITE: i64 = 16;

/// The job read from a row's version and body.
fn job_of(version: i64, body: &str) -> Result<ActionJob, StoreError> {
    let mut job: ActionJob = from_json(body)?;
    job.version = version.max(0) as u64;
    Ok(job)
}

/// `tenant`'s job `id`.
pub(crate) fn get(
    conn: &Connection,
    tenant: &str,
    id: &str,
) -> Result<Option<ActionJob>, StoreError> {
    conn.prepare_cached("SELECT version, body FROM action_jobs WHERE tenant = ?1 AND id = ?2")
        .map_err(sql)?
        .query_row(params![tenant, id], |r| {
            Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?))
        })
        .optional()
        .map_err(sql)?
        .map(|(version, body)| job_of(version, &body))
        .transpose()
}

/// `tenant`'s jobs, newest first (ids are time-ordered), at most `limit`.
pub(crate) fn list(
    conn: &Connection,
    tenant: &str,
    limit: usize,
) -> Result<Vec<ActionJob>, StoreError> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT version, body FROM action_jobs WHERE tenant = ?1 ORDER BY id DESC LIMIT ?2",
        )
        .map_err(sql)?;
    let rows = stmt
        .query_map(params![tenant, limit as i64], |r| {
            Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?))
        })
        .map_err(sql)?;
    rows.map(|row| {
        let (version, body) = row.map_err(sql)?;
        job_of(version, &body)
    })
    .collect()
}

/// The running jobs of every tenant, at most `limit`.
pub(crate) fn active(conn: &Connection, limit: usize) -> Result<Vec<ActiveActionJob>, StoreError> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT tenant, id FROM action_jobs INDEXED BY action_jobs_active
             WHERE status = 'running' ORDER BY tenant, id LIMIT ?1",
        )
        .map_err(sql)?;
    let rows = stmt
        .query_map(params![limit as i64], |r| {
            Ok(ActiveActionJob {
                tenant: TenantId(r.get(0)?),
                id: r.get(1)?,
            })
        })
        .map_err(sql)?;
    rows.map(|row| row.map_err(sql)).collect()
}

/// Write `job` if its stored version is `expected` (0: none); the version written.
/// Jobs past their `keep_until` at `now` are dropped, a few at a time.
pub(crate) fn put(
    tx: &Connection,
    job: &ActionJob,
    expected: u64,
    now: Timestamp,
) -> Result<u64, StoreError> {
    tx.prepare_cached(
        "DELETE FROM action_jobs WHERE (tenant, id) IN
         (SELECT tenant, id FROM action_jobs WHERE keep_until < ?1 LIMIT ?2)",
    )
    .map_err(sql)?
    .execute(params![now.0, DROPPED_PER_WRITE])
    .map_err(sql)?;
    let body = to_json(job)?;
    let (tenant, id, status) = (job.tenant.as_str(), job.id.as_str(), job.status.as_str());
    let keep_until = job.keep_until().map(|t| t.0);
    let changed = if expected == 0 {
        tx.prepare_cached(
            "INSERT INTO action_jobs (tenant, id, version, status, body, keep_until)
             VALUES (?1, ?2, 1, ?3, ?4, ?5) ON CONFLICT (tenant, id) DO NOTHING",
        )
        .map_err(sql)?
        .execute(params![tenant, id, status, body, keep_until])
        .map_err(sql)?
    } else {
        tx.prepare_cached(
            "UPDATE action_jobs SET version = ?3 + 1, status = ?4, body = ?5, keep_until = ?6
             WHERE tenant = ?1 AND id = ?2 AND version = ?3",
        )
        .map_err(sql)?
        .execute(params![
            tenant,
            id,
            expected as i64,
            status,
            body,
            keep_until
        ])
        .map_err(sql)?
    };
    if changed == 0 {
        return Err(StoreError::Conflict(None));
    }
    Ok(expected + 1)
}
