//! `POST /runs/{id}/operations/{position}/resolve`: a run parked on a tool call whose
//! outcome is `unknown` (its process died between "running" and the result) is resolved
//! through HTTP as succeeded, failed or retry, with who did it in the timeline; and every
//! wrong request is a clear 4xx that changes nothing.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use axum::Router;
use http::{Method, StatusCode};
use serde_json::{Value, json};
use siesta::*;
use siesta_api::{ApiKeys, ControlApi};
use siesta_testing::{LEASE_TTL, TestEnv};
use tower::ServiceExt;

const KEY: &str = "ops-key";

fn registry(calls: Arc<AtomicU32>) -> Registry {
    let mut reg = Registry::new();
    reg.register("charge", move |ctx: Context, _: Value| {
        let calls = calls.clone();
        async move {
            let order: String = ctx
                .step("prepare", |_| async { Ok("o-1".to_owned()) })
                .await?;
            let charged = ctx
                .tool_call("charge", &json!({"order": order}), move |_| async move {
                    calls.fetch_add(1, Ordering::SeqCst);
                    Ok(json!("charged by the call"))
                })
                .await;
            Ok(match charged {
                Ok(v) => json!({"charged": v}),
                Err(e) => json!({"failed": e.cause().map(|c| (c.kind.clone(), c.message.clone()))}),
            })
        }
    });
    reg
}

/// A run of `tenant` parked because the process died right after the tool call was
/// recorded as running.
async fn parked_run(tenant: &str) -> (TestEnv, RunId, Arc<AtomicU32>) {
    let calls = Arc::new(AtomicU32::new(0));
    let w = TestEnv::builder(registry(calls.clone()))
        .tenant(tenant)
        .build();
    let id = w.create("charge", json!(null), None).await.unwrap();
    // The step's result, then the tool call's "running": the process dies there.
    w.crash_after_writes(2);
    w.run_until_idle().await;
    assert!(w.has_crashed(), "the engine died inside the tool call");
    w.restart();
    w.advance(LEASE_TTL + Duration::from_secs(1)).await;
    assert_eq!(
        w.status(&id).await,
        RunStatus::Parked,
        "{:?}",
        w.run(&id).await.error
    );
    (w, id, calls)
}

/// A parked run of `acme`, and the router over the engine that replaced the dead one,
/// `acme` known by [`KEY`].
async fn parked() -> (TestEnv, Router, RunId, Arc<AtomicU32>) {
    let (w, id, calls) = parked_run("acme").await;
    let keys = ApiKeys::new(HashMap::from([(KEY.to_owned(), TenantId::from("acme"))]));
    let router = ControlApi::new(w.engine()).authenticate(keys).router();
    (w, router, id, calls)
}

struct Answer {
    status: StatusCode,
    etag: Option<String>,
    body: Value,
}

async fn post(router: &Router, path: &str, if_match: Option<&str>, body: &str) -> Answer {
    let mut request = http::Request::builder()
        .method(Method::POST)
        .uri(path)
        .header("authorization", format!("Bearer {KEY}"))
        .header("content-type", "application/json");
    if let Some(v) = if_match {
        request = request.header("if-match", v);
    }
    let request = request
        .body(axum::body::Body::from(body.to_owned()))
        .unwrap();
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let etag = response
        .headers()
        .get("etag")
        .map(|v| v.to_str().unwrap().to_owned());
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    Answer {
        status,
        etag,
        body: serde_json::from_slice(&bytes).unwrap(),
    }
}

fn resolve_path(id: &RunId, position: &str) -> String {
    format!(
        "/runs/{id}/operations/{}/resolve",
        position.replace('#', "%23")
    )
}

fn etag(run: &Run) -> String {
    format!("\"{}\"", run.version)
}

/// Who the caller is, as the API keys say: the key's fingerprint and its tenant.
fn resolved_by_ops_key(event: &TimelineEvent) -> bool {
    event.details["ResolvedBy"]
        .as_str()
        .is_some_and(|by| by.starts_with("api-key:") && by.ends_with("@acme") && !by.contains(KEY))
}

async fn resolve_and_finish(body: Value) -> (TestEnv, RunId, Run, u32, u32) {
    let (w, router, id, calls) = parked().await;
    let before = calls.load(Ordering::SeqCst);
    let run = w.run(&id).await;
    let answer = post(
        &router,
        &resolve_path(&id, "charge#0"),
        Some(&etag(&run)),
        &body.to_string(),
    )
    .await;
    assert_eq!(answer.status, StatusCode::ACCEPTED, "{}", answer.body);
    assert_eq!(answer.body["status"], "pending");
    assert_eq!(answer.etag, Some(format!("\"{}\"", run.version + 1)));
    w.run_until_idle().await;
    let finished = w.run(&id).await;
    assert_eq!(
        finished.status,
        RunStatus::Completed,
        "{:?}",
        finished.error
    );
    let resolved = w
        .timeline(&id)
        .await
        .into_iter()
        .find(|e| e.event_type == EventType::ToolCallRecorded && resolved_by_ops_key(e))
        .expect("the resolution is in the timeline with who made it");
    assert_eq!(resolved.details["Resolution"], body["outcome"]);
    assert_eq!(resolved.id.as_deref(), Some("charge#0"));
    (w, id, finished, before, calls.load(Ordering::SeqCst))
}

fn output(run: &Run) -> Value {
    match &run.output {
        Some(Payload::Inline(v)) => v.clone(),
        other => panic!("no inline output: {other:?}"),
    }
}

#[tokio::test]
async fn resolved_as_succeeded_over_http_the_workflow_gets_the_operators_value() {
    let (_w, _id, run, before, after) =
        resolve_and_finish(json!({"outcome": "succeeded", "value": {"receipt": "r-9"}})).await;
    assert_eq!(output(&run), json!({"charged": {"receipt": "r-9"}}));
    assert_eq!(after, before, "the call is not made again");
}

#[tokio::test]
async fn resolved_as_failed_over_http_the_workflow_gets_the_operators_error() {
    let (_w, _id, run, before, after) = resolve_and_finish(
        json!({"outcome": "failed", "error": {"code": "Declined", "message": "the bank refused"}}),
    )
    .await;
    assert_eq!(
        output(&run),
        json!({"failed": ["Declined", "the bank refused"]})
    );
    assert_eq!(after, before, "the call is not made again");
}

#[tokio::test]
async fn a_failure_given_as_a_bare_message_reaches_the_workflow_unchanged() {
    let (_w, _id, run, _, _) =
        resolve_and_finish(json!({"outcome": "failed", "error": "refused by hand"})).await;
    assert_eq!(
        output(&run),
        json!({"failed": ["ResolvedAsFailed", "refused by hand"]})
    );
}

#[tokio::test]
async fn resolved_for_retry_over_http_the_call_is_made_again() {
    let (_w, _id, run, before, after) = resolve_and_finish(json!({"outcome": "retry"})).await;
    assert_eq!(output(&run), json!({"charged": "charged by the call"}));
    assert_eq!(after, before + 1, "made once more");
}

#[tokio::test]
async fn wrong_requests_are_clear_4xx_and_change_nothing() {
    let (w, router, id, _) = parked().await;
    let run = w.run(&id).await;
    let succeeded = json!({"outcome": "succeeded", "value": 1}).to_string();
    let cases: Vec<(String, Option<String>, String, StatusCode, &str)> = vec![
        (
            resolve_path(&RunId::from("no-such-run"), "charge#0"),
            None,
            succeeded.clone(),
            StatusCode::NOT_FOUND,
            "not_found",
        ),
        (
            resolve_path(&id, "nothing#7"),
            None,
            succeeded.clone(),
            StatusCode::NOT_FOUND,
            "not_found",
        ),
        (
            // A step, not a tool call whose outcome is unknown.
            resolve_path(&id, "prepare#0"),
            None,
            succeeded.clone(),
            StatusCode::CONFLICT,
            "nothing_to_resolve",
        ),
        (
            resolve_path(&id, "charge#0"),
            Some(format!("\"{}\"", run.version + 5)),
            succeeded.clone(),
            StatusCode::PRECONDITION_FAILED,
            "version_mismatch",
        ),
        (
            resolve_path(&id, "charge#0"),
            None,
            json!({"outcome": "maybe"}).to_string(),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            resolve_path(&id, "charge#0"),
            None,
            json!({"outcome": "failed", "error": {}}).to_string(),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            resolve_path(&id, "charge#0"),
            None,
            "{not json".into(),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
    ];
    for (path, if_match, body, status, code) in cases {
        let answer = post(&router, &path, if_match.as_deref(), &body).await;
        assert_eq!(answer.status, status, "{path} {body}: {}", answer.body);
        assert_eq!(answer.body["error"]["code"], code, "{path} {body}");
        assert!(
            answer.body["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "{path}: a message says why"
        );
    }
    let after = w.run(&id).await;
    assert_eq!(after.status, RunStatus::Parked, "nothing changed");
    assert_eq!(after.version, run.version, "nothing changed");
    assert!(
        matches!(
            w.entry(&id, "charge#0").await.unwrap().state,
            EntryState::Unknown { .. }
        ),
        "still unknown"
    );
}

#[tokio::test]
async fn a_run_that_is_not_parked_cannot_be_resolved() {
    let (w, router, id, _) = parked().await;
    let path = resolve_path(&id, "charge#0");
    let body = json!({"outcome": "retry"}).to_string();
    assert_eq!(
        post(&router, &path, None, &body).await.status,
        StatusCode::ACCEPTED
    );
    // Resumed, not run yet: pending.
    let again = post(&router, &path, None, &body).await;
    assert_eq!(again.status, StatusCode::CONFLICT, "{}", again.body);
    assert_eq!(again.body["error"]["code"], "not_parked");
    w.run_until_idle().await;
    let finished = post(&router, &path, None, &body).await;
    assert_eq!(finished.status, StatusCode::CONFLICT, "{}", finished.body);
    assert_eq!(finished.body["error"]["code"], "already_finished");
}

#[tokio::test]
async fn in_dev_without_keys_the_resolution_is_recorded_as_made_by_dev() {
    // Without keys every caller is tenant `default`.
    let (w, id, _) = parked_run("default").await;
    let router = ControlApi::new(w.engine())
        .authenticate(ApiKeys::default())
        .router();
    let answer = post(
        &router,
        &resolve_path(&id, "charge#0"),
        None,
        r#"{"outcome":"retry"}"#,
    )
    .await;
    assert_eq!(answer.status, StatusCode::ACCEPTED, "{}", answer.body);
    let by: Vec<Value> = w
        .timeline(&id)
        .await
        .into_iter()
        .filter(|e| {
            e.event_type == EventType::ToolCallRecorded || e.event_type == EventType::RunResumed
        })
        .map(|e| e.details["ResolvedBy"].clone())
        .filter(|by| !by.is_null())
        .collect();
    assert_eq!(by, [json!("dev"), json!("dev")]);
}

#[test]
fn the_route_is_in_the_openapi_document_with_its_body_and_errors() {
    let doc = serde_json::to_value(siesta_api::openapi()).unwrap();
    let op = &doc["paths"]["/runs/{id}/operations/{position}/resolve"]["post"];
    assert_eq!(op["operationId"], "resolveOperation");
    assert!(
        op["requestBody"]["content"]["application/json"]["schema"].is_object(),
        "{op}"
    );
    for status in ["202", "400", "404", "409", "412"] {
        assert!(
            op["responses"][status]["content"]["application/json"]["schema"].is_object(),
            "{status}: {op}"
        );
    }
    let params: Vec<&str> = op["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(params, ["id", "position", "If-Match"]);
    let schema = serde_json::to_string(&doc["components"]["schemas"]["Resolution"]).unwrap();
    for outcome in ["succeeded", "failed", "retry"] {
        assert!(schema.contains(outcome), "{outcome} in {schema}");
    }
}
