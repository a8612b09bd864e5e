//! Runs and callbacks written through a store as the engine would: a run created and
//! claimed, a callback it opens, a run suspended by the checkpoint that opens one, and
//! a delivery to a callback.
#![allow(
    clippy::expect_used,
    reason = "test set-up: a failed expect is a failed test"
)]

use std::time::Duration;

use serde_json::json;
use siesta::ports::{Checkpoint, Claim, NewDelivery, RunStore};
use siesta::*;

/// A run of a new tenant (named after `prefix`), created and claimed at `at` with a
/// lease for a minute: the run as claimed.
pub async fn claimed_run(store: &dyn RunStore, prefix: &str, at: Timestamp) -> Run {
    let mut run = Run::new(
        TenantId(format!("{prefix}-{}", uuid::Uuid::new_v4().simple())),
        RunId("r".into()),
        "order",
        Payload::Inline(json!(null)),
        at,
    );
    let mut started = TimelineEvent::execution_started(at, "order", json!(null));
    started.seq = 1;
    run.timeline_seq = 1;
    store
        .create_run(&run, &started)
        .await
        .expect("create the run");
    let claim = Claim {
        owner: "engine".into(),
        now: at,
        expires_at: at.plus(Duration::from_secs(60)),
    };
    store
        .claim(&run.tenant, &run.id, &claim)
        .await
        .expect("claim the run")
}

/// The record of a callback `run` opens at `position` at `at`, with a deadline an hour
/// later if `deadline`, and a heartbeat timeout of `every` if any.
pub fn callback(
    run: &Run,
    position: &str,
    at: Timestamp,
    deadline: bool,
    every: Option<Duration>,
) -> CallbackRecord {
    CallbackRecord {
        callback_id: CallbackId(format!("cb_{}", uuid::Uuid::new_v4().simple())),
        tenant: run.tenant.clone(),
        run_id: run.id.clone(),
        position: Position::from(position),
        status: CallbackStatus::Open,
        deadline: deadline.then(|| at.plus(Duration::from_secs(3600))),
        created_at: at,
        accepts: None,
        heartbeat: every.map(|every| CallbackHeartbeat::new(every, at)),
    }
}

/// A run of a new tenant (named after `prefix`) waiting on a callback opened at `at`
/// (see [`callback`]): the run after the suspension and the callback's record.
pub async fn waiting_on_a_callback(
    store: &dyn RunStore,
    prefix: &str,
    at: Timestamp,
    deadline: bool,
    every: Option<Duration>,
) -> (Run, CallbackRecord) {
    let held = claimed_run(store, prefix, at).await;
    let mut waiting = held.clone();
    waiting.version += 1;
    waiting.status = RunStatus::Waiting;
    waiting.lease = None;
    waiting.due_at = Some(at.plus(Duration::from_secs(3600)));
    let mut cp = Checkpoint::new(waiting, held.version, Some(held.epoch));
    cp.by_own_build = true;
    let record = callback(&held, "approval#0", at, deadline, every);
    cp.callbacks.push(record.clone());
    store.checkpoint(&cp).await.expect("open the callback");
    (cp.run, record)
}

/// A delivery of `body` to `record`'s run, received at `at`, with a new id.
pub fn delivery(record: &CallbackRecord, body: DeliveryBody, at: Timestamp) -> NewDelivery {
    NewDelivery {
        id: DeliveryId(format!("d-{}", uuid::Uuid::new_v4().simple())),
        tenant: record.tenant.clone(),
        run_id: record.run_id.clone(),
        body,
        received_at: at,
        resend_after: None,
        event: TimelineEvent::execution_started(at, "order", json!(null)),
    }
}
