//! The concurrent queue worker (`Engine::work`) and the in-process notifications: a
//! slow run holds up no other, a committed wake-up reaches the worker without polling,
//! and a watcher hears when a run's invocation ends.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use siesta::*;
use tokio::sync::oneshot;

/// A generous guard so a broken build fails instead of hanging; never reached when the
/// behaviour holds, and nothing is asserted about how long anything takes.
const GUARD: Duration = Duration::from_secs(60);

type Gate = Arc<Mutex<Option<oneshot::Receiver<()>>>>;

/// `slow` holds its one step until the test opens the gate and says when it is in the
/// step; `quick` runs one step.
fn registry(gate: Gate, entered: Arc<Mutex<Option<oneshot::Sender<()>>>>) -> Registry {
    let mut reg = Registry::new();
    reg.register("slow", move |ctx: Context, _: serde_json::Value| {
        let (gate, entered) = (gate.clone(), entered.clone());
        async move {
            ctx.step("hold", move |_| {
                let (gate, entered) = (gate.clone(), entered.clone());
                async move {
                    if let Some(entered) = entered.lock().unwrap().take() {
                        let _ = entered.send(());
                    }
                    let gate = gate.lock().unwrap().take();
                    if let Some(gate) = gate {
                        let _ = gate.await;
                    }
                    Ok(1u64)
                }
            })
            .await
        }
    });
    reg.register("quick", |ctx: Context, _: serde_json::Value| async move {
        ctx.step("one", |_| async { Ok(2u64) }).await
    });
    reg
}

async fn settled(engine: &Engine, tenant: &TenantId, run: &RunId) -> Run {
    let watch = engine.watch_run(tenant, run);
    loop {
        let changed = watch.changed();
        let current = engine.get_run(tenant, run).await.unwrap();
        if current.status.is_finished() {
            return current;
        }
        changed.await;
    }
}

/// GIVEN a worker with free slots and a run whose step is held open (a 5 s tool call
/// stand-in, held by a gate rather than a clock) WHEN another run is started THEN it
/// completes while the first is still inside its step; the first completes once the
/// gate opens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_step_does_not_hold_up_another_run() {
    let (open, gate) = oneshot::channel();
    let (entered_tx, entered) = oneshot::channel();
    let w = support::world(registry(
        Arc::new(Mutex::new(Some(gate))),
        Arc::new(Mutex::new(Some(entered_tx))),
    ));
    let (engine, tenant) = (w.engine(), w.tenant().clone());
    let worker = {
        let engine = engine.clone();
        tokio::spawn(async move { engine.work(WorkerConfig::default()).await })
    };
    let slow = engine
        .start(&tenant, "slow", serde_json::Value::Null, None)
        .await
        .unwrap();
    tokio::time::timeout(GUARD, entered)
        .await
        .expect("the slow step starts")
        .unwrap();

    let quick = engine
        .start(&tenant, "quick", serde_json::Value::Null, None)
        .await
        .unwrap();
    let done = tokio::time::timeout(GUARD, settled(&engine, &tenant, &quick.id))
        .await
        .expect("the quick run completes while the slow one holds its step");
    assert_eq!(done.status, RunStatus::Completed);
    assert_eq!(done.output, Some(Payload::Inline(serde_json::json!(2))));
    let held = engine.get_run(&tenant, &slow.id).await.unwrap();
    assert_eq!(held.status, RunStatus::Running, "still in its step");

    open.send(()).unwrap();
    let done = tokio::time::timeout(GUARD, settled(&engine, &tenant, &slow.id))
        .await
        .expect("the slow run completes once released");
    assert_eq!(done.output, Some(Payload::Inline(serde_json::json!(1))));
    worker.abort();
}

/// GIVEN a worker asleep on an empty queue, told to look only every hour when nothing
/// signals it WHEN a run is started THEN it is handled: the start's wake-up woke the
/// worker, not a poll.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sent_wake_up_reaches_a_sleeping_worker_without_polling() {
    let (_open, gate) = oneshot::channel();
    let (entered_tx, _entered) = oneshot::channel();
    let w = support::world(registry(
        Arc::new(Mutex::new(Some(gate))),
        Arc::new(Mutex::new(Some(entered_tx))),
    ));
    let (engine, tenant) = (w.engine(), w.tenant().clone());
    let config = WorkerConfig {
        idle_look: Duration::from_secs(3600),
        ..WorkerConfig::default()
    };
    let worker = {
        let engine = engine.clone();
        tokio::spawn(async move { engine.work(config).await })
    };
    // Let the worker find the queue empty and go to sleep first.
    for _ in 0..3 {
        tokio::task::yield_now().await;
    }
    for _ in 0..3 {
        let run = engine
            .start(&tenant, "quick", serde_json::Value::Null, None)
            .await
            .unwrap();
        let done = tokio::time::timeout(GUARD, settled(&engine, &tenant, &run.id))
            .await
            .expect("the worker was woken by the send");
        assert_eq!(done.status, RunStatus::Completed);
    }
    worker.abort();
}
