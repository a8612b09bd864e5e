//! A start cut off between its write and its wake-up's send (the process killed, a
//! Lambda timed out): the run is stored, pending, and no wake-up is on its way. An
//! idempotent retry of the start wakes it at once; without a retry, the sweep does once
//! the start's short margin (`EngineConfig::start_resend_margin`) has passed. On the
//! normal path neither sends anything more.

mod support;

use std::time::Duration;

use serde_json::json;
use siesta::*;
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
    reg
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_cut_off_before_its_send_begins_as_soon_as_it_is_retried_with_its_key() {
    let w = world(registry());
    let (engine, queue) = lossy(&w, registry(), 1);
    let id = RunId::from("key-derived-id");
    engine
        .start(w.tenant(), "await_go", json!(null), Some(id.clone()))
        .await
        .unwrap();
    assert_eq!(
        engine.run_until_idle(10).await.unwrap(),
        0,
        "nothing queued"
    );
    assert_eq!(w.run(&id).await.status, RunStatus::Pending);

    // The retry finds the run, which has not begun: its wake-up is sent again.
    let again = engine
        .start(w.tenant(), "await_go", json!(null), Some(id.clone()))
        .await;
    assert!(
        matches!(again, Err(EngineError::AlreadyExists)),
        "{again:?}"
    );
    let found = engine.ensure_started(w.tenant(), &id).await.unwrap();
    assert_eq!(found.status, RunStatus::Pending);
    assert_eq!(sends(&queue), 2);
    // No time passes: the run begins on the retry's wake-up, not the sweep's.
    assert_eq!(engine.run_until_idle(10).await.unwrap(), 1);
    let run = w.run(&id).await;
    assert_eq!(run.status, RunStatus::Waiting, "claimed and advanced");

    // A retry of a start that has begun sends nothing.
    engine.ensure_started(w.tenant(), &id).await.unwrap();
    assert_eq!(sends(&queue), 2);
    assert_eq!(engine.run_until_idle(10).await.unwrap(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_cut_off_before_its_send_and_never_retried_is_woken_by_the_first_sweep_past_the_start_margin()
 {
    let w = world(registry());
    let (engine, queue) = lossy(&w, registry(), 1);
    let margin = EngineConfig::default().start_resend_margin;
    assert!(margin <= Duration::from_secs(60), "{margin:?}");
    let id = engine
        .start(w.tenant(), "await_go", json!(null), None)
        .await
        .unwrap()
        .id;

    // Within the margin the start's wake-up may be on its way: left alone.
    w.clock().advance(margin / 2);
    let report = engine.sweep(100).await.unwrap();
    assert_eq!((report.due, report.woken), (0, 0), "{report:?}");

    w.clock().advance(margin / 2 + Duration::from_millis(1));
    let report = engine.sweep(100).await.unwrap();
    assert_eq!(
        (report.due, report.woken, report.lost_wakeups),
        (1, 1, 1),
        "{report:?}"
    );
    assert_eq!(sends(&queue), 2, "the start's and the sweep's");
    assert_eq!(engine.run_until_idle(10).await.unwrap(), 1);
    assert_eq!(w.run(&id).await.status, RunStatus::Waiting);
    w.clock().advance(EngineConfig::default().resend_margin * 2);
    assert_eq!(engine.sweep(100).await.unwrap().woken, 0);
    assert_eq!(sends(&queue), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_that_is_not_cut_off_costs_one_send_and_a_queued_one_gets_no_duplicate_past_the_margin()
 {
    let w = world(registry());
    let (engine, queue) = lossy(&w, registry(), 0);
    let margin = EngineConfig::default().start_resend_margin;
    let begun = engine
        .start(w.tenant(), "await_go", json!(null), None)
        .await
        .unwrap()
        .id;
    assert_eq!(engine.run_until_idle(10).await.unwrap(), 1);
    assert_eq!(w.run(&begun).await.status, RunStatus::Waiting);
    // Five more whose wake-ups wait in the queue past the margin (a backlog): the
    // embedded queue says it holds them, so the sweep sends none.
    for _ in 0..5 {
        engine
            .start(w.tenant(), "await_go", json!(null), None)
            .await
            .unwrap();
    }
    assert_eq!(sends(&queue), 6, "one per start");
    w.clock().advance(margin + Duration::from_secs(1));
    let report = engine.sweep(100).await.unwrap();
    assert_eq!(
        (report.due, report.woken, report.already_queued),
        (5, 0, 5),
        "{report:?}"
    );
    assert_eq!(sends(&queue), 6, "no duplicate");
    assert_eq!(engine.run_until_idle(10).await.unwrap(), 5, "one each");
}
