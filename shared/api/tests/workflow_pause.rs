//! Pausing a workflow through the API: `POST /workflows/{name}/pause` answers 202 with
//! the pause and its bulk job; while it refuses starts `POST /runs` is a 409
//! `workflow_paused`; `GET /workflows/{name}/pause` says who paused it; `POST
//! /workflows/{name}/resume` lets starts in again; an unknown workflow is a 404 and an
//! unknown `starts` a 400.
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
    registry.register("echo", |_: Context, input: Value| async move {
        Ok::<_, siesta::Error>(input)
    });
    registry
}

#[tokio::test]
async fn a_workflow_paused_to_refuse_starts_refuses_them_until_resumed() {
    let env = TestEnv::builder(registry()).tenant("acme").build();
    let api = common::keyed_api(&env);
    let start = json!({"workflow": "echo", "input": 1});

    let (status, bad) = common::call_keyed(
        &api,
        "POST",
        "/workflows/echo/pause",
        Some(json!({"starts": "drop"})),
        &[],
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}");
    let (status, unknown) =
        common::call_keyed(&api, "POST", "/workflows/nope/pause", None, &[]).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{unknown}");

    let (status, paused) = common::call_keyed(
        &api,
        "POST",
        "/workflows/echo/pause",
        Some(json!({"starts": "refuse"})),
        &[],
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{paused}");
    assert_eq!(paused["paused"], true);
    assert!(paused["job"].is_string(), "{paused}");

    let (status, refused) =
        common::call_keyed(&api, "POST", "/runs", Some(start.clone()), &[]).await;
    assert_eq!(status, StatusCode::CONFLICT, "{refused}");
    assert_eq!(refused["error"]["code"], "workflow_paused");
    let (status, read) = common::call_keyed(&api, "GET", "/workflows/echo/pause", None, &[]).await;
    assert_eq!(status, StatusCode::OK, "{read}");
    assert_eq!(
        (read["paused"].clone(), read["starts"].clone()),
        (json!(true), json!("refuse"))
    );
    assert!(read["by"].is_string(), "{read}");

    let (status, resumed) =
        common::call_keyed(&api, "POST", "/workflows/echo/resume", None, &[]).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{resumed}");
    assert_eq!(resumed["paused"], false);
    let (status, started) = common::call_keyed(&api, "POST", "/runs", Some(start), &[]).await;
    assert_eq!(status, StatusCode::CREATED, "{started}");
}
