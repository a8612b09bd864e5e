//! Pausing a run through the API: `POST /runs/{id}/pause` answers 200 `paused` for a
//! waiting run, with who paused it in the timeline; an event sent meanwhile is kept;
//! `POST /runs/{id}/resume` lets it go on; a finished run is not paused (409); a stale
//! `If-Match` is refused (412).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

mod common;

use http::StatusCode;
use serde_json::{Value, json};
use siesta::{Context, Registry};
use siesta_testing::TestEnv;

fn registry() -> Registry {
    let mut registry = Registry::new();
    registry.register("waits_for_go", |ctx: Context, _: Value| async move {
        let go: Value = ctx.wait_for_event("go").await?;
        Ok(go)
    });
    registry
}

#[tokio::test]
async fn a_waiting_run_is_paused_keeps_its_event_and_resumes_by_the_api() {
    let env = TestEnv::builder(registry()).tenant("acme").build();
    let api = common::keyed_api(&env);
    let id = env.start("waits_for_go", json!(null)).await;
    let path = |tail: &str| format!("/runs/{id}{tail}");

    let (status, stale) = common::call_keyed(
        &api,
        "POST",
        &path("/pause"),
        None,
        &[("if-match", "\"99\"")],
    )
    .await;
    assert_eq!(status, StatusCode::PRECONDITION_FAILED, "{stale}");

    let (status, paused) = common::call_keyed(&api, "POST", &path("/pause"), None, &[]).await;
    assert_eq!(status, StatusCode::OK, "{paused}");
    assert_eq!(paused["status"], "paused");

    let (status, _) =
        common::call_keyed(&api, "POST", &path("/events/go"), Some(json!("now")), &[]).await;
    assert!(status.is_success(), "{status}");
    env.run_until_idle().await;
    let (_, still) = common::call_keyed(&api, "GET", &path(""), None, &[]).await;
    assert_eq!(
        still["status"], "paused",
        "an event does not wake a paused run"
    );

    let (status, resumed) = common::call_keyed(&api, "POST", &path("/resume"), None, &[]).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{resumed}");
    env.run_until_idle().await;
    let (_, done) = common::call_keyed(&api, "GET", &path(""), None, &[]).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["output"], json!("now"));

    let (_, timeline) = common::call_keyed(&api, "GET", &path("/timeline"), None, &[]).await;
    let paused_event = timeline["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["event_type"] == "RunPaused" || e["EventType"] == "RunPaused")
        .cloned()
        .unwrap_or(Value::Null);
    assert_ne!(paused_event, Value::Null, "{timeline}");

    let (status, refused) = common::call_keyed(&api, "POST", &path("/pause"), None, &[]).await;
    assert_eq!(status, StatusCode::CONFLICT, "{refused}");
    assert_eq!(refused["error"]["code"], "already_finished");
}
