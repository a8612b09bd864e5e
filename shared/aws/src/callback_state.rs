//! A callback's state kept in its run's item (up to [`MAX_IN_RUN`] of them): whether
//! it is open, and its heartbeat deadline. A delivery writes the run item anyway, so a
//! delivery that closes the callback (or moves its heartbeat deadline) writes nothing
//! beside the run item and its own record, and the run's version condition covers the
//! callback too: two items in the delivery's transaction instead of three.
//!
//! The callback record stays, as the index a webhook's token finds its run by, written
//! once when the callback opens, with [`CALLBACK_STATUS`] `in_run`: its status is then
//! told by the run item, open while the run item has its attribute
//! ([`state_attr`]), closed by a delivery once not. A checkpoint that closes it (a
//! timeout, the run finishing) writes the record whole with its status, as for any
//! callback, and removes the attribute. The record's body says `open`; its status is
//! read from the run item ([`with_state`]).

use aws_sdk_dynamodb::types::AttributeValue;
use siesta::ports::StoreError;
use siesta::{CallbackRecord, CallbackStatus, Timestamp};
use std::time::Duration;

use crate::item::*;

/// The value of [`CALLBACK_STATUS`] of a callback record whose state is in the run
/// item.
const IN_RUN: &str = "in_run";

/// How many open callbacks' states a run item holds at most: a run that opens more
/// keeps the others' in their records, as before, so that the run item — which every
/// delivery, claim and lease renewal rewrites and DynamoDB bills by size — stays near
/// 1 KB, and far from DynamoDB's 400 KB, however many callbacks a run leaves open.
pub(crate) const MAX_IN_RUN: usize = 4;

/// The run item's attribute holding callback `id`'s state while it is open: its
/// heartbeat deadline in ms, 0 for none.
pub(crate) fn state_attr(id: &siesta::CallbackId) -> String {
    format!("c#{}", id.as_str())
}

/// Whether `name` is a run item's attribute holding a callback's state.
fn is_state_attr(name: &str) -> bool {
    name.starts_with("c#")
}

/// The record of an open callback whose state goes in the run item: the index a token
/// finds its run by.
pub(crate) fn in_run_record_item(
    record: &CallbackRecord,
    now: Timestamp,
    retention: Duration,
) -> Result<Item, StoreError> {
    let mut item = callback_item(record, now, retention)?;
    item.insert(CALLBACK_STATUS.into(), s(IN_RUN));
    // Kept in the run item, where it moves.
    item.remove(CALLBACK_HEARTBEAT_DEADLINE);
    Ok(item)
}

/// Whether the callback record `item` keeps its state in the run item.
pub(crate) fn is_in_run(item: &Item) -> bool {
    matches!(item.get(CALLBACK_STATUS), Some(AttributeValue::S(v)) if v == IN_RUN)
}

/// Put open callback `record`'s state in `run_item`.
pub(crate) fn put_state(run_item: &mut Item, record: &CallbackRecord) {
    let deadline = record.heartbeat.map_or(0, |h| h.deadline.millis());
    run_item.insert(state_attr(&record.callback_id), n(deadline));
}

/// The callback record `record`, read from an `in_run` record item, with the state its
/// run item holds: open with its heartbeat deadline while the run item has the
/// attribute; completed (closed by a delivery) once not, or when the run is gone.
pub(crate) fn with_state(
    mut record: CallbackRecord,
    run_item: Option<&Item>,
) -> Result<CallbackRecord, StoreError> {
    let attr = state_attr(&record.callback_id);
    match run_item.filter(|run| run.contains_key(&attr)) {
        Some(run) => {
            let deadline: i64 = get_n(run, &attr, "callback state")?;
            record.status = CallbackStatus::Open;
            if let Some(heartbeat) = record.heartbeat.as_mut() {
                heartbeat.deadline = Timestamp(deadline);
            }
        }
        None => record.status = CallbackStatus::Completed,
    }
    Ok(record)
}

/// The attributes of the callback states `run_item` holds.
pub(crate) fn state_attrs(run_item: &Item) -> Vec<String> {
    run_item
        .keys()
        .filter(|name| is_state_attr(name))
        .cloned()
        .collect()
}

/// The bytes of the callback states `run_item` holds, but those named in `except`: what
/// a write of the whole run keeps of them.
pub(crate) fn kept_state_bytes(run_item: &Item, except: &[String]) -> usize {
    let kept: Item = run_item
        .iter()
        .filter(|(name, _)| is_state_attr(name) && !except.contains(name))
        .map(|(name, value)| (name.clone(), value.clone()))
        .collect();
    item_size(&kept)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::EXPIRES_AT;
    use siesta::{CallbackHeartbeat, CallbackId, Position, RunId, TenantId};

    fn record(heartbeat: bool) -> CallbackRecord {
        CallbackRecord {
            callback_id: CallbackId("cb_1".into()),
            tenant: TenantId("t".into()),
            run_id: RunId("r".into()),
            position: Position("pay#1".into()),
            status: CallbackStatus::Open,
            deadline: Some(Timestamp(9_000)),
            created_at: Timestamp(1_000),
            accepts: None,
            heartbeat: heartbeat
                .then(|| CallbackHeartbeat::new(Duration::from_secs(2), Timestamp(1_000))),
        }
    }

    #[test]
    fn an_open_callback_reads_back_as_it_was_opened() {
        for heartbeat in [false, true] {
            let opened = record(heartbeat);
            let item = in_run_record_item(&opened, Timestamp(1_000), Duration::ZERO).unwrap();
            assert!(is_in_run(&item));
            // Its deadline (9 s) plus the retention (none here), never sooner.
            assert_eq!(
                item.get(EXPIRES_AT),
                Some(&crate::item::n(9)),
                "an open record expires after its deadline"
            );
            let mut run = Item::new();
            put_state(&mut run, &opened);
            let read = callback_from_item(&item).unwrap();
            assert_eq!(with_state(read, Some(&run)).unwrap(), opened);
        }
    }

    #[test]
    fn the_run_items_heartbeat_deadline_is_the_callbacks() {
        let opened = record(true);
        let mut moved = opened.clone();
        moved.heartbeat_received(Timestamp(4_000));
        let mut run = Item::new();
        put_state(&mut run, &moved);
        assert_eq!(with_state(opened, Some(&run)).unwrap(), moved);
    }

    #[test]
    fn a_callback_without_its_attribute_or_its_run_is_closed() {
        let run = Item::from([("status".to_owned(), s("waiting"))]);
        for run_item in [Some(&run), None] {
            let read = with_state(record(false), run_item).unwrap();
            assert_eq!(read.status, CallbackStatus::Completed);
        }
    }

    #[test]
    fn an_in_run_records_body_says_open_but_its_status_is_not_the_records_open() {
        let item = in_run_record_item(&record(false), Timestamp(1_000), Duration::ZERO).unwrap();
        assert_eq!(
            callback_from_item(&item).unwrap().status,
            CallbackStatus::Open
        );
        assert_ne!(item.get(CALLBACK_STATUS), Some(&open_callback_status()));
    }

    #[test]
    fn kept_state_bytes_count_the_states_left() {
        let mut run = Item::from([("status".to_owned(), s("waiting"))]);
        put_state(&mut run, &record(false));
        let mut other = record(false);
        other.callback_id = CallbackId("cb_2".into());
        put_state(&mut run, &other);
        let one = kept_state_bytes(&run, &[state_attr(&other.callback_id)]);
        assert_eq!(one, "c#cb_1".len() + 2);
        assert_eq!(kept_state_bytes(&run, &[]), 2 * one);
    }
}
