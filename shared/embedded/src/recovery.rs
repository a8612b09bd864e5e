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

use rusqlite::{Connection, params};
use siesta::Timestamp;
use siesta::ports::StoreError;

use crate::{Indexed, get_run, sql, update_run};

/// Clear the `resend_after` of every run whose promised wake-up the queue does not
/// hold; how many. One seek on the due index from `now` on (a `resend_after` in the
/// past already lets the sweep see the run) and one on the queue per run found.
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
        .prepare(
            "SELECT tenant, run_id FROM runs WHERE sweep_at IS NOT NULL AND sweep_at > ?1
               AND sweep_at > due_at
               AND NOT EXISTS (SELECT 1 FROM wake_queue
                               WHERE wake_queue.tenant = runs.tenant AND wake_queue.run_id = runs.run_id)",
        )
        .map_err(sql)?
        .query_map(params![now.0], |r| Ok((r.get(0)?, r.get(1)?)))
        .map_err(sql)?
        .collect::<Result<_, _>>()
        .map_err(sql)?;
    for (tenant, run_id) in &lost {
        if let Some(mut run) = get_run(conn, tenant, run_id)? {
            let stored = Indexed::of(&run);
            run.resend_after = None;
            update_run(conn, stored, &run)?;
        }
    }
    Ok(lost.len())
}
