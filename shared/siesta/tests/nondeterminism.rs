//! A run whose code no longer matches its journal is parked with an error naming the
//! position and both operation kinds, never silently diverged.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

mod support;

use std::time::Duration;

use serde_json::json;
use siesta::*;
use support::{create, world};

fn v1() -> Registry {
    let mut reg = Registry::new();
    reg.register("flow", |ctx: Context, _: serde_json::Value| async move {
        ctx.step("reserve", |_| async { Ok(1) }).await?;
        ctx.sleep(Duration::from_secs(60)).await?;
        Ok(())
    });
    reg
}

async fn park_under(new_code: Registry) -> Run {
    let w = world(v1());
    let id = create(&w, "flow", json!(null)).await;
    w.run_until_idle().await;
    assert_eq!(w.run(&id).await.status, RunStatus::Waiting);
    w.deploy(new_code);
    let engine = w.engine();
    w.clock().advance(Duration::from_secs(60));
    engine.sweep(10).await.unwrap();
    engine.run_until_idle(10).await.unwrap();
    w.run(&id).await
}

#[tokio::test]
async fn changed_operation_kind_at_a_position_parks_the_run() {
    let mut reg = Registry::new();
    reg.register("flow", |ctx: Context, _: serde_json::Value| async move {
        let _: u32 = ctx.wait_for_event("reserve").await?;
        Ok(())
    });
    let run = park_under(reg).await;
    assert_eq!(run.status, RunStatus::Parked);
    let error = run.error.unwrap();
    assert_eq!(error.kind, "NonDeterminism");
    assert!(
        error.message.contains("reserve#0")
            && error.message.contains("step")
            && error.message.contains("event"),
        "{}",
        error.message
    );
}

#[tokio::test]
async fn renamed_operation_parks_the_run_naming_both() {
    let mut reg = Registry::new();
    reg.register("flow", |ctx: Context, _: serde_json::Value| async move {
        ctx.step("hold", |_| async { Ok(1) }).await?;
        ctx.sleep(Duration::from_secs(60)).await?;
        Ok(())
    });
    let run = park_under(reg).await;
    assert_eq!(run.status, RunStatus::Parked);
    let message = run.error.unwrap().message;
    assert!(
        message.contains("reserve#0") && message.contains("hold#0"),
        "{message}"
    );
}

#[tokio::test]
async fn removed_operation_parks_the_run_instead_of_completing() {
    let mut reg = Registry::new();
    reg.register("flow", |_ctx: Context, _: serde_json::Value| async move {
        Ok(())
    });
    let run = park_under(reg).await;
    assert_eq!(run.status, RunStatus::Parked);
    assert!(run.error.unwrap().message.contains("no longer reaches"));
}

#[tokio::test]
async fn unchanged_code_replays_cleanly() {
    let run = park_under(v1()).await;
    assert_eq!(run.status, RunStatus::Completed);
}
