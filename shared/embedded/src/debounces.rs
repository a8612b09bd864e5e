//! Debounces' entries ([`RunStore::get_debounce_entry`]): per tenant, debounce and key,
//! the run its starts join now and the entry's version. A write is one savepoint of
//! the writer, conditioned on the version read, as DynamoDB's conditional put would
//! be; entries past their `keep_until` are dropped by the writes that come after.

use rusqlite::{Connection, OptionalExtension, params};
use siesta::ports::{DebounceEntry, StoreError};
use siesta::*;

use crate::sql;

/// Schema version 11: debounces' entries.
pub(crate) const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS debounce_entries (
    tenant TEXT NOT NULL, name TEXT NOT NULL, key TEXT NOT NULL,
    run_id TEXT NOT NULL, version INTEGER NOT NULL, keep_until INTEGER NOT NULL,
    PRIMARY KEY (tenant, name, key)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS debounce_entries_by_keep_until ON debounce_entries (keep_until);
";

/// What a file that holds runs needs for version 11: nothing, no debounce has an entry.
pub(crate) const BACKFILL: &str = "";

/// How many forgotten entries one write drops at most (the rest go with later writes).
const DROPPED_PER_WRITE: i64 = 16;

/// Whose entry: a tenant's debounce (by name) and key.
#[derive(Clone, Copy)]
pub(crate) struct EntryOf<'a> {
    pub(crate) tenant: &'a str,
    pub(crate) name: &'a str,
    pub(crate) key: &'a str,
}

/// The entry `of`.
pub(crate) fn get(
    conn: &Connection,
    of: &EntryOf<'_>,
) -> Result<Option<DebounceEntry>, StoreError> {
    let EntryOf { tenant, name, key } = *of;
    conn.prepare_cached(
        "SELECT run_id, version FROM debounce_entries WHERE tenant = ?1 AND name = ?2 AND key = ?3",
    )
    .map_err(sql)?
    .query_row(params![tenant, name, key], |r| {
        Ok(DebounceEntry {
            run_id: RunId(r.get(0)?),
            version: r.get::<_, i64>(1)?.max(0) as u64,
        })
    })
    .optional()
    .map_err(sql)
}

/// Point the entry at `run_id` if it is at `expected` (0: none); the version written.
pub(crate) fn put(
    tx: &Connection,
    of: &EntryOf<'_>,
    run_id: &RunId,
    expected: u64,
    keep_until: Timestamp,
    now: Timestamp,
) -> Result<u64, StoreError> {
    let EntryOf { tenant, name, key } = *of;
    tx.prepare_cached(
        "DELETE FROM debounce_entries WHERE (tenant, name, key) IN
         (SELECT tenant, name, key FROM debounce_entries WHERE keep_until < ?1 LIMIT ?2)",
    )
    .map_err(sql)?
    .execute(params![now.0, DROPPED_PER_WRITE])
    .map_err(sql)?;
    let changed = if expected == 0 {
        tx.prepare_cached(
            "INSERT INTO debounce_entries (tenant, name, key, run_id, version, keep_until)
             VALUES (?1, ?2, ?3, ?4, 1, ?5) ON CONFLICT (tenant, name, key) DO NOTHING",
        )
        .map_err(sql)?
        .execute(params![tenant, name, key, run_id.0, keep_until.0])
        .map_err(sql)?
    } else {
        tx.prepare_cached(
            "UPDATE debounce_entries SET run_id = ?4, version = ?5 + 1, keep_until = ?6
             WHERE tenant = ?1 AND name = ?2 AND key = ?3 AND version = ?5",
        )
        .map_err(sql)?
        .execute(params![
            tenant,
            name,
            key,
            run_id.0,
            expected as i64,
            keep_until.0
        ])
        .map_err(sql)?
    };
    if changed == 0 {
        return Err(StoreError::Conflict(None));
    }
    Ok(expected + 1)
}
