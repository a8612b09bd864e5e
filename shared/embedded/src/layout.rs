//! The tables of the file, and how an older file is brought up to them.
//!
//! A run's own rows (its journal, timeline and deliveries) are keyed by the run's
//! integer key, the rowid of its `runs` row, not by its tenant and run id: a text key
//! of ~40 bytes repeated in every row and every index entry was a third of what a
//! sleeping run cost on disk. With an integer key their primary-key index is small
//! (~12 bytes an entry), and they stay rowid tables: a `WITHOUT ROWID` table keeps at
//! most ~1 000 bytes of a row in its B-tree page and moves the rest to an overflow
//! page of its own, so a journal entry or timeline event of 1.5 KB (a step's result)
//! would take 4.7 KB instead of 2 KB, for no gain on small rows (measured: 244 against
//! 231 bytes a 200-byte row). An event wait's JSON Schema, the same for
//! every run of a workflow, is stored once in `schemas` and referenced from the entry
//! (see the `stored` module). The list indexes end in `created_at`, and the run key
//! SQLite appends to every index entry breaks the ties between runs created in the
//! same millisecond (the later-created run first).
//!
//! A file written before run keys existed is rebuilt into these tables once, in one
//! transaction, when it is opened ([`open`]), then vacuumed so that the old tables'
//! pages leave the file.

use rusqlite::Connection;
use siesta::ports::StoreError;

use crate::sql;

/// Tables the layout change left as they were (created if missing).
const QUEUE_AND_RECORDS: &str = "
CREATE TABLE IF NOT EXISTS callbacks (callback_id TEXT PRIMARY KEY, body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS tool_calls (
    tenant TEXT NOT NULL, key TEXT NOT NULL, body TEXT NOT NULL, PRIMARY KEY (tenant, key));
CREATE TABLE IF NOT EXISTS artifacts (
    location TEXT PRIMARY KEY, sha256 TEXT NOT NULL, media_type TEXT NOT NULL, size INTEGER NOT NULL, content BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS wake_queue (
    id INTEGER PRIMARY KEY AUTOINCREMENT, tenant TEXT NOT NULL, run_id TEXT NOT NULL,
    lane INTEGER NOT NULL, body TEXT NOT NULL, visible_at INTEGER NOT NULL,
    receive_count INTEGER NOT NULL DEFAULT 0, receipt TEXT);
CREATE INDEX IF NOT EXISTS wake_queue_fair ON wake_queue (lane, tenant, visible_at, id);
CREATE INDEX IF NOT EXISTS wake_queue_receipt ON wake_queue (receipt) WHERE receipt IS NOT NULL;
CREATE INDEX IF NOT EXISTS wake_queue_run ON wake_queue (tenant, run_id, visible_at);
CREATE TABLE IF NOT EXISTS dead_letter_queue (
    id INTEGER PRIMARY KEY AUTOINCREMENT, body TEXT NOT NULL, moved_at INTEGER NOT NULL,
    visible_at INTEGER NOT NULL, receipt TEXT);
CREATE INDEX IF NOT EXISTS dead_letter_queue_visible ON dead_letter_queue (visible_at, id);
CREATE INDEX IF NOT EXISTS dead_letter_queue_receipt ON dead_letter_queue (receipt) WHERE receipt IS NOT NULL;
CREATE TABLE IF NOT EXISTS queue_turns (lane INTEGER PRIMARY KEY, tenant TEXT NOT NULL);
";

/// The runs and their own rows, keyed by the run key.
const RUN_TABLES: &str = "
CREATE TABLE IF NOT EXISTS runs (
    key INTEGER PRIMARY KEY, tenant TEXT NOT NULL, run_id TEXT NOT NULL,
    status TEXT NOT NULL, workflow TEXT NOT NULL, created_at INTEGER NOT NULL,
    due_at INTEGER, sweep_at INTEGER, body TEXT NOT NULL,
    UNIQUE (tenant, run_id));
CREATE TABLE IF NOT EXISTS journal (
    run INTEGER NOT NULL, position TEXT NOT NULL, accepts INTEGER, body TEXT NOT NULL,
    PRIMARY KEY (run, position));
CREATE TABLE IF NOT EXISTS timeline (
    run INTEGER NOT NULL, seq INTEGER NOT NULL, body TEXT NOT NULL,
    PRIMARY KEY (run, seq));
CREATE TABLE IF NOT EXISTS deliveries (
    run INTEGER NOT NULL, id TEXT NOT NULL, seq INTEGER NOT NULL, body TEXT NOT NULL,
    PRIMARY KEY (run, id));
CREATE TABLE IF NOT EXISTS schemas (
    id INTEGER PRIMARY KEY, sha256 BLOB NOT NULL UNIQUE, body TEXT NOT NULL);
";

/// The list indexes (newest first: scanned backwards, ties broken by the run key
/// SQLite appends to each entry) and the due index, by when the sweep looks at a run
/// ([`siesta::Run::sweep_at`]).
const RUN_INDEXES: &str = "
CREATE INDEX IF NOT EXISTS runs_by_tenant ON runs (tenant, created_at);
CREATE INDEX IF NOT EXISTS runs_by_status ON runs (tenant, status, created_at);
CREATE INDEX IF NOT EXISTS runs_by_workflow ON runs (tenant, workflow, created_at);
CREATE INDEX IF NOT EXISTS runs_by_status_workflow ON runs (tenant, status, workflow, created_at);
CREATE INDEX IF NOT EXISTS runs_sweep ON runs (sweep_at) WHERE sweep_at IS NOT NULL;
";

/// Rebuilds the runs and their rows of a file made before run keys into
/// [`RUN_TABLES`]; runs get their keys in creation order. Journal entries keep their
/// schema inline and timeline events their full form: both are read as they are.
const MIGRATE_TO_RUN_KEYS: &str = "
CREATE TABLE IF NOT EXISTS journal (
    tenant TEXT NOT NULL, run_id TEXT NOT NULL, position TEXT NOT NULL, body TEXT NOT NULL,
    PRIMARY KEY (tenant, run_id, position));
CREATE TABLE IF NOT EXISTS timeline (
    tenant TEXT NOT NULL, run_id TEXT NOT NULL, seq INTEGER NOT NULL, body TEXT NOT NULL,
    PRIMARY KEY (tenant, run_id, seq));
CREATE TABLE IF NOT EXISTS deliveries (
    tenant TEXT NOT NULL, run_id TEXT NOT NULL, id TEXT NOT NULL, seq INTEGER NOT NULL, body TEXT NOT NULL,
    PRIMARY KEY (tenant, run_id, id));
ALTER TABLE runs RENAME TO runs_by_id;
ALTER TABLE journal RENAME TO journal_by_id;
ALTER TABLE timeline RENAME TO timeline_by_id;
ALTER TABLE deliveries RENAME TO deliveries_by_id;
DROP INDEX IF EXISTS runs_by_tenant;
DROP INDEX IF EXISTS runs_by_status;
DROP INDEX IF EXISTS runs_by_workflow;
DROP INDEX IF EXISTS runs_by_status_workflow;
DROP INDEX IF EXISTS runs_sweep;
DROP INDEX IF EXISTS runs_due;
%RUN_TABLES%
INSERT INTO runs (tenant, run_id, status, workflow, created_at, due_at, sweep_at, body)
    SELECT tenant, run_id, status, workflow, created_at, due_at, sweep_at, body
      FROM runs_by_id ORDER BY created_at, run_id;
INSERT INTO journal (run, position, body)
    SELECT runs.key, old.position, old.body FROM runs JOIN journal_by_id AS old
        ON old.tenant = runs.tenant AND old.run_id = runs.run_id ORDER BY runs.key, old.position;
INSERT INTO timeline (run, seq, body)
    SELECT runs.key, old.seq, old.body FROM runs JOIN timeline_by_id AS old
        ON old.tenant = runs.tenant AND old.run_id = runs.run_id ORDER BY runs.key, old.seq;
INSERT INTO deliveries (run, id, seq, body)
    SELECT runs.key, old.id, old.seq, old.body FROM runs JOIN deliveries_by_id AS old
        ON old.tenant = runs.tenant AND old.run_id = runs.run_id ORDER BY runs.key, old.id;
DROP TABLE runs_by_id;
DROP TABLE journal_by_id;
DROP TABLE timeline_by_id;
DROP TABLE deliveries_by_id;
";

/// Gives a file made before runs had a sweep time the column (a run's sweep time is its
/// due time until a wake-up is sent for it).
const MIGRATE_SWEEP_AT: &str = "
ALTER TABLE runs ADD COLUMN sweep_at INTEGER;
UPDATE runs SET sweep_at = due_at;
";

/// Moves what a file made before the queue had lanes and per-run keys holds into the
/// tables above, once.
const MIGRATE_QUEUE: &str = "
INSERT INTO wake_queue (tenant, run_id, lane, body, visible_at, receive_count, receipt)
    SELECT json_extract(body, '$.tenant'), json_extract(body, '$.run_id'), 1, body, visible_at, receive_count, receipt FROM queue;
DROP TABLE queue;
";
const MIGRATE_DEAD_LETTERS: &str = "
INSERT INTO dead_letter_queue (body, moved_at, visible_at) SELECT body, moved_at, moved_at FROM dead_letters;
DROP TABLE dead_letters;
";

/// What [`open`] found the file to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Found {
    /// No runs table yet: the tables were created.
    New,
    /// The current layout.
    Current,
    /// A file made before run keys, now rebuilt.
    Migrated,
}

/// Create the tables of a new file, or bring an older file's up to them: all of it in
/// one transaction, decided inside it, so two processes opening one old file at once
/// migrate it once.
pub(crate) fn open(conn: &Connection) -> Result<Found, StoreError> {
    // Takes effect on a new file at once (before its first table); an older file keeps
    // its mode until the `VACUUM` below.
    conn.execute_batch("PRAGMA auto_vacuum = INCREMENTAL")
        .map_err(sql)?;
    conn.execute_batch("BEGIN IMMEDIATE").map_err(sql)?;
    let found = bring_up_to_date(conn);
    let end = if found.is_ok() { "COMMIT" } else { "ROLLBACK" };
    conn.execute_batch(end).map_err(sql)?;
    let found = found?;
    let incremental: i64 = conn
        .query_row("PRAGMA auto_vacuum", [], |r| r.get(0))
        .map_err(sql)?;
    if found == Found::Migrated || incremental != AUTO_VACUUM_INCREMENTAL {
        // Once per file, after its migration committed: a file made before schema
        // version 4 becomes incremental (SQLite switches an existing file's mode only
        // by rebuilding it), so that removed runs' pages can leave it
        // (`retention`); and a file rebuilt to run keys gives back the old tables'
        // pages, which would otherwise keep it at its old size plus the new tables'.
        // Decided by the file's mode, not its version, so a process killed before the
        // `VACUUM` finished does it at the next open.
        conn.execute_batch("PRAGMA auto_vacuum = INCREMENTAL; VACUUM")
            .map_err(sql)?;
    }
    Ok(found)
}

/// `PRAGMA auto_vacuum`'s answer for `INCREMENTAL`.
const AUTO_VACUUM_INCREMENTAL: i64 = 2;

fn bring_up_to_date(conn: &Connection) -> Result<Found, StoreError> {
    conn.execute_batch(QUEUE_AND_RECORDS).map_err(sql)?;
    for (table, migration) in [
        ("queue", MIGRATE_QUEUE),
        ("dead_letters", MIGRATE_DEAD_LETTERS),
    ] {
        if table_sql(conn, table)?.is_some() {
            conn.execute_batch(migration).map_err(sql)?;
        }
    }
    let found = match table_sql(conn, "runs")? {
        None => Found::New,
        Some(runs) if runs.contains("key INTEGER PRIMARY KEY") => Found::Current,
        Some(runs) => {
            if !runs.contains("sweep_at") {
                conn.execute_batch(MIGRATE_SWEEP_AT).map_err(sql)?;
            }
            conn.execute_batch(&MIGRATE_TO_RUN_KEYS.replace("%RUN_TABLES%", RUN_TABLES))
                .map_err(sql)?;
            Found::Migrated
        }
    };
    conn.execute_batch(RUN_TABLES).map_err(sql)?;
    conn.execute_batch(RUN_INDEXES).map_err(sql)?;
    conn.execute_batch(crate::recovery::PROMISED_INDEX)
        .map_err(sql)?;
    crate::unfinished::ensure(conn, found == Found::New)?;
    migrate(conn, found == Found::New)?;
    Ok(found)
}

/// A numbered step of the schema: what it adds, and what a file that already holds
/// runs needs besides (its rows brought up to it).
struct Migration {
    /// The schema version the file has once this step is applied.
    version: i64,
    /// The tables, columns, indexes and triggers it adds.
    schema: &'static str,
    /// What it does to the rows of a file that is not new.
    backfill: &'static str,
}

/// The schema's numbered steps, in order, on top of the tables above; a file records
/// the last one it has as `PRAGMA user_version` (0: none).
const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        schema: crate::builds::SCHEMA,
        backfill: crate::builds::BACKFILL,
    },
    Migration {
        version: 2,
        schema: crate::streams::SCHEMA,
        backfill: crate::streams::BACKFILL,
    },
    Migration {
        version: 3,
        schema: crate::streams::KEYS_SCHEMA,
        backfill: crate::streams::BACKFILL,
    },
    // With it the file becomes `auto_vacuum = INCREMENTAL` (see [`open`]).
    Migration {
        version: 4,
        schema: crate::retention::SCHEMA,
        backfill: crate::retention::BACKFILL,
    },
    Migration {
        version: 5,
        schema: crate::retention::REAP_SCHEMA,
        backfill: crate::retention::REAP_BACKFILL,
    },
    Migration {
        version: 6,
        schema: crate::limits::SCHEMA,
        backfill: crate::limits::BACKFILL,
    },
    Migration {
        version: 7,
        schema: crate::step_slots::SCHEMA,
        backfill: crate::limits::BACKFILL,
    },
    Migration {
        version: 8,
        schema: crate::rate_turns::SCHEMA,
        backfill: crate::limits::BACKFILL,
    },
    Migration {
        version: 9,
        schema: crate::builds::INDEX_WITHOUT_NOT_IN,
        backfill: crate::limits::BACKFILL,
    },
    Migration {
        version: 10,
        schema: crate::schedules::SCHEMA,
        backfill: crate::schedules::BACKFILL,
    },
    Migration {
        version: 11,
        schema: crate::debounces::SCHEMA,
        backfill: crate::debounces::BACKFILL,
    },
    Migration {
        version: 12,
        schema: crate::action_jobs::SCHEMA,
        backfill: crate::action_jobs::BACKFILL,
    },
    Migration {
        version: 13,
        schema: crate::workflow_pauses::SCHEMA,
        backfill: crate::workflow_pauses::BACKFILL,
    },
    Migration {
        version: 14,
        schema: crate::action_jobs::KEEP_SCHEMA,
        backfill: crate::action_jobs::KEEP_BACKFILL,
    },
];

/// Apply the numbered steps the file lacks, in the transaction of [`open`]; the rows of
/// a file that is not `new` are brought up to each.
fn migrate(conn: &Connection, new: bool) -> Result<(), StoreError> {
    let at: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(sql)?;
    for step in MIGRATIONS.iter().filter(|m| m.version > at) {
        conn.execute_batch(step.schema).map_err(sql)?;
        if !new {
            conn.execute_batch(step.backfill).map_err(sql)?;
        }
        conn.execute_batch(&format!("PRAGMA user_version = {}", step.version))
            .map_err(sql)?;
    }
    Ok(())
}

/// The `CREATE TABLE` statement of `table`, if the file has it.
fn table_sql(conn: &Connection, table: &str) -> Result<Option<String>, StoreError> {
    use rusqlite::OptionalExtension;
    conn.query_row(
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?1",
        [table],
        |r| r.get(0),
    )
    .optional()
    .map_err(sql)
}
