//! What the sweep sends and what the queue hands out first, on the engine's own queue
//! (embedded) with a manual clock: a wake-up waiting in the queue is not sent again, a
//! lost one is; outside-world wake-ups go before older starts; one tenant's backlog
//! does not hold up another tenant.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::json;
use siesta::ports::*;
use siesta::*;
use siesta_testing::TestEnv;
use support::{create, world};

fn registry() -> Registry {
    let mut reg = Registry::new();
    reg.register("sleepy", |ctx: Context, _: serde_json::Value| async move {
        ctx.sleep(Duration::from_secs(60)).await
    });
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

/// Hand out every visible wake-up, one at a time, handling each; the wake-ups in the
/// order they were handed out.
async fn drain_one_by_one(w: &TestEnv) -> Vec<WakeUp> {
    let engine = w.engine();
    let queue = engine.backend().queue.clone();
    let mut order = Vec::new();
    loop {
        let got = queue.receive(1, Duration::from_secs(60)).await.unwrap();
        let Some(m) = got.into_iter().next() else {
            return order;
        };
        engine.handle_wakeup(&m.wake).await.unwrap();
        queue.ack(&m.receipt).await.unwrap();
        order.push(m.wake);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_while_wake_ups_wait_in_the_queue_sends_none_again() {
    let w = world(registry());
    let mut ids = Vec::new();
    for _ in 0..50 {
        ids.push(create(&w, "sleepy", json!(null)).await);
    }
    // Started, due at once, their wake-ups queued and not yet handled: the due index
    // leaves them out until their re-send time.
    w.clock().advance(Duration::from_secs(10));
    for _ in 0..3 {
        let report = w.engine().sweep(1000).await.unwrap();
        assert_eq!((report.due, report.woken), (0, 0), "{report:?}");
    }
    // Past it (a backlog that outlasts the margin), the queue is asked, and holds them.
    w.clock().advance(EngineConfig::default().resend_margin);
    let report = w.engine().sweep(1000).await.unwrap();
    assert_eq!(
        (report.due, report.woken, report.already_queued),
        (50, 0, 50),
        "{report:?}"
    );
    // Found queued, they leave the due index for another margin: the next sweeps'
    // pages are free for runs that need them.
    for _ in 0..3 {
        let report = w.engine().sweep(1000).await.unwrap();
        assert_eq!((report.due, report.woken), (0, 0), "{report:?}");
    }
    w.clock().advance(EngineConfig::default().resend_margin);
    let report = w.engine().sweep(1000).await.unwrap();
    assert_eq!(
        (report.due, report.woken, report.already_queued),
        (50, 0, 50),
        "still queued a margin later: asked again, nothing sent"
    );
    assert_eq!(
        w.engine().run_until_idle(100).await.unwrap(),
        50,
        "one each"
    );

    // Asleep on their timers, whose delayed wake-ups are in the queue: once due, they
    // are visible there and the sweep leaves them to it.
    w.clock().advance(Duration::from_secs(61));
    let report = w.engine().sweep(1000).await.unwrap();
    assert_eq!((report.due, report.woken), (0, 0), "{report:?}");
    assert_eq!(
        w.engine().run_until_idle(100).await.unwrap(),
        50,
        "one each"
    );
    for id in &ids {
        assert_eq!(w.run(id).await.status, RunStatus::Completed);
    }
    assert_eq!(w.engine().sweep(1000).await.unwrap().due, 0);
}

/// A queue whose sends fail: the commit before them happened, the message did not.
struct SendsFail;

#[async_trait]
impl SendHook for SendsFail {
    async fn send(&self, _: &dyn WakeQueue, _: &WakeUp, _: Duration) -> Result<(), StoreError> {
        Err(StoreError::Unavailable("injected: the send failed".into()))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_after_a_lost_send_sends_it_again() {
    let w = world(registry());
    let base = w.embedded().backend();
    let failing = Engine::new(
        Backend {
            queue: Arc::new(HookedSends::new(base.queue.clone(), SendsFail)),
            ..base.clone()
        },
        w.clock().clone(),
        registry(),
        EngineConfig::default(),
    );
    let lost = failing
        .start(w.tenant(), "await_go", json!(null), None)
        .await
        .unwrap()
        .id;
    let queued = create(&w, "await_go", json!(null)).await;
    w.clock().advance(Duration::from_secs(10));

    // Only the lost one is due for the sweep: the other's wake-up is on its way.
    let report = w.engine().sweep(1000).await.unwrap();
    assert_eq!(
        (report.due, report.woken, report.lost_wakeups),
        (1, 1, 1),
        "{report:?}"
    );
    assert_eq!(w.engine().run_until_idle(100).await.unwrap(), 2);
    assert_eq!(w.run(&lost).await.status, RunStatus::Waiting);
    assert_eq!(w.run(&queued).await.status, RunStatus::Waiting);

    // A delivery whose wake-up is lost too.
    failing
        .deliver_event(w.tenant(), &lost, "go", json!(1), None)
        .await
        .unwrap();
    let report = w.engine().sweep(1000).await.unwrap();
    assert_eq!((report.woken, report.due_waits), (1, 1), "{report:?}");
    w.run_until_idle().await;
    assert_eq!(w.run(&lost).await.status, RunStatus::Completed);
}

/// A queue that takes every send and keeps none, without an error: a wake-up lost
/// the way a process dying between its write and its send loses it.
struct SendsVanish(std::sync::atomic::AtomicUsize);

#[async_trait]
impl SendHook for SendsVanish {
    async fn send(&self, _: &dyn WakeQueue, _: &WakeUp, _: Duration) -> Result<(), StoreError> {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wake_up_lost_without_an_error_is_sent_again_once_its_margin_passed_then_after_a_doubled_wait()
 {
    let w = world(registry());
    let base = w.embedded().backend();
    let vanish = Arc::new(HookedSends::new(base.queue.clone(), SendsVanish(0.into())));
    let margin = EngineConfig::default().resend_margin;
    // The general margin, which a start's shorter one (tests/lost_start.rs) would hide.
    let lossy = Engine::new(
        Backend {
            queue: vanish.clone(),
            ..base.clone()
        },
        w.clock().clone(),
        registry(),
        EngineConfig {
            start_resend_margin: margin,
            ..EngineConfig::default()
        },
    );
    let sends = || vanish.0.load(std::sync::atomic::Ordering::SeqCst);
    let run = lossy
        .start(w.tenant(), "await_go", json!(null), None)
        .await
        .unwrap()
        .id;
    assert_eq!(sends(), 1, "the start's wake-up, gone without a trace");

    // Within the margin the sweep takes it for queued; past it, sends it again (and
    // that one vanishes too). Each time, the next is given as long as the run has
    // been due: the waits double.
    let t0 = w.now();
    let s = Duration::from_secs(1);
    let mut next = t0.plus(margin);
    for sent in 2..=4 {
        w.clock().set(Timestamp(next.0 - 1));
        assert_eq!(
            lossy.sweep(1000).await.unwrap().woken,
            0,
            "before send {sent}"
        );
        w.clock().set(next.plus(s));
        let report = lossy.sweep(1000).await.unwrap();
        assert_eq!((report.woken, report.lost_wakeups), (1, 1), "{report:?}");
        assert_eq!(sends(), sent);
        let now = next.plus(s);
        next = now.plus(t0.until(now));
    }
    assert_eq!(
        t0.until(next),
        8 * margin + 14 * s,
        "waits of 1, 1, 2 and 4 margins"
    );

    // With a queue that keeps them, the sweep's wake-up starts the run.
    assert_eq!(w.engine().sweep(1000).await.unwrap().woken, 0);
    w.clock().set(next);
    assert_eq!(w.engine().sweep(1000).await.unwrap().woken, 1);
    w.run_until_idle().await;
    assert_eq!(w.run(&run).await.status, RunStatus::Waiting);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wake_up_lost_with_the_process_is_sent_by_the_first_sweep_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("siesta.db");
    let clock = Arc::new(ManualClock::default());
    let engine_on =
        |backend: Backend| Engine::new(backend, clock.clone(), registry(), EngineConfig::default());
    let (lost, queued) = {
        let base = siesta_embedded::EmbeddedBackend::open(&path, clock.clone())
            .unwrap()
            .backend();
        // The process dies between the start's write and its send.
        let dying = engine_on(Backend {
            queue: Arc::new(HookedSends::new(base.queue.clone(), SendsVanish(0.into()))),
            ..base.clone()
        });
        let lost = dying
            .start(&"acme".into(), "await_go", json!(null), None)
            .await
            .unwrap()
            .id;
        let engine = engine_on(base);
        let queued = engine
            .start(&"acme".into(), "await_go", json!(null), None)
            .await
            .unwrap()
            .id;
        clock.advance(Duration::from_secs(10));
        let report = engine.sweep(1000).await.unwrap();
        assert_eq!(
            (report.due, report.woken),
            (0, 0),
            "before the restart both wake-ups count as on their way: {report:?}"
        );
        (lost, queued)
    };

    // Opened again: the queue holds the one wake-up and not the other, and the first
    // sweep sends the lost one, well within the margin.
    let backend = siesta_embedded::EmbeddedBackend::open(&path, clock.clone())
        .unwrap()
        .backend();
    let engine = engine_on(backend.clone());
    clock.advance(Duration::from_secs(1));
    let report = engine.sweep(1000).await.unwrap();
    assert_eq!(
        (report.due, report.woken, report.lost_wakeups),
        (1, 1, 1),
        "{report:?}"
    );
    assert_eq!(engine.sweep(1000).await.unwrap().woken, 0, "sent once");
    assert_eq!(engine.run_until_idle(100).await.unwrap(), 2, "one each");
    for id in [&lost, &queued] {
        let run = backend
            .store
            .get_run(&"acme".into(), id)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(run.status, RunStatus::Waiting, "{id}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outside_world_wake_up_is_handled_before_older_start_wake_ups() {
    let w = world(registry());
    let waiting = create(&w, "await_go", json!(null)).await;
    w.run_until_idle().await;
    let mut starts = Vec::new();
    for _ in 0..100 {
        starts.push(create(&w, "sleepy", json!(null)).await);
    }
    w.clock().advance(Duration::from_millis(5));
    w.engine()
        .deliver_event(w.tenant(), &waiting, "go", json!("now"), None)
        .await
        .unwrap();

    let order = drain_one_by_one(&w).await;
    assert_eq!(order.len(), 101);
    assert_eq!(
        order[0].run_id, waiting,
        "the event goes first: {:?}",
        order[0]
    );
    assert_eq!(w.run(&waiting).await.status, RunStatus::Completed);
    let rest: Vec<&RunId> = order[1..].iter().map(|w| &w.run_id).collect();
    assert_eq!(rest, starts.iter().collect::<Vec<_>>(), "starts in order");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_with_a_large_backlog_does_not_hold_up_another_tenants_wake_ups() {
    let w = world(registry());
    let (a, b) = (TenantId::from("a-busy"), TenantId::from("b-quiet"));
    for _ in 0..500 {
        w.engine()
            .start(&a, "sleepy", json!(null), None)
            .await
            .unwrap();
    }
    let mut quiet = Vec::new();
    for _ in 0..3 {
        quiet.push(
            w.engine()
                .start(&b, "sleepy", json!(null), None)
                .await
                .unwrap()
                .id,
        );
    }
    let order = drain_one_by_one(&w).await;
    assert_eq!(order.len(), 503);
    // Turn and turn about while both have wake-ups: b's three are among the first six.
    let b_at: Vec<usize> = order
        .iter()
        .enumerate()
        .filter(|(_, wake)| wake.tenant == b)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(b_at.len(), 3);
    assert!(b_at.iter().all(|&i| i < 6), "b handled at {b_at:?}");
    for id in &quiet {
        assert_eq!(
            w.engine().get_run(&b, id).await.unwrap().status,
            RunStatus::Waiting
        );
    }
}
