//! Runs pinned to the build they started on: two builds of one app on one store (the
//! same workflow names, build B's `approval` with a step inserted before the wait). An
//! engine never claims or replays a run of another build; the run waits for its build
//! as it was, deliveries to it are recorded, and it finishes when its build serves
//! again.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use siesta::ports::{DeliverOutcome, WakeReason, WakeUp};
use siesta::probe::ProbeStore;
use siesta::*;
use siesta_testing::{TestEnv, default_engine_config};
use support::output;

const BUILD_A: &str = "shop@1.0.0+aaaa";
const BUILD_B: &str = "shop@1.0.1+bbbb";

/// `approval` as build A has it: draft, wait for the approval, refund.
fn build_a() -> Registry {
    let mut reg = Registry::new();
    reg.register("approval", |ctx: Context, _: Value| async move {
        let draft: String = ctx
            .step("draft", |_| async { Ok("draft".to_owned()) })
            .await?;
        let approved: bool = ctx.wait_for_event("approval").await?;
        let refund: String = ctx
            .step("refund", |_| async { Ok("refunded".to_owned()) })
            .await?;
        Ok(json!({"build": "a", "draft": draft, "approved": approved, "refund": refund}))
    });
    reg
}

/// Build B: a `triage` step inserted before the draft — a journal of build A does not
/// replay on it.
fn build_b() -> Registry {
    let mut reg = Registry::new();
    reg.register("approval", |ctx: Context, _: Value| async move {
        ctx.step("triage", |_| async { Ok(1u32) }).await?;
        let draft: String = ctx
            .step("draft", |_| async { Ok("draft".to_owned()) })
            .await?;
        let approved: bool = ctx.wait_for_event("approval").await?;
        Ok(json!({"build": "b", "draft": draft, "approved": approved}))
    });
    reg
}

fn config(build_id: &str, sweep_other_builds: OtherBuilds) -> EngineConfig {
    EngineConfig {
        owner: format!("engine-{build_id}"),
        build_id: build_id.to_owned(),
        sweep_other_builds,
        ..default_engine_config()
    }
}

/// One store, and an engine for each build (each leaving the other's runs to it, as
/// the dev server does).
/// An engine and the probe around its store.
type Serving = (Engine, Arc<ProbeStore>);

fn two_builds() -> (TestEnv, Serving, Serving) {
    let w = TestEnv::builder(Registry::new()).tenant("acme").build();
    let a = w.engine_with(build_a(), config(BUILD_A, OtherBuilds::Leave));
    let b = w.engine_with(build_b(), config(BUILD_B, OtherBuilds::Leave));
    (w, a, b)
}

/// Work `engine`'s queue and sweep until neither finds anything at this instant.
async fn settle(engine: &Engine) {
    for _ in 0..50 {
        let handled = engine.run_until_idle(50).await.unwrap();
        let woken = engine.sweep(100).await.unwrap().woken;
        if handled == 0 && woken == 0 {
            return;
        }
    }
    panic!("the engine did not settle");
}

async fn start(w: &TestEnv, engine: &Engine) -> RunId {
    let run = engine
        .start(w.tenant(), "approval", json!(null), None)
        .await
        .unwrap();
    settle(engine).await;
    run.id
}

/// The positions of a journal, sorted.
fn positions(journal: &[JournalEntry]) -> Vec<&str> {
    let mut positions: Vec<&str> = journal.iter().map(|e| e.position.0.as_str()).collect();
    positions.sort();
    positions
}

#[tokio::test]
async fn a_run_of_build_a_is_left_alone_by_build_b_and_finishes_on_a_when_a_serves_again() {
    let (w, (a, _), (b, b_probe)) = two_builds();
    let run_a = start(&w, &a).await;
    assert_eq!(w.status(&run_a).await, RunStatus::Waiting);
    assert_eq!(w.run(&run_a).await.build_id.as_deref(), Some(BUILD_A));

    // Build B serves now. An approval delivered to A's run is accepted and recorded.
    let delivered = b
        .deliver_event(w.tenant(), &run_a, "approval", json!(true), None)
        .await
        .unwrap();
    assert!(matches!(delivered, DeliverOutcome::Accepted(_)));
    let recorded = w.run(&run_a).await;
    assert_eq!(recorded.inbox_seq, 1);
    assert!(
        w.timeline(&run_a)
            .await
            .iter()
            .any(|e| e.event_type == EventType::EventDelivered),
        "the delivery is on the run's timeline"
    );

    // B's engine answers a wake-up for it after one read, writing nothing.
    let (reads, writes) = b_probe.counts();
    let wake = WakeUp::new(w.tenant().clone(), run_a.clone(), WakeReason::Delivery);
    assert_eq!(
        b.handle_wakeup(&wake).await.unwrap(),
        WakeOutcome::OtherBuild {
            build_id: BUILD_A.to_owned()
        }
    );
    assert_eq!(b_probe.counts(), (reads + 1, writes));

    // B's worker takes the delivery's wake-up off the queue as handled, and its sweep,
    // once the run falls due for it, sends nothing: the run is exactly as it was.
    settle(&b).await;
    w.clock().advance(Duration::from_secs(16 * 60));
    let sweep = b.sweep(100).await.unwrap();
    assert_eq!((sweep.woken, sweep.other_builds), (0, 1), "{sweep:?}");
    assert_eq!(b.run_until_idle(10).await.unwrap(), 0, "nothing was queued");
    let left = w.run(&run_a).await;
    assert_eq!(left.status, RunStatus::Waiting);
    assert_eq!(
        (left.version, left.epoch, left.timeline_seq, left.inbox_seen),
        (
            recorded.version,
            recorded.epoch,
            recorded.timeline_seq,
            recorded.inbox_seen
        ),
        "B wrote nothing to the run's progress"
    );
    assert_eq!(
        positions(&w.journal(&run_a).await),
        ["approval#0", "draft#0"]
    );
    assert_eq!(a.awaiting_build(&left), None, "build A serves its own run");
    assert_eq!(b.awaiting_build(&left), Some(BUILD_A));

    // Build A serves again: its sweep finds the run (the mark B's sweep left has
    // passed) and A finishes it on A's code, with the approval delivered meanwhile.
    w.clock().advance(Duration::from_secs(32 * 60));
    settle(&a).await;
    let done = w.run(&run_a).await;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(
        output(&done),
        json!({"build": "a", "draft": "draft", "approved": true, "refund": "refunded"})
    );
    assert!(
        !positions(&w.journal(&run_a).await).contains(&"triage#0"),
        "B's inserted step never ran for A's run"
    );
}

#[tokio::test]
async fn runs_of_build_b_run_on_b_beside_the_runs_of_a_waiting_for_a() {
    let (w, (a, _), (b, _)) = two_builds();
    let run_a = start(&w, &a).await;
    let run_b = start(&w, &b).await;
    assert_eq!(w.run(&run_b).await.build_id.as_deref(), Some(BUILD_B));
    assert_eq!(
        positions(&w.journal(&run_b).await),
        ["approval#0", "draft#0", "triage#0"]
    );
    for run in [&run_a, &run_b] {
        b.deliver_event(w.tenant(), run, "approval", json!(true), None)
            .await
            .unwrap();
    }
    settle(&b).await;
    let done = w.run(&run_b).await;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(output(&done)["build"], json!("b"));
    assert_eq!(w.status(&run_a).await, RunStatus::Waiting);
}

#[tokio::test]
async fn a_run_whose_workflow_upgrades_when_it_replays_still_waits_for_its_build_until_upgraded() {
    let w = TestEnv::builder(Registry::new()).tenant("acme").build();
    let (a, _) = w.engine_with(build_a(), config(BUILD_A, OtherBuilds::Leave));
    let mut upgrading = build_b();
    upgrading.upgrade_policy("approval", UpgradePolicy::UpgradeWhenReplays);
    let (b, _) = w.engine_with(upgrading, config(BUILD_B, OtherBuilds::Leave));
    assert_eq!(
        b.upgrade_policy("approval"),
        UpgradePolicy::UpgradeWhenReplays
    );
    assert_eq!(a.upgrade_policy("approval"), UpgradePolicy::Pinned);

    let run_a = start(&w, &a).await;
    b.deliver_event(w.tenant(), &run_a, "approval", json!(true), None)
        .await
        .unwrap();
    let wake = WakeUp::new(w.tenant().clone(), run_a.clone(), WakeReason::Delivery);
    assert_eq!(
        b.handle_wakeup(&wake).await.unwrap(),
        WakeOutcome::OtherBuild {
            build_id: BUILD_A.to_owned()
        }
    );
    settle(&b).await;
    assert_eq!(w.status(&run_a).await, RunStatus::Waiting);
}

/// Build C: build A's `approval` with a step appended after the refund — a journal
/// of build A replays on it.
fn build_c() -> Registry {
    let mut reg = Registry::new();
    reg.register("approval", |ctx: Context, _: Value| async move {
        let draft: String = ctx
            .step("draft", |_| async { Ok("draft".to_owned()) })
            .await?;
        let approved: bool = ctx.wait_for_event("approval").await?;
        let refund: String = ctx
            .step("refund", |_| async { Ok("refunded".to_owned()) })
            .await?;
        ctx.step("receipt", |_| async { Ok(()) }).await?;
        Ok(json!({"build": "c", "draft": draft, "approved": approved, "refund": refund}))
    });
    reg.upgrade_policy("approval", UpgradePolicy::UpgradeWhenReplays);
    reg
}

#[tokio::test]
async fn a_run_upgraded_to_the_serving_build_runs_there_and_one_that_diverges_is_refused() {
    let (w, (a, _), (b, _)) = two_builds();
    let (c, _) = w.engine_with(build_c(), config("shop@1.0.2+cccc", OtherBuilds::Leave));
    let run = start(&w, &a).await;
    c.deliver_event(w.tenant(), &run, "approval", json!(true), None)
        .await
        .unwrap();
    settle(&c).await;
    assert_eq!(
        w.status(&run).await,
        RunStatus::Waiting,
        "not run before its upgrade"
    );

    // B inserted a step: its upgrade is refused, naming where the journal and the code
    // part ways, and the run stays on A.
    let refused = b.upgrade(w.tenant(), &run, None).await;
    assert!(
        matches!(&refused, Err(EngineError::Diverged(d)) if d.position.to_string().contains("#0")),
        "{refused:?}"
    );
    assert_eq!(w.run(&run).await.build_id.as_deref(), Some(BUILD_A));

    // C only appended one: the upgrade moves the run, and C runs it to its end.
    let upgraded = c.upgrade(w.tenant(), &run, None).await.unwrap();
    assert_eq!(upgraded.build_id.as_deref(), Some("shop@1.0.2+cccc"));
    settle(&c).await;
    let done = w.run(&run).await;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(output(&done)["build"], json!("c"));
    assert_eq!(
        a.awaiting_build(&done),
        None,
        "a finished run waits for nothing"
    );
}

#[test]
fn the_engine_default_upgrade_policy_is_pinned_and_a_workflow_may_set_its_own() {
    assert_eq!(
        EngineConfig::default().upgrade_policy,
        UpgradePolicy::Pinned
    );
    assert_eq!(
        EngineConfig::default().sweep_other_builds,
        OtherBuilds::Wake
    );
    let mut reg = build_a();
    assert_eq!(reg.policy("approval"), None);
    reg.upgrade_policy("approval", UpgradePolicy::UpgradeWhenReplays);
    assert_eq!(
        reg.policy("approval"),
        Some(UpgradePolicy::UpgradeWhenReplays)
    );
}

#[tokio::test]
async fn a_run_that_records_no_build_is_served_by_any_build() {
    let w = TestEnv::builder(Registry::new()).tenant("acme").build();
    let (a, _) = w.engine_with(build_a(), config(BUILD_A, OtherBuilds::Leave));
    let (b, _) = w.engine_with(build_a(), config(BUILD_B, OtherBuilds::Leave));
    let run = a
        .start(w.tenant(), "approval", json!(null), None)
        .await
        .unwrap();
    settle(&a).await;
    // A run from before builds were recorded.
    let mut stored = w.run(&run.id).await;
    let mut unrecorded = stored.clone();
    unrecorded.build_id = None;
    unrecorded.version += 1;
    w.backend()
        .store
        .checkpoint(&siesta::ports::Checkpoint::new(
            unrecorded,
            stored.version,
            None,
        ))
        .await
        .unwrap();
    stored = w.run(&run.id).await;
    assert_eq!(b.awaiting_build(&stored), None);
    b.deliver_event(w.tenant(), &run.id, "approval", json!(false), None)
        .await
        .unwrap();
    settle(&b).await;
    assert_eq!(w.status(&run.id).await, RunStatus::Completed);
}

#[tokio::test]
async fn a_sweep_that_wakes_other_builds_sends_their_run_a_wake_up_per_margin_not_per_tick() {
    let w = TestEnv::builder(Registry::new()).tenant("acme").build();
    let (a, _) = w.engine_with(build_a(), config(BUILD_A, OtherBuilds::Leave));
    // As on AWS: the sweep wakes every build's runs (the step function forwards them).
    let (b, _) = w.engine_with(build_b(), config(BUILD_B, OtherBuilds::Wake));
    let run_a = start(&w, &a).await;
    b.deliver_event(w.tenant(), &run_a, "approval", json!(true), None)
        .await
        .unwrap();
    settle(&b).await;

    w.clock().advance(Duration::from_secs(16 * 60));
    assert_eq!(b.sweep(100).await.unwrap().woken, 1);
    assert_eq!(
        b.run_until_idle(10).await.unwrap(),
        1,
        "handled as OtherBuild"
    );
    for _ in 0..10 {
        w.clock().advance(Duration::from_secs(5));
        assert_eq!(b.sweep(100).await.unwrap().woken, 0, "not every tick");
    }
    assert_eq!(w.status(&run_a).await, RunStatus::Waiting);
}

#[tokio::test]
async fn runs_of_other_builds_do_not_fill_the_sweep_pages_of_a_build_that_leaves_them() {
    let (w, (a, _), (b, _)) = two_builds();
    let mut of_a = Vec::new();
    for _ in 0..5 {
        of_a.push(start(&w, &a).await);
    }
    for run in &of_a {
        b.deliver_event(w.tenant(), run, "approval", json!(true), None)
            .await
            .unwrap();
    }
    settle(&b).await;
    let run_b = start(&w, &b).await;
    b.deliver_event(w.tenant(), &run_b, "approval", json!(true), None)
        .await
        .unwrap();
    // B's own wake-up is lost (deleted unhandled).
    let queue = &b.backend().queue;
    for message in queue.receive(10, Duration::from_secs(60)).await.unwrap() {
        queue.ack(&message.receipt).await.unwrap();
    }
    w.clock().advance(Duration::from_secs(16 * 60));

    // Pages of two: A's five runs come first in the due index, B's own run last.
    let mut woken = 0;
    for _ in 0..4 {
        woken += b.sweep(2).await.unwrap().woken;
    }
    assert_eq!(woken, 1, "B's own run was reached");
    settle(&b).await;
    assert_eq!(w.status(&run_b).await, RunStatus::Completed);
}

#[tokio::test]
async fn a_run_waiting_for_its_build_is_woken_at_once_when_its_build_opens_the_file_again() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("siesta.db");
    let clock = Arc::new(ManualClock::default());
    let tenant = TenantId::from("acme");
    let serve = |registry: Registry, build: &str| {
        let backend = siesta_embedded::EmbeddedBackend::open(&path, clock.clone()).unwrap();
        let engine = Engine::new(
            backend.backend(),
            clock.clone(),
            registry,
            config(build, OtherBuilds::Leave),
        );
        (backend, engine)
    };

    // `dev` on build A: a run waits for its approval.
    let (file, a) = serve(build_a(), BUILD_A);
    let run = a
        .start(&tenant, "approval", json!(null), None)
        .await
        .unwrap();
    settle(&a).await;
    drop((a, file));

    // `dev` on build B: the approval arrives, B leaves the run to A.
    let (file, b) = serve(build_b(), BUILD_B);
    b.deliver_event(&tenant, &run.id, "approval", json!(true), None)
        .await
        .unwrap();
    settle(&b).await;
    clock.advance(Duration::from_secs(16 * 60));
    settle(&b).await;
    assert_eq!(
        b.get_run(&tenant, &run.id).await.unwrap().status,
        RunStatus::Waiting
    );
    drop((b, file));

    // `dev` on build A again, a moment later: its first sweep finds the run.
    clock.advance(Duration::from_secs(1));
    let (_file, a) = serve(build_a(), BUILD_A);
    settle(&a).await;
    let done = a.get_run(&tenant, &run.id).await.unwrap();
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(output(&done)["build"], json!("a"));
}
