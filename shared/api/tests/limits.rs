//! Concurrency limits through the API: a start over a limit answers 201 `queued` with
//! where it waits, its view and the run list say its place in line, `GET /limits`
//! counts holders and waiters per key, and a key given at start is honoured.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

mod common;

use http::StatusCode;
use serde_json::{Value, json};
use siesta::{Context, Registry, RunLimit};
use siesta_api::ControlApi;
use siesta_testing::TestEnv;

fn registry() -> Registry {
    let mut registry = Registry::new();
    registry
        .register("per_customer", |ctx: Context, _: Value| async move {
            let done: Value = ctx.wait_for_event("done").await?;
            Ok(done)
        })
        .register("job", |_: Context, _: Value| async move { Ok(1) })
        .limit(
            RunLimit::new("per-customer", 1)
                .key_from_input("/customer")
                .workflow("per_customer"),
        )
        .limit(
            RunLimit::new("jobs-per-team", 1)
                .key_given_at_start()
                .workflow("job"),
        );
    registry
}

async fn call(
    api: &ControlApi,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    common::call_keyed(api, method, path, body, &[]).await
}

fn api(env: &TestEnv) -> ControlApi {
    common::keyed_api(env)
}

#[tokio::test]
async fn a_start_over_a_limit_answers_queued_with_its_limit_key_and_place() {
    let env = TestEnv::builder(registry()).tenant("acme").build();
    let api = api(&env);
    let start = json!({"workflow": "per_customer", "input": {"customer": "c-1"}});
    let (status, first) = call(&api, "POST", "/runs", Some(start.clone())).await;
    assert_eq!(status, StatusCode::CREATED, "{first}");
    assert_eq!(first["status"], "pending");
    assert!(first.get("queued").is_none(), "{first}");
    let (_, second) = call(&api, "POST", "/runs", Some(start.clone())).await;
    let (status, third) = call(&api, "POST", "/runs", Some(start)).await;
    assert_eq!(
        status,
        StatusCode::CREATED,
        "accepted, not refused: {third}"
    );
    assert_eq!(second["status"], "queued");
    assert_eq!(
        second["queued"],
        json!({"limit": "per-customer", "key": "c-1", "position": 1})
    );
    assert_eq!(third["queued"]["position"], 2);

    let (_, view) = call(
        &api,
        "GET",
        &format!("/runs/{}", third["id"].as_str().unwrap()),
        None,
    )
    .await;
    assert_eq!(
        view["queued"],
        json!({"limit": "per-customer", "key": "c-1", "position": 2})
    );
    let (_, page) = call(&api, "GET", "/runs?status=queued", None).await;
    let runs = page["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2, "{page}");
    assert!(
        runs.iter().all(|r| r["queued"]["position"].is_u64()),
        "{page}"
    );

    let (status, limits) = call(&api, "GET", "/limits", None).await;
    assert_eq!(status, StatusCode::OK, "{limits}");
    assert_eq!(
        limits["limits"],
        json!([
            {"name": "jobs-per-team", "scope": "runs", "max": 1, "key": "given", "workflows": ["job"], "keys": []},
            {"name": "per-customer", "scope": "runs", "max": 1, "key": "input:/customer", "workflows": ["per_customer"],
             "keys": [{"key": "c-1", "holders": 1, "waiters": 2}]},
        ])
    );
}

#[tokio::test]
async fn a_key_given_at_start_counts_the_run_and_a_missing_one_is_invalid_input() {
    let env = TestEnv::builder(registry()).tenant("acme").build();
    let api = api(&env);
    let (status, error) = call(&api, "POST", "/runs", Some(json!({"workflow": "job"}))).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{error}");
    assert!(error.to_string().contains("concurrency_key"), "{error}");
    let (status, run) = call(
        &api,
        "POST",
        "/runs",
        Some(json!({"workflow": "job", "concurrency_key": "team-a"})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{run}");
    assert_eq!(run["status"], "pending");
    let (_, held) = call(&api, "GET", "/limits", None).await;
    assert_eq!(
        held["limits"][0]["keys"],
        json!([{"key": "team-a", "holders": 1, "waiters": 0}])
    );
    env.run_until_idle().await;
    let (_, done) = call(&api, "GET", "/limits", None).await;
    assert_eq!(
        done["limits"][0]["keys"],
        json!([]),
        "a finished run holds nothing"
    );
}
