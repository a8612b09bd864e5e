//! Runs across deploys through the router (`tower::ServiceExt::oneshot`): export a run,
//! check its replay on the build serving the API, upgrade it (409 with the divergence
//! when it does not replay, 412 on a stale version), upgrade a whole build.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

use std::sync::Arc;

use axum::Router;
use http::{Method, StatusCode};
use serde_json::{Value, json};
use siesta::*;
use siesta_api::ControlApi;

mod common;
use common::TenantHeader;
use tower::ServiceExt;

/// Build A: a model call, then an approval.
fn build_a() -> Registry {
    let mut reg = Registry::new();
    reg.register("agent", |ctx: Context, _: Value| async move {
        ctx.step("llm", |_| async { Ok(1) }).await?;
        let ok: bool = ctx.wait_for_event("approval").await?;
        Ok(json!(ok))
    });
    reg.register("triaged", |ctx: Context, _: Value| async move {
        ctx.step("llm", |_| async { Ok(1) }).await?;
        let ok: bool = ctx.wait_for_event("approval").await?;
        Ok(json!(ok))
    });
    reg
}

/// Build B: `agent` gained a step after the approval (replays), `triaged` a step before
/// the model call (does not).
fn build_b() -> Registry {
    let mut reg = Registry::new();
    reg.register("agent", |ctx: Context, _: Value| async move {
        ctx.step("llm", |_| async { Ok(1) }).await?;
        let ok: bool = ctx.wait_for_event("approval").await?;
        ctx.step("notify", |_| async { Ok(2) }).await?;
        Ok(json!(ok))
    });
    reg.register("triaged", |ctx: Context, _: Value| async move {
        ctx.step("triage", |_| async { Ok(0) }).await?;
        ctx.step("llm", |_| async { Ok(1) }).await?;
        let ok: bool = ctx.wait_for_event("approval").await?;
        Ok(json!(ok))
    });
    reg
}

struct World {
    _dir: tempfile::TempDir,
    /// The old build, which started the runs.
    a: Engine,
    /// The router over build B.
    router: Router,
}

impl World {
    fn new() -> World {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::default());
        let embedded =
            siesta_embedded::EmbeddedBackend::open(dir.path().join("db"), clock.clone()).unwrap();
        let engine = |registry, build: &str| {
            let config = EngineConfig {
                build_id: build.to_owned(),
                ..EngineConfig::default()
            };
            Engine::new(embedded.backend(), clock.clone(), registry, config)
        };
        let a = engine(build_a(), "app@a");
        let b = engine(build_b(), "app@b");
        World {
            _dir: dir,
            a,
            router: ControlApi::new(b).authenticate(TenantHeader).router(),
        }
    }

    /// A run of `workflow` started on build A, waiting for its approval.
    async fn waiting(&self, tenant: &str, workflow: &str) -> String {
        let run = self
            .a
            .start(&TenantId::from(tenant), workflow, json!(null), None)
            .await
            .unwrap();
        self.a.run_until_idle(10).await.unwrap();
        run.id.to_string()
    }

    async fn call(
        &self,
        tenant: &str,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
    ) -> (StatusCode, Value) {
        let mut builder = http::Request::builder()
            .method(method)
            .uri(path)
            .header("x-test-tenant", tenant);
        for (k, v) in headers {
            builder = builder.header(*k, *v);
        }
        let request = builder.body(axum::body::Body::empty()).unwrap();
        let response = self.router.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        (status, serde_json::from_slice(&bytes).unwrap())
    }
}

#[tokio::test]
async fn a_run_is_exported_whole_to_its_tenant_only() {
    let w = World::new();
    let id = w.waiting("acme", "agent").await;
    let (status, body) = w
        .call("acme", Method::GET, &format!("/runs/{id}/export"), &[])
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["format"], RunExport::FORMAT);
    let export: RunExport = serde_json::from_value(body).unwrap();
    assert_eq!(export.run.id.as_str(), id);
    assert_eq!(export.journal.len(), 2);

    let (status, _) = w
        .call("other", Method::GET, &format!("/runs/{id}/export"), &[])
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn the_replay_check_says_clean_or_where_it_diverges() {
    let w = World::new();
    let clean = w.waiting("acme", "agent").await;
    let diverging = w.waiting("acme", "triaged").await;
    let (status, body) = w
        .call(
            "acme",
            Method::GET,
            &format!("/runs/{clean}/replay-check"),
            &[],
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["result"], "clean");
    assert_eq!(body["replayed"], 2);
    assert_eq!(body["build_id"], "app@b");
    assert_eq!(body["run_build_id"], "app@a");
    let (_, body) = w
        .call(
            "acme",
            Method::GET,
            &format!("/runs/{diverging}/replay-check"),
            &[],
        )
        .await;
    assert_eq!(body["result"], "diverged");
    assert_eq!(body["divergence"]["position"], "triage#0");
}

#[tokio::test]
async fn upgrade_moves_a_clean_run_and_refuses_a_stale_version() {
    let w = World::new();
    let id = w.waiting("acme", "agent").await;
    let (_, run) = w
        .call("acme", Method::GET, &format!("/runs/{id}"), &[])
        .await;
    let version = run["version"].as_u64().unwrap();

    let stale = format!("\"{}\"", version + 3);
    let (status, body) = w
        .call(
            "acme",
            Method::POST,
            &format!("/runs/{id}/upgrade"),
            &[("if-match", &stale)],
        )
        .await;
    assert_eq!(status, StatusCode::PRECONDITION_FAILED, "{body}");

    let current = format!("\"{version}\"");
    let (status, body) = w
        .call(
            "acme",
            Method::POST,
            &format!("/runs/{id}/upgrade"),
            &[("if-match", &current)],
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["build_id"], "app@b");
    assert_eq!(body["status"], "waiting");
}

#[tokio::test]
async fn upgrade_refuses_a_diverging_run_with_409_and_the_position() {
    let w = World::new();
    let id = w.waiting("acme", "triaged").await;
    let (status, body) = w
        .call("acme", Method::POST, &format!("/runs/{id}/upgrade"), &[])
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["error"]["code"], "diverged");
    let divergence = &body["error"]["divergence"];
    assert_eq!(divergence["position"], "triage#0");
    assert_eq!(divergence["journal_kind"], "step");
    assert_eq!(divergence["code_kind"], "step");
    let (_, run) = w
        .call("acme", Method::GET, &format!("/runs/{id}"), &[])
        .await;
    assert_eq!(run["build_id"], "app@a");
}

#[tokio::test]
async fn upgrading_a_build_reports_what_moved_and_what_diverged() {
    let w = World::new();
    let clean = w.waiting("acme", "agent").await;
    let diverging = w.waiting("acme", "triaged").await;
    let (status, body) = w
        .call("acme", Method::POST, "/builds/app@a/upgrade", &[])
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["to"], "app@b");
    assert_eq!(body["upgraded"], json!([clean]));
    assert_eq!(body["diverged"][0]["run_id"], json!(diverging));
    assert_eq!(body["diverged"][0]["divergence"]["position"], "triage#0");
}
