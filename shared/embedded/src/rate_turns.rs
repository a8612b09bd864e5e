//! Step rate limits' turns: per key, the last turn given (`rate_keys`), and the turns
//! kept for attempts that wait for theirs (`rate_turns`), so an attempt that comes back
//! at its turn is not given another.

use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, params};
use siesta::ports::{RateTurn, StepSlotHolder, StoreError};
use siesta::*;

use crate::sql;

/// The two tables (a step of the file's schema).
pub(crate) const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS rate_keys (rate_key TEXT PRIMARY KEY, last_turn INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS rate_turns (
    rate_key TEXT NOT NULL, tenant TEXT NOT NULL, run_id TEXT NOT NULL, position TEXT NOT NULL,
    turn INTEGER NOT NULL,
    PRIMARY KEY (rate_key, tenant, run_id, position)) WITHOUT ROWID;
";

/// How long a kept turn outlives its instant before it is let go (its run finished or
/// was cancelled without coming back for it).
const FORGOTTEN_AFTER: Duration = Duration::from_secs(3600);

/// [`siesta::ports::RunStore::take_rate_turn`] in `tx`.
pub(crate) fn take(
    tx: &Connection,
    key: &str,
    interval: Duration,
    holder: &StepSlotHolder,
    now: Timestamp,
) -> Result<RateTurn, StoreError> {
    let (tenant, run_id, position) = (&holder.tenant.0, &holder.run_id.0, &holder.position.0);
    let kept: Option<i64> = tx
        .prepare_cached(
            "SELECT turn FROM rate_turns WHERE rate_key = ?1 AND tenant = ?2 AND run_id = ?3 AND position = ?4",
        )
        .map_err(sql)?
        .query_row(params![key, tenant, run_id, position], |r| r.get(0))
        .optional()
        .map_err(sql)?;
    let turn = match kept {
        Some(turn) => Timestamp(turn),
        None => {
            let last: Option<i64> = tx
                .prepare_cached("SELECT last_turn FROM rate_keys WHERE rate_key = ?1")
                .map_err(sql)?
                .query_row(params![key], |r| r.get(0))
                .optional()
                .map_err(sql)?;
            let turn = last.map_or(now, |last| Timestamp(last).plus(interval).max(now));
            tx.prepare_cached(
                "INSERT INTO rate_keys (rate_key, last_turn) VALUES (?1, ?2) ON CONFLICT (rate_key) DO UPDATE SET last_turn = ?2",
            )
            .map_err(sql)?
            .execute(params![key, turn.0])
            .map_err(sql)?;
            turn
        }
    };
    if turn <= now {
        tx.prepare_cached(
            "DELETE FROM rate_turns WHERE rate_key = ?1 AND (tenant = ?2 AND run_id = ?3 AND position = ?4 OR turn < ?5)",
        )
        .map_err(sql)?
        .execute(params![key, tenant, run_id, position, now.0 - FORGOTTEN_AFTER.as_millis() as i64])
        .map_err(sql)?;
        return Ok(RateTurn::Now);
    }
    if kept.is_none() {
        tx.prepare_cached(
            "INSERT INTO rate_turns (rate_key, tenant, run_id, position, turn) VALUES (?1, ?2, ?3, ?4, ?5)",
        )
        .map_err(sql)?
        .execute(params![key, tenant, run_id, position, turn.0])
        .map_err(sql)?;
    }
    Ok(RateTurn::At(turn))
}
