//! A delivery cut off between its write and its wake-up's send (the process killed, a
//! Lambda timed out): the delivery is stored, its run made due, and no wake-up is on its
//! way (issue 44). A retry of the delivery, answered as a duplicate, sends the wake-up
//! again while the run has not looked at its inbox; without a retry, the sweep wakes the
//! run once the delivery's short margin (`EngineConfig::delivery_resend_margin`) has
//! passed, not the general 15 minutes. A child's outcome to its parent likewise. The
//! AWS backend's counterpart, through every route of the router, is the end-to-end
//! `tests/tests/lost_deliveries.rs`.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

mod support;

use std::time::Duration;

use serde_json::json;
use siesta::ports::*;
use siesta::*;
use std::sync::atomic::Ordering;

use siesta_testing::TestEnv;
use support::lossy::{lossy, sends};
use support::world;

fn registry() -> Registry {
    let mut reg = Registry::new();
    reg.register(
        "await_go",
        |ctx: Context, _: serde_json::Value| async move {
            let v: serde_json::Value = ctx.wait_for_event("go").await?;
            Ok(v)
        },
    );
    reg.register("parent", |ctx: Context, _: serde_json::Value| async move {
        let v: serde_json::Value = ctx.invoke("child", "await_go", json!(null)).await?;
        Ok(v)
    });
    reg
}

async fn go(engine: &Engine, w: &TestEnv, id: &RunId, key: &str) -> DeliverOutcome {
    engine
        .deliver_event(
            w.tenant(),
            id,
            "go",
            json!(1),
            Some(DeliveryId(key.to_owned())),
        )
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_cut_off_before_its_send_is_taken_as_soon_as_its_retry_is_answered_as_a_duplicate()
 {
    let w = world(registry());
    let (engine, queue) = lossy(&w, registry(), 0);
    let id = engine
        .start(w.tenant(), "await_go", json!(null), None)
        .await
        .unwrap()
        .id;
    assert_eq!(engine.run_until_idle(10).await.unwrap(), 1);
    queue.lose.store(1, Ordering::SeqCst);
    assert!(matches!(
        go(&engine, &w, &id, "go-1").await,
        DeliverOutcome::Accepted(_)
    ));
    assert_eq!(
        engine.run_until_idle(10).await.unwrap(),
        0,
        "nothing queued"
    );

    // The retry: a duplicate, and the run has not looked at its inbox, so its wake-up
    // goes again. No time passes: the retry's wake-up, not the sweep's, takes it.
    assert_eq!(
        go(&engine, &w, &id, "go-1").await,
        DeliverOutcome::Duplicate
    );
    assert_eq!(sends(&queue), 3, "the start's, the lost one, the retry's");
    assert_eq!(engine.run_until_idle(10).await.unwrap(), 1);
    assert_eq!(w.run(&id).await.status, RunStatus::Completed);

    // A duplicate of a delivery its run took sends nothing.
    assert_eq!(
        go(&engine, &w, &id, "go-1").await,
        DeliverOutcome::Duplicate
    );
    assert_eq!(sends(&queue), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_while_the_first_wake_up_waits_in_the_queue_costs_one_harmless_send() {
    let w = world(registry());
    let (engine, queue) = lossy(&w, registry(), 0);
    let id = engine
        .start(w.tenant(), "await_go", json!(null), None)
        .await
        .unwrap()
        .id;
    assert_eq!(engine.run_until_idle(10).await.unwrap(), 1);
    go(&engine, &w, &id, "go-1").await;
    go(&engine, &w, &id, "go-1").await;
    assert_eq!(
        sends(&queue),
        3,
        "the start's, the delivery's, the duplicate's"
    );
    // One of the two takes the delivery; the other finds nothing to do.
    engine.run_until_idle(10).await.unwrap();
    let run = w.run(&id).await;
    assert_eq!(run.status, RunStatus::Completed);
    assert_eq!(
        run.epoch,
        FencingEpoch(2),
        "claimed by the start and once more"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_cut_off_and_never_retried_is_taken_at_the_first_sweep_past_the_delivery_margin()
{
    let w = world(registry());
    let (engine, queue) = lossy(&w, registry(), 0);
    let margin = EngineConfig::default().delivery_resend_margin;
    assert!(margin <= Duration::from_secs(60), "{margin:?}");
    let event = engine
        .start(w.tenant(), "await_go", json!(null), None)
        .await
        .unwrap()
        .id;
    let parent = engine
        .start(w.tenant(), "parent", json!(null), None)
        .await
        .unwrap()
        .id;
    engine.run_until_idle(10).await.unwrap();
    let history = engine
        .backend()
        .store
        .load_replay_input(w.tenant(), &parent)
        .await
        .unwrap();
    let child = history
        .journal
        .iter()
        .find_map(|e| match &e.state {
            EntryState::Waiting(Wait {
                kind: WaitKind::Child { run_id },
                ..
            }) => Some(run_id.clone()),
            _ => None,
        })
        .expect("the parent waits on its child");
    // The event's wake-up is lost; then the child's own arrives, and the one its end
    // sends its parent is lost.
    queue.lose.store(1, Ordering::SeqCst);
    go(&engine, &w, &event, "go-1").await;
    go(&engine, &w, &child, "go-child").await;
    queue.lose.store(1, Ordering::SeqCst);
    assert_eq!(engine.run_until_idle(10).await.unwrap(), 1, "the child's");
    assert_eq!(w.run(&child).await.status, RunStatus::Completed);
    assert_eq!(
        queue.lose.load(Ordering::SeqCst),
        0,
        "the parent's wake-up was lost"
    );
    for id in [&event, &parent] {
        assert_eq!(w.run(id).await.status, RunStatus::Waiting);
    }

    // Within the margin their wake-ups may be on their way: left alone.
    w.clock().advance(margin - Duration::from_secs(1));
    let report = engine.sweep(100).await.unwrap();
    assert_eq!((report.due, report.woken), (0, 0), "{report:?}");

    w.clock().advance(Duration::from_secs(2));
    let report = engine.sweep(100).await.unwrap();
    assert_eq!(
        (report.due, report.woken, report.due_waits),
        (2, 2, 2),
        "{report:?}"
    );
    assert_eq!(engine.run_until_idle(10).await.unwrap(), 2);
    for id in [&event, &parent] {
        assert_eq!(w.run(id).await.status, RunStatus::Completed);
    }
}
