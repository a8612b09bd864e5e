//! The rules of [`RunStore::deliver`](siesta::ports::RunStore::deliver), as a pure
//! decision over what was read: DynamoDB cannot branch inside a transaction, so the
//! adapter reads the run, the dedup record and the callback record, decides here, and
//! writes the outcome conditioned on nothing having changed since the read.

use siesta::ports::{NewDelivery, StoreError};
use siesta::*;

/// What a delivery does to the records it touches.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DeliveryPlan {
    /// The run after the delivery (`inbox_seq`, `timeline_seq`, `version` + 1).
    pub(crate) run: Run,
    /// The version the run had when it was read (the write's condition).
    pub(crate) read_version: u64,
    /// The stored delivery, with its inbox `seq`.
    pub(crate) delivery: Delivery,
    /// Its timeline event, with its `seq`.
    pub(crate) event: TimelineEvent,
    /// The callback record: `Some((record, closes))`, where `closes` says whether the
    /// delivery closes it (an outcome) or only needs it open (a heartbeat).
    pub(crate) callback: Option<(CallbackRecord, bool)>,
}

/// What a delivery comes to.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Planned {
    /// A delivery with this id was stored before: nothing changes.
    Duplicate,
    /// Write this.
    Apply(Box<DeliveryPlan>),
}

/// Decide a delivery, checking in the order the port's contract gives: the run exists,
/// the id is new, the run is not finished, the callback (if any) is this run's and
/// open.
pub(crate) fn plan_delivery(
    d: &NewDelivery,
    run: Option<Run>,
    already_stored: bool,
    callback: Option<CallbackRecord>,
) -> Result<Planned, StoreError> {
    let mut run = run.ok_or(StoreError::NotFound)?;
    if already_stored {
        return Ok(Planned::Duplicate);
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
            let mut record = callback
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
            let closes = !matches!(d.body, DeliveryBody::CallbackHeartbeat { .. });
            if closes {
                record.status = CallbackStatus::Completed;
            } else {
                record.heartbeat_received(d.received_at);
            }
            Some((record, closes))
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
    Ok(Planned::Apply(Box::new(DeliveryPlan {
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

    fn apply(p: Result<Planned, StoreError>) -> DeliveryPlan {
        match p {
            Ok(Planned::Apply(plan)) => *plan,
            other => panic!("expected a write, got {other:?}"),
        }
    }

    #[test]
    fn a_delivery_to_a_waiting_run_makes_it_due_now_and_closes_its_callback() {
        let plan = apply(plan_delivery(
            &delivery(success()),
            Some(run(RunStatus::Waiting)),
            false,
            Some(callback(CallbackStatus::Open, "r")),
        ));
        assert_eq!(plan.read_version, 12);
        assert_eq!(plan.run.version, 13);
        assert_eq!((plan.run.inbox_seq, plan.delivery.seq), (5, 5));
        assert_eq!((plan.run.timeline_seq, plan.event.seq), (10, 10));
        assert_eq!(plan.run.due_at, Some(Timestamp(2_000)));
        let (record, closes) = plan.callback.unwrap();
        assert!(closes);
        assert_eq!(record.status, CallbackStatus::Completed);
    }

    #[test]
    fn a_delivery_to_a_running_run_leaves_its_due_time_alone() {
        let plan = apply(plan_delivery(
            &delivery(success()),
            Some(run(RunStatus::Running)),
            false,
            Some(callback(CallbackStatus::Open, "r")),
        ));
        assert_eq!(plan.run.due_at, Some(Timestamp(5_000)));
    }

    #[test]
    fn a_heartbeat_needs_the_callback_open_but_leaves_it_open() {
        let plan = apply(plan_delivery(
            &delivery(DeliveryBody::CallbackHeartbeat {
                callback_id: CallbackId("cb".into()),
            }),
            Some(run(RunStatus::Waiting)),
            false,
            Some(callback(CallbackStatus::Open, "r")),
        ));
        let (record, closes) = plan.callback.unwrap();
        assert!(!closes);
        assert_eq!(record.status, CallbackStatus::Open);
    }

    #[test]
    fn a_callback_outcome_at_or_after_its_deadline_is_gone() {
        let at_deadline = CallbackRecord {
            deadline: Some(Timestamp(2_000)),
            ..callback(CallbackStatus::Open, "r")
        };
        assert!(matches!(
            plan_delivery(
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
        apply(plan_delivery(
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
            plan_delivery(&d, None, true, closed.clone()),
            Err(StoreError::NotFound)
        ));
        assert_eq!(
            plan_delivery(&d, Some(run(RunStatus::Completed)), true, closed.clone()).unwrap(),
            Planned::Duplicate,
            "a retried webhook is acknowledged even after its run finished"
        );
        assert!(matches!(
            plan_delivery(&d, Some(run(RunStatus::Completed)), false, None),
            Err(StoreError::Gone(_))
        ));
        assert!(matches!(
            plan_delivery(&d, Some(run(RunStatus::Waiting)), false, None),
            Err(StoreError::NotFound)
        ));
        assert!(matches!(
            plan_delivery(
                &d,
                Some(run(RunStatus::Waiting)),
                false,
                Some(callback(CallbackStatus::Open, "another-run"))
            ),
            Err(StoreError::NotFound)
        ));
        assert!(matches!(
            plan_delivery(&d, Some(run(RunStatus::Waiting)), false, closed),
            Err(StoreError::Gone(_))
        ));
    }
}
