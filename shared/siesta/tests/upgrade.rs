//! Upgrade: a run moves to another build only when its journal replays there; a run
//! that does not replay is refused with the position, and left as it was; a run parked
//! for non-determinism is taken, and resumed, once a fixed build replays it.

mod support;

use serde_json::{Value, json};
use siesta::*;
use support::{output, world};

fn v1() -> Registry {
    let mut reg = Registry::new();
    reg.register("agent", |ctx: Context, _: Value| async move {
        ctx.step("llm", |_| async { Ok(1) }).await?;
        let approved: bool = ctx.wait_for_event("approval").await?;
        Ok(json!({"approved": approved}))
    });
    reg
}

fn inserted_step() -> Registry {
    let mut reg = Registry::new();
    reg.register("agent", |ctx: Context, _: Value| async move {
        ctx.step("triage", |_| async { Ok(0) }).await?;
        ctx.step("llm", |_| async { Ok(1) }).await?;
        let approved: bool = ctx.wait_for_event("approval").await?;
        Ok(json!({"approved": approved}))
    });
    reg
}

fn appended_step() -> Registry {
    let mut reg = Registry::new();
    reg.register("agent", |ctx: Context, _: Value| async move {
        ctx.step("llm", |_| async { Ok(1) }).await?;
        let approved: bool = ctx.wait_for_event("approval").await?;
        let notified: u32 = ctx.step("notify", |_| async { Ok(2) }).await?;
        Ok(json!({"approved": approved, "notified": notified}))
    });
    reg
}

/// An engine on the environment's data running `registry` as build `build`.
fn build(w: &siesta_testing::TestEnv, registry: Registry, build: &str) -> Engine {
    let config = EngineConfig {
        build_id: build.to_owned(),
        owner: format!("engine-{build}"),
        ..w.config().clone()
    };
    w.engine_with(registry, config).0
}

#[tokio::test]
async fn a_run_that_replays_moves_to_the_new_build_and_finishes_on_its_code() {
    let w = world(v1());
    let id = w.start("agent", json!(null)).await;
    let before = w.run(&id).await;
    assert_eq!(before.status, RunStatus::Waiting);
    let old_build = before.build_id.clone();

    let b = build(&w, appended_step(), "agent@2");
    let upgraded = b
        .upgrade(w.tenant(), &id, Some(before.version))
        .await
        .unwrap();
    assert_eq!(upgraded.build_id.as_deref(), Some("agent@2"));
    assert_eq!(upgraded.status, RunStatus::Waiting);
    assert_eq!(upgraded.version, before.version + 1);
    let event = w
        .timeline(&id)
        .await
        .into_iter()
        .find(|e| e.event_type == EventType::RunUpgraded)
        .expect("a RunUpgraded event");
    assert_eq!(event.details["From"], json!(old_build));
    assert_eq!(event.details["To"], json!("agent@2"));
    assert_eq!(event.details["Replayed"], json!(2));

    b.deliver_event(w.tenant(), &id, "approval", json!(true), None)
        .await
        .unwrap();
    b.run_until_idle(10).await.unwrap();
    let run = w.run(&id).await;
    assert_eq!(run.status, RunStatus::Completed);
    assert_eq!(output(&run), json!({"approved": true, "notified": 2}));
}

#[tokio::test]
async fn a_run_that_does_not_replay_is_refused_with_the_position_and_left_as_it_was() {
    let w = world(v1());
    let id = w.start("agent", json!(null)).await;
    let before = w.run(&id).await;

    let b = build(&w, inserted_step(), "agent@2");
    match b.upgrade(w.tenant(), &id, None).await {
        Err(EngineError::Diverged(d)) => {
            assert_eq!(d.position, Position::from("triage#0"));
            assert_eq!(d.journal_kind, Some(OperationKind::Step));
            assert_eq!(d.code_kind, Some(OperationKind::Step));
        }
        other => panic!("a diverging run must be refused: {other:?}"),
    }
    let after = w.run(&id).await;
    assert_eq!(after.version, before.version);
    assert_eq!(after.build_id, before.build_id);

    // Still whole on its own build.
    w.deliver_event(&id, "approval", false).await;
    assert_eq!(w.status(&id).await, RunStatus::Completed);
}

#[tokio::test]
async fn a_stale_version_is_refused() {
    let w = world(v1());
    let id = w.start("agent", json!(null)).await;
    let version = w.run(&id).await.version;
    let b = build(&w, appended_step(), "agent@2");
    assert!(matches!(
        b.upgrade(w.tenant(), &id, Some(version + 7)).await,
        Err(EngineError::VersionMismatch { current }) if current == version
    ));
}

#[tokio::test]
async fn a_run_parked_for_non_determinism_is_upgraded_and_resumed_once_a_fixed_build_replays_it() {
    let w = world(v1());
    let id = w.start("agent", json!(null)).await;

    // The broken deploy, under the same build id (the code changed, the id did not):
    // the approval parks the run.
    w.deploy(inserted_step());
    w.deliver_event(&id, "approval", true).await;
    let parked = w.run(&id).await;
    assert_eq!(parked.status, RunStatus::Parked);
    assert_eq!(parked.error.unwrap().kind, "NonDeterminism");
    assert!(matches!(
        w.engine().upgrade(w.tenant(), &id, None).await,
        Err(EngineError::Diverged(_))
    ));

    // The fix (the new step after the approval instead): one call takes the run.
    let fixed = build(&w, appended_step(), "agent@3");
    let upgraded = fixed.upgrade(w.tenant(), &id, None).await.unwrap();
    assert_eq!(upgraded.build_id.as_deref(), Some("agent@3"));
    assert_eq!(upgraded.status, RunStatus::Pending);
    assert_eq!(upgraded.error, None);
    fixed.run_until_idle(10).await.unwrap();
    let run = w.run(&id).await;
    assert_eq!(run.status, RunStatus::Completed);
    assert_eq!(output(&run), json!({"approved": true, "notified": 2}));
}

#[tokio::test]
async fn upgrading_a_build_moves_the_runs_that_replay_and_reports_the_others() {
    let mut reg = v1();
    reg.register("other", |ctx: Context, _: Value| async move {
        ctx.step("first", |_| async { Ok(1) }).await?;
        let _: bool = ctx.wait_for_event("go").await?;
        Ok(json!(null))
    });
    let w = world(reg);
    let a = w.start("agent", json!(null)).await;
    let b = w.start("other", json!(null)).await;
    let old = w.run(&a).await.build_id.unwrap();

    // The new build changed `other` before its wait and only appended to `agent`.
    let mut next = appended_step();
    next.register("other", |ctx: Context, _: Value| async move {
        ctx.step("zeroth", |_| async { Ok(0) }).await?;
        ctx.step("first", |_| async { Ok(1) }).await?;
        let _: bool = ctx.wait_for_event("go").await?;
        Ok(json!(null))
    });
    let engine = build(&w, next, "app@2");
    let report = engine.upgrade_build(w.tenant(), &old).await.unwrap();
    assert_eq!(report.upgraded, vec![a.clone()]);
    assert_eq!(report.diverged.len(), 1);
    assert_eq!(report.diverged[0].run_id, b);
    assert_eq!(
        report.diverged[0].divergence.position,
        Position::from("zeroth#0")
    );
    assert!(report.skipped.is_empty());
    assert_eq!(w.run(&a).await.build_id.as_deref(), Some("app@2"));
    assert_eq!(w.run(&b).await.build_id.as_deref(), Some(old.as_str()));
}

#[tokio::test]
async fn a_run_an_invocation_holds_is_not_upgraded_under_it() {
    let w = world(v1());
    let id = w.start("agent", json!(null)).await;
    // Another process claims the run (a delivery woke it) and works on it.
    let now = w.now();
    w.backend()
        .store
        .claim(
            w.tenant(),
            &id,
            &siesta::ports::Claim {
                owner: "elsewhere".into(),
                now,
                expires_at: now.plus(std::time::Duration::from_secs(60)),
            },
        )
        .await
        .unwrap();
    let before = w.run(&id).await;
    let b = build(&w, appended_step(), "agent@2");
    assert!(matches!(
        b.upgrade(w.tenant(), &id, None).await,
        Err(EngineError::Leased)
    ));
    let after = w.run(&id).await;
    assert_eq!(
        (after.version, after.build_id),
        (before.version, before.build_id)
    );
}
