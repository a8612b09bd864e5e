//! An accepted delivery (see [`siesta::delivery`]): the delivery's dedup record, its
//! event, the run under the version read, and the callback record only if the delivery
//! changes it — else a check that it is still as read. A callback whose state the run
//! item holds ([`crate::callback_state`]) changes in the run item alone, under the run's
//! version condition, which covers it.
//!
//! The delivery's event joins the run item's tail ([`tail_with_event`]) while the run
//! item stays within a write unit with [`CLAIM_ROOM`] to spare: one item fewer in the
//! transaction. Else it has a timeline item of its own.

use std::collections::HashMap;
use std::time::Duration;

use siesta::delivery::{Accepted, CallbackChange};
use siesta::ports::StoreError;
use siesta::*;

use super::{
    Action, Billed, CLAIM_ROOM, Condition, Expected, PlannedWrite, Role, StatesKept, TailKept,
    WRITE_UNIT_BYTES, names, run_write,
};
use crate::callback_state::{kept_state_bytes, put_state, state_attr};
use crate::history_item::{archived_tail, tail_with_event};
use crate::item::*;
use crate::keys::*;

/// The transactional writes of the accepted delivery `plan`, given the run item as
/// read (`read`, for the tail and callback states it holds) and whether the callback
/// it names keeps its state in the run item.
pub(crate) fn delivery(
    plan: &Accepted,
    read: Option<&Item>,
    retention: Duration,
    callback_in_run: bool,
) -> Result<Vec<PlannedWrite>, StoreError> {
    let mut writes = vec![PlannedWrite::insert(
        Role::DeliveryRecord,
        delivery_item(&plan.delivery)?,
    )];
    let mut item = run_item(&plan.run, retention)?;
    let mut states = StatesKept::default();
    // The state this delivery writes (set or removed); one it only requires is kept.
    let mut own_state = Vec::new();
    if let Some(CallbackChange::Write(record)) = plan.callback.as_ref().filter(|_| callback_in_run)
    {
        let attr = state_attr(&record.callback_id);
        match record.status {
            CallbackStatus::Open => put_state(&mut item, record),
            _ => states.removed.push(attr.clone()),
        }
        own_state.push(attr);
    }
    if let Some(read) = read {
        states.kept_bytes = kept_state_bytes(read, &own_state);
        states.before_bytes = item_size(read);
    }
    let tail = match read {
        Some(read) => tail_with_event(
            &plan.run,
            plan.read_version,
            archived_tail(read)?.as_ref(),
            &plan.event,
        )?,
        None => None,
    };
    // With room for the lease the claim that follows adds, so that it stays one unit.
    let in_tail = tail.is_some_and(|tail| {
        let mut with_tail = item.clone();
        tail.put_in(&mut with_tail);
        let fits = item_size(&with_tail) + states.kept_bytes + CLAIM_ROOM <= WRITE_UNIT_BYTES;
        if fits {
            item = with_tail;
        }
        fits
    });
    if !in_tail {
        writes.push(PlannedWrite::insert(
            Role::DeliveryTimeline,
            timeline_item(&plan.run.tenant, &plan.run.id, &plan.event)?,
        ));
    }
    let expected = Expected {
        version: plan.read_version,
        epoch: None,
        first_event: None,
        // The lease as read: the delivery writes it back.
        lease_expires: Some(plan.run.lease.as_ref().map(|l| l.expires_at)),
    };
    writes.push(run_write(
        Role::DeliveryRun,
        &item,
        &expected,
        TailKept::Kept,
        &states,
        true,
    )?);
    if let Some(change) = plan.callback.as_ref().filter(|_| !callback_in_run) {
        let open = still_open(plan.delivery.received_at);
        let record = callback_item(change.record(), plan.delivery.received_at, retention)?;
        writes.push(match change {
            CallbackChange::Write(_) => {
                PlannedWrite::put(Role::DeliveryCallback, record, Some(open), true)
            }
            CallbackChange::RequireOpen(callback) => PlannedWrite {
                role: Role::DeliveryCallback,
                action: Action::Check {
                    key: key(callback_pk(&callback.callback_id), RECORD_SK),
                },
                condition: Some(open),
                transactional: true,
                // A check is billed like a write of the item it checks.
                billed: Billed::Bytes(item_size(&record)),
                run_after: None,
            },
        });
    }
    Ok(writes)
}

/// That the callback record is open, and neither its deadline nor its heartbeat
/// deadline passed when the delivery was `received`: a completion or heartbeat after
/// either is refused even if the run has not yet recorded the timeout. The decision was
/// made on a read outside the transaction, so the write checks it again.
fn still_open(received: Timestamp) -> Condition {
    Condition {
        expression: "#callback_status = :open AND (attribute_not_exists(#callback_deadline) OR #callback_deadline > :received) AND (attribute_not_exists(#heartbeat_deadline) OR #heartbeat_deadline > :received)".into(),
        names: names(&[
            ("#callback_status", CALLBACK_STATUS),
            ("#callback_deadline", CALLBACK_DEADLINE),
            ("#heartbeat_deadline", CALLBACK_HEARTBEAT_DEADLINE),
        ]),
        values: HashMap::from([
            (":open".to_owned(), open_callback_status()),
            (":received".to_owned(), n(received.millis())),
        ]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::{DUE_INDEX, TENANT_INDEX};
    use crate::layout::fixtures::*;
    use crate::layout::{Action, WritePlan};
    use proptest::prelude::*;

    fn roles(writes: &[PlannedWrite]) -> Vec<Role> {
        writes.iter().map(|w| w.role).collect()
    }

    #[test]
    fn a_delivery_to_a_waiting_run_writes_its_record_and_the_run_moved_into_the_due_index() {
        // GIVEN a run waiting with no deadline (out of the due index), read as stored
        let mut waiting = run(RunStatus::Waiting);
        waiting.due_at = None;
        let read = run_item(&waiting, RETENTION).unwrap();
        let plan = accepted(&waiting, an_event(), "yes", None);
        // WHEN the delivery is planned
        let writes = delivery(&plan, Some(&read), RETENTION, false).unwrap();
        // THEN its record is inserted and the run item holds its event: two items
        assert_eq!(roles(&writes), [Role::DeliveryRecord, Role::DeliveryRun]);
        assert_eq!(
            writes[0].condition.as_ref().map(|c| c.expression.as_str()),
            Some("attribute_not_exists(pk)")
        );
        let run_write = &writes[1];
        assert!(run_write.transactional);
        assert!(written_item(run_write).contains_key(TAIL));
        // conditioned on the version read and the lease as read (none)
        assert_eq!(
            condition(run_write).expression,
            "#version = :v AND attribute_not_exists(#lease_expires)"
        );
        assert_eq!(values(run_write).get(":v"), Some(&n(3)));
        // and the run enters the due index (due at once), its tenant entry unchanged
        let moved: Vec<_> = run_write
            .index_effects(Some(&read))
            .into_iter()
            .map(|w| (w.index, w.writes))
            .collect();
        assert_eq!(moved, [(DUE_INDEX, 1)]);
        assert!(!moved.iter().any(|(i, _)| *i == TENANT_INDEX));
    }

    #[test]
    fn an_event_that_would_take_the_run_item_past_a_write_unit_has_an_item_of_its_own() {
        let waiting = run(RunStatus::Waiting);
        let read = run_item(&waiting, RETENTION).unwrap();
        let plan = accepted(&waiting, an_event(), &noise(900, 7), None);
        let writes = delivery(&plan, Some(&read), RETENTION, false).unwrap();
        assert_eq!(
            roles(&writes),
            [
                Role::DeliveryRecord,
                Role::DeliveryTimeline,
                Role::DeliveryRun
            ]
        );
        assert!(!written_item(&writes[2]).contains_key(TAIL));
    }

    #[test]
    fn a_callback_whose_state_is_in_the_run_item_is_closed_there_alone() {
        let waiting = run(RunStatus::Waiting);
        let mut read = run_item(&waiting, RETENTION).unwrap();
        let open = callback("cb_1");
        put_state(&mut read, &open);
        let body = DeliveryBody::CallbackSucceeded {
            callback_id: open.callback_id.clone(),
            value: Payload::Inline(serde_json::json!(1)),
        };
        let plan = accepted(&waiting, body, "done", Some(open.clone()));
        let writes = delivery(&plan, Some(&read), RETENTION, true).unwrap();
        assert_eq!(roles(&writes), [Role::DeliveryRecord, Role::DeliveryRun]);
        let Action::Update { names, .. } = &writes[1].action else {
            panic!("the run item is updated");
        };
        assert!(
            names.values().any(|n| *n == state_attr(&open.callback_id)),
            "its state removed"
        );
    }

    #[test]
    fn a_callback_record_is_written_or_checked_on_the_condition_it_is_open_and_in_time() {
        let waiting = run(RunStatus::Waiting);
        let read = run_item(&waiting, RETENTION).unwrap();
        let open = callback("cb_1");
        let done = DeliveryBody::CallbackSucceeded {
            callback_id: open.callback_id.clone(),
            value: Payload::Inline(serde_json::json!(1)),
        };
        let heartbeat = DeliveryBody::CallbackHeartbeat {
            callback_id: open.callback_id.clone(),
        };
        for (body, is_check) in [(done, false), (heartbeat, true)] {
            let plan = accepted(&waiting, body, "", Some(open.clone()));
            let writes = delivery(&plan, Some(&read), RETENTION, false).unwrap();
            let record = writes.last().unwrap();
            assert_eq!(record.role, Role::DeliveryCallback);
            // A heartbeat to a callback without a heartbeat timeout changes nothing.
            assert_eq!(matches!(record.action, Action::Check { .. }), is_check);
            assert!(
                condition(record)
                    .expression
                    .starts_with("#callback_status = :open")
            );
            assert_eq!(values(record).get(":received"), Some(&n(5_000)));
        }
    }

    proptest! {
        /// Whatever the event's size and the callback states the run item keeps, the
        /// event joins the run item only while it stays within a write unit with room
        /// for the claim, else it has an item of its own — never both, never neither;
        /// and the plan's write units are the sum of its writes'.
        #[test]
        fn the_event_is_in_the_run_item_only_with_room_for_the_claim(
            note in 0usize..1_500,
            seed in any::<u64>(),
            states in 0usize..=4,
        ) {
            let waiting = run(RunStatus::Waiting);
            let mut read = run_item(&waiting, RETENTION).unwrap();
            for i in 0..states {
                put_state(&mut read, &callback(&format!("cb_{i}")));
            }
            let plan = accepted(&waiting, an_event(), &noise(note, seed), None);
            let writes = delivery(&plan, Some(&read), RETENTION, false).unwrap();
            let run_write = writes.iter().find(|w| w.role == Role::DeliveryRun).unwrap();
            let in_tail = written_item(run_write).contains_key(TAIL);
            let own_item = writes.iter().any(|w| w.role == Role::DeliveryTimeline);
            prop_assert!(in_tail != own_item);
            if in_tail {
                let stored = item_size(&written_item(run_write)) + kept_state_bytes(&read, &[]);
                prop_assert!(stored + CLAIM_ROOM <= WRITE_UNIT_BYTES);
            }
            let plan = WritePlan { writes };
            let sum: f64 = plan.writes.iter().map(|w| match w.billed {
                Billed::Bytes(b) => w.write_units_of(b),
                Billed::Returned => 0.0,
            }).sum();
            prop_assert_eq!(plan.write_units(), sum);
            prop_assert!(plan.oversized().is_empty());
        }
    }
}
