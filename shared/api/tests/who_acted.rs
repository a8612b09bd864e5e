//! Every operator's action on a run names who did it in the run's timeline (issue 47):
//! a pause (`PausedBy`), a resume (`ResolvedBy`), a restart (`RestartedBy`) and a cancel
//! (`CancelledBy`), each the caller as the API names it — here an API key's
//! fingerprint at its tenant.
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
async fn pause_resume_restart_and_cancel_each_name_the_caller_in_the_timeline() {
    let env = TestEnv::builder(registry()).tenant("acme").build();
    let api = common::keyed_api(&env);
    let id = env.start("waits_for_go", json!(null)).await;
    let path = |tail: &str| format!("/runs/{id}{tail}");
    for action in ["/pause", "/resume", "/restart", "/cancel"] {
        let (status, body) = common::call_keyed(&api, "POST", &path(action), None, &[]).await;
        assert!(status.is_success(), "{action}: {status} {body}");
        env.run_until_idle().await;
    }
    let (status, timeline) = common::call_keyed(&api, "GET", &path("/timeline"), None, &[]).await;
    assert_eq!(status, StatusCode::OK);
    let events = timeline["events"].as_array().unwrap();
    let by = |event: &str, field: &str| -> Vec<Value> {
        events
            .iter()
            .filter(|e| e["event_type"] == event || e["EventType"] == event)
            .map(|e| {
                let details = if e["details"].is_null() {
                    &e["Details"]
                } else {
                    &e["details"]
                };
                details[field].clone()
            })
            .collect()
    };
    let who = by("RunPaused", "PausedBy");
    assert_eq!(who.len(), 1, "{timeline}");
    let caller = who[0].as_str().expect("a caller").to_owned();
    assert!(caller.ends_with("@acme"), "{caller}");
    assert_eq!(by("RunResumed", "ResolvedBy"), [json!(caller)]);
    assert_eq!(by("RunRestarted", "RestartedBy"), [json!(caller)]);
    assert_eq!(by("ExecutionCancelled", "CancelledBy"), [json!(caller)]);
}
