//! Removing finished runs past their retention ([`siesta::ports::RunStore::reap_due`]).
//!
//! Invariants this module keeps, and why:
//! - **Only finished runs.** A run's `finished_at` and `reap_at` columns are set by
//!   the write that moves it to completed, failed or cancelled (its `updated_at` then)
//!   and are `NULL` otherwise; the removal reads the partial index of runs with a
//!   `reap_at` alone (`runs_reap`) and checks the status again, so a pending, running,
//!   waiting or parked run is never read, let alone removed, however old it is.
//! - **Each run looked at when it is due, and not before.** `reap_at` is when the
//!   reaper next looks at a finished run. The write that finishes it sets it to the
//!   end of its own retention ([`siesta::RetentionRules::verdict`]: its workflow's, its
//!   tenant's or the deployment's) under the rules the store was last given
//!   ([`ReapSchedule`], set by [`rearm`]), so the reaper reads it once, when it goes; a
//!   run kept for ever is never due. Before any rules were given (a file just opened),
//!   it is due at its finish and put back at its end by the first pass that reads it.
//!   The reaper still decides by the rules it is given when it reaches a run, and new
//!   rules (a restart with another `--retention`) make every run not yet due due once
//!   more ([`rearm`]). So a tenant or workflow kept longer than the rest is not read again
//!   each pass, and the passes cost what is due, not what is kept.
//! - **Bounded.** One call is one write of the single writer: it seeks the earliest
//!   due runs on the index (at most `limit`) and removes each run's rows by its key,
//!   one index seek per table. Live writes queue behind one page at most, never behind
//!   a backlog of a million finished runs.
//! - **Whole runs or nothing.** The page is one savepoint of the writer's group
//!   commit: a process killed mid-page leaves every run as it was, and the next call
//!   starts from the earliest due run again — there is no other place to lose.
//! - **Every row of the run.** The run (its `Idempotency-Key` is its id), journal,
//!   timeline, deliveries (their ids are the dedup records), stream chunks and keys, callback
//!   and tool-call records (their `run` column, schema version 4), queued wake-ups,
//!   and the artifacts under the run's location. A finished child whose parent still
//!   exists stays (looked at again at [`parent_recheck_at`]): the parent's delivery of
//!   its outcome may point at the child's artifacts.
//! - **The file shrinks.** The file is `auto_vacuum = INCREMENTAL` (schema version 4
//!   switches an older file once, with a `VACUUM`): each page ends with
//!   `PRAGMA incremental_vacuum`, which moves the pages it freed to the end of the
//!   file and cuts them off at the next WAL checkpoint.

use std::sync::{Arc, RwLock};

use rusqlite::{Connection, params};
use siesta::ports::{ReapedRun, StoreError, artifact_location};
use siesta::retention::{ReapReport, parent_recheck_at};
use siesta::{RetentionRules, RunId, TenantId, Timestamp, Verdict};

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

/// The rules the store was last given ([`siesta::ports::RunStore::rearm_reaping`]),
/// by which the write that finishes a run sets when the reaper first looks at it.
/// Shared by every write of one backend; empty until the first rearm (the rules are
/// stored as text only, to compare, so a reopened file knows none).
#[derive(Clone, Default)]
pub(crate) struct ReapSchedule(Arc<RwLock<Option<RetentionRules>>>);

impl ReapSchedule {
    /// Schedule the runs finished from now on by `rules` (`None`: at their finish).
    pub(crate) fn set(&self, rules: Option<RetentionRules>) {
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = rules;
    }

    /// The `reap_at` column of `run` as a write stores it: `NULL` while it is not
    /// finished; once finished, the end of its own retention under the rules last
    /// given — the time the reaper would put it back to if it looked at its finish,
    /// so it is read once, when it goes ([`NEVER`] if kept for ever) — or its finish
    /// when no rules were given yet.
    pub(crate) fn reap_at(&self, run: &siesta::Run) -> Option<i64> {
        let finished = finished_at(run)?;
        let rules = self.0.read().unwrap_or_else(|e| e.into_inner());
        let Some(rules) = rules.as_ref() else {
            return Some(finished);
        };
        let at = Timestamp(finished);
        Some(match rules.verdict(&run.tenant, &run.workflow, at, at) {
            Verdict::KeepForEver => NEVER,
            Verdict::LookAgainAt(end) => end.0,
            // No retention at all: due at once.
            Verdict::Remove => finished,
        })
    }
}

/// Schema version 5: when the reaper next looks at a finished run, on an index of its
/// own, and the rules it last reaped by; the indexes of version 4 that sought finished runs by finish time go (a run
/// kept longer than the rest was walked over by every pass).
pub(crate) const REAP_SCHEMA: &str = "
ALTER TABLE runs ADD COLUMN reap_at INTEGER;
CREATE INDEX IF NOT EXISTS runs_reap ON runs (reap_at) WHERE reap_at IS NOT NULL;
CREATE TABLE IF NOT EXISTS reap_rules (id INTEGER PRIMARY KEY CHECK (id = 0), rules TEXT NOT NULL);
DROP INDEX IF EXISTS runs_finished;
DROP INDEX IF EXISTS runs_finished_by_workflow;
";

/// What a file that holds finished runs needs for version 5: each looked at once more.
pub(crate) const REAP_BACKFILL: &str =
    "UPDATE runs SET reap_at = finished_at WHERE finished_at IS NOT NULL";

/// The earliest runs due to be looked at (`?1`: now, `?2`: how many), with, if their
/// parent still exists, when it is due to be looked at itself (0: not finished). The
/// parent is the run under its id if the link records no creation time or the run was
/// created then — a later one is a new run under a reused id (an `Idempotency-Key`
/// replayed after the parent was removed), as [`siesta::ParentLink::names`] says.
const DUE: &str = "SELECT key, tenant, run_id, workflow, finished_at, status,
        (SELECT coalesce(parent.reap_at, 0) FROM runs AS parent
          WHERE parent.tenant = runs.tenant
            AND parent.run_id = json_extract(runs.body, '$.parent.run_id')
            AND coalesce(json_extract(runs.body, '$.parent.created_at'),
                         parent.created_at) = parent.created_at) AS parent_due
   FROM runs INDEXED BY runs_reap
  WHERE reap_at IS NOT NULL AND reap_at <= ?1
  ORDER BY reap_at LIMIT ?2";

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

/// Put a run back: looked at next at `?2` ([`NEVER`]: kept for ever; `NULL`: not
/// finished).
const PUT_BACK: &str = "UPDATE runs SET reap_at = ?2 WHERE key = ?1";

/// A run kept for ever stays in the index, never due, so that new rules can bring it
/// back ([`rearm`]).
const NEVER: i64 = i64::MAX;

/// [`siesta::ports::RunStore::rearm_reaping`]: when `rules` (their text) differ from
/// the last ones, every run not due yet (put back, or scheduled at its finish by the
/// last rules) is due at `now`. Bounded by what is kept, and only when the rules change.
pub(crate) fn rearm(tx: &Connection, rules: &str, now: Timestamp) -> Result<(), StoreError> {
    use rusqlite::OptionalExtension;
    let last: Option<String> = tx
        .prepare_cached("SELECT rules FROM reap_rules WHERE id = 0")
        .map_err(sql)?
        .query_row([], |r| r.get(0))
        .optional()
        .map_err(sql)?;
    if last.as_deref() == Some(rules) {
        return Ok(());
    }
    tx.prepare_cached("UPDATE runs SET reap_at = ?1 WHERE reap_at > ?1")
        .map_err(sql)?
        .execute(params![now.0])
        .map_err(sql)?;
    tx.prepare_cached("INSERT OR REPLACE INTO reap_rules (id, rules) VALUES (0, ?1)")
        .map_err(sql)?
        .execute(params![rules])
        .map_err(sql)?;
    Ok(())
}

/// Look at the earliest (at most `limit`) finished runs due at `now`: remove those past
/// their retention under `rules` with all their rows, put the rest back; then give the
/// freed pages back to the file system. Inside one savepoint of the writer.
pub(crate) fn reap(
    tx: &Connection,
    rules: &RetentionRules,
    now: Timestamp,
    limit: usize,
) -> Result<ReapReport, StoreError> {
    let page = i64::try_from(limit).unwrap_or(i64::MAX);
    type Row = (
        i64,
        String,
        String,
        String,
        Option<i64>,
        String,
        Option<i64>,
    );
    let due: Vec<Row> = tx
        .prepare_cached(DUE)
        .map_err(sql)?
        .query_map(params![now.0, page], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
                r.get(6)?,
            ))
        })
        .map_err(sql)?
        .collect::<Result<_, _>>()
        .map_err(sql)?;
    let mut report = ReapReport {
        more: due.len() >= limit,
        ..ReapReport::default()
    };
    for (key, tenant, run_id, workflow, finished_at, status, parent_due) in due {
        let tenant = TenantId(tenant);
        let finished = ["completed", "failed", "cancelled"].contains(&status.as_str());
        let next = match finished_at {
            Some(at) if finished => match rules.verdict(&tenant, &workflow, Timestamp(at), now) {
                Verdict::KeepForEver => Some(NEVER),
                Verdict::LookAgainAt(end) => Some(end.0),
                Verdict::Remove => match parent_due {
                    Some(parent_due) => Some(parent_recheck_at(now, Some(parent_due))),
                    None => {
                        remove(tx, key, &tenant, &run_id)?;
                        report.removed.push(ReapedRun {
                            tenant,
                            run_id: RunId(run_id),
                            workflow,
                        });
                        continue;
                    }
                },
            },
            // Not finished (a status write always clears it; kept for safety): out.
            _ => None,
        };
        tx.prepare_cached(PUT_BACK)
            .map_err(sql)?
            .execute(params![key, next])
            .map_err(sql)?;
        report.put_back += 1;
    }
    if !report.removed.is_empty() {
        // The pragma frees one page per step of its statement: step it to the end.
        let mut vacuum = tx
            .prepare_cached("PRAGMA incremental_vacuum")
            .map_err(sql)?;
        let mut steps = vacuum.raw_query();
        while steps.next().map_err(sql)?.is_some() {}
    }
    Ok(report)
}

/// Remove the run stored under `key` with every row and artifact that is its own.
fn remove(tx: &Connection, key: i64, tenant: &TenantId, run_id: &str) -> Result<(), StoreError> {
    for statement in BY_KEY {
        tx.prepare_cached(statement)
            .map_err(sql)?
            .execute(params![key])
            .map_err(sql)?;
    }
    tx.prepare_cached("DELETE FROM wake_queue WHERE tenant = ?1 AND run_id = ?2")
        .map_err(sql)?
        .execute(params![tenant.0, run_id])
        .map_err(sql)?;
    // Every location under the run is `<prefix><sha256>`; `0` follows `/`.
    let prefix = artifact_location(tenant, &RunId(run_id.to_owned()), "");
    let end = format!("{}0", &prefix[..prefix.len() - 1]);
    tx.prepare_cached("DELETE FROM artifacts WHERE location >= ?1 AND location < ?2")
        .map_err(sql)?
        .execute(params![prefix, end])
        .map_err(sql)?;
    tx.prepare_cached("DELETE FROM runs WHERE key = ?1")
        .map_err(sql)?
        .execute(params![key])
        .map_err(sql)?;
    Ok(())
}
