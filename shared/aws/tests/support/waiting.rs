//! A run waiting on a callback, written through a store as the engine would: created,
//! claimed, then suspended by the checkpoint that opens the callback.
#![allow(
    clippy::expect_used,
    reason = "test set-up: a failed expect is a failed test"
)]

use std::time::Duration;

use serde_json::json;
use siesta::ports::{Checkpoint, Claim, RunStore};
use siesta::*;

/// A run of a new tenant (named after `prefix`) waiting on a callback opened at `at`,
/// with a deadline an hour later if `deadline`, and a heartbeat timeout of `every` if
/// any: the run after the suspension and the callback's record.
pub async fn waiting_on_a_callback(
    store: &dyn RunStore,
    prefix: &str,
    at: Timestamp,
    deadline: bool,
    every: Option<Duration>,
) -> (Run, CallbackRecord) {
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
    let held = store
        .claim(&run.tenant, &run.id, &claim)
        .await
        .expect("claim the run");
    let mut waiting = held.clone();
    waiting.version += 1;
    waiting.status = RunStatus::Waiting;
    waiting.lease = None;
    waiting.due_at = Some(at.plus(Duration::from_secs(3600)));
    let mut cp = Checkpoint::new(waiting, held.version, Some(held.epoch));
    cp.by_own_build = true;
    let record = CallbackRecord {
        callback_id: CallbackId(format!("cb_{}", uuid::Uuid::new_v4().simple())),
        tenant: held.tenant.clone(),
        run_id: held.id.clone(),
        position: Position::from("approval#0"),
        status: CallbackStatus::Open,
        deadline: deadline.then(|| at.plus(Duration::from_secs(3600))),
        created_at: at,
        accepts: None,
        heartbeat: every.map(|every| CallbackHeartbeat::new(every, at)),
    };
    cp.callbacks.push(record.clone());
    store.checkpoint(&cp).await.expect("open the callback");
    (cp.run, record)
}
