//! Concurrency limits' slots, kept in the file by the rule of [`siesta::flow::slots`]:
//! who holds each key of each limit (`limit_holders`) and who waits for it, by ticket
//! (`limit_waiters`). A run's slots are taken in the write that creates it and freed,
//! and handed to the first in line, in the write that finishes it, so no interleaving
//! of writers can let more runs hold a key than its max.

use rusqlite::{Connection, OptionalExtension, params};
use siesta::ports::{LimitUsage, StoreError};
use siesta::*;

use crate::retention::ReapSchedule;
use crate::sql;
use crate::store::{Indexed, get_run, update_run};

/// The two tables (a step of the file's schema).
pub(crate) const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS limit_holders (
    tenant TEXT NOT NULL, limit_name TEXT NOT NULL, key TEXT NOT NULL, run_id TEXT NOT NULL,
    PRIMARY KEY (tenant, limit_name, key, run_id)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS limit_waiters (
    tenant TEXT NOT NULL, limit_name TEXT NOT NULL, key TEXT NOT NULL, ticket INTEGER NOT NULL,
    run_id TEXT NOT NULL,
    PRIMARY KEY (tenant, limit_name, key, ticket)) WITHOUT ROWID;
";

/// Nothing to bring up to it: a file older than the tables has no run with limits.
pub(crate) const BACKFILL: &str = "";

const HOLDERS: &str =
    "SELECT count(*) FROM limit_holders WHERE tenant = ?1 AND limit_name = ?2 AND key = ?3";
const LAST_TICKET: &str =
    "SELECT max(ticket) FROM limit_waiters WHERE tenant = ?1 AND limit_name = ?2 AND key = ?3";
const FIRST_WAITER: &str = "SELECT ticket, run_id FROM limit_waiters
    WHERE tenant = ?1 AND limit_name = ?2 AND key = ?3 ORDER BY ticket LIMIT 1";
const HOLD: &str =
    "INSERT INTO limit_holders (tenant, limit_name, key, run_id) VALUES (?1, ?2, ?3, ?4)";
const UNHOLD: &str = "DELETE FROM limit_holders
    WHERE tenant = ?1 AND limit_name = ?2 AND key = ?3 AND run_id = ?4";
const WAIT: &str = "INSERT INTO limit_waiters (tenant, limit_name, key, ticket, run_id)
    VALUES (?1, ?2, ?3, ?4, ?5)";
const UNWAIT: &str = "DELETE FROM limit_waiters
    WHERE tenant = ?1 AND limit_name = ?2 AND key = ?3 AND ticket = ?4";

/// How many of `run`'s slots it holds: all but from the one it waits for.
fn held(run: &Run) -> usize {
    match (&run.queued, run.status) {
        (Some(at), RunStatus::Queued) => run
            .limits
            .iter()
            .position(|s| s.limit == at.limit)
            .unwrap_or(run.limits.len()),
        _ => run.limits.len(),
    }
}

/// Take `run`'s slots from its `from`-th on, by the rule: hold while the line is empty
/// and the key has room, else join the line and leave `run` queued there. Whether it
/// now holds them all.
fn take_from(tx: &Connection, run: &mut Run, from: usize) -> Result<bool, StoreError> {
    let tenant = run.tenant.0.clone();
    for slot in run.limits[from..].iter().cloned() {
        let line = params![tenant, slot.limit, slot.key];
        let holders: u64 = tx
            .prepare_cached(HOLDERS)
            .map_err(sql)?
            .query_row(line, |r| r.get(0))
            .map_err(sql)?;
        let last: Option<u64> = tx
            .prepare_cached(LAST_TICKET)
            .map_err(sql)?
            .query_row(line, |r| r.get(0))
            .map_err(sql)?;
        if last.is_none() && holders < u64::from(slot.max) {
            tx.prepare_cached(HOLD)
                .map_err(sql)?
                .execute(params![tenant, slot.limit, slot.key, run.id.0])
                .map_err(sql)?;
            continue;
        }
        let ticket = last.map_or(1, |t| t + 1);
        tx.prepare_cached(WAIT)
            .map_err(sql)?
            .execute(params![tenant, slot.limit, slot.key, ticket, run.id.0])
            .map_err(sql)?;
        run.status = RunStatus::Queued;
        run.queued = Some(QueuedAt {
            limit: slot.limit,
            key: slot.key,
            ticket,
        });
        run.due_at = None;
        run.resend_after = None;
        return Ok(false);
    }
    run.queued = None;
    Ok(true)
}

/// `run` as created under its limits: holding every slot (as given), or queued.
pub(crate) fn admit(tx: &Connection, run: &Run) -> Result<Run, StoreError> {
    let mut run = run.clone();
    take_from(tx, &mut run, 0)?;
    Ok(run)
}

/// `stored`, as it was before the write that finishes it (or cancels it while
/// queued), leaves its lines; the slots it held go to the first in line. The runs
/// admitted, as written: pending, due at `now`.
pub(crate) fn release(
    tx: &Connection,
    stored: &Run,
    now: Timestamp,
    reaping: &ReapSchedule,
) -> Result<Vec<Run>, StoreError> {
    let tenant = &stored.tenant.0;
    let held = held(stored);
    for slot in &stored.limits[..held] {
        tx.prepare_cached(UNHOLD)
            .map_err(sql)?
            .execute(params![tenant, slot.limit, slot.key, stored.id.0])
            .map_err(sql)?;
    }
    if let (Some(at), RunStatus::Queued) = (&stored.queued, stored.status) {
        tx.prepare_cached(UNWAIT)
            .map_err(sql)?
            .execute(params![tenant, at.limit, at.key, at.ticket])
            .map_err(sql)?;
    }
    let mut admitted = Vec::new();
    for slot in &stored.limits[..held] {
        hand_over(
            tx,
            &stored.tenant,
            &slot.limit,
            &slot.key,
            now,
            reaping,
            &mut admitted,
        )?;
    }
    Ok(admitted)
}

/// Give the freed slots of `limit`'s `key` to the first in line while its max lets
/// one more hold the key; a run handed its last slot is admitted (pushed on
/// `admitted`), one handed another goes on to wait for its next.
fn hand_over(
    tx: &Connection,
    tenant: &TenantId,
    limit: &str,
    key: &str,
    now: Timestamp,
    reaping: &ReapSchedule,
    admitted: &mut Vec<Run>,
) -> Result<(), StoreError> {
    loop {
        let first: Option<(u64, String)> = tx
            .prepare_cached(FIRST_WAITER)
            .map_err(sql)?
            .query_row(params![tenant.0, limit, key], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .optional()
            .map_err(sql)?;
        let Some((ticket, run_id)) = first else {
            return Ok(());
        };
        let unwait = |tx: &Connection| {
            tx.prepare_cached(UNWAIT)
                .map_err(sql)?
                .execute(params![tenant.0, limit, key, ticket])
                .map_err(sql)
        };
        let waiting = get_run(tx, &tenant.0, &run_id)?.filter(|r| {
            r.status == RunStatus::Queued
                && r.queued
                    .as_ref()
                    .is_some_and(|q| q.ticket == ticket && q.limit == limit && q.key == key)
        });
        let Some(waiting) = waiting else {
            // Not a run waiting here any more (it cannot be: its finish or cancel
            // left the line); the line must not stall behind it.
            unwait(tx)?;
            continue;
        };
        let index = held(&waiting);
        let holders: u64 = tx
            .prepare_cached(HOLDERS)
            .map_err(sql)?
            .query_row(params![tenant.0, limit, key], |r| r.get(0))
            .map_err(sql)?;
        if holders >= u64::from(waiting.limits[index].max) {
            return Ok(());
        }
        unwait(tx)?;
        tx.prepare_cached(HOLD)
            .map_err(sql)?
            .execute(params![tenant.0, limit, key, run_id])
            .map_err(sql)?;
        let mut next = waiting.clone();
        next.version += 1;
        next.updated_at = now;
        if take_from(tx, &mut next, index + 1)? {
            next.status = RunStatus::Pending;
            next.due_at = Some(now);
            next.resend_after = None;
            update_run(tx, Indexed::of(&waiting), &next, reaping)?;
            admitted.push(next);
        } else {
            update_run(tx, Indexed::of(&waiting), &next, reaping)?;
        }
    }
}

/// Every key of `tenant`'s limits held or waited for.
pub(crate) fn usage(tx: &Connection, tenant: &TenantId) -> Result<Vec<LimitUsage>, StoreError> {
    let mut usage: Vec<LimitUsage> = Vec::new();
    for (table, holders) in [("limit_holders", true), ("limit_waiters", false)] {
        let mut stmt = tx
            .prepare_cached(&format!(
                "SELECT limit_name, key, count(*) FROM {table} WHERE tenant = ?1 GROUP BY limit_name, key"
            ))
            .map_err(sql)?;
        let rows = stmt
            .query_map(params![tenant.0], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, u64>(2)?,
                ))
            })
            .map_err(sql)?;
        for row in rows {
            let (limit, key, n) = row.map_err(sql)?;
            let at = match usage.iter().position(|u| u.limit == limit && u.key == key) {
                Some(at) => at,
                None => {
                    usage.push(LimitUsage {
                        limit,
                        key,
                        holders: 0,
                        waiters: 0,
                    });
                    usage.len() - 1
                }
            };
            if holders {
                usage[at].holders = n;
            } else {
                usage[at].waiters = n;
            }
        }
    }
    usage.sort_by(|a, b| (&a.limit, &a.key).cmp(&(&b.limit, &b.key)));
    Ok(usage)
}

/// The place of the run waiting at `at` in its line (1: next).
pub(crate) fn position(
    tx: &Connection,
    tenant: &TenantId,
    at: &QueuedAt,
) -> Result<u64, StoreError> {
    tx.prepare_cached(
        "SELECT count(*) FROM limit_waiters WHERE tenant = ?1 AND limit_name = ?2 AND key = ?3 AND ticket <= ?4",
    )
    .map_err(sql)?
    .query_row(params![tenant.0, at.limit, at.key, at.ticket], |r| r.get(0))
    .map_err(sql)
}
