//! `GET /schedules` and the operator's actions on a schedule, through the router:
//! listed with the names other tools rely on, paused and resumed, triggered (again with
//! the same `Idempotency-Key`: the same run), another tenant's not found.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

use std::collections::HashMap;

use http::StatusCode;
use serde_json::{Value, json};
use siesta::{Context, Error, Registry, Schedule, Timestamp};
use siesta_api::{ApiKeys, ControlApi};
use siesta_testing::TestEnv;
use tower::ServiceExt;

/// 2026-01-01T00:00:00Z.
const JAN_1: i64 = 1_767_225_600_000;

fn env() -> TestEnv {
    let mut reg = Registry::new();
    reg.register("report", |_: Context, input: Value| async move {
        Ok::<_, Error>(input)
    });
    reg.schedule(
        Schedule::new("nightly-report", "report", "0 2 * * *")
            .tenant("acme")
            .input(json!({"period": "day"})),
    )
    .unwrap();
    reg.schedule(Schedule::new("theirs", "report", "0 3 * * *").tenant("globex"))
        .unwrap();
    TestEnv::builder(reg)
        .tenant("acme")
        .start_at(Timestamp(JAN_1))
        .build()
}

fn api(env: &TestEnv) -> ControlApi {
    let keys = ApiKeys::new(HashMap::from([("k".to_owned(), env.tenant().clone())]));
    ControlApi::new(env.engine()).authenticate(keys)
}

async fn call(
    api: &ControlApi,
    method: &str,
    path: &str,
    key: Option<&str>,
) -> (StatusCode, http::HeaderMap, Value) {
    let mut req = http::Request::builder()
        .method(method)
        .uri(path)
        .header("authorization", "Bearer k");
    if let Some(key) = key {
        req = req.header("idempotency-key", key);
    }
    let response = api
        .clone()
        .router()
        .oneshot(req.body(axum::body::Body::empty()).unwrap())
        .await
        .unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    (status, headers, serde_json::from_slice(&bytes).unwrap())
}

#[tokio::test]
async fn get_schedules_lists_the_callers_schedules_with_their_next_tick() {
    let env = env();
    let (status, _, body) = call(&api(&env), "GET", "/schedules", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        body,
        json!({"schedules": [{
            "name": "nightly-report",
            "workflow": "report",
            "cron": "0 2 * * *",
            "timezone": "UTC",
            "next": "2026-01-01T02:00:00.000Z",
            "paused": false,
            "disabled": false,
            "overlap": "skip",
            "catch_up": "latest",
        }]})
    );
}

#[tokio::test]
async fn pause_and_resume_answer_the_schedule_as_it_now_is() {
    let env = env();
    let api = api(&env);
    let (status, _, paused) = call(&api, "POST", "/schedules/nightly-report/pause", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(paused["paused"], true);
    assert_eq!(paused["next"], Value::Null);
    let (_, _, listed) = call(&api, "GET", "/schedules", None).await;
    assert_eq!(listed["schedules"][0]["paused"], true);
    let (status, _, resumed) = call(&api, "POST", "/schedules/nightly-report/resume", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(resumed["paused"], false);
    assert_eq!(resumed["next"], "2026-01-01T02:00:00.000Z");
}

#[tokio::test]
async fn trigger_starts_a_run_and_the_same_idempotency_key_answers_it_again() {
    let env = env();
    let api = api(&env);
    let (status, headers, run) = call(
        &api,
        "POST",
        "/schedules/nightly-report/trigger",
        Some("k1"),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(run["workflow"], "report");
    assert_eq!(run["input"], json!({"period": "day"}));
    let id = run["id"].as_str().unwrap().to_owned();
    assert!(id.starts_with("schedule-nightly-report-trigger-"), "{id}");
    assert_eq!(headers["location"], format!("/runs/{id}").as_str());
    let (status, _, again) = call(
        &api,
        "POST",
        "/schedules/nightly-report/trigger",
        Some("k1"),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(again["id"], id.as_str());
    let (status, _, other) = call(&api, "POST", "/schedules/nightly-report/trigger", None).await;
    assert_eq!(status, StatusCode::CREATED);
    assert_ne!(other["id"], id.as_str());
}

#[tokio::test]
async fn another_tenants_schedule_and_an_unknown_one_are_not_found() {
    let env = env();
    let api = api(&env);
    for path in [
        "/schedules/theirs/pause",
        "/schedules/theirs/resume",
        "/schedules/theirs/trigger",
        "/schedules/nope/pause",
    ] {
        let (status, _, body) = call(&api, "POST", path, None).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}");
        assert_eq!(body["error"]["code"], "not_found", "{path}: {body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("schedule"),
            "{body}"
        );
    }
}
