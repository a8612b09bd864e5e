//! Deliveries inside the writer's transaction: [`apply_delivery`] reads what the rules
//! of [`RunStore::deliver`] decide on, lets the core decide ([`siesta::delivery`]) and
//! writes what it says; and the callback records it and a checkpoint write.

use rusqlite::{Connection, OptionalExtension, params};
use siesta::delivery::{CallbackChange, Decision};
use siesta::ports::*;
use siesta::*;

use crate::retention::ReapSchedule;
use crate::store::{Indexed, get_keyed_run, insert_event, update_run};
use crate::{from_json, sql, to_json};

/// Apply a delivery inside a transaction: read the run, whether the id is stored and
/// the callback record, decide, write. The read is inside the write's transaction, so
/// a callback the delivery only needs open ([`CallbackChange::RequireOpen`]) is not
/// written.
pub(crate) fn apply_delivery(
    tx: &Connection,
    d: &NewDelivery,
    reaping: &ReapSchedule,
) -> Result<DeliverOutcome, StoreError> {
    let (key, run) = get_keyed_run(tx, &d.tenant.0, &d.run_id.0)?.ok_or(StoreError::NotFound)?;
    let stored = Indexed::of(&run);
    let duplicate: Option<i64> = tx
        .prepare_cached("SELECT seq FROM deliveries WHERE run = ?1 AND id = ?2")
        .map_err(sql)?
        .query_row(params![key, d.id.0], |r| r.get(0))
        .optional()
        .map_err(sql)?;
    let callback = match d.body.callback_id() {
        Some(id) if duplicate.is_none() && !run.status.is_finished() => get_callback(tx, id)?,
        _ => None,
    };
    let accepted = match siesta::delivery::decide(d, Some(run), duplicate.is_some(), callback)? {
        Decision::Duplicate => return Ok(DeliverOutcome::Duplicate),
        Decision::Accept(accepted) => accepted,
    };
    if let Some(CallbackChange::Write(record)) = &accepted.callback {
        put_callback_as(tx, &record.callback_id, &to_json(record)?, Some(key))?;
    }
    tx.prepare_cached("INSERT INTO deliveries (run, id, seq, body) VALUES (?1, ?2, ?3, ?4)")
        .map_err(sql)?
        .execute(params![
            key,
            accepted.delivery.id.0,
            accepted.delivery.seq as i64,
            to_json(&accepted.delivery)?
        ])
        .map_err(sql)?;
    insert_event(tx, key, &accepted.run, &accepted.event)?;
    update_run(tx, stored, &accepted.run, reaping)?;
    Ok(DeliverOutcome::Accepted(Box::new(accepted.run)))
}

pub(crate) fn get_callback(
    tx: &Connection,
    id: &CallbackId,
) -> Result<Option<CallbackRecord>, StoreError> {
    let body: Option<String> = tx
        .query_row(
            "SELECT body FROM callbacks WHERE callback_id = ?1",
            params![id.0],
            |r| r.get(0),
        )
        .optional()
        .map_err(sql)?;
    body.map(|b| from_json(&b)).transpose()
}

/// Store the callback record `id`, encoded as `body`, of the run whose key is `run`.
pub(crate) fn put_callback_as(
    tx: &Connection,
    id: &CallbackId,
    body: &str,
    run: Option<i64>,
) -> Result<(), StoreError> {
    tx.prepare_cached(
        "INSERT OR REPLACE INTO callbacks (callback_id, body, run) VALUES (?1, ?2, ?3)",
    )
    .map_err(sql)?
    .execute(params![id.0, body, run])
    .map_err(sql)?;
    Ok(())
}
