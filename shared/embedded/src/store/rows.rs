//! The rows every write shares: a run read by its key, inserted, rewritten (setting only
//! the indexed columns that changed), and its timeline appended to.

use rusqlite::{Connection, OptionalExtension, params};
use siesta::ports::*;
use siesta::*;

use crate::retention::ReapSchedule;
use crate::{builds, is_constraint, retention, sql, stored};

/// A run and its key by tenant and run id; the columns after the key are those
/// [`stored::RunRow::read`] reads.
const GET_RUN: &str = "SELECT key, tenant, run_id, status, workflow, created_at, due_at, body
    FROM runs WHERE tenant = ?1 AND run_id = ?2";

pub(crate) fn get_run(
    tx: &Connection,
    tenant: &str,
    run_id: &str,
) -> Result<Option<Run>, StoreError> {
    Ok(get_keyed_run(tx, tenant, run_id)?.map(|(_, run)| run))
}

/// The stored run and its key (the rowid its own rows are stored under).
pub(crate) fn get_keyed_run(
    tx: &Connection,
    tenant: &str,
    run_id: &str,
) -> Result<Option<(i64, Run)>, StoreError> {
    let row: Option<(i64, stored::RunRow)> = tx
        .prepare_cached(GET_RUN)
        .map_err(sql)?
        .query_row(params![tenant, run_id], |r| {
            Ok((r.get(0)?, stored::RunRow::read(r, 1)?))
        })
        .optional()
        .map_err(sql)?;
    row.map(|(key, row)| Ok((key, row.run()?))).transpose()
}

/// Insert `run`, its `reap_at` by `reaping`; its key.
pub(super) fn put_run(
    tx: &Connection,
    run: &Run,
    reaping: &ReapSchedule,
) -> Result<i64, StoreError> {
    tx.prepare_cached(
        "INSERT INTO runs (tenant, run_id, status, workflow, created_at, due_at, body, sweep_at, build, finished_at, reap_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
    )
    .map_err(sql)?
    .execute(params![run.tenant.0, run.id.0, run.status.as_str(), run.workflow, run.created_at.0, run.due_at.map(|d| d.0), stored::run_body(run)?, run.sweep_at().map(|d| d.0), run.build_id, retention::finished_at(run), reaping.reap_at(run)])
    .map_err(sql)?;
    Ok(tx.last_insert_rowid())
}

/// The indexed columns of a stored run that change over its life.
#[derive(Clone)]
pub(crate) struct Indexed {
    status: RunStatus,
    due_at: Option<Timestamp>,
    sweep_at: Option<Timestamp>,
    /// Changes only when the run is upgraded to another build.
    build: Option<String>,
}

impl Indexed {
    pub(crate) fn of(run: &Run) -> Self {
        Indexed {
            status: run.status,
            due_at: run.due_at,
            sweep_at: run.sweep_at(),
            build: run.build_id.clone(),
        }
    }
}

/// Rewrite the stored run, whose indexed columns are `old`, as `run`. Only the columns that changed are set:
/// SQLite rewrites the index entries of every column an `UPDATE` sets, and a run's
/// status and due time change far less often than its body (a checkpoint of a running
/// run changes neither), so most checkpoints touch the row's page and no index. A
/// status change sets `reap_at` by `reaping`.
pub(crate) fn update_run(
    tx: &Connection,
    old: Indexed,
    run: &Run,
    reaping: &ReapSchedule,
) -> Result<(), StoreError> {
    update_run_as(tx, old, run, &stored::run_body(run)?, reaping)
}

/// [`update_run`] with the run already encoded as `body`.
pub(super) fn update_run_as(
    tx: &Connection,
    old: Indexed,
    run: &Run,
    body: &str,
    reaping: &ReapSchedule,
) -> Result<(), StoreError> {
    let due_changed = run.due_at != old.due_at || run.sweep_at() != old.sweep_at;
    let sweep_at = run.sweep_at().map(|d| d.0);
    let changed = match (run.status != old.status, due_changed) {
        (false, false) => tx
            .prepare_cached("UPDATE runs SET body = ?3 WHERE tenant = ?1 AND run_id = ?2")
            .map_err(sql)?
            .execute(params![run.tenant.0, run.id.0, body]),
        (true, false) => tx
            .prepare_cached(
                "UPDATE runs SET body = ?3, status = ?4, finished_at = ?5, reap_at = ?6 WHERE tenant = ?1 AND run_id = ?2",
            )
            .map_err(sql)?
            .execute(params![run.tenant.0, run.id.0, body, run.status.as_str(), retention::finished_at(run), reaping.reap_at(run)]),
        (false, true) => tx
            .prepare_cached(
                "UPDATE runs SET body = ?3, due_at = ?4, sweep_at = ?5 WHERE tenant = ?1 AND run_id = ?2",
            )
            .map_err(sql)?
            .execute(params![run.tenant.0, run.id.0, body, run.due_at.map(|d| d.0), sweep_at]),
        (true, true) => tx
            .prepare_cached(
                "UPDATE runs SET body = ?3, status = ?4, due_at = ?5, sweep_at = ?6, finished_at = ?7, reap_at = ?8 WHERE tenant = ?1 AND run_id = ?2",
            )
            .map_err(sql)?
            .execute(params![
                run.tenant.0,
                run.id.0,
                body,
                run.status.as_str(),
                run.due_at.map(|d| d.0),
                sweep_at,
                retention::finished_at(run),
                reaping.reap_at(run)
            ]),
    }
    .map_err(sql)?;
    if changed != 1 {
        return Err(StoreError::NotFound);
    }
    if run.build_id != old.build {
        tx.prepare_cached(builds::SET_BUILD)
            .map_err(sql)?
            .execute(params![run.tenant.0, run.id.0, run.build_id])
            .map_err(sql)?;
    }
    Ok(())
}

pub(super) fn insert_run(
    tx: &Connection,
    run: &Run,
    started: &TimelineEvent,
    reaping: &ReapSchedule,
) -> Result<(), StoreError> {
    if get_run(tx, &run.tenant.0, &run.id.0)?.is_some() {
        return Err(StoreError::AlreadyExists);
    }
    let key = put_run(tx, run, reaping)?;
    insert_event(tx, key, run, started)
}

/// Append `event` to the timeline of `run`, whose key is `key`.
pub(crate) fn insert_event(
    tx: &Connection,
    key: i64,
    run: &Run,
    event: &TimelineEvent,
) -> Result<(), StoreError> {
    insert_event_as(tx, key, run, event.seq, &stored::event_body(event)?)
}

/// [`insert_event`] with the event already in its stored form, `body`; a conflict (with
/// the run as stored) when the run's timeline has `seq` already.
pub(super) fn insert_event_as(
    tx: &Connection,
    key: i64,
    run: &Run,
    seq: u64,
    body: &str,
) -> Result<(), StoreError> {
    let inserted = tx
        .prepare_cached("INSERT INTO timeline (run, seq, body) VALUES (?1, ?2, ?3)")
        .and_then(|mut s| s.execute(params![key, seq as i64, body]));
    match inserted {
        Ok(_) => Ok(()),
        Err(e) if is_constraint(&e) => Err(StoreError::Conflict(
            get_run(tx, &run.tenant.0, &run.id.0)?.map(Box::new),
        )),
        Err(e) => Err(sql(e)),
    }
}

/// The key of the run a record of `tenant`'s `run_id` belongs to: `key`, the key of
/// `run`, when it is that run's (as a checkpoint's records are), else looked up;
/// `None` when no such run exists.
pub(super) fn run_key(
    tx: &Connection,
    key: i64,
    run: &Run,
    tenant: &TenantId,
    run_id: &RunId,
) -> Result<Option<i64>, StoreError> {
    if run.tenant == *tenant && run.id == *run_id {
        return Ok(Some(key));
    }
    Ok(get_keyed_run(tx, &tenant.0, &run_id.0)?.map(|(key, _)| key))
}

pub(super) fn conflict(current: Run) -> StoreError {
    StoreError::Conflict(Some(Box::new(current)))
}
