//! Restarting a run through the API: `POST /runs/{id}/restart` with no body restarts a
//! failed run in place from its failed step (200, `restart` on its view, who did it in
//! the timeline), `{"as_new": true}` answers 201 with the fork, an unknown `from` is a
//! 422 and a body that is not an object a 400, a code change before the point a 409
//! `diverged` naming where, and a stale `If-Match` a 412.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use http::StatusCode;
use serde_json::{Value, json};
use siesta::{Context, Registry, StepError};
use siesta_testing::TestEnv;

/// `fetch_then_notify`: a step, then a step that fails for good until `fixed`; with
/// `renamed`, the first step has another name.
fn registry(fixed: Arc<AtomicBool>, renamed: bool) -> Registry {
    let mut registry = Registry::new();
    registry.register("fetch_then_notify", move |ctx: Context, _: Value| {
        let fixed = fixed.clone();
        async move {
            let first = if renamed { "fetch_v2" } else { "fetch" };
            ctx.step(first, |_| async { Ok(1u32) }).await?;
            ctx.step("notify", move |_| async move {
                if fixed.load(Ordering::SeqCst) {
                    Ok(json!("sent"))
                } else {
                    Err(StepError::from_http_status(400, "the receiver said 400"))
                }
            })
            .await
        }
    });
    registry
}

#[tokio::test]
async fn a_failed_run_restarts_in_place_and_as_new_by_the_api() {
    let fixed = Arc::new(AtomicBool::new(false));
    let env = TestEnv::builder(registry(fixed.clone(), false))
        .tenant("acme")
        .build();
    let api = common::keyed_api(&env);
    let id = env.start("fetch_then_notify", json!(null)).await;
    let path = |tail: &str| format!("/runs/{id}{tail}");
    let (_, failed) = common::call_keyed(&api, "GET", &path(""), None, &[]).await;
    assert_eq!(failed["status"], "failed", "{failed}");

    let (status, stale) = common::call_keyed(
        &api,
        "POST",
        &path("/restart"),
        None,
        &[("if-match", "\"99\"")],
    )
    .await;
    assert_eq!(status, StatusCode::PRECONDITION_FAILED, "{stale}");
    let (status, unknown) = common::call_keyed(
        &api,
        "POST",
        &path("/restart"),
        Some(json!({"from": "nowhere#0"})),
        &[],
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{unknown}");
    let (status, malformed) =
        common::call_keyed(&api, "POST", &path("/restart"), Some(json!([1])), &[]).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{malformed}");

    fixed.store(true, Ordering::SeqCst);
    let (status, restarted) = common::call_keyed(&api, "POST", &path("/restart"), None, &[]).await;
    assert_eq!(status, StatusCode::OK, "{restarted}");
    assert_eq!(restarted["id"], json!(id.0));
    assert_eq!(restarted["restart"]["from"], "notify#0");
    assert_eq!(restarted["restart"]["number"], 1);
    env.run_until_idle().await;
    let (_, done) = common::call_keyed(&api, "GET", &path(""), None, &[]).await;
    assert_eq!(done["status"], "completed", "{done}");
    let (_, timeline) = common::call_keyed(&api, "GET", &path("/timeline"), None, &[]).await;
    assert!(
        timeline.to_string().contains("RunRestarted"),
        "who restarted it is in the timeline: {timeline}"
    );

    let (status, fork) = common::call_keyed(
        &api,
        "POST",
        &path("/restart"),
        Some(json!({"from": "fetch#0", "as_new": true})),
        &[],
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{fork}");
    assert_ne!(fork["id"], json!(id.0));
    assert_eq!(fork["restart"]["forked_from"], json!(id.0));
}

#[tokio::test]
async fn a_restart_where_the_code_before_the_point_changed_is_a_409_naming_it() {
    let env = TestEnv::builder(registry(Arc::new(AtomicBool::new(false)), false))
        .tenant("acme")
        .build();
    let id = env.start("fetch_then_notify", json!(null)).await;
    let (engine, _) = env.engine_with(
        registry(Arc::new(AtomicBool::new(true)), true),
        env.config().clone(),
    );
    let api = common::keyed_api_over(&env, engine);
    let (status, refused) =
        common::call_keyed(&api, "POST", &format!("/runs/{id}/restart"), None, &[]).await;
    assert_eq!(status, StatusCode::CONFLICT, "{refused}");
    assert_eq!(refused["error"]["code"], "diverged");
    assert!(refused.to_string().contains("fetch_v2#0"), "{refused}");
}
