//! Wake-ups that keep failing: a dead letter is handled once and parks its run only
//! while it is the run's latest wake-up, so `resume` sticks; a worker killed while it
//! holds a batch costs a receive only to what it was handling; and a run worked on
//! longer than the visibility timeout is not handed out twice.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use siesta::ports::*;
use siesta::*;
use siesta_testing::TestEnv;
use support::{create, world};

fn registry() -> Registry {
    let mut reg = Registry::new();
    reg.register("nap", |ctx: Context, _: serde_json::Value| async move {
        ctx.sleep(Duration::from_secs(3600)).await?;
        Ok("rested")
    });
    reg
}

/// Receive the run's wake-up until the queue dead-letters it (the default limit is 5),
/// never acknowledging it: a handler that fails every time.
async fn fail_until_dead_lettered(w: &TestEnv, run_id: &RunId) {
    for _ in 0..10 {
        let got = w
            .engine()
            .backend()
            .queue
            .receive(10, Duration::from_secs(1))
            .await
            .unwrap();
        w.clock().advance(Duration::from_secs(2));
        if got.is_empty() {
            break;
        }
    }
    // A peek: a zero visibility leaves them for the sweep.
    let dead = w
        .engine()
        .backend()
        .queue
        .dead_letters(10, Duration::ZERO)
        .await
        .unwrap();
    assert!(
        dead.iter().any(|d| &d.wake.run_id == run_id),
        "dead-lettered: {dead:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_wake_up_is_dead_lettered_is_parked_with_the_reason_once() {
    let w = world(registry());
    let id = create(&w, "nap", json!(null)).await;
    fail_until_dead_lettered(&w, &id).await;

    let report = w.engine().sweep(100).await.unwrap();
    assert_eq!(
        (report.dead_letters, report.parked_dead_letters),
        (1, 1),
        "{report:?}"
    );
    let run = w.run(&id).await;
    assert_eq!(run.status, RunStatus::Parked);
    assert_eq!(run.error.as_ref().unwrap().kind, "DeadLettered");
    assert!(run.lease.is_none() && run.due_at.is_none(), "{run:?}");
    let last = w.timeline(&id).await.pop().unwrap();
    assert_eq!(last.event_type, EventType::RunParked);
    assert_eq!(last.details["Error"]["kind"], "DeadLettered", "{last:?}");

    let again = w.engine().sweep(100).await.unwrap();
    assert_eq!(
        (again.dead_letters, again.parked_dead_letters),
        (0, 0),
        "handled once: {again:?}"
    );
    assert_eq!(w.run(&id).await.version, run.version);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_for_a_finished_or_leased_run_changes_nothing() {
    let mut reg = registry();
    reg.register("quick", |_ctx: Context, _: serde_json::Value| async move {
        Ok(1)
    });
    let w = world(reg);
    let done = create(&w, "quick", json!(null)).await;
    fail_until_dead_lettered(&w, &done).await;
    w.engine()
        .handle_wakeup(&WakeUp {
            tenant: w.tenant().clone(),
            run_id: done.clone(),
            reason: WakeReason::Started,
            epoch_hint: 0,
            seq_hint: None,
        })
        .await
        .unwrap();
    assert_eq!(w.run(&done).await.status, RunStatus::Completed);

    let held = create(&w, "nap", json!(null)).await;
    fail_until_dead_lettered(&w, &held).await;
    let now = w.clock().now();
    w.engine()
        .backend()
        .store
        .claim(
            w.tenant(),
            &held,
            &Claim {
                owner: "someone-else".into(),
                now,
                expires_at: now.plus(Duration::from_secs(600)),
            },
        )
        .await
        .unwrap();
    let (done_before, held_before) = (w.run(&done).await, w.run(&held).await);

    let report = w.engine().sweep(100).await.unwrap();
    assert_eq!(
        (report.dead_letters, report.parked_dead_letters),
        (2, 0),
        "{report:?}"
    );
    assert_eq!(w.run(&done).await, done_before);
    assert_eq!(w.run(&held).await, held_before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wake_up_worked_on_past_its_visibility_timeout_is_not_handed_out_twice() {
    let mut reg = Registry::new();
    reg.register("slow", |ctx: Context, _: serde_json::Value| async move {
        ctx.step("work", |_| async {
            tokio::time::sleep(Duration::from_millis(1200)).await;
            Ok(())
        })
        .await?;
        Ok("done")
    });
    let dir = tempfile::tempdir().unwrap();
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let backend = siesta_embedded::EmbeddedBackend::open(dir.path().join("s.db"), clock.clone())
        .unwrap()
        .backend();
    let engine = Engine::new(
        backend.clone(),
        clock,
        reg,
        EngineConfig {
            // The worker receives with the lease as the visibility timeout.
            lease_ttl: Duration::from_millis(300),
            ..EngineConfig::default()
        },
    );
    let tenant = TenantId::from("acme");
    let run = engine
        .start(&tenant, "slow", json!(null), None)
        .await
        .unwrap();

    let worker = tokio::spawn({
        let engine = engine.clone();
        async move { engine.work_queue_once(1).await.unwrap() }
    });
    // Another worker polls all through the slow step: the message stays hidden.
    let mut stolen = 0;
    while !worker.is_finished() {
        tokio::time::sleep(Duration::from_millis(100)).await;
        stolen += backend
            .queue
            .receive(10, Duration::from_secs(30))
            .await
            .unwrap()
            .len();
    }
    assert_eq!(worker.await.unwrap(), 1);
    assert_eq!(stolen, 0, "the wake-up was handed to a second worker");
    let run = engine.get_run(&tenant, &run.id).await.unwrap();
    assert_eq!(run.status, RunStatus::Completed, "{:?}", run.error);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_run_resumes_where_it_stopped_once_an_operator_says_so() {
    let w = world(registry());
    let id = create(&w, "nap", json!(null)).await;
    fail_until_dead_lettered(&w, &id).await;
    w.engine().sweep(100).await.unwrap();
    let parked = w.run(&id).await;
    assert_eq!(parked.status, RunStatus::Parked);

    let stale = w
        .engine()
        .resume(w.tenant(), &id, Some(parked.version - 1))
        .await;
    assert!(
        matches!(stale, Err(EngineError::VersionMismatch { .. })),
        "{stale:?}"
    );
    let resumed = w
        .engine()
        .resume(w.tenant(), &id, Some(parked.version))
        .await
        .unwrap();
    assert_eq!(resumed.status, RunStatus::Pending);
    assert!(resumed.error.is_none());
    w.engine().run_until_idle(100).await.unwrap();
    let run = w.run(&id).await;
    assert_eq!(
        run.status,
        RunStatus::Waiting,
        "back to its nap: {:?}",
        run.error
    );
    let events: Vec<EventType> = w.timeline(&id).await.iter().map(|e| e.event_type).collect();
    assert!(events.contains(&EventType::RunResumed), "{events:?}");

    let again = w.engine().resume(w.tenant(), &id, None).await;
    assert!(
        matches!(again, Err(EngineError::NotParked(RunStatus::Waiting))),
        "{again:?}"
    );
}

/// A run that waits for the event `go` (up to an hour), then finishes.
fn awaiting() -> Registry {
    let mut reg = registry();
    reg.register(
        "await_go",
        |ctx: Context, _: serde_json::Value| async move {
            let v: serde_json::Value = ctx
                .wait_for_event("go")
                .timeout(Duration::from_secs(3600))
                .await?;
            Ok(v)
        },
    );
    reg
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_run_stays_resumed_through_sweeps_and_a_later_event_completes_it() {
    let w = world(awaiting());
    let id = create(&w, "await_go", json!(null)).await;
    fail_until_dead_lettered(&w, &id).await;
    w.engine().sweep(100).await.unwrap();
    assert_eq!(w.run(&id).await.status, RunStatus::Parked);

    w.engine().resume(w.tenant(), &id, None).await.unwrap();
    w.run_until_idle().await;
    // Each sweep past the five minutes a dead letter being handled stays hidden: one
    // handled but not deleted would be back by then.
    for _ in 0..3 {
        w.clock().advance(Duration::from_secs(301));
        let report = w.engine().sweep(100).await.unwrap();
        assert_eq!(report.parked_dead_letters, 0, "{report:?}");
        w.run_until_idle().await;
    }
    let run = w.run(&id).await;
    assert_eq!(run.status, RunStatus::Waiting, "{:?}", run.error);

    w.engine()
        .deliver_event(w.tenant(), &id, "go", json!("approved"), None)
        .await
        .unwrap();
    w.run_until_idle().await;
    let run = w.run(&id).await;
    assert_eq!(run.status, RunStatus::Completed, "{:?}", run.error);
    assert_eq!(run.output, Some(Payload::Inline(json!("approved"))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_five_dead_letters_are_each_handled_once() {
    let w = world(registry());
    let mut ids = Vec::new();
    for _ in 0..25 {
        ids.push(create(&w, "nap", json!(null)).await);
    }
    // Received five times each without an acknowledgement, then once more.
    for _ in 0..6 {
        loop {
            let got = w
                .engine()
                .backend()
                .queue
                .receive(10, Duration::from_secs(1))
                .await
                .unwrap();
            if got.is_empty() {
                break;
            }
        }
        w.clock().advance(Duration::from_secs(2));
    }
    let report = w.engine().sweep(100).await.unwrap();
    assert_eq!(
        (report.dead_letters, report.parked_dead_letters),
        (25, 25),
        "{report:?}"
    );
    for id in &ids {
        assert_eq!(w.run(id).await.status, RunStatus::Parked);
    }
    w.clock().advance(Duration::from_secs(600));
    let again = w.engine().sweep(100).await.unwrap();
    assert_eq!(again.dead_letters, 0, "each once: {again:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_the_runs_progress_has_overtaken_parks_nothing() {
    let w = world(awaiting());
    let id = create(&w, "await_go", json!(null)).await;
    // The run moves on (here: handled directly) while its start wake-up is received
    // and never acknowledged until the queue gives up on it.
    let wake = WakeUp::new(w.tenant().clone(), id.clone(), WakeReason::Started);
    w.engine().handle_wakeup(&wake).await.unwrap();
    assert_eq!(w.run(&id).await.status, RunStatus::Waiting);
    fail_until_dead_lettered(&w, &id).await;

    let before = w.run(&id).await;
    let report = w.engine().sweep(100).await.unwrap();
    assert_eq!(
        (report.dead_letters, report.parked_dead_letters),
        (1, 0),
        "{report:?}"
    );
    assert_eq!(w.run(&id).await, before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_kills_in_a_row_of_a_worker_holding_a_batch_park_no_healthy_run() {
    let mut reg = Registry::new();
    reg.register("hang", |ctx: Context, _: serde_json::Value| async move {
        ctx.step("forever", |_| {
            std::future::pending::<Result<(), StepError>>()
        })
        .await?;
        Ok(())
    });
    reg.register("quick", |ctx: Context, _: serde_json::Value| async move {
        ctx.step("work", |_| async { Ok(1) }).await?;
        Ok(2)
    });
    let w = world(reg);
    // The hanging run is the oldest: a worker taking wake-ups one at a time would sit
    // on it while holding the nine others.
    let hang = create(&w, "hang", json!(null)).await;
    let mut healthy = Vec::new();
    for _ in 0..9 {
        healthy.push(create(&w, "quick", json!(null)).await);
    }
    for kill in 1..=5 {
        let worker = tokio::spawn({
            let engine = w.engine().clone();
            async move { engine.work_queue_once(10).await }
        });
        // Until every healthy run has finished and the worker has claimed the hanging
        // run once more — it holds its wake-up — (a guard, not a measurement: the test
        // fails after 10 s if they never do).
        let all_done = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                let mut done = w.run(&hang).await.epoch.0 >= kill;
                for id in &healthy {
                    done &= w.run(id).await.status == RunStatus::Completed;
                }
                if done {
                    return;
                }
                tokio::task::yield_now().await;
            }
        })
        .await;
        assert!(
            all_done.is_ok() || kill > 1,
            "kill {kill}: the healthy runs were not handled while 'hang' hung"
        );
        assert!(
            !worker.is_finished(),
            "kill {kill}: the worker hangs on 'hang'"
        );
        worker.abort();
        let _ = worker.await;
        // Past the visibility timeout and the lease.
        w.clock()
            .advance(w.config().lease_ttl + Duration::from_secs(1));
    }
    // The sixth receive moves the hanging run's wake-up to the dead-letter queue.
    let got = w
        .engine()
        .backend()
        .queue
        .receive(10, w.config().lease_ttl)
        .await
        .unwrap();
    assert!(got.is_empty(), "{got:?}");
    let report = w.engine().sweep(100).await.unwrap();
    assert_eq!(report.dead_letters, 1, "only the run at fault: {report:?}");
    for id in &healthy {
        let run = w.run(id).await;
        assert_eq!(run.status, RunStatus::Completed, "{:?}", run.error);
    }
    assert_eq!(w.run(&hang).await.status, RunStatus::Parked);
}
