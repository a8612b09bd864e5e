//! Deliveries inside the writer's transaction: [`apply_delivery`] (the rules of
//! [`RunStore::deliver`]) and the callback records it and a checkpoint write.

use rusqlite::{Connection, OptionalExtension, params};
use siesta::ports::*;
use siesta::*;

use crate::store::{Indexed, get_keyed_run, insert_event, update_run};
use crate::{from_json, sql, to_json};

/// Apply a delivery inside a transaction, with the rules of [`RunStore::deliver`].
pub(crate) fn apply_delivery(
    tx: &Connection,
    d: &NewDelivery,
) -> Result<DeliverOutcome, StoreError> {
    let (key, mut run) =
        get_keyed_run(tx, &d.tenant.0, &d.run_id.0)?.ok_or(StoreError::NotFound)?;
    let stored = Indexed::of(&run);
    let duplicate: Option<i64> = tx
        .prepare_cached("SELECT seq FROM deliveries WHERE run = ?1 AND id = ?2")
        .map_err(sql)?
        .query_row(params![key, d.id.0], |r| r.get(0))
        .optional()
        .map_err(sql)?;
    if duplicate.is_some() {
        return Ok(DeliverOutcome::Duplicate);
    }
    if run.status.is_finished() {
        return Err(StoreError::Gone(format!(
            "run {} is {}",
            run.id, run.status
        )));
    }
    if let Some(callback_id) = d.body.callback_id() {
        let mut record = get_callback(tx, callback_id)?
            .filter(|r| r.tenant == d.tenant && r.run_id == d.run_id)
            .ok_or(StoreError::NotFound)?;
        if record.status != CallbackStatus::Open {
            return Err(StoreError::Gone(format!(
                "callback {callback_id} is closed"
            )));
        }
        if let Some(why) = record.too_late(d.received_at) {
            return Err(StoreError::Gone(why));
        }
        if !matches!(d.body, DeliveryBody::CallbackHeartbeat { .. }) {
            record.status = CallbackStatus::Completed;
            put_callback(tx, &record)?;
        } else if record.heartbeat.is_some() {
            record.heartbeat_received(d.received_at);
            put_callback(tx, &record)?;
        }
    }
    run.inbox_seq += 1;
    run.timeline_seq += 1;
    run.version += 1;
    run.updated_at = d.received_at;
    if run.status == RunStatus::Waiting {
        run.due_at = Some(d.received_at);
        run.resend_after = d.resend_after;
    }
    let delivery = Delivery {
        id: d.id.clone(),
        tenant: d.tenant.clone(),
        run_id: d.run_id.clone(),
        seq: run.inbox_seq,
        body: d.body.clone(),
        received_at: d.received_at,
    };
    tx.prepare_cached("INSERT INTO deliveries (run, id, seq, body) VALUES (?1, ?2, ?3, ?4)")
        .map_err(sql)?
        .execute(params![
            key,
            d.id.0,
            delivery.seq as i64,
            to_json(&delivery)?
        ])
        .map_err(sql)?;
    let mut event = d.event.clone();
    event.seq = run.timeline_seq;
    insert_event(tx, key, &run, &event)?;
    update_run(tx, stored, &run)?;
    Ok(DeliverOutcome::Accepted(Box::new(run)))
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

fn put_callback(tx: &Connection, record: &CallbackRecord) -> Result<(), StoreError> {
    put_callback_as(tx, &record.callback_id, &to_json(record)?)
}

/// [`put_callback`] with the record already encoded as `body`.
pub(crate) fn put_callback_as(
    tx: &Connection,
    id: &CallbackId,
    body: &str,
) -> Result<(), StoreError> {
    tx.prepare_cached("INSERT OR REPLACE INTO callbacks (callback_id, body) VALUES (?1, ?2)")
        .map_err(sql)?
        .execute(params![id.0, body])
        .map_err(sql)?;
    Ok(())
}
