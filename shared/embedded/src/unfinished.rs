//! Each tenant's count of unfinished runs, kept by the file itself.
//!
//! A start under a quota ([`siesta::ports::RunStore::create_run_within`]) compares the
//! tenant's unfinished runs with its limit. Counting them with `count(*)` over the
//! status index visits every one of them, so a start's cost grew with the tenant's
//! sleeping runs (at 1 000 000 asleep, a million index entries per start). The count
//! is kept instead in `tenant_unfinished`, one row per tenant, by triggers on `runs`:
//! every way a run is inserted, changes status or is deleted moves it, in the same
//! transaction as the change, so no code path can forget to (the same rule as the
//! counter item on DynamoDB, which the adapter updates in the create's and the
//! finishing checkpoint's transaction). A run counts while its status is not
//! finished ([`siesta::RunStatus::is_finished`]: completed, failed, cancelled).

use rusqlite::{Connection, OptionalExtension, params};
use siesta::TenantId;
use siesta::ports::StoreError;

use crate::sql;

/// The counter table and the triggers that keep it (idempotent). Their conditions
/// spell the finished statuses out rather than as an `IN` list, which SQLite evaluates
/// by building a temporary table every time a run is inserted or changes status.
const COUNTER: &str = "
CREATE TABLE IF NOT EXISTS tenant_unfinished (
    tenant TEXT PRIMARY KEY, runs INTEGER NOT NULL) WITHOUT ROWID;
CREATE TRIGGER IF NOT EXISTS tenant_unfinished_insert AFTER INSERT ON runs
    WHEN new.status <> 'completed' AND new.status <> 'failed' AND new.status <> 'cancelled'
    BEGIN
        INSERT INTO tenant_unfinished (tenant, runs) VALUES (new.tenant, 1)
            ON CONFLICT (tenant) DO UPDATE SET runs = runs + 1;
    END;
CREATE TRIGGER IF NOT EXISTS tenant_unfinished_delete AFTER DELETE ON runs
    WHEN old.status <> 'completed' AND old.status <> 'failed' AND old.status <> 'cancelled'
    BEGIN
        UPDATE tenant_unfinished SET runs = runs - 1 WHERE tenant = old.tenant;
    END;
CREATE TRIGGER IF NOT EXISTS tenant_unfinished_finish AFTER UPDATE OF status ON runs
    WHEN old.status <> 'completed' AND old.status <> 'failed' AND old.status <> 'cancelled'
     AND (new.status = 'completed' OR new.status = 'failed' OR new.status = 'cancelled')
    BEGIN
        UPDATE tenant_unfinished SET runs = runs - 1 WHERE tenant = old.tenant;
    END;
CREATE TRIGGER IF NOT EXISTS tenant_unfinished_unfinish AFTER UPDATE OF status ON runs
    WHEN (old.status = 'completed' OR old.status = 'failed' OR old.status = 'cancelled')
     AND new.status <> 'completed' AND new.status <> 'failed' AND new.status <> 'cancelled'
    BEGIN
        INSERT INTO tenant_unfinished (tenant, runs) VALUES (new.tenant, 1)
            ON CONFLICT (tenant) DO UPDATE SET runs = runs + 1;
    END;
";

/// The four triggers, dropped to be made again by [`COUNTER`].
const DROP_TRIGGERS: &str = "
DROP TRIGGER IF EXISTS tenant_unfinished_insert;
DROP TRIGGER IF EXISTS tenant_unfinished_delete;
DROP TRIGGER IF EXISTS tenant_unfinished_finish;
DROP TRIGGER IF EXISTS tenant_unfinished_unfinish;
";

/// Counts a file's runs once, when the counter is new to it (a new file, one made
/// before the counter existed, or one whose `runs` table was rebuilt).
const COUNT_EXISTING: &str = "
DELETE FROM tenant_unfinished;
INSERT INTO tenant_unfinished (tenant, runs)
    SELECT tenant, count(*) FROM runs
     WHERE status NOT IN ('completed', 'failed', 'cancelled') GROUP BY tenant;
";

/// A tenant's unfinished runs: one primary-key lookup.
const UNFINISHED_RUNS: &str = "SELECT runs FROM tenant_unfinished WHERE tenant = ?1";

/// Create the counter and its triggers if the file lacks them, counting the runs it
/// already holds unless it is `new` (no runs yet). Call inside the transaction that
/// brings the file's tables up to date, after the `runs` table exists.
pub(crate) fn ensure(conn: &Connection, new: bool) -> Result<(), StoreError> {
    // The table and its four triggers. A trigger goes with its table when the table is
    // dropped (as a layout rebuild drops the old `runs`), and a count not kept by all
    // four is not to be trusted: count again.
    let kept: i64 = conn
        .query_row(
            "SELECT count(*) FROM sqlite_master WHERE name = 'tenant_unfinished' OR (type = 'trigger' AND tbl_name = 'runs' AND name LIKE 'tenant_unfinished_%')",
            [],
            |r| r.get(0),
        )
        .map_err(sql)?;
    // The triggers are made again at every open, so a file whose triggers were written
    // with `IN` lists gets these; the count they keep does not move meanwhile (one
    // transaction, no run written).
    conn.execute_batch(DROP_TRIGGERS).map_err(sql)?;
    conn.execute_batch(COUNTER).map_err(sql)?;
    if kept != 5 && !new {
        conn.execute_batch(COUNT_EXISTING).map_err(sql)?;
    }
    Ok(())
}

/// How many of `tenant`'s runs are not finished.
pub(crate) fn count(conn: &Connection, tenant: &TenantId) -> Result<u64, StoreError> {
    conn.prepare_cached(UNFINISHED_RUNS)
        .map_err(sql)?
        .query_row(params![tenant.0], |r| r.get::<_, i64>(0))
        .optional()
        .map(|n| n.unwrap_or(0).max(0) as u64)
        .map_err(sql)
}

#[cfg(test)]
mod tests {
    use super::*;

    const FINISHED: [&str; 3] = ["completed", "failed", "cancelled"];
    const ALL: [&str; 7] = [
        "pending",
        "running",
        "waiting",
        "completed",
        "failed",
        "cancelled",
        "parked",
    ];

    /// A minimal `runs` table with the columns the triggers read.
    fn file() -> Connection {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(
            "CREATE TABLE runs (key INTEGER PRIMARY KEY, tenant TEXT NOT NULL, status TEXT NOT NULL)",
        )
        .unwrap();
        conn
    }

    fn counted(conn: &Connection, tenant: &str) -> u64 {
        count(conn, &TenantId(tenant.to_owned())).unwrap()
    }

    fn recounted(conn: &Connection, tenant: &str) -> u64 {
        conn.query_row(
            "SELECT count(*) FROM runs WHERE tenant = ?1 AND status NOT IN ('completed', 'failed', 'cancelled')",
            [tenant],
            |r| r.get::<_, i64>(0),
        )
        .unwrap() as u64
    }

    #[test]
    fn the_counter_follows_every_insert_status_change_and_delete() {
        let conn = file();
        ensure(&conn, false).unwrap();
        assert_eq!(counted(&conn, "a"), 0);
        // Every status a run may be created in, and every transition between two.
        for (i, status) in ALL.iter().enumerate() {
            conn.execute(
                "INSERT INTO runs (key, tenant, status) VALUES (?1, 'a', ?2)",
                params![i as i64, status],
            )
            .unwrap();
        }
        conn.execute(
            "INSERT INTO runs (key, tenant, status) VALUES (100, 'b', 'waiting')",
            [],
        )
        .unwrap();
        assert_eq!(counted(&conn, "a"), 4);
        for from in ALL {
            for to in ALL {
                conn.execute("UPDATE runs SET status = ?1 WHERE key = 0", [from])
                    .unwrap();
                conn.execute("UPDATE runs SET status = ?1 WHERE key = 0", [to])
                    .unwrap();
                assert_eq!(counted(&conn, "a"), recounted(&conn, "a"), "{from} -> {to}");
            }
        }
        // An update that leaves the status alone moves nothing.
        conn.execute("UPDATE runs SET tenant = tenant WHERE key = 1", [])
            .unwrap();
        assert_eq!(counted(&conn, "a"), recounted(&conn, "a"));
        conn.execute("DELETE FROM runs WHERE key IN (1, 3)", [])
            .unwrap();
        assert_eq!(counted(&conn, "a"), recounted(&conn, "a"));
        assert_eq!(counted(&conn, "b"), 1);
        assert_eq!(counted(&conn, "nobody"), 0);
    }

    #[test]
    fn a_file_made_before_the_counter_has_its_runs_counted_once_when_opened() {
        let conn = file();
        for (i, status) in ALL.iter().chain(FINISHED.iter()).enumerate() {
            conn.execute(
                "INSERT INTO runs (key, tenant, status) VALUES (?1, ?2, ?3)",
                params![i as i64, if i % 2 == 0 { "a" } else { "b" }, status],
            )
            .unwrap();
        }
        ensure(&conn, false).unwrap();
        assert_eq!(counted(&conn, "a"), recounted(&conn, "a"));
        assert_eq!(counted(&conn, "b"), recounted(&conn, "b"));
        // Opening it again neither recounts nor counts twice.
        ensure(&conn, false).unwrap();
        conn.execute(
            "INSERT INTO runs (key, tenant, status) VALUES (50, 'a', 'pending')",
            [],
        )
        .unwrap();
        assert_eq!(counted(&conn, "a"), recounted(&conn, "a"));
    }

    #[test]
    fn a_runs_table_rebuilt_without_the_triggers_is_counted_again() {
        let conn = file();
        ensure(&conn, false).unwrap();
        conn.execute(
            "INSERT INTO runs (key, tenant, status) VALUES (1, 'a', 'waiting')",
            [],
        )
        .unwrap();
        // A rebuild: the old table (and its triggers) go, a new one is filled.
        conn.execute_batch(
            "ALTER TABLE runs RENAME TO old_runs;
             CREATE TABLE runs (key INTEGER PRIMARY KEY, tenant TEXT NOT NULL, status TEXT NOT NULL);
             INSERT INTO runs SELECT * FROM old_runs;
             INSERT INTO runs (key, tenant, status) VALUES (2, 'a', 'pending');
             DROP TABLE old_runs;",
        )
        .unwrap();
        ensure(&conn, false).unwrap();
        assert_eq!(counted(&conn, "a"), 2);
        conn.execute("UPDATE runs SET status = 'completed' WHERE key = 2", [])
            .unwrap();
        assert_eq!(counted(&conn, "a"), 1);
    }
}
