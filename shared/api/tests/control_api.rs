//! The control API through its router (`tower::ServiceExt::oneshot`), no socket in
//! between.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use http::{HeaderMap, Method, StatusCode};
use serde_json::json;
use siesta::*;
use siesta_api::ControlApi;

mod common;
use common::TenantHeader;
use tower::ServiceExt;

struct World {
    _dir: tempfile::TempDir,
    engine: Engine,
    router: Router,
    clock: Arc<ManualClock>,
}

/// An answer: status, headers and the JSON body.
struct ApiResponse {
    status: StatusCode,
    headers: HeaderMap,
    body: serde_json::Value,
}

/// Send `request` through `router` and read the answer.
async fn send(router: &Router, request: http::Request<axum::body::Body>) -> ApiResponse {
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    let body = serde_json::from_slice(&bytes)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&bytes)));
    assert_eq!(
        headers["content-type"], "application/json",
        "every answer is JSON"
    );
    ApiResponse {
        status,
        headers,
        body,
    }
}

fn request(
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> http::Request<axum::body::Body> {
    let mut builder = http::Request::builder().method(method).uri(path);
    for (k, v) in headers {
        builder = builder.header(*k, *v);
    }
    builder
        .body(axum::body::Body::from(body.to_owned()))
        .unwrap()
}

fn registry() -> Registry {
    let mut reg = Registry::new();
    reg.register(
        "approve",
        |ctx: Context, input: serde_json::Value| async move {
            let cb = ctx.create_callback::<String>("sign_off").await?;
            let by = cb.wait().await?;
            let ok: bool = ctx.wait_for_event("approval").await?;
            Ok(json!({"input": input, "by": by, "ok": ok}))
        },
    );
    reg.register("quick", |_ctx: Context, n: u32| async move { Ok(n + 1) });
    reg.register("timed", |ctx: Context, _: serde_json::Value| async move {
        let cb = ctx
            .create_callback::<String>("sign_off")
            .timeout(Duration::from_secs(3600))
            .await?;
        cb.wait().await
    });
    reg
}

impl World {
    fn new() -> World {
        World::with_quotas(Quotas::default())
    }

    fn with_quotas(quotas: Quotas) -> World {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::default());
        let embedded =
            siesta_embedded::EmbeddedBackend::open(dir.path().join("db"), clock.clone()).unwrap();
        let config = EngineConfig {
            callback_base_url: "https://hooks.example".into(),
            quotas,
            ..EngineConfig::default()
        };
        let engine = Engine::new(embedded.backend(), clock.clone(), registry(), config);
        World {
            _dir: dir,
            router: ControlApi::new(engine.clone())
                .authenticate(TenantHeader)
                .router(),
            engine,
            clock,
        }
    }

    async fn call(
        &self,
        tenant: &str,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> ApiResponse {
        let mut headers = headers.to_vec();
        headers.push(("x-test-tenant", tenant));
        send(&self.router, request(method, path, &headers, body)).await
    }

    async fn settle(&self) {
        self.engine.run_until_idle(100).await.unwrap();
    }
}

fn code(r: &ApiResponse) -> &str {
    r.body["error"]["code"].as_str().unwrap_or("")
}

#[tokio::test]
async fn start_show_and_complete_through_the_api() {
    let w = World::new();
    let r = w
        .call(
            "a",
            Method::POST,
            "/runs",
            &[],
            r#"{"workflow":"approve","input":{"change":"x"}}"#,
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let id = r.body["id"].as_str().unwrap().to_owned();
    assert_eq!(r.headers["location"], format!("/runs/{id}").as_str());
    w.settle().await;
    let r = w
        .call("a", Method::GET, &format!("/runs/{id}"), &[], "")
        .await;
    assert_eq!(r.body["status"], "waiting");
    assert_eq!(
        r.headers["etag"],
        format!("\"{}\"", r.body["version"]).as_str()
    );
    let wait = &r.body["waits"][0];
    assert_eq!(wait["kind"], "callback");
    let callback = wait["callback_id"].as_str().unwrap().to_owned();
    assert_eq!(
        wait["url"],
        format!("https://hooks.example/hooks/{callback}")
    );
    // The event arrives early: kept until the run waits for it.
    let r = w
        .call(
            "a",
            Method::POST,
            &format!("/runs/{id}/events/approval"),
            &[("idempotency-key", "e1")],
            "true",
        )
        .await;
    assert_eq!(r.status, StatusCode::ACCEPTED);
    let r = w
        .call(
            "a",
            Method::POST,
            &format!("/runs/{id}/events/approval"),
            &[("idempotency-key", "e1")],
            "true",
        )
        .await;
    assert_eq!(r.body["duplicate"], true);
    let r = w
        .call(
            "a",
            Method::POST,
            &format!("/callbacks/{callback}/succeed"),
            &[],
            r#""alice""#,
        )
        .await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.body);
    w.settle().await;
    let r = w
        .call("a", Method::GET, &format!("/runs/{id}/result"), &[], "")
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(
        r.body["output"],
        json!({"input": {"change": "x"}, "by": "alice", "ok": true})
    );
    let r = w
        .call(
            "a",
            Method::GET,
            &format!("/runs/{id}/timeline?after=2&limit=3"),
            &[],
            "",
        )
        .await;
    let seqs: Vec<u64> = r.body["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["Seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, vec![3, 4, 5]);
}

#[tokio::test]
async fn every_time_the_api_shows_is_rfc_3339_in_utc_to_the_millisecond() {
    // The test clock starts at 2026-01-01T00:00:00Z; the callback times out an hour on.
    let w = World::new();
    w.clock.advance(Duration::from_millis(123));
    let r = w
        .call("a", Method::POST, "/runs", &[], r#"{"workflow":"timed"}"#)
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    assert_eq!(r.body["created_at"], "2026-01-01T00:00:00.123Z");
    let id = r.body["id"].as_str().unwrap().to_owned();
    w.clock.advance(Duration::from_secs(1));
    w.settle().await;
    let r = w
        .call("a", Method::GET, &format!("/runs/{id}"), &[], "")
        .await;
    assert_eq!(r.body["created_at"], "2026-01-01T00:00:00.123Z");
    assert_eq!(r.body["updated_at"], "2026-01-01T00:00:01.123Z");
    let deadline = "2026-01-01T01:00:01.123Z";
    assert_eq!(r.body["waits"][0]["deadline"], deadline, "{}", r.body);
    let r = w.call("a", Method::GET, "/runs?limit=1", &[], "").await;
    assert_eq!(r.body["runs"][0]["updated_at"], "2026-01-01T00:00:01.123Z");

    let r = w
        .call("a", Method::GET, &format!("/runs/{id}/timeline"), &[], "")
        .await;
    let events = r.body["events"].as_array().unwrap();
    assert_eq!(events[0]["EventTimestamp"], "2026-01-01T00:00:00.123Z");
    for e in events {
        let at = e["EventTimestamp"].as_str().unwrap();
        assert!(at.len() == 24 && at.ends_with('Z'), "{e}");
    }
    let of = |t: &str| events.iter().find(|e| e["EventType"] == t).unwrap();
    assert_eq!(of("CallbackStarted")["Details"]["Timeout"], deadline);
    assert_eq!(of("InvocationCompleted")["Details"]["NextWakeAt"], deadline);
    assert_eq!(
        of("InvocationCompleted")["EventTimestamp"],
        "2026-01-01T00:00:01.123Z"
    );
}

#[tokio::test]
async fn another_tenant_cannot_see_cancel_or_signal_a_run() {
    let w = World::new();
    let r = w
        .call(
            "a",
            Method::POST,
            "/runs",
            &[],
            r#"{"workflow":"approve","input":null}"#,
        )
        .await;
    let id = r.body["id"].as_str().unwrap().to_owned();
    w.settle().await;
    let callback = w
        .call("a", Method::GET, &format!("/runs/{id}"), &[], "")
        .await
        .body["waits"][0]["callback_id"]
        .as_str()
        .unwrap()
        .to_owned();
    for (method, path, body) in [
        (Method::GET, format!("/runs/{id}"), ""),
        (Method::GET, format!("/runs/{id}/timeline"), ""),
        (Method::GET, format!("/runs/{id}/result"), ""),
        (Method::POST, format!("/runs/{id}/cancel"), ""),
        (Method::POST, format!("/runs/{id}/events/approval"), "true"),
        (Method::POST, format!("/runs/{id}/messages"), "\"hi\""),
        (
            Method::POST,
            format!("/callbacks/{callback}/succeed"),
            "\"mallory\"",
        ),
    ] {
        let r = w.call("b", method.clone(), &path, &[], body).await;
        assert_eq!(
            r.status,
            StatusCode::NOT_FOUND,
            "{method} {path}: {}",
            r.body
        );
    }
    let listed = w.call("b", Method::GET, "/runs", &[], "").await;
    assert_eq!(listed.body["runs"], json!([]));
    assert_eq!(
        w.call("a", Method::GET, &format!("/runs/{id}"), &[], "")
            .await
            .body["status"],
        "waiting"
    );
}

#[tokio::test]
async fn idempotency_key_replays_the_first_answer_and_refuses_another_body() {
    let w = World::new();
    let body = r#"{"workflow":"quick","input":1}"#;
    let first = w
        .call(
            "a",
            Method::POST,
            "/runs",
            &[("idempotency-key", "k1")],
            body,
        )
        .await;
    assert_eq!(first.status, StatusCode::CREATED);
    let again = w
        .call(
            "a",
            Method::POST,
            "/runs",
            &[("idempotency-key", "k1")],
            body,
        )
        .await;
    assert_eq!(again.status, StatusCode::CREATED);
    assert_eq!(again.body["id"], first.body["id"]);
    assert_eq!(again.headers["idempotent-replayed"], "true");
    let other = w
        .call(
            "a",
            Method::POST,
            "/runs",
            &[("idempotency-key", "k1")],
            r#"{"workflow":"quick","input":2}"#,
        )
        .await;
    assert_eq!(other.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(code(&other), "idempotency_key_reused");
    // The same key from another tenant is another run.
    let b = w
        .call(
            "b",
            Method::POST,
            "/runs",
            &[("idempotency-key", "k1")],
            body,
        )
        .await;
    assert_eq!(b.status, StatusCode::CREATED);
    assert_ne!(b.body["id"], first.body["id"]);
}

#[tokio::test]
async fn if_match_guards_cancel_and_a_finished_run_cannot_be_cancelled() {
    let w = World::new();
    let r = w
        .call(
            "a",
            Method::POST,
            "/runs",
            &[],
            r#"{"workflow":"approve","input":null}"#,
        )
        .await;
    let id = r.body["id"].as_str().unwrap().to_owned();
    w.settle().await;
    let etag = w
        .call("a", Method::GET, &format!("/runs/{id}"), &[], "")
        .await
        .headers["etag"]
        .to_str()
        .unwrap()
        .to_owned();
    let stale = w
        .call(
            "a",
            Method::POST,
            &format!("/runs/{id}/cancel"),
            &[("if-match", "\"1\"")],
            "",
        )
        .await;
    assert_eq!(stale.status, StatusCode::PRECONDITION_FAILED);
    let ok = w
        .call(
            "a",
            Method::POST,
            &format!("/runs/{id}/cancel"),
            &[("if-match", &etag)],
            "",
        )
        .await;
    assert_eq!(ok.status, StatusCode::OK, "{}", ok.body);
    assert_eq!(ok.body["status"], "cancelled");
    let again = w
        .call("a", Method::POST, &format!("/runs/{id}/cancel"), &[], "")
        .await;
    assert_eq!(again.status, StatusCode::CONFLICT);
    let late = w
        .call(
            "a",
            Method::POST,
            &format!("/runs/{id}/events/approval"),
            &[],
            "true",
        )
        .await;
    assert_eq!(late.status, StatusCode::GONE);
}

#[tokio::test]
async fn bad_input_gets_a_clear_error_and_changes_nothing() {
    let w = World::new();
    let cases = [
        (
            Method::POST,
            "/runs",
            "{not json",
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            Method::POST,
            "/runs",
            r#"{"workflow":"nope","input":1}"#,
            StatusCode::UNPROCESSABLE_ENTITY,
            "unknown_workflow",
        ),
        (
            Method::POST,
            "/runs",
            r#"{"workflow":"quick","input":"one"}"#,
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_input",
        ),
        (
            Method::GET,
            "/runs/missing",
            "",
            StatusCode::NOT_FOUND,
            "not_found",
        ),
        (
            Method::GET,
            "/runs?status=sleepy",
            "",
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            Method::DELETE,
            "/runs",
            "",
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
        ),
        (
            Method::GET,
            "/nowhere",
            "",
            StatusCode::NOT_FOUND,
            "not_found",
        ),
        (
            Method::POST,
            "/callbacks/cb_unknown/succeed",
            "1",
            StatusCode::NOT_FOUND,
            "not_found",
        ),
    ];
    for (method, path, body, status, expected) in cases {
        let r = w.call("a", method.clone(), path, &[], body).await;
        assert_eq!(r.status, status, "{method} {path}: {}", r.body);
        assert_eq!(code(&r), expected, "{method} {path}");
        assert!(
            r.body["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty())
        );
    }
    assert_eq!(
        w.call("a", Method::GET, "/runs", &[], "").await.body["runs"],
        json!([])
    );
}

#[tokio::test]
async fn list_filters_and_pages_with_a_cursor() {
    let w = World::new();
    for n in 0..5 {
        w.call(
            "a",
            Method::POST,
            "/runs",
            &[],
            &format!(r#"{{"workflow":"quick","input":{n}}}"#),
        )
        .await;
    }
    w.call(
        "a",
        Method::POST,
        "/runs",
        &[],
        r#"{"workflow":"approve","input":null}"#,
    )
    .await;
    w.settle().await;
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("/runs?workflow=quick&limit=2&cursor={c}"),
            None => "/runs?workflow=quick&limit=2".to_owned(),
        };
        let r = w.call("a", Method::GET, &path, &[], "").await;
        for run in r.body["runs"].as_array().unwrap() {
            assert_eq!(run["workflow"], "quick");
            seen.push(run["id"].as_str().unwrap().to_owned());
        }
        match r.body["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => break,
        }
    }
    seen.dedup();
    assert_eq!(seen.len(), 5);
    let waiting = w
        .call("a", Method::GET, "/runs?status=waiting", &[], "")
        .await;
    assert_eq!(waiting.body["runs"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn prefer_wait_returns_202_with_the_view_while_the_run_is_unfinished() {
    let w = World::new();
    let r = w
        .call(
            "a",
            Method::POST,
            "/runs",
            &[],
            r#"{"workflow":"approve","input":null}"#,
        )
        .await;
    let id = r.body["id"].as_str().unwrap().to_owned();
    let started = std::time::Instant::now();
    let r = w
        .call(
            "a",
            Method::GET,
            &format!("/runs/{id}/result"),
            &[("prefer", "wait=1")],
            "",
        )
        .await;
    assert_eq!(r.status, StatusCode::ACCEPTED);
    assert!(started.elapsed() >= Duration::from_millis(900));
    assert_eq!(r.body["id"], id.as_str());
}

#[tokio::test]
async fn every_documented_route_is_routed() {
    let w = World::new();
    let doc = w.call("a", Method::GET, "/openapi.json", &[], "").await;
    assert_eq!(doc.body["openapi"], "3.1.0");
    let paths = doc.body["paths"].as_object().unwrap();
    let operations: usize = paths.values().map(|p| p.as_object().unwrap().len()).sum();
    assert!(operations >= 16, "{operations} operations");
    for (template, item) in paths {
        let path = template
            .split('/')
            .map(|s| if s.starts_with('{') { "x" } else { s })
            .collect::<Vec<_>>()
            .join("/");
        for method in item.as_object().unwrap().keys() {
            let method: Method = method.to_uppercase().parse().unwrap();
            let r = w.call("a", method.clone(), &path, &[], "{}").await;
            assert_ne!(
                r.status,
                StatusCode::METHOD_NOT_ALLOWED,
                "{method} {template}"
            );
            assert_ne!(
                r.body["error"]["message"], "route not found",
                "{method} {template}"
            );
        }
    }
}

/// Start `pay` (it creates a callback and waits on it), run it until it waits, and give
/// the run and its callback's token (from the timeline's `CallbackStarted`).
async fn start_waiting_on_its_callback(engine: &Engine, tenant: &TenantId) -> (Run, String) {
    let run = engine
        .start(tenant, "pay", json!(null), None)
        .await
        .unwrap();
    engine.run_until_idle(10).await.unwrap();
    let timeline = engine
        .backend()
        .store
        .timeline(tenant, &run.id, 0, 100)
        .await
        .unwrap();
    let token = timeline
        .iter()
        .find(|e| e.event_type == EventType::CallbackStarted)
        .unwrap()
        .details["CallbackId"]
        .as_str()
        .unwrap()
        .to_owned();
    (run, token)
}

#[tokio::test]
async fn a_webhook_after_its_callback_timed_out_is_gone_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::default());
    let embedded =
        siesta_embedded::EmbeddedBackend::open(dir.path().join("db"), clock.clone()).unwrap();
    let mut reg = Registry::new();
    reg.register("pay", |ctx: Context, _: serde_json::Value| async move {
        let cb = ctx
            .create_callback::<serde_json::Value>("payment")
            .timeout(Duration::from_secs(3600))
            .await?;
        match cb.wait().await {
            Ok(v) => Ok(v),
            Err(e) => Ok(json!(e.kind().as_str())),
        }
    });
    let engine = Engine::new(
        embedded.backend(),
        clock.clone(),
        reg,
        EngineConfig::default(),
    );
    let router = ControlApi::new(engine.clone())
        .authenticate(TenantHeader)
        .router();
    let tenant = TenantId::from("default");
    let (run, token) = start_waiting_on_its_callback(&engine, &tenant).await;
    clock.advance(Duration::from_secs(3600));
    engine.sweep(10).await.unwrap();
    engine.run_until_idle(10).await.unwrap();
    let before = engine.get_run(&tenant, &run.id).await.unwrap();
    assert_eq!(
        before.output,
        Some(Payload::Inline(json!("CallbackTimedOut")))
    );
    let r = send(
        &router,
        request(
            Method::POST,
            &format!("/hooks/{token}"),
            &[],
            r#"{"status":"COMPLETED"}"#,
        ),
    )
    .await;
    assert_eq!(r.status, StatusCode::GONE, "{}", r.body);
    assert_eq!(engine.get_run(&tenant, &run.id).await.unwrap(), before);
}

#[tokio::test]
async fn only_a_parked_run_can_be_resumed() {
    let w = World::new();
    let r = w
        .call(
            "a",
            Method::POST,
            "/runs",
            &[],
            r#"{"workflow":"approve","input":null}"#,
        )
        .await;
    let id = r.body["id"].as_str().unwrap().to_owned();
    w.settle().await;
    let before = w
        .call("a", Method::GET, &format!("/runs/{id}"), &[], "")
        .await;
    let resume = w
        .call("a", Method::POST, &format!("/runs/{id}/resume"), &[], "")
        .await;
    assert_eq!(resume.status, StatusCode::CONFLICT, "{}", resume.body);
    assert_eq!(code(&resume), "not_parked");
    let other = w
        .call("b", Method::POST, &format!("/runs/{id}/resume"), &[], "")
        .await;
    assert_eq!(other.status, StatusCode::NOT_FOUND, "another tenant's run");
    let after = w
        .call("a", Method::GET, &format!("/runs/{id}"), &[], "")
        .await;
    assert_eq!(
        after.body["version"], before.body["version"],
        "nothing changed"
    );
}

#[tokio::test]
async fn a_body_over_the_limit_is_413_and_a_wrong_method_405_with_allow_both_in_json() {
    let w = World::new();
    let big = format!(
        r#"{{"workflow":"quick","input":"{}"}}"#,
        "x".repeat(siesta_api::DEFAULT_MAX_API_BODY)
    );
    let r = w.call("a", Method::POST, "/runs", &[], &big).await;
    assert_eq!(r.status, StatusCode::PAYLOAD_TOO_LARGE, "{}", r.body);
    assert_eq!(code(&r), "payload_too_large");
    for (method, path, allowed) in [
        (Method::DELETE, "/runs", &["GET", "POST"][..]),
        (Method::PUT, "/runs/x/cancel", &["POST"][..]),
        (Method::GET, "/hooks/cb_x", &["POST"][..]),
    ] {
        let r = w.call("a", method.clone(), path, &[], "").await;
        assert_eq!(r.status, StatusCode::METHOD_NOT_ALLOWED, "{method} {path}");
        assert_eq!(code(&r), "method_not_allowed", "{method} {path}");
        let allow = r.headers["allow"].to_str().unwrap();
        for m in allowed {
            assert!(allow.contains(m), "{method} {path}: Allow: {allow}");
        }
    }
    assert_eq!(
        w.call("a", Method::GET, "/runs", &[], "").await.body["runs"],
        json!([]),
        "nothing was started"
    );
}

/// An artifact store whose disk is full.
struct FullDisk;

#[async_trait::async_trait]
impl siesta::ports::ArtifactStore for FullDisk {
    async fn put(
        &self,
        _: &TenantId,
        _: &RunId,
        _: &str,
        _: bytes::Bytes,
    ) -> Result<ArtifactRef, siesta::ports::StoreError> {
        Err(siesta::ports::StoreError::Unavailable(
            "database or disk is full".into(),
        ))
    }

    async fn get(&self, _: &ArtifactRef) -> Result<bytes::Bytes, siesta::ports::StoreError> {
        Err(siesta::ports::StoreError::NotFound)
    }

    fn location(&self, tenant: &TenantId, run_id: &RunId, sha256: &str) -> String {
        format!("{tenant}/{run_id}/{sha256}")
    }
}

#[tokio::test]
async fn storage_that_is_full_is_a_503_with_retry_after_and_nothing_is_started() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::default());
    let embedded =
        siesta_embedded::EmbeddedBackend::open(dir.path().join("db"), clock.clone()).unwrap();
    let mut backend = embedded.backend();
    backend.artifacts = Arc::new(FullDisk);
    let engine = Engine::new(backend, clock, registry(), EngineConfig::default());
    let router = ControlApi::new(engine.clone())
        .authenticate(TenantHeader)
        .router();
    // Larger than the inline limit: the input goes to the (full) artifact store.
    let input = "x".repeat(EngineConfig::default().inline_limit + 1);
    let body = json!({"workflow": "approve", "input": input}).to_string();
    let r = send(
        &router,
        request(Method::POST, "/runs", &[("x-test-tenant", "a")], &body),
    )
    .await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{}", r.body);
    assert_eq!(code(&r), "unavailable");
    assert_eq!(
        r.headers["retry-after"],
        siesta_api::RETRY_AFTER_SECS.to_string().as_str()
    );
    let list = send(
        &router,
        request(Method::GET, "/runs", &[("x-test-tenant", "a")], ""),
    )
    .await;
    assert_eq!(list.body["runs"], json!([]), "nothing was started");
}

/// The answer over a quota: 429, `quota_exceeded` naming the limit, `Retry-After`.
fn assert_over_quota(r: &ApiResponse, limit: &str) {
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS, "{}", r.body);
    assert_eq!(code(r), "quota_exceeded");
    let message = r.body["error"]["message"].as_str().unwrap();
    assert!(message.contains(limit), "{message} names {limit}");
    let retry: u64 = r.headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!(retry >= 1, "Retry-After {retry}");
}

async fn runs_of(w: &World, tenant: &str) -> usize {
    let r = w.call(tenant, Method::GET, "/runs", &[], "").await;
    r.body["runs"].as_array().unwrap().len()
}

#[tokio::test]
async fn starts_over_a_tenants_quota_are_429_naming_the_limit_and_start_nothing() {
    let quotas = Quotas::parse(
        r#"{"default": {"max_unfinished_runs": 1, "max_input_bytes": 64},
            "tenants": {"big": {"max_unfinished_runs": 2}}}"#,
    )
    .unwrap();
    let w = World::with_quotas(quotas);
    let start = r#"{"workflow":"approve","input":{"change":"x"}}"#;
    let r = w.call("small", Method::POST, "/runs", &[], start).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let first = r.body["id"].as_str().unwrap().to_owned();
    w.settle().await;
    let r = w.call("small", Method::POST, "/runs", &[], start).await;
    assert_over_quota(&r, "max_unfinished_runs");
    assert_eq!(runs_of(&w, "small").await, 1, "nothing was started");

    let large = json!({"workflow": "approve", "input": {"change": "x".repeat(100)}}).to_string();
    let r = w.call("big", Method::POST, "/runs", &[], &large).await;
    assert_over_quota(&r, "max_input_bytes");
    for _ in 0..2 {
        let r = w.call("big", Method::POST, "/runs", &[], start).await;
        assert_eq!(r.status, StatusCode::CREATED, "the override allows two");
    }
    let r = w.call("big", Method::POST, "/runs", &[], start).await;
    assert_over_quota(&r, "max_unfinished_runs");
    assert_eq!(runs_of(&w, "big").await, 2);

    // A finished run gives its slot back.
    let r = w
        .call(
            "small",
            Method::POST,
            &format!("/runs/{first}/cancel"),
            &[],
            "",
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let r = w.call("small", Method::POST, "/runs", &[], start).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
}

#[tokio::test]
async fn starts_over_the_rate_wait_for_the_bucket_to_refill() {
    let quotas = Quotas::parse(r#"{"default": {"starts_per_minute": 2}}"#).unwrap();
    let w = World::with_quotas(quotas);
    let start = r#"{"workflow":"quick","input":1}"#;
    for _ in 0..2 {
        let r = w.call("a", Method::POST, "/runs", &[], start).await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    }
    let r = w.call("a", Method::POST, "/runs", &[], start).await;
    assert_over_quota(&r, "starts_per_minute");
    assert_eq!(r.headers["retry-after"], "30", "one start every 30 s");
    assert_eq!(runs_of(&w, "a").await, 2);
    let r = w.call("b", Method::POST, "/runs", &[], start).await;
    assert_eq!(
        r.status,
        StatusCode::CREATED,
        "another tenant has its own rate"
    );
    w.clock.advance(Duration::from_secs(30));
    let r = w.call("a", Method::POST, "/runs", &[], start).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
}

#[tokio::test]
async fn deliveries_over_a_tenants_quota_are_429_and_the_run_still_waits() {
    let quotas =
        Quotas::parse(r#"{"default": {"max_delivery_bytes": 32, "max_pending_deliveries": 2}}"#)
            .unwrap();
    let w = World::with_quotas(quotas);
    let r = w
        .call(
            "a",
            Method::POST,
            "/runs",
            &[],
            r#"{"workflow":"approve","input":1}"#,
        )
        .await;
    let id = r.body["id"].as_str().unwrap().to_owned();
    w.settle().await;
    let r = w
        .call("a", Method::GET, &format!("/runs/{id}"), &[], "")
        .await;
    let callback = r.body["waits"][0]["callback_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let version = r.body["version"].clone();

    let big = json!("y".repeat(40)).to_string();
    for path in [
        format!("/callbacks/{callback}/succeed"),
        format!("/runs/{id}/events/approval"),
        format!("/runs/{id}/messages"),
    ] {
        let r = w.call("a", Method::POST, &path, &[], &big).await;
        assert_over_quota(&r, "max_delivery_bytes");
    }
    for i in 0..2 {
        let r = w
            .call(
                "a",
                Method::POST,
                &format!("/runs/{id}/messages"),
                &[],
                &i.to_string(),
            )
            .await;
        assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.body);
    }
    let r = w
        .call("a", Method::POST, &format!("/runs/{id}/messages"), &[], "3")
        .await;
    assert_over_quota(&r, "max_pending_deliveries");
    let r = w
        .call("a", Method::GET, &format!("/runs/{id}"), &[], "")
        .await;
    assert_eq!(
        r.body["version"].as_u64(),
        version.as_u64().map(|v| v + 2),
        "two recorded"
    );

    // Once the run has taken them in, there is room again, and it still waits.
    w.settle().await;
    let r = w
        .call(
            "a",
            Method::POST,
            &format!("/callbacks/{callback}/succeed"),
            &[],
            r#""bob""#,
        )
        .await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.body);
    w.settle().await;
    let r = w
        .call("a", Method::GET, &format!("/runs/{id}"), &[], "")
        .await;
    assert_eq!(r.body["status"], "waiting", "now for the approval event");
}

/// `POST /hooks/{token}` reads the callback record once, in the engine: an unknown
/// token is a 404 whether or not the body is JSON (named before the body, as it always
/// was), and a known token with a body that is not JSON a 400 that uses nothing up.
#[tokio::test]
async fn a_callback_webhook_reads_its_callback_once_and_names_an_unknown_token_before_a_bad_body() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::default());
    let embedded =
        siesta_embedded::EmbeddedBackend::open(dir.path().join("db"), clock.clone()).unwrap();
    let probe = siesta::probe::ProbeStore::new(embedded.backend().store.clone());
    let backend = siesta::ports::Backend {
        store: probe.clone(),
        ..embedded.backend()
    };
    let mut reg = Registry::new();
    reg.register("pay", |ctx: Context, _: serde_json::Value| async move {
        let cb = ctx.create_callback::<serde_json::Value>("payment").await?;
        cb.wait().await
    });
    let engine = Engine::new(backend, clock.clone(), reg, EngineConfig::default());
    let router = ControlApi::new(engine.clone())
        .authenticate(TenantHeader)
        .router();
    let tenant = TenantId::from("default");
    let (run, token) = start_waiting_on_its_callback(&engine, &tenant).await;
    let post = |token: String, body: &'static str| {
        let router = router.clone();
        async move {
            send(
                &router,
                request(Method::POST, &format!("/hooks/{token}"), &[], body),
            )
            .await
        }
    };

    for body in [r#"{"ok":true}"#, "not json"] {
        let r = post("cb_unknown".into(), body).await;
        assert_eq!(r.status, StatusCode::NOT_FOUND, "{body}: {}", r.body);
        assert_eq!(code(&r), "not_found");
    }
    let r = post(token.clone(), "not json").await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.body);

    let reads = |p: &siesta::probe::ProbeStore| p.reads.load(std::sync::atomic::Ordering::SeqCst);
    let before = reads(&probe);
    let r = post(token, r#"{"ok":true}"#).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(
        reads(&probe) - before,
        1,
        "the callback record, read by the engine; the store's delivery reads the rest"
    );
    engine.run_until_idle(10).await.unwrap();
    let done = engine.get_run(&tenant, &run.id).await.unwrap();
    assert_eq!(done.output, Some(Payload::Inline(json!({"ok": true}))));
}
