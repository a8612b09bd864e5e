//! Step limits' slots: at most `max` attempts in flight per key across the file, by
//! the rule of [`siesta::flow::slots`] with holders that lapse. A holder row names the
//! attempt's run, step and the epoch of the lease it runs under; it holds while that
//! lease does (so an attempt that crashed gives its slot back when its lease ends),
//! or, when the slot was handed to a waiting run, until its grant ends. Waiters wait by
//! ticket.

use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, params};
use siesta::ports::{HandedSlot, StepSlot, StepSlotHolder, StoreError};
use siesta::*;

use crate::retention::ReapSchedule;
use crate::sql;
use crate::store::{Indexed, get_run, update_run};

/// The two tables and the index finding a run's place in line (a step of the file's
/// schema).
pub(crate) const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS step_slot_holders (
    slot_key TEXT NOT NULL, tenant TEXT NOT NULL, run_id TEXT NOT NULL, position TEXT NOT NULL,
    epoch INTEGER, granted_until INTEGER,
    PRIMARY KEY (slot_key, tenant, run_id, position)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS step_slot_waiters (
    slot_key TEXT NOT NULL, ticket INTEGER NOT NULL,
    tenant TEXT NOT NULL, run_id TEXT NOT NULL, position TEXT NOT NULL,
    PRIMARY KEY (slot_key, ticket)) WITHOUT ROWID;
CREATE UNIQUE INDEX IF NOT EXISTS step_slot_waiter_of
    ON step_slot_waiters (slot_key, tenant, run_id, position);
";

/// A holder row: whose, and under which lease or grant.
struct Held {
    tenant: String,
    run_id: String,
    position: String,
    epoch: Option<u64>,
    granted_until: Option<i64>,
}

fn holders(tx: &Connection, key: &str) -> Result<Vec<Held>, StoreError> {
    let mut stmt = tx
        .prepare_cached(
            "SELECT tenant, run_id, position, epoch, granted_until FROM step_slot_holders WHERE slot_key = ?1",
        )
        .map_err(sql)?;
    let rows = stmt
        .query_map(params![key], |r| {
            Ok(Held {
                tenant: r.get(0)?,
                run_id: r.get(1)?,
                position: r.get(2)?,
                epoch: r.get(3)?,
                granted_until: r.get(4)?,
            })
        })
        .map_err(sql)?;
    rows.collect::<Result<_, _>>().map_err(sql)
}

/// Whether `held` still holds at `now`: its run's lease is the one it took the slot
/// under and has not lapsed, or (a slot handed to a waiting run) its grant runs on.
fn holds(tx: &Connection, held: &Held, now: Timestamp) -> Result<bool, StoreError> {
    match held.epoch {
        None => Ok(held.granted_until.is_some_and(|until| until > now.0)),
        Some(epoch) => Ok(get_run(tx, &held.tenant, &held.run_id)?.is_some_and(|run| {
            !run.status.is_finished()
                && run
                    .lease
                    .is_some_and(|l| l.epoch == FencingEpoch(epoch) && l.expires_at > now)
        })),
    }
}

fn unhold(
    tx: &Connection,
    key: &str,
    tenant: &str,
    run_id: &str,
    position: &str,
) -> Result<(), StoreError> {
    tx.prepare_cached(
        "DELETE FROM step_slot_holders WHERE slot_key = ?1 AND tenant = ?2 AND run_id = ?3 AND position = ?4",
    )
    .map_err(sql)?
    .execute(params![key, tenant, run_id, position])
    .map_err(sql)?;
    Ok(())
}

/// Let go every holder of `key` that no longer holds; how many still do.
fn lapse(tx: &Connection, key: &str, now: Timestamp) -> Result<u32, StoreError> {
    let mut live = 0;
    for held in holders(tx, key)? {
        if holds(tx, &held, now)? {
            live += 1;
        } else {
            unhold(tx, key, &held.tenant, &held.run_id, &held.position)?;
        }
    }
    Ok(live)
}

/// Hand free slots of `key` to the first in line while fewer than `max` hold it: each
/// is granted until `now` + `grant_for`, and its run, waiting or running, is made due
/// now.
fn hand_over(
    tx: &Connection,
    key: &str,
    max: u32,
    mut live: u32,
    now: Timestamp,
    grant_for: Duration,
    reaping: &ReapSchedule,
) -> Result<Vec<HandedSlot>, StoreError> {
    let mut handed = Vec::new();
    while live < max {
        let first: Option<(u64, String, String, String)> = tx
            .prepare_cached(
                "SELECT ticket, tenant, run_id, position FROM step_slot_waiters WHERE slot_key = ?1 ORDER BY ticket LIMIT 1",
            )
            .map_err(sql)?
            .query_row(params![key], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
            .optional()
            .map_err(sql)?;
        let Some((ticket, tenant, run_id, position)) = first else {
            break;
        };
        tx.prepare_cached("DELETE FROM step_slot_waiters WHERE slot_key = ?1 AND ticket = ?2")
            .map_err(sql)?
            .execute(params![key, ticket])
            .map_err(sql)?;
        let Some(run) = get_run(tx, &tenant, &run_id)?.filter(|r| !r.status.is_finished()) else {
            // Its run is gone or finished: it waits for nothing any more.
            continue;
        };
        let until = now.plus(grant_for).0;
        tx.prepare_cached(
            "INSERT OR REPLACE INTO step_slot_holders (slot_key, tenant, run_id, position, epoch, granted_until) VALUES (?1, ?2, ?3, ?4, NULL, ?5)",
        )
        .map_err(sql)?
        .execute(params![key, tenant, run_id, position, until])
        .map_err(sql)?;
        live += 1;
        // A waiting run is made due now. So is a running one, between its look at the
        // line and its suspension: its suspension keeps a due time at or before now
        // that it finds written (`Shared::commit`), rather than sleeping past the slot.
        let waiting = run.status == RunStatus::Waiting && run.due_at.is_none_or(|d| d > now);
        if waiting || run.status == RunStatus::Running {
            let mut due = run.clone();
            due.due_at = Some(now);
            due.resend_after = None;
            due.version += 1;
            update_run(tx, Indexed::of(&run), &due, reaping)?;
        }
        handed.push(HandedSlot {
            tenant: run.tenant,
            run_id: run.id,
        });
    }
    Ok(handed)
}

/// [`siesta::ports::RunStore::take_step_slot`] in `tx`.
pub(crate) fn take(
    tx: &Connection,
    key: &str,
    max: u32,
    holder: &StepSlotHolder,
    now: Timestamp,
    grant_for: Duration,
    reaping: &ReapSchedule,
) -> Result<(StepSlot, Vec<HandedSlot>), StoreError> {
    let (tenant, run_id, position) = (&holder.tenant.0, &holder.run_id.0, &holder.position.0);
    let live = lapse(tx, key, now)?;
    let handed = hand_over(tx, key, max, live, now, grant_for, reaping)?;
    let mine = tx
        .prepare_cached(
            "UPDATE step_slot_holders SET epoch = ?5, granted_until = NULL WHERE slot_key = ?1 AND tenant = ?2 AND run_id = ?3 AND position = ?4",
        )
        .map_err(sql)?
        .execute(params![key, tenant, run_id, position, holder.epoch.0])
        .map_err(sql)?;
    let handed: Vec<HandedSlot> = handed
        .into_iter()
        .filter(|h| !(h.tenant == holder.tenant && h.run_id == holder.run_id))
        .collect();
    if mine == 1 {
        return Ok((StepSlot::Held, handed));
    }
    let waiting: Option<u64> = tx
        .prepare_cached(
            "SELECT ticket FROM step_slot_waiters WHERE slot_key = ?1 AND tenant = ?2 AND run_id = ?3 AND position = ?4",
        )
        .map_err(sql)?
        .query_row(params![key, tenant, run_id, position], |r| r.get(0))
        .optional()
        .map_err(sql)?;
    let ticket = match waiting {
        Some(ticket) => ticket,
        None => {
            let line: Option<u64> = tx
                .prepare_cached("SELECT max(ticket) FROM step_slot_waiters WHERE slot_key = ?1")
                .map_err(sql)?
                .query_row(params![key], |r| r.get(0))
                .map_err(sql)?;
            let holding: u32 = tx
                .prepare_cached("SELECT count(*) FROM step_slot_holders WHERE slot_key = ?1")
                .map_err(sql)?
                .query_row(params![key], |r| r.get(0))
                .map_err(sql)?;
            if line.is_none() && holding < max {
                tx.prepare_cached(
                    "INSERT INTO step_slot_holders (slot_key, tenant, run_id, position, epoch, granted_until) VALUES (?1, ?2, ?3, ?4, ?5, NULL)",
                )
                .map_err(sql)?
                .execute(params![key, tenant, run_id, position, holder.epoch.0])
                .map_err(sql)?;
                return Ok((StepSlot::Held, handed));
            }
            let ticket = line.map_or(1, |t| t + 1);
            tx.prepare_cached(
                "INSERT INTO step_slot_waiters (slot_key, ticket, tenant, run_id, position) VALUES (?1, ?2, ?3, ?4, ?5)",
            )
            .map_err(sql)?
            .execute(params![key, ticket, tenant, run_id, position])
            .map_err(sql)?;
            ticket
        }
    };
    let position: u64 = tx
        .prepare_cached(
            "SELECT count(*) FROM step_slot_waiters WHERE slot_key = ?1 AND ticket <= ?2",
        )
        .map_err(sql)?
        .query_row(params![key, ticket], |r| r.get(0))
        .map_err(sql)?;
    Ok((StepSlot::Queued { position }, handed))
}

/// [`siesta::ports::RunStore::give_back_step_slot`] in `tx`.
pub(crate) fn give_back(
    tx: &Connection,
    key: &str,
    max: u32,
    holder: &StepSlotHolder,
    now: Timestamp,
    grant_for: Duration,
    reaping: &ReapSchedule,
) -> Result<Vec<HandedSlot>, StoreError> {
    unhold(
        tx,
        key,
        &holder.tenant.0,
        &holder.run_id.0,
        &holder.position.0,
    )?;
    let live = lapse(tx, key, now)?;
    hand_over(tx, key, max, live, now, grant_for, reaping)
}
