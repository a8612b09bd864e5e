//! Wake-ups lost with the process that was to send them.
//!
//! A write that leaves a run due and promises a wake-up sets the run's `resend_after`,
//! and the sweep leaves the run alone until then (a margin of 15 minutes by default):
//! the wake-up may merely wait behind a backlog. On this backend the queue is a table
//! of the same file, and a send either commits or fails with an error (the engine then
//! clears `resend_after` itself), so a promised wake-up goes missing only when the
//! process dies between the write and the send, or the OS drops the unsynced send with
//! it. Either way the file is opened again before anything can send it, so opening is
//! when to look: a run whose `resend_after` lies ahead but whose wake-up the queue
//! does not hold gets its `resend_after` cleared, and the first sweep sends its wake-up
//! at once instead of a margin later.
//!
//! Opening must not cost more with every run asleep: a run waiting days for an event
//! is in the due index too (its deadline), so a seek on that index from now on visits
//! every sleeping run — 1 000 000 sleeping runs held the dev server's start-up for
//! seconds. A run whose wake-up was promised has `sweep_at > due_at` (its
//! `resend_after` pushes it past its due time) and a sleeping one does not, so
//! [`PROMISED_INDEX`] holds only the runs with a wake-up on its way, and recovery
//! reads that index alone.

use rusqlite::{Connection, params};
use siesta::Timestamp;
use siesta::ports::StoreError;

use crate::retention::ReapSchedule;
use crate::sql;
use crate::store::{Indexed, get_run, update_run};

/// The runs whose wake-up is on its way (`resend_after` after their due time), by when
/// the sweep looks at them again; it covers what recovery reads of them.
pub(crate) const PROMISED_INDEX: &str = "
CREATE INDEX IF NOT EXISTS runs_promised ON runs (sweep_at, tenant, run_id) WHERE sweep_at > due_at;
";

/// The runs whose wake-up was promised, is not due again yet (`?1`: now) and is not in
/// the queue.
const LOST: &str = "SELECT tenant, run_id FROM runs INDEXED BY runs_promised
     WHERE sweep_at > due_at AND sweep_at > ?1
       AND NOT EXISTS (SELECT 1 FROM wake_queue
                       WHERE wake_queue.tenant = runs.tenant AND wake_queue.run_id = runs.run_id)";

/// Clear the `resend_after` of every run whose promised wake-up the queue does not
/// hold; how many. One seek on [`PROMISED_INDEX`] from `now` on (a `resend_after` in
/// the past already lets the sweep see the run) and one on the queue per run found:
/// proportional to the wake-ups on their way, not to the runs asleep.
pub(crate) fn forget_lost_wake_ups(conn: &Connection, now: Timestamp) -> Result<usize, StoreError> {
    conn.execute_batch("BEGIN IMMEDIATE").map_err(sql)?;
    let forgotten = forget(conn, now);
    let end = if forgotten.is_ok() {
        "COMMIT"
    } else {
        "ROLLBACK"
    };
    conn.execute_batch(end).map_err(sql)?;
    forgotten
}

fn forget(conn: &Connection, now: Timestamp) -> Result<usize, StoreError> {
    let lost: Vec<(String, String)> = conn
        .prepare(LOST)
        .map_err(sql)?
        .query_map(params![now.0], |r| Ok((r.get(0)?, r.get(1)?)))
        .map_err(sql)?
        .collect::<Result<_, _>>()
        .map_err(sql)?;
    for (tenant, run_id) in &lost {
        if let Some(mut run) = get_run(conn, tenant, run_id)? {
            let stored = Indexed::of(&run);
            run.resend_after = None;
            // At open no rules are known: a status change would set `reap_at` to the
            // finish (this write changes none).
            update_run(conn, stored, &run, &ReapSchedule::default())?;
        }
    }
    Ok(lost.len())
}

#[cfg(test)]
mod tests {
    use rusqlite::{Connection, StatementStatus, params};

    use super::LOST;

    /// A file with `asleep` runs waiting for a deadline a day ahead and three runs whose
    /// wake-up was promised a margin ahead, of which the queue holds one.
    fn file(asleep: usize) -> Connection {
        let conn = Connection::open_in_memory().unwrap();
        crate::layout::open(&conn).unwrap();
        let (now, margin, day) = (1_000_000_i64, 900_000_i64, 86_400_000_i64);
        let mut insert = conn
            .prepare(
                "INSERT INTO runs (tenant, run_id, status, workflow, created_at, due_at, body, sweep_at)
                 VALUES ('acme', ?1, ?2, 'approval', 0, ?3, '{}', ?4)",
            )
            .unwrap();
        for i in 0..asleep {
            insert
                .execute(params![
                    format!("asleep-{i}"),
                    "waiting",
                    now + day,
                    now + day
                ])
                .unwrap();
        }
        for id in ["lost-1", "lost-2", "queued"] {
            insert
                .execute(params![id, "pending", now, now + margin])
                .unwrap();
        }
        drop(insert);
        conn.execute(
            "INSERT INTO wake_queue (tenant, run_id, lane, body, visible_at) VALUES ('acme', 'queued', 0, '{}', 0)",
            [],
        )
        .unwrap();
        conn
    }

    /// The runs recovery finds lost at `now`, and the virtual machine steps it took.
    fn lost(conn: &Connection) -> (Vec<String>, i32) {
        let mut stmt = conn.prepare(LOST).unwrap();
        let ids = stmt
            .query_map([1_000_000_i64], |r| r.get::<_, String>(1))
            .unwrap()
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        (ids, stmt.get_status(StatementStatus::VmStep))
    }

    #[test]
    fn recovery_reads_the_runs_with_a_wake_up_on_its_way_and_not_the_runs_asleep() {
        let (few, few_steps) = lost(&file(10));
        let (many, many_steps) = lost(&file(3_000));
        assert_eq!(few, ["lost-1", "lost-2"]);
        assert_eq!(many, few);
        assert_eq!(
            many_steps, few_steps,
            "3 000 runs asleep cost recovery nothing more than 10"
        );
    }
}
