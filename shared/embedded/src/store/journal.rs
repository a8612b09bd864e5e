//! A run's journal rows: an event wait's schema stored once and referred to by id, and
//! the journal read back with its schemas.

use rusqlite::{Connection, OptionalExtension, params};
use siesta::ports::*;
use siesta::*;

use crate::{sql, stored};

/// The id under which `schema` is stored, storing it the first time it is seen.
pub(super) fn schema_id(tx: &Connection, schema: &stored::Schema) -> Result<i64, StoreError> {
    let id: Option<i64> = tx
        .prepare_cached("SELECT id FROM schemas WHERE sha256 = ?1")
        .map_err(sql)?
        .query_row(params![schema.sha256], |r| r.get(0))
        .optional()
        .map_err(sql)?;
    if let Some(id) = id {
        return Ok(id);
    }
    tx.prepare_cached("INSERT INTO schemas (sha256, body) VALUES (?1, ?2)")
        .map_err(sql)?
        .execute(params![schema.sha256, schema.body])
        .map_err(sql)?;
    Ok(tx.last_insert_rowid())
}

/// A run's journal entries, with their event waits' schemas.
pub(super) fn read_journal(
    tx: &rusqlite::Connection,
    tenant: &str,
    run_id: &str,
) -> Result<Vec<JournalEntry>, StoreError> {
    let mut stmt = tx
        .prepare_cached(
            "SELECT journal.position, journal.body, schemas.body FROM runs JOIN journal ON journal.run = runs.key
               LEFT JOIN schemas ON schemas.id = journal.accepts
              WHERE runs.tenant = ?1 AND runs.run_id = ?2",
        )
        .map_err(sql)?;
    let mut journal = Vec::new();
    for row in stmt
        .query_map(params![tenant, run_id], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, Option<String>>(2)?,
            ))
        })
        .map_err(sql)?
    {
        let (position, body, schema) = row.map_err(sql)?;
        journal.push(stored::entry(&position, &body, schema.as_deref())?);
    }
    Ok(journal)
}
