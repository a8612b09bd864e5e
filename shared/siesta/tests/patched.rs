//! `ctx.patched`: a run made before the patch replays down the old path (the marker
//! takes no position), a run at its frontier records the marker and takes the new one,
//! and `deprecate_patch` retires the patch without breaking runs that recorded it.

mod support;

use serde_json::{Value, json};
use siesta::*;
use support::{output, world};

fn before() -> Registry {
    let mut reg = Registry::new();
    reg.register("flow", |ctx: Context, _: Value| async move {
        ctx.step("plan", |_| async { Ok(1) }).await?;
        let _: bool = ctx.wait_for_event("go").await?;
        ctx.step("execute", |_| async { Ok(2) }).await?;
        Ok(json!("old"))
    });
    reg
}

fn patched() -> Registry {
    let mut reg = Registry::new();
    reg.register("flow", |ctx: Context, _: Value| async move {
        ctx.step("plan", |_| async { Ok(1) }).await?;
        let path = if ctx.patched("notify") {
            ctx.step("notify", |_| async { Ok(3) }).await?;
            "new"
        } else {
            "old"
        };
        let _: bool = ctx.wait_for_event("go").await?;
        ctx.step("execute", |_| async { Ok(2) }).await?;
        Ok(json!(path))
    });
    reg
}

fn deprecated() -> Registry {
    let mut reg = Registry::new();
    reg.register("flow", |ctx: Context, _: Value| async move {
        ctx.step("plan", |_| async { Ok(1) }).await?;
        ctx.deprecate_patch("notify");
        ctx.step("notify", |_| async { Ok(3) }).await?;
        let _: bool = ctx.wait_for_event("go").await?;
        ctx.step("execute", |_| async { Ok(2) }).await?;
        Ok(json!("new"))
    });
    reg
}

#[tokio::test]
async fn patched_is_false_for_a_run_made_before_the_patch_and_true_for_a_new_one() {
    let w = world(before());
    let old = w.start("flow", json!(null)).await;
    w.deploy(patched());
    let new = w.start("flow", json!(null)).await;

    let marker = w.entry(&new, "patch:notify#0").await.expect("the marker");
    assert_eq!(marker.kind, OperationKind::Patch);
    assert_eq!(marker.index, 1, "the marker takes its place in the run");
    assert_eq!(w.entry(&new, "notify#0").await.unwrap().index, 2);
    assert!(w.entry(&old, "patch:notify#0").await.is_none());
    let marker_event = w
        .timeline(&new)
        .await
        .into_iter()
        .find(|e| e.event_type == EventType::MarkerRecorded)
        .expect("a MarkerRecorded event");
    assert_eq!(marker_event.details["Patch"], "notify");

    for id in [&old, &new] {
        w.deliver_event(id, "go", true).await;
    }
    assert_eq!(output(&w.run(&old).await), json!("old"));
    assert_eq!(output(&w.run(&new).await), json!("new"));
    // The old run's operations kept their positions: the marker took none.
    assert_eq!(w.entry(&old, "execute#0").await.unwrap().index, 2);
    assert!(w.entry(&old, "notify#0").await.is_none());
}

#[tokio::test]
async fn a_run_that_reaches_the_patch_point_after_the_deploy_takes_the_new_path() {
    let mut reg = Registry::new();
    reg.register("flow", |ctx: Context, _: Value| async move {
        let _: bool = ctx.wait_for_event("go").await?;
        Ok(json!("old"))
    });
    let w = world(reg);
    let id = w.start("flow", json!(null)).await;
    let mut reg = Registry::new();
    reg.register("flow", |ctx: Context, _: Value| async move {
        let _: bool = ctx.wait_for_event("go").await?;
        if ctx.patched("after") {
            ctx.step("extra", |_| async { Ok(1) }).await?;
            return Ok(json!("new"));
        }
        Ok(json!("old"))
    });
    w.deploy(reg);
    w.deliver_event(&id, "go", true).await;
    assert_eq!(output(&w.run(&id).await), json!("new"));
    assert!(w.entry(&id, "patch:after#0").await.is_some());
}

#[tokio::test]
async fn deprecate_patch_takes_a_recorded_marker_and_records_none() {
    let w = world(patched());
    let with_marker = w.start("flow", json!(null)).await;
    w.deploy(deprecated());
    let without = w.start("flow", json!(null)).await;
    assert!(w.entry(&without, "patch:notify#0").await.is_none());
    assert!(w.entry(&without, "notify#0").await.is_some());
    for id in [&with_marker, &without] {
        assert!(
            w.engine()
                .check_replay(w.tenant(), id)
                .await
                .unwrap()
                .is_clean()
        );
        w.deliver_event(id, "go", true).await;
        assert_eq!(output(&w.run(id).await), json!("new"));
    }
}

#[tokio::test]
async fn a_new_operation_where_a_run_recorded_the_marker_diverges_naming_the_marker() {
    let w = world(patched());
    let id = w.start("flow", json!(null)).await;
    let mut reg = Registry::new();
    reg.register("flow", |ctx: Context, _: Value| async move {
        ctx.step("plan", |_| async { Ok(1) }).await?;
        ctx.step("audit", |_| async { Ok(0) }).await?;
        ctx.step("notify", |_| async { Ok(3) }).await?;
        let _: bool = ctx.wait_for_event("go").await?;
        Ok(json!("new"))
    });
    let (engine, _) = w.engine_with(reg, w.config().clone());
    match engine.check_replay(w.tenant(), &id).await.unwrap() {
        ReplayCheck::Diverged(d) => {
            assert_eq!(d.position, Position::from("audit#0"));
            assert_eq!(d.journal_kind, Some(OperationKind::Patch));
            assert_eq!(d.code_kind, Some(OperationKind::Step));
        }
        clean => panic!("a step where the marker is must diverge: {clean:?}"),
    }
}
