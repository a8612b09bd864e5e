//! Restart from a step (issue 47), what the conformance suite does not already hold on
//! both backends: a child run after the point is taken over, not started again; an
//! event a superseded wait took is offered again; a callback a superseded wait opened is
//! closed; a running run is cancelled at its boundary and then restarted; a restart
//! asked again with the same token does nothing twice.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use serde_json::{Value, json};
use siesta::*;
use support::{gate, world};

/// `fails_until_fixed`: a step that fails for good (a 4xx) until `fixed`.
async fn last_step(ctx: &Context, fixed: Arc<AtomicBool>) -> Result<Value, Error> {
    ctx.step("notify", move |_| async move {
        if fixed.load(Ordering::SeqCst) {
            Ok(json!("notified"))
        } else {
            Err(StepError::from_http_status(400, "the receiver said 400"))
        }
    })
    .await
}

fn restart_from(position: &str) -> RestartRequest {
    RestartRequest {
        from: Some(Position::from(position)),
        ..RestartRequest::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_run_after_the_point_is_taken_over_not_started_again() {
    let fixed = Arc::new(AtomicBool::new(false));
    let children = Arc::new(AtomicUsize::new(0));
    let mut reg = Registry::new();
    let kids = children.clone();
    reg.register("kid", move |ctx: Context, _: Value| {
        let kids = kids.clone();
        async move {
            ctx.step("work", move |_| async move {
                kids.fetch_add(1, Ordering::SeqCst);
                Ok(7u32)
            })
            .await
        }
    });
    let fix = fixed.clone();
    reg.register("parent", move |ctx: Context, _: Value| {
        let fix = fix.clone();
        async move {
            ctx.step("prepare", |_| async { Ok(1u32) }).await?;
            let seven: u32 = ctx.invoke("delegate", "kid", json!(null)).await?;
            let done = last_step(&ctx, fix).await?;
            Ok(json!({"kid": seven, "done": done}))
        }
    });
    let w = world(reg);
    let run = w.start("parent", json!(null)).await;
    assert_eq!(w.status(&run).await, RunStatus::Failed);
    assert_eq!(children.load(Ordering::SeqCst), 1);

    fixed.store(true, Ordering::SeqCst);
    let restarted = w
        .engine()
        .restart(w.tenant(), &run, restart_from("prepare#0"), None, "ops")
        .await
        .unwrap();
    assert_eq!(restarted.superseded, 3);
    w.run_until_idle().await;
    let done = w.run(&run).await;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(
        support::output(&done),
        json!({"kid": 7, "done": "notified"})
    );
    assert_eq!(children.load(Ordering::SeqCst), 1, "no second child run");
    let runs = w
        .backend()
        .store
        .list_runs(w.tenant(), &Default::default(), None, 100)
        .await
        .unwrap();
    assert_eq!(runs.runs.len(), 2, "the parent and its one child");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_a_superseded_wait_took_is_offered_again_and_a_callback_it_opened_is_closed() {
    let fixed = Arc::new(AtomicBool::new(false));
    let mut reg = Registry::new();
    let fix = fixed.clone();
    reg.register("waits", move |ctx: Context, _: Value| {
        let fix = fix.clone();
        async move {
            let go: Value = ctx.wait_for_event("go").await?;
            let callback = ctx.create_callback::<Value>("approval").await?;
            let _ = callback;
            let done = last_step(&ctx, fix).await?;
            Ok(json!({"go": go, "done": done}))
        }
    });
    let w = world(reg);
    let run = w.start("waits", json!(null)).await;
    w.deliver_event(&run, "go", "now").await;
    assert_eq!(w.status(&run).await, RunStatus::Failed);
    let first_callback = w
        .journal(&run)
        .await
        .into_iter()
        .find_map(|e| match e.state {
            EntryState::Waiting(Wait {
                kind: WaitKind::Callback { callback_id, .. },
                ..
            }) => Some(callback_id),
            _ => None,
        })
        .expect("the callback's wait is journaled");

    fixed.store(true, Ordering::SeqCst);
    w.engine()
        .restart(w.tenant(), &run, restart_from("go#0"), None, "ops")
        .await
        .unwrap();
    w.run_until_idle().await;
    let done = w.run(&run).await;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(
        support::output(&done)["go"],
        json!("now"),
        "the event was taken again, not waited for anew"
    );
    let record = w.callback_record(&first_callback).await;
    assert_eq!(
        record.status,
        CallbackStatus::Closed,
        "the superseded callback accepts nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_run_is_cancelled_at_its_boundary_then_restarted() {
    let (gate, entered, release) = gate();
    let seconds = Arc::new(AtomicUsize::new(0));
    let mut reg = Registry::new();
    let count = seconds.clone();
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

    let engine = w.engine();
    let tenant = w.tenant().clone();
    let id = run.clone();
    let restart = tokio::spawn(async move {
        engine
            .restart(&tenant, &id, RestartRequest::default(), None, "ops")
            .await
    });
    // The restart asks for a cancel and waits: the attempt in flight goes on.
    let asked = loop {
        let now = w.run(&run).await;
        if now.cancel_requested {
            break now;
        }
        tokio::task::yield_now().await;
    };
    assert_eq!(asked.status, RunStatus::Running);
    release.send(()).unwrap();
    worker.await.unwrap().unwrap();
    let restarted = restart.await.unwrap().unwrap();
    assert_eq!(restarted.run.status, RunStatus::Pending);
    assert_eq!(
        restarted.from, None,
        "nothing failed: from where it stopped"
    );
    w.run_until_idle().await;
    let done = w.run(&run).await;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(
        seconds.load(Ordering::SeqCst),
        1,
        "the second step ran once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_asked_again_with_its_token_does_nothing_twice() {
    let fixed = Arc::new(AtomicBool::new(true));
    let firsts = Arc::new(AtomicUsize::new(0));
    let mut reg = Registry::new();
    let (fix, count) = (fixed.clone(), firsts.clone());
    reg.register("two", move |ctx: Context, _: Value| {
        let (fix, count) = (fix.clone(), count.clone());
        async move {
            ctx.step("first", move |_| async move {
                count.fetch_add(1, Ordering::SeqCst);
                Ok(1u32)
            })
            .await?;
            last_step(&ctx, fix).await
        }
    });
    let w = world(reg);
    let run = w.start("two", json!(null)).await;
    let request = RestartRequest {
        from: Some(Position::from("first#0")),
        token: Some("job-7".to_owned()),
        ..RestartRequest::default()
    };
    let first = w
        .engine()
        .restart(w.tenant(), &run, request.clone(), None, "ops")
        .await
        .unwrap();
    assert!(!first.already);
    w.run_until_idle().await;
    let again = w
        .engine()
        .restart(w.tenant(), &run, request, None, "ops")
        .await
        .unwrap();
    assert!(again.already);
    w.run_until_idle().await;
    assert_eq!(
        firsts.load(Ordering::SeqCst),
        2,
        "once at the start, once restarted"
    );
    assert_eq!(w.run(&run).await.restart.unwrap().number, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_parked_by_a_step_out_of_retries_restarts_from_that_step() {
    let fixed = Arc::new(AtomicBool::new(false));
    let firsts = Arc::new(AtomicUsize::new(0));
    let mut reg = Registry::new();
    let (fix, count) = (fixed.clone(), firsts.clone());
    reg.register("parks", move |ctx: Context, _: Value| {
        let (fix, count) = (fix.clone(), count.clone());
        async move {
            ctx.step("first", move |_| async move {
                count.fetch_add(1, Ordering::SeqCst);
                Ok(1u32)
            })
            .await?;
            ctx.step("charge", move |_| async move {
                if fix.load(Ordering::SeqCst) {
                    Ok(json!("charged"))
                } else {
                    Err(StepError::from_http_status(401, "bad credential"))
                }
            })
            .park_on_exhaustion()
            .await
        }
    });
    let w = world(reg);
    let run = w.start("parks", json!(null)).await;
    assert_eq!(w.status(&run).await, RunStatus::Parked);

    fixed.store(true, Ordering::SeqCst);
    let restarted = w
        .engine()
        .restart(w.tenant(), &run, RestartRequest::default(), None, "ops")
        .await
        .unwrap();
    assert_eq!(restarted.from, Some(Position::from("charge#0")));
    w.run_until_idle().await;
    let done = w.run(&run).await;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(support::output(&done), json!("charged"));
    assert_eq!(firsts.load(Ordering::SeqCst), 1, "the first step ran once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_child_is_started_anew_by_a_restart_of_its_parent() {
    let fixed = Arc::new(AtomicBool::new(false));
    let mut reg = Registry::new();
    let fix = fixed.clone();
    reg.register("kid", move |ctx: Context, _: Value| {
        let fix = fix.clone();
        async move { last_step(&ctx, fix).await }
    });
    reg.register("parent", |ctx: Context, _: Value| async move {
        let got: Value = ctx.invoke("delegate", "kid", json!(null)).await?;
        Ok(got)
    });
    let w = world(reg);
    let run = w.start("parent", json!(null)).await;
    assert_eq!(w.status(&run).await, RunStatus::Failed);

    fixed.store(true, Ordering::SeqCst);
    let restarted = w
        .engine()
        .restart(w.tenant(), &run, RestartRequest::default(), None, "ops")
        .await
        .unwrap();
    assert_eq!(restarted.from, Some(Position::from("delegate#0")));
    w.run_until_idle().await;
    let done = w.run(&run).await;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(support::output(&done), json!("notified"));
    let runs = w
        .backend()
        .store
        .list_runs(w.tenant(), &Default::default(), None, 100)
        .await
        .unwrap()
        .runs;
    assert_eq!(
        runs.len(),
        3,
        "the parent, its failed child and the new one"
    );
    assert_eq!(
        runs.iter()
            .filter(|r| r.status == RunStatus::Failed)
            .count(),
        1,
        "the failed child is left as it was"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_whose_marks_landed_but_not_its_last_write_changes_nothing_replay_sees() {
    let fixed = Arc::new(AtomicBool::new(false));
    let mut reg = Registry::new();
    let fix = fixed.clone();
    reg.register("two", move |ctx: Context, _: Value| {
        let fix = fix.clone();
        async move {
            ctx.step("first", |_| async { Ok(1u32) }).await?;
            last_step(&ctx, fix).await
        }
    });
    let w = world(reg);
    let run = w.start("two", json!(null)).await;
    let failed = w.run(&run).await;
    // A restart cut off after it marked the entries (restart 1), before its last write.
    let mut marked = w.entry(&run, "notify#0").await.unwrap();
    marked.superseded = Some(1);
    let mut next = failed.clone();
    next.version += 1;
    let mut checkpoint = siesta::ports::Checkpoint::new(next, failed.version, None);
    checkpoint.journal = vec![marked];
    w.backend().store.checkpoint(&checkpoint).await.unwrap();
    assert_eq!(
        w.engine().check_replay(w.tenant(), &run).await.unwrap(),
        ReplayCheck::Clean { replayed: 2 },
        "the marked entry is still live: the run replays as before"
    );
    fixed.store(true, Ordering::SeqCst);
    let restarted = w
        .engine()
        .restart(w.tenant(), &run, RestartRequest::default(), None, "ops")
        .await
        .unwrap();
    assert_eq!(
        restarted.from,
        Some(Position::from("notify#0")),
        "planned the same"
    );
    w.run_until_idle().await;
    assert_eq!(w.status(&run).await, RunStatus::Completed);
}
