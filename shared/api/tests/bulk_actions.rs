//! Bulk actions through the API: `POST /runs/actions` answers 202 with the job,
//! `GET /runs/actions/{id}` shows its progress (matched = done + skipped + failed) and
//! who started it, which each run's timeline names too; `GET /runs/actions` lists the
//! caller's jobs; another tenant sees none of them; a filter that names nothing is
//! refused with 422 and a malformed body with 400.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

mod common;

use http::StatusCode;
use serde_json::{Value, json};
use siesta::{Context, Registry, TenantId};
use siesta_testing::TestEnv;
use tower::ServiceExt;

fn registry() -> Registry {
    let mut registry = Registry::new();
    registry.register("waits_for_go", |ctx: Context, _: Value| async move {
        let go: Value = ctx.wait_for_event("go").await?;
        Ok(go)
    });
    registry
}

/// The router of `env`'s engine with two keys: `k` for `env`'s tenant, `other` for
/// another tenant.
fn api(env: &TestEnv) -> siesta_api::ControlApi {
    let keys = siesta_api::ApiKeys::new(std::collections::HashMap::from([
        ("k".to_owned(), env.tenant().clone()),
        ("other".to_owned(), TenantId::from("other")),
    ]));
    siesta_api::ControlApi::new(env.engine()).authenticate(keys)
}

/// `method path` with `body` as the key `key`: the status and the body as JSON.
async fn call(
    api: &siesta_api::ControlApi,
    key: &str,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let request = http::Request::builder()
        .method(method)
        .uri(path)
        .header("authorization", format!("Bearer {key}"))
        .header("content-type", "application/json");
    let body = body.map_or_else(axum::body::Body::empty, |b| b.to_string().into());
    let response = api
        .clone()
        .router()
        .oneshot(request.body(body).unwrap())
        .await
        .unwrap();
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

#[tokio::test]
async fn a_bulk_pause_is_started_followed_listed_and_kept_to_its_tenant() {
    let env = TestEnv::builder(registry()).tenant("acme").build();
    let api = api(&env);
    let mut runs = Vec::new();
    for _ in 0..3 {
        runs.push(env.start("waits_for_go", json!(null)).await);
    }

    let (status, started) = call(
        &api,
        "k",
        "POST",
        "/runs/actions",
        Some(json!({"action": "pause", "filter": {"workflow": "waits_for_go", "status": "waiting"}, "rate": 100})),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{started}");
    assert_eq!(started["status"], "running");
    assert_eq!(started["action"], "pause");
    assert_eq!(started["filter"]["workflow"], "waits_for_go");
    let id = started["id"].as_str().unwrap().to_owned();
    let by = started["by"].as_str().unwrap().to_owned();
    assert!(!by.is_empty());

    env.run_until_idle().await;
    let (status, job) = call(&api, "k", "GET", &format!("/runs/actions/{id}"), None).await;
    assert_eq!(status, StatusCode::OK, "{job}");
    assert_eq!(job["status"], "done", "{job}");
    assert_eq!(
        (
            &job["matched"],
            &job["done"],
            &job["skipped"],
            &job["failed"]
        ),
        (&json!(3), &json!(3), &json!(0), &json!(0))
    );
    for run in &runs {
        let (_, view) = call(&api, "k", "GET", &format!("/runs/{run}"), None).await;
        assert_eq!(view["status"], "paused");
        let paused_by = env
            .timeline(run)
            .await
            .into_iter()
            .find(|e| e.event_type == siesta::EventType::RunPaused)
            .map(|e| e.details["PausedBy"].clone());
        assert_eq!(paused_by, Some(json!(by)), "the job's caller paused it");
    }

    let (status, list) = call(&api, "k", "GET", "/runs/actions", None).await;
    assert_eq!(status, StatusCode::OK, "{list}");
    assert_eq!(list["jobs"][0]["id"], json!(id));

    let (status, _) = call(&api, "other", "GET", &format!("/runs/actions/{id}"), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "another tenant's job");
    let (_, theirs) = call(&api, "other", "GET", "/runs/actions", None).await;
    assert_eq!(theirs["jobs"], json!([]));
    let (status, _) = call(
        &api,
        "other",
        "POST",
        &format!("/runs/actions/{id}/cancel"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    let (status, finished) = call(
        &api,
        "k",
        "POST",
        &format!("/runs/actions/{id}/cancel"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{finished}");
    assert_eq!(
        finished["status"], "done",
        "a finished job is answered as it is"
    );
}

#[tokio::test]
async fn a_running_job_is_cancelled_and_bad_requests_are_refused() {
    let env = TestEnv::builder(registry()).tenant("acme").build();
    let api = api(&env);
    for _ in 0..3 {
        env.start("waits_for_go", json!(null)).await;
    }
    let (_, started) = call(
        &api,
        "k",
        "POST",
        "/runs/actions",
        Some(json!({"action": "cancel", "filter": {"workflow": "waits_for_go"}, "rate": 1})),
    )
    .await;
    let id = started["id"].as_str().unwrap();
    env.run_until_idle().await;
    let (status, cancelled) = call(
        &api,
        "k",
        "POST",
        &format!("/runs/actions/{id}/cancel"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{cancelled}");
    assert_eq!(cancelled["status"], "cancelled");
    assert_eq!(
        cancelled["done"], 1,
        "one slice of one run went before the cancel"
    );
    assert!(cancelled["cancelled_by"].is_string());

    let (status, empty) = call(
        &api,
        "k",
        "POST",
        "/runs/actions",
        Some(json!({"action": "cancel", "filter": {}})),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{empty}");
    assert_eq!(empty["error"]["code"], "invalid_input");
    let (status, _) = call(
        &api,
        "k",
        "POST",
        "/runs/actions",
        Some(json!({"action": "explode", "filter": {"workflow": "w"}})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, _) = call(
        &api,
        "k",
        "POST",
        "/runs/actions",
        Some(json!({"action": "cancel", "filter": {"colour": "red"}})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "an unknown filter field");
    let (status, theirs) = call(
        &api,
        "k",
        "POST",
        "/runs/actions",
        Some(json!({"action": "cancel", "filter": {"tenant": "other", "workflow": "w"}})),
    )
    .await;
    assert_eq!(
        status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "another tenant: {theirs}"
    );
    let (status, own) = call(
        &api,
        "k",
        "POST",
        "/runs/actions",
        Some(json!({"action": "cancel", "filter": {"tenant": "acme", "workflow": "nothing"}})),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "its own tenant: {own}");
    let (status, _) = call(&api, "k", "GET", "/runs/actions/job-nope", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn the_openapi_document_describes_the_bulk_action_routes() {
    let env = TestEnv::builder(registry()).tenant("acme").build();
    let (status, doc) = call(&api(&env), "k", "GET", "/openapi.json", None).await;
    assert_eq!(status, StatusCode::OK);
    let paths = &doc["paths"];
    assert_eq!(
        paths["/runs/actions"]["post"]["operationId"],
        "startRunsAction"
    );
    assert!(paths["/runs/actions"]["post"]["responses"]["202"].is_object());
    assert_eq!(
        paths["/runs/actions"]["get"]["operationId"],
        "listRunsActions"
    );
    assert_eq!(
        paths["/runs/actions/{id}"]["get"]["operationId"],
        "getRunsAction"
    );
    assert_eq!(
        paths["/runs/actions/{id}/cancel"]["post"]["operationId"],
        "cancelRunsAction"
    );
    let schemas = &doc["components"]["schemas"];
    for name in [
        "StartRunsAction",
        "RunsActionFilter",
        "RunsActionView",
        "RunsActionList",
    ] {
        assert!(schemas[name].is_object(), "{name} in the document");
    }
}
