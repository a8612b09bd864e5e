//! Pausing a run (issue 47): a paused run takes no turn — a timer that falls due and an
//! event that arrives while it is paused wait for the resume, nothing is lost and
//! nothing runs early; a running run finishes its attempt in flight and pauses at its
//! next boundary; resume goes on from the journal.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use siesta::*;
use support::{gate, world};

/// `nap_then_go`: a minute's timer, then the event `go`.
fn napping() -> Registry {
    let mut reg = Registry::new();
    reg.register("nap_then_go", |ctx: Context, _: Value| async move {
        ctx.wait("nap", Duration::from_secs(60)).await?;
        let go: Value = ctx.wait_for_event("go").await?;
        Ok(go)
    });
    reg
}

fn events(timeline: &[TimelineEvent], t: EventType) -> Vec<&TimelineEvent> {
    timeline.iter().filter(|e| e.event_type == t).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_run_takes_no_turn_keeps_what_arrives_and_goes_on_when_resumed() {
    let w = world(napping());
    let run = w.start("nap_then_go", json!(null)).await;
    assert_eq!(w.status(&run).await, RunStatus::Waiting);
    let paused = w.pause(&run).await;
    assert_eq!(paused.status, RunStatus::Paused);
    assert_eq!(paused.due_at, None, "not due: the sweep leaves it alone");

    // The event arrives and the timer falls due while it is paused: both wait.
    w.deliver_event(&run, "go", "now").await;
    w.advance(Duration::from_secs(120)).await;
    let held = w.run(&run).await;
    assert_eq!(held.status, RunStatus::Paused, "nothing early");
    assert_eq!(held.inbox_seq, 1, "the event is recorded");
    assert_eq!(
        w.journal(&run).await.len(),
        1,
        "only the timer's opening: the run took no turn"
    );

    let resumed = w.resume(&run).await;
    assert_eq!(resumed.status, RunStatus::Pending);
    let done = w.run(&run).await;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(support::output(&done), json!("now"), "nothing lost");
    let timeline = w.timeline(&run).await;
    let paused = events(&timeline, EventType::RunPaused);
    assert_eq!(paused.len(), 1);
    assert_eq!(paused[0].details["PausedBy"], json!("test"));
    assert_eq!(events(&timeline, EventType::RunResumed).len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_run_finishes_its_attempt_and_pauses_at_its_next_boundary() {
    let (gate, entered, release) = gate();
    let second = Arc::new(AtomicUsize::new(0));
    let mut reg = Registry::new();
    let count = second.clone();
    reg.register("two_steps", move |ctx: Context, _: Value| {
        let (gate, count) = (gate.clone(), count.clone());
        async move {
            ctx.step("first", move |_| {
                let gate = gate.clone();
                async move {
                    gate.pass().await;
                    Ok(1u32)
                }
            })
            .await?;
            ctx.step("second", move |_| {
                let count = count.clone();
                async move {
                    count.fetch_add(1, Ordering::SeqCst);
                    Ok(2u32)
                }
            })
            .await
        }
    });
    let w = world(reg);
    let run = support::create(&w, "two_steps", json!(null)).await;
    let engine = w.engine();
    let worker = tokio::spawn(async move { engine.run_until_idle(10).await });
    entered.await.unwrap();

    let asked = w
        .engine()
        .pause(w.tenant(), &run, None, "ops@acme")
        .await
        .unwrap();
    assert_eq!(asked.status, RunStatus::Running, "asked, not yet paused");
    assert_eq!(asked.pause_requested.as_deref(), Some("ops@acme"));
    release.send(()).unwrap();
    worker.await.unwrap().unwrap();
    w.run_until_idle().await;

    let paused = w.run(&run).await;
    assert_eq!(paused.status, RunStatus::Paused, "{:?}", paused.error);
    assert_eq!(paused.pause_requested, None);
    assert!(
        w.entry(&run, "first#0").await.is_some(),
        "the attempt in flight finished and was checkpointed"
    );
    assert_eq!(
        second.load(Ordering::SeqCst),
        0,
        "the next step did not run"
    );

    w.resume(&run).await;
    let done = w.run(&run).await;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(second.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_run_can_be_cancelled_and_a_finished_one_is_not_paused() {
    let w = world(napping());
    let run = w.start("nap_then_go", json!(null)).await;
    w.pause(&run).await;
    assert_eq!(
        w.pause(&run).await.status,
        RunStatus::Paused,
        "again: as it is"
    );
    assert_eq!(w.cancel(&run).await.status, RunStatus::Cancelled);
    let refused = w.engine().pause(w.tenant(), &run, None, "test").await;
    assert!(
        matches!(
            refused,
            Err(EngineError::AlreadyFinished(RunStatus::Cancelled))
        ),
        "{refused:?}"
    );
}
