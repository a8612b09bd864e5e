//! Removing finished runs past their retention ([`siesta::ports::RunStore::reap_finished`]).
//!
//! Invariants this module keeps, and why:
//! - **Only finished runs.** A run's `finished_at` column is set by the write that
//!   moves it to completed, failed or cancelled (its `updated_at` then) and is `NULL`
//!   otherwise; the removal reads the partial indexes of finished runs alone
//!   (`runs_finished`, `runs_finished_by_workflow`) and checks the status again, so a
//!   pending, running, waiting or parked run is never read, let alone removed,
//!   however old it is.
//! - **Bounded.** One call is one write of the single writer: it seeks the oldest due
//!   runs on the index (at most `limit`) and removes each run's rows by its key, one
//!   index seek per table. Live writes queue behind one page at most, never behind
//!   a backlog of a million finished runs.
//! - **Whole runs or nothing.** The page is one savepoint of the writer's group
//!   commit: a process killed mid-page leaves every run as it was, and the next call
//!   starts from the oldest due run again — there is no other place to lose.
//! - **Every row of the run.** The run (its `Idempotency-Key` is its id), journal,
//!   timeline, deliveries (their ids are the dedup records), stream chunks and keys, callback
//!   and tool-call records (their `run` column, schema version 4), queued wake-ups,
//!   and the artifacts under the run's location. A finished child whose parent still
//!   exists stays: the parent's delivery of its outcome may point at the child's
//!   artifacts.
//! - **The file shrinks.** The file is `auto_vacuum = INCREMENTAL` (schema version 4
//!   switches an older file once, with a `VACUUM`): each page ends with
//!   `PRAGMA incremental_vacuum`, which moves the pages it freed to the end of the
//!   file and cuts them off at the next WAL checkpoint.

use rusqlite::{Connection, params};
use siesta::ports::{ReapedRun, StoreError, artifact_location};
use siesta::{RunId, TenantId};

use crate::sql;

/// Schema version 4: when a finished run finished, the run each callback and tool-call
/// record belongs to, and the indexes the removal seeks on.
pub(crate) const SCHEMA: &str = "
ALTER TABLE runs ADD COLUMN finished_at INTEGER;
ALTER TABLE callbacks ADD COLUMN run INTEGER;
ALTER TABLE tool_calls ADD COLUMN run INTEGER;
CREATE INDEX IF NOT EXISTS runs_finished ON runs (finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS runs_finished_by_workflow ON runs (workflow, finished_at)
    WHERE finished_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS callbacks_by_run ON callbacks (run) WHERE run IS NOT NULL;
CREATE INDEX IF NOT EXISTS tool_calls_by_run ON tool_calls (run) WHERE run IS NOT NULL;
";

/// What a file that holds runs needs for version 4: its finished runs' finish time
/// (their last change), and its records' runs, read from their bodies.
pub(crate) const BACKFILL: &str = "
UPDATE runs SET finished_at = json_extract(body, '$.updated_at')
 WHERE status IN ('completed', 'failed', 'cancelled');
UPDATE callbacks SET run = (SELECT key FROM runs
    WHERE runs.tenant = json_extract(callbacks.body, '$.tenant')
      AND runs.run_id = json_extract(callbacks.body, '$.run_id'));
UPDATE tool_calls SET run = (SELECT key FROM runs
    WHERE runs.tenant = tool_calls.tenant
      AND runs.run_id = json_extract(tool_calls.body, '$.run_id'));
";

/// The finish time a run's `finished_at` column holds: its last change once finished.
pub(crate) fn finished_at(run: &siesta::Run) -> Option<i64> {
    run.status.is_finished().then_some(run.updated_at.0)
}

/// A finished run whose parent (if any) is gone: `runs` is the candidate.
const PARENT_GONE: &str = "NOT EXISTS (SELECT 1 FROM runs AS parent
    WHERE parent.tenant = runs.tenant AND parent.run_id = json_extract(runs.body, '$.parent.run_id'))";

/// The oldest due runs of any workflow (`?1`: finished at or before, `?2`: how many).
fn due_any() -> String {
    format!(
        "SELECT key, tenant, run_id, workflow FROM runs INDEXED BY runs_finished
          WHERE finished_at IS NOT NULL AND finished_at <= ?1
            AND status IN ('completed', 'failed', 'cancelled') AND {PARENT_GONE}
          ORDER BY finished_at LIMIT ?2"
    )
}

/// [`due_any`] of the workflow `?3`.
fn due_of_workflow() -> String {
    format!(
        "SELECT key, tenant, run_id, workflow FROM runs INDEXED BY runs_finished_by_workflow
          WHERE workflow = ?3 AND finished_at IS NOT NULL AND finished_at <= ?1
            AND status IN ('completed', 'failed', 'cancelled') AND {PARENT_GONE}
          ORDER BY finished_at LIMIT ?2"
    )
}

/// The rows of a run in the tables keyed by its key (`?1`).
const BY_KEY: &[&str] = &[
    "DELETE FROM journal WHERE run = ?1",
    "DELETE FROM timeline WHERE run = ?1",
    "DELETE FROM deliveries WHERE run = ?1",
    "DELETE FROM stream_chunks WHERE run = ?1",
    "DELETE FROM stream_keys WHERE run = ?1",
    "DELETE FROM callbacks WHERE run = ?1",
    "DELETE FROM tool_calls WHERE run = ?1",
];

/// Remove the oldest (at most `limit`) finished runs that finished at or before
/// `before`, of `workflow` when given, with all their rows; then give the freed pages
/// back to the file system. Inside one savepoint of the writer.
pub(crate) fn reap(
    tx: &Connection,
    workflow: Option<&str>,
    before: i64,
    limit: usize,
) -> Result<Vec<ReapedRun>, StoreError> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let due: Vec<(i64, String, String, String)> = match workflow {
        None => tx
            .prepare_cached(&due_any())
            .map_err(sql)?
            .query_map(params![before, limit], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
            })
            .map_err(sql)?
            .collect::<Result<_, _>>(),
        Some(workflow) => tx
            .prepare_cached(&due_of_workflow())
            .map_err(sql)?
            .query_map(params![before, limit, workflow], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
            })
            .map_err(sql)?
            .collect::<Result<_, _>>(),
    }
    .map_err(sql)?;
    let mut removed = Vec::with_capacity(due.len());
    for (key, tenant, run_id, workflow) in due {
        for statement in BY_KEY {
            tx.prepare_cached(statement)
                .map_err(sql)?
                .execute(params![key])
                .map_err(sql)?;
        }
        tx.prepare_cached("DELETE FROM wake_queue WHERE tenant = ?1 AND run_id = ?2")
            .map_err(sql)?
            .execute(params![tenant, run_id])
            .map_err(sql)?;
        let (tenant, run_id) = (TenantId(tenant), RunId(run_id));
        // Every location under the run is `<prefix><sha256>`; `0` follows `/`.
        let prefix = artifact_location(&tenant, &run_id, "");
        let end = format!("{}0", &prefix[..prefix.len() - 1]);
        tx.prepare_cached("DELETE FROM artifacts WHERE location >= ?1 AND location < ?2")
            .map_err(sql)?
            .execute(params![prefix, end])
            .map_err(sql)?;
        tx.prepare_cached("DELETE FROM runs WHERE key = ?1")
            .map_err(sql)?
            .execute(params![key])
            .map_err(sql)?;
        removed.push(ReapedRun {
            tenant,
            run_id,
            workflow,
        });
    }
    if !removed.is_empty() {
        // The pragma frees one page per step of its statement: step it to the end.
        let mut vacuum = tx
            .prepare_cached("PRAGMA incremental_vacuum")
            .map_err(sql)?;
        let mut steps = vacuum.raw_query();
        while steps.next().map_err(sql)?.is_some() {}
    }
    Ok(removed)
}
