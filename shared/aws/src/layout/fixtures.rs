//! What the plans' tests build their inputs from: runs, deliveries decided by the core,
//! callbacks, journal entries, events; and what they read of a plan.

use std::time::Duration;

use serde_json::json;
use siesta::delivery::{Accepted, Decision};
use siesta::ports::NewDelivery;
use siesta::*;

use super::{Action, Condition, PlannedWrite};
use crate::item::Item;

/// No retention: the plans' items carry no expiry to compare.
pub(super) const RETENTION: Duration = Duration::ZERO;

/// Run `r` of tenant `t`, in `status`, at version 3 with three timeline events.
pub(super) fn run(status: RunStatus) -> Run {
    let mut run = Run::new(
        TenantId("t".into()),
        RunId("r".into()),
        "order",
        Payload::Inline(json!(null)),
        Timestamp(1_000),
    );
    run.status = status;
    run.version = 3;
    run.timeline_seq = 3;
    run
}

/// A journal entry at `position`.
pub(super) fn entry(position: &str) -> JournalEntry {
    JournalEntry {
        position: Position(position.into()),
        index: 0,
        kind: OperationKind::Step,
        name: position.into(),
        state: EntryState::Started {
            attempt: 1,
            key: None,
        },
        consumed: Vec::new(),
        handle: None,
        minted: Vec::new(),
        within: None,
        superseded: None,
        updated_at: Timestamp(0),
    }
}

/// A timeline event at `seq` with `details`.
pub(super) fn event(seq: u64, details: serde_json::Value) -> TimelineEvent {
    let mut e = TimelineEvent::execution_started(Timestamp(1_000), "order", details);
    e.seq = seq;
    e
}

/// An open callback `id` of run `r`.
pub(super) fn callback(id: &str) -> CallbackRecord {
    CallbackRecord {
        callback_id: CallbackId(id.into()),
        tenant: TenantId("t".into()),
        run_id: RunId("r".into()),
        position: Position("pay#1".into()),
        status: CallbackStatus::Open,
        deadline: Some(Timestamp(90_000)),
        created_at: Timestamp(1_000),
        accepts: None,
        heartbeat: None,
    }
}

/// The delivery of `body` to `run`, with an event of `note` in its details, decided by
/// the core as every adapter decides it.
pub(super) fn accepted(
    run: &Run,
    body: DeliveryBody,
    note: &str,
    callback: Option<CallbackRecord>,
) -> Accepted {
    let d = NewDelivery {
        id: DeliveryId("d1".into()),
        tenant: run.tenant.clone(),
        run_id: run.id.clone(),
        body,
        received_at: Timestamp(5_000),
        resend_after: None,
        event: event(0, json!({ "note": note })),
    };
    match siesta::delivery::decide(&d, Some(run.clone()), false, callback) {
        Ok(Decision::Accept(accepted)) => *accepted,
        other => panic!("the delivery is not accepted: {other:?}"),
    }
}

/// An event delivery named `approval`.
pub(super) fn an_event() -> DeliveryBody {
    DeliveryBody::Event {
        name: "approval".into(),
        value: Payload::Inline(json!(true)),
    }
}

/// A random-looking string of `len` lowercase letters (incompressible enough that
/// deflating does not hide its size).
pub(super) fn noise(len: usize, seed: u64) -> String {
    let mut state = seed.wrapping_add(1);
    (0..len)
        .map(|_| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            char::from(b'a' + (state >> 33) as u8 % 26)
        })
        .collect()
}

/// The condition of `write` (every run item's write has one).
pub(super) fn condition(write: &PlannedWrite) -> &Condition {
    write.condition.as_ref().expect("a condition")
}

/// The update expression of `write`, an update.
pub(super) fn update_expression(write: &PlannedWrite) -> &str {
    match &write.action {
        Action::Update { expression, .. } => expression,
        other => panic!("not an update: {other:?}"),
    }
}

/// The values `write`'s request carries: its update's and its condition's.
pub(super) fn values(write: &PlannedWrite) -> Item {
    let mut values = match &write.action {
        Action::Update { values, .. } => values.clone(),
        _ => Item::new(),
    };
    if let Some(c) = &write.condition {
        values.extend(c.values.clone());
    }
    values
}

/// The attributes `write`, a whole run item's update, sets (its key aside).
pub(super) fn written_item(write: &PlannedWrite) -> Item {
    let Action::Update { names, values, .. } = &write.action else {
        panic!("not an update: {:?}", write.action);
    };
    names
        .iter()
        .filter_map(|(placeholder, name)| {
            let value = values.get(&placeholder.replacen('#', ":", 1))?;
            placeholder
                .starts_with("#w")
                .then(|| (name.clone(), value.clone()))
        })
        .collect()
}
