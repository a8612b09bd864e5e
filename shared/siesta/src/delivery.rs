//! The rules of [`RunStore::deliver`](crate::ports::RunStore::deliver) as one pure
//! decision, so that every adapter reads, calls [`decide`], and writes what it says.
//!
//! Invariants [`decide`] keeps, and why:
//! - **Checks in the port's contract order.** The run must exist (else `NotFound`); a
//!   delivery id stored before is a duplicate and changes nothing, even once the run has
//!   finished (a retried webhook is acknowledged); a finished run refuses the rest
//!   (`Gone`); a callback delivery needs the callback record, of this run (else
//!   `NotFound`), open, and neither past its deadline nor its heartbeat deadline at the
//!   delivery's `received_at` (else `Gone`) — so a late outcome is refused even before
//!   the run has recorded the timeout.
//! - **An accepted delivery moves the run by one.** `inbox_seq` + 1 is the delivery's
//!   `seq`, `timeline_seq` + 1 its event's `seq`, `version` + 1 (the write is
//!   conditioned on the version read), `updated_at` is `received_at`. A waiting run is
//!   due now, and its `resend_after` is the delivery's: the sweep skips it until then,
//!   as its wake-up is on its way. The sender keeps that margin short (the engine's
//!   `delivery_resend_margin`), since on SQS a wake-up lost with its sender (killed
//!   between the write and the send) shows only as this due entry; a running one keeps
//!   its due time, which is its lease's.
//! - **No write for nothing.** The callback record is written only when the delivery
//!   changes it: an outcome closes it (single use); a heartbeat moves its heartbeat
//!   deadline when it has one and the deadline moves. Otherwise the delivery only needs
//!   the record as it was read ([`CallbackChange::RequireOpen`]): an adapter whose read
//!   is inside its write transaction writes nothing, one that reads first (DynamoDB)
//!   checks the same conditions in its write.

use crate::model::*;
use crate::ports::{NewDelivery, StoreError};

/// What an accepted delivery writes.
#[derive(Debug, Clone, PartialEq)]
pub struct Accepted {
    /// The run after the delivery.
    pub run: Run,
    /// The version the run had when it was read: the write's condition.
    pub read_version: u64,
    /// The delivery as stored, with its inbox `seq`.
    pub delivery: Delivery,
    /// Its timeline event, with its `seq`.
    pub event: TimelineEvent,
    /// What happens to the callback record, for a callback delivery.
    pub callback: Option<CallbackChange>,
}

/// What a callback delivery does to the callback record.
#[derive(Debug, Clone, PartialEq)]
pub enum CallbackChange {
    /// Write the record: closed by an outcome, or its heartbeat deadline moved.
    Write(CallbackRecord),
    /// Write nothing, but the record must still be as read (open, in time): a
    /// heartbeat for a callback without a heartbeat timeout.
    RequireOpen(CallbackRecord),
}

impl CallbackChange {
    /// The record, written or required.
    pub fn record(&self) -> &CallbackRecord {
        match self {
            CallbackChange::Write(r) | CallbackChange::RequireOpen(r) => r,
        }
    }
}

/// What a delivery comes to.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// A delivery with this id was stored before: nothing changes.
    Duplicate,
    /// Write this.
    Accept(Box<Accepted>),
}

/// Decide delivery `d` from what was read: the run, whether a delivery with its id is
/// stored, and the callback record its body names (if any). See the module's
/// invariants.
pub fn decide(
    d: &NewDelivery,
    run: Option<Run>,
    already_stored: bool,
    callback: Option<CallbackRecord>,
) -> Result<Decision, StoreError> {
    let mut run = run.ok_or(StoreError::NotFound)?;
    if already_stored {
        return Ok(Decision::Duplicate);
    }
    if let DeliveryBody::ChildFinished {
        parent_created_at: Some(created_at),
        ..
    } = &d.body
        && *created_at != run.created_at
    {
        return Err(StoreError::Gone(format!(
            "run {} is not the child's parent but a later run under its id",
            run.id
        )));
    }
    if run.status.is_finished() {
        return Err(StoreError::Gone(format!(
            "run {} is {}",
            run.id, run.status
        )));
    }
    let callback = match d.body.callback_id() {
        None => None,
        Some(callback_id) => {
            let read = callback
                .filter(|r| r.tenant == d.tenant && r.run_id == d.run_id)
                .ok_or(StoreError::NotFound)?;
            if read.status != CallbackStatus::Open {
                return Err(StoreError::Gone(format!(
                    "callback {callback_id} is closed"
                )));
            }
            if let Some(why) = read.too_late(d.received_at) {
                return Err(StoreError::Gone(why));
            }
            let mut record = read.clone();
            if matches!(d.body, DeliveryBody::CallbackHeartbeat { .. }) {
                record.heartbeat_received(d.received_at);
            } else {
                record.status = CallbackStatus::Completed;
            }
            Some(if record == read {
                CallbackChange::RequireOpen(read)
            } else {
                CallbackChange::Write(record)
            })
        }
    };
    let read_version = run.version;
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
    let mut event = d.event.clone();
    event.seq = run.timeline_seq;
    Ok(Decision::Accept(Box::new(Accepted {
        run,
        read_version,
        delivery,
        event,
        callback,
    })))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::Timestamp;
    use proptest::prelude::*;
    use serde_json::json;

    fn run(status: RunStatus) -> Run {
        let mut run = Run::new(
            TenantId("t".into()),
            RunId("r".into()),
            "order",
            Payload::Inline(json!(null)),
            Timestamp(1),
        );
        run.status = status;
        run.inbox_seq = 4;
        run.timeline_seq = 9;
        run.version = 12;
        run.due_at = Some(Timestamp(5_000));
        run
    }

    fn callback(status: CallbackStatus, run_id: &str) -> CallbackRecord {
        CallbackRecord {
            callback_id: CallbackId("cb".into()),
            tenant: TenantId("t".into()),
            run_id: RunId(run_id.into()),
            position: Position("payment#1".into()),
            status,
            deadline: None,
            created_at: Timestamp(1),
            accepts: None,
            heartbeat: None,
        }
    }

    fn delivery(body: DeliveryBody) -> NewDelivery {
        NewDelivery {
            id: DeliveryId("d1".into()),
            tenant: TenantId("t".into()),
            run_id: RunId("r".into()),
            body,
            received_at: Timestamp(2_000),
            resend_after: None,
            event: TimelineEvent::execution_started(Timestamp(2_000), "order", json!(null)),
        }
    }

    fn success() -> DeliveryBody {
        DeliveryBody::CallbackSucceeded {
            callback_id: CallbackId("cb".into()),
            value: Payload::Inline(json!({"ok": true})),
        }
    }

    fn heartbeat() -> DeliveryBody {
        DeliveryBody::CallbackHeartbeat {
            callback_id: CallbackId("cb".into()),
        }
    }

    fn accepted(p: Result<Decision, StoreError>) -> Accepted {
        match p {
            Ok(Decision::Accept(a)) => *a,
            other => panic!("expected a write, got {other:?}"),
        }
    }

    #[test]
    fn a_delivery_to_a_waiting_run_makes_it_due_now_and_closes_its_callback() {
        let a = accepted(decide(
            &delivery(success()),
            Some(run(RunStatus::Waiting)),
            false,
            Some(callback(CallbackStatus::Open, "r")),
        ));
        assert_eq!(a.read_version, 12);
        assert_eq!(a.run.version, 13);
        assert_eq!((a.run.inbox_seq, a.delivery.seq), (5, 5));
        assert_eq!((a.run.timeline_seq, a.event.seq), (10, 10));
        assert_eq!(a.run.due_at, Some(Timestamp(2_000)));
        let Some(CallbackChange::Write(record)) = a.callback else {
            panic!("an outcome writes the record: {:?}", a.callback)
        };
        assert_eq!(record.status, CallbackStatus::Completed);
    }

    #[test]
    fn a_delivery_to_a_running_run_leaves_its_due_time_alone() {
        let a = accepted(decide(
            &delivery(success()),
            Some(run(RunStatus::Running)),
            false,
            Some(callback(CallbackStatus::Open, "r")),
        ));
        assert_eq!(a.run.due_at, Some(Timestamp(5_000)));
    }

    #[test]
    fn a_heartbeat_without_a_heartbeat_timeout_writes_no_record_but_needs_it_open() {
        let open = callback(CallbackStatus::Open, "r");
        let a = accepted(decide(
            &delivery(heartbeat()),
            Some(run(RunStatus::Waiting)),
            false,
            Some(open.clone()),
        ));
        assert_eq!(a.callback, Some(CallbackChange::RequireOpen(open)));
    }

    #[test]
    fn a_heartbeat_moves_the_heartbeat_deadline_and_leaves_the_callback_open() {
        let watched = CallbackRecord {
            heartbeat: Some(CallbackHeartbeat::new(
                std::time::Duration::from_secs(60),
                Timestamp(1_000),
            )),
            ..callback(CallbackStatus::Open, "r")
        };
        let a = accepted(decide(
            &delivery(heartbeat()),
            Some(run(RunStatus::Waiting)),
            false,
            Some(watched),
        ));
        let Some(CallbackChange::Write(record)) = a.callback else {
            panic!("a moved deadline is written: {:?}", a.callback)
        };
        assert_eq!(record.status, CallbackStatus::Open);
        assert_eq!(
            record.heartbeat.map(|h| h.deadline),
            Some(Timestamp(62_000))
        );
    }

    #[test]
    fn a_callback_outcome_at_or_after_its_deadline_is_gone() {
        let at_deadline = CallbackRecord {
            deadline: Some(Timestamp(2_000)),
            ..callback(CallbackStatus::Open, "r")
        };
        assert!(matches!(
            decide(
                &delivery(success()),
                Some(run(RunStatus::Waiting)),
                false,
                Some(at_deadline.clone())
            ),
            Err(StoreError::Gone(_))
        ));
        let in_time = CallbackRecord {
            deadline: Some(Timestamp(2_001)),
            ..at_deadline
        };
        accepted(decide(
            &delivery(success()),
            Some(run(RunStatus::Waiting)),
            false,
            Some(in_time),
        ));
    }

    #[test]
    fn checks_come_in_the_contract_order() {
        let d = delivery(success());
        let closed = Some(callback(CallbackStatus::TimedOut, "r"));
        assert!(matches!(
            decide(&d, None, true, closed.clone()),
            Err(StoreError::NotFound)
        ));
        assert_eq!(
            decide(&d, Some(run(RunStatus::Completed)), true, closed.clone()).unwrap(),
            Decision::Duplicate,
            "a retried webhook is acknowledged even after its run finished"
        );
        assert!(matches!(
            decide(&d, Some(run(RunStatus::Completed)), false, None),
            Err(StoreError::Gone(_))
        ));
        assert!(matches!(
            decide(&d, Some(run(RunStatus::Waiting)), false, None),
            Err(StoreError::NotFound)
        ));
        assert!(matches!(
            decide(
                &d,
                Some(run(RunStatus::Waiting)),
                false,
                Some(callback(CallbackStatus::Open, "another-run"))
            ),
            Err(StoreError::NotFound)
        ));
        assert!(matches!(
            decide(&d, Some(run(RunStatus::Waiting)), false, closed),
            Err(StoreError::Gone(_))
        ));
    }

    fn any_status() -> impl Strategy<Value = RunStatus> {
        prop_oneof![
            Just(RunStatus::Pending),
            Just(RunStatus::Running),
            Just(RunStatus::Waiting),
            Just(RunStatus::Completed),
            Just(RunStatus::Failed),
            Just(RunStatus::Cancelled),
            Just(RunStatus::Parked),
        ]
    }

    fn any_body() -> impl Strategy<Value = DeliveryBody> {
        prop_oneof![
            Just(DeliveryBody::Event {
                name: "go".into(),
                value: Payload::Inline(json!(1)),
            }),
            Just(DeliveryBody::Message {
                value: Payload::Inline(json!(1)),
            }),
            Just(success()),
            Just(DeliveryBody::CallbackFailed {
                callback_id: CallbackId("cb".into()),
                error: ErrorInfo::new("No", "declined", false),
            }),
            Just(heartbeat()),
        ]
    }

    fn any_callback() -> impl Strategy<Value = Option<CallbackRecord>> {
        let status = prop_oneof![
            Just(CallbackStatus::Open),
            Just(CallbackStatus::Completed),
            Just(CallbackStatus::TimedOut),
        ];
        let deadline = proptest::option::of(0i64..4_000);
        let heartbeat = proptest::option::of((1u64..5_000, 0i64..8_000));
        let owner = prop_oneof![Just("r"), Just("other")];
        proptest::option::of((status, deadline, heartbeat, owner)).prop_map(|c| {
            c.map(|(status, deadline, heartbeat, owner)| CallbackRecord {
                deadline: deadline.map(Timestamp),
                heartbeat: heartbeat.map(|(timeout_ms, deadline)| CallbackHeartbeat {
                    timeout_ms,
                    deadline: Timestamp(deadline),
                }),
                ..callback(status, owner)
            })
        })
    }

    proptest! {
        #[test]
        fn every_decision_keeps_the_invariants(
            status in any_status(),
            body in any_body(),
            exists in any::<bool>(),
            stored in any::<bool>(),
            record in any_callback(),
        ) {
            let d = delivery(body.clone());
            let before = run(status);
            let decided = decide(&d, exists.then(|| before.clone()), stored, record.clone());
            let is_callback = body.callback_id().is_some();
            let is_heartbeat = matches!(body, DeliveryBody::CallbackHeartbeat { .. });
            match decided {
                Err(StoreError::NotFound) => prop_assert!(
                    !exists || (!stored && !status.is_finished() && is_callback)
                ),
                Err(StoreError::Gone(_)) => prop_assert!(exists && !stored),
                Err(other) => prop_assert!(false, "unexpected {other:?}"),
                Ok(Decision::Duplicate) => prop_assert!(exists && stored),
                Ok(Decision::Accept(a)) => {
                    prop_assert!(exists && !stored && !status.is_finished());
                    prop_assert_eq!(a.read_version, before.version);
                    prop_assert_eq!(a.run.version, before.version + 1);
                    prop_assert_eq!(a.delivery.seq, before.inbox_seq + 1);
                    prop_assert_eq!(a.run.inbox_seq, a.delivery.seq);
                    prop_assert_eq!(a.event.seq, before.timeline_seq + 1);
                    prop_assert_eq!(a.run.timeline_seq, a.event.seq);
                    if status == RunStatus::Waiting {
                        prop_assert_eq!(a.run.due_at, Some(d.received_at));
                    } else {
                        prop_assert_eq!(a.run.due_at, before.due_at);
                    }
                    prop_assert_eq!(a.callback.is_some(), is_callback);
                    if let Some(change) = &a.callback {
                        let read = record.clone().expect("a callback delivery read its record");
                        prop_assert_eq!(read.status, CallbackStatus::Open);
                        prop_assert!(read.too_late(d.received_at).is_none());
                        match change {
                            // Nothing is written that did not change.
                            CallbackChange::Write(written) => prop_assert_ne!(written, &read),
                            CallbackChange::RequireOpen(required) => {
                                prop_assert_eq!(required, &read);
                                prop_assert!(is_heartbeat);
                            }
                        }
                        if !is_heartbeat {
                            prop_assert_eq!(change.record().status, CallbackStatus::Completed);
                        }
                    }
                }
            }
        }
    }
}
