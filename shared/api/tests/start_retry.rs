//! `POST /runs` retried with its `Idempotency-Key` after the first attempt died between
//! the run's write and its wake-up's send: the retry is answered with the stored run and
//! wakes it, so it begins at once rather than when the sweep finds it.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use http::{Method, StatusCode};
use serde_json::json;
use siesta::ports::*;
use siesta::*;
use siesta_api::ControlApi;
use tower::ServiceExt;

mod common;
use common::TenantHeader;

/// A send hook for the embedded queue: its first send vanishes without an error, as it
/// does when the process dies between the write and the send.
struct LosesFirstSend(AtomicUsize);

#[async_trait]
impl SendHook for LosesFirstSend {
    async fn send(
        &self,
        queue: &dyn WakeQueue,
        wake: &WakeUp,
        delay: Duration,
    ) -> Result<(), StoreError> {
        if self.0.fetch_add(1, Ordering::SeqCst) == 0 {
            return Ok(());
        }
        queue.send(wake, delay).await
    }
}

async fn start(router: &axum::Router) -> (StatusCode, http::HeaderMap, serde_json::Value) {
    let request = http::Request::builder()
        .method(Method::POST)
        .uri("/runs")
        .header("x-test-tenant", "acme")
        .header("idempotency-key", "order-1234")
        .body(axum::body::Body::from(
            r#"{"workflow":"await_go","input":{"order":1234}}"#,
        ))
        .unwrap();
    let response = router.clone().oneshot(request).await.unwrap();
    let (status, headers) = (response.status(), response.headers().clone());
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    (status, headers, serde_json::from_slice(&bytes).unwrap())
}

#[tokio::test]
async fn a_start_retried_with_its_key_after_its_wake_up_was_lost_begins_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::default());
    let embedded =
        siesta_embedded::EmbeddedBackend::open(dir.path().join("db"), clock.clone()).unwrap();
    let base = embedded.backend();
    let queue = Arc::new(HookedSends::new(
        base.queue.clone(),
        LosesFirstSend(AtomicUsize::new(0)),
    ));
    let mut reg = Registry::new();
    reg.register(
        "await_go",
        |ctx: Context, _: serde_json::Value| async move {
            let v: serde_json::Value = ctx.wait_for_event("go").await?;
            Ok(v)
        },
    );
    let engine = Engine::new(
        Backend {
            queue: queue.clone(),
            ..base
        },
        clock.clone(),
        reg,
        EngineConfig::default(),
    );
    let router = ControlApi::new(engine.clone())
        .authenticate(TenantHeader)
        .router();

    let (status, _, first) = start(&router).await;
    assert_eq!(status, StatusCode::CREATED, "{first}");
    assert_eq!(
        engine.run_until_idle(10).await.unwrap(),
        0,
        "its wake-up is lost"
    );

    let (status, headers, again) = start(&router).await;
    assert_eq!(status, StatusCode::CREATED, "{again}");
    assert_eq!(headers["idempotent-replayed"], "true");
    assert_eq!(again["id"], first["id"]);
    assert_eq!(queue.0.load(Ordering::SeqCst), 2, "the retry sent it again");
    // No time passes: the retry's wake-up, not the sweep, begins the run.
    assert_eq!(engine.run_until_idle(10).await.unwrap(), 1);
    let id = RunId::from(first["id"].as_str().unwrap());
    let run = engine.get_run(&TenantId::from("acme"), &id).await.unwrap();
    assert_eq!(run.status, RunStatus::Waiting);

    // Retried once more, now that it has begun: answered, nothing sent.
    let (status, _, third) = start(&router).await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(third["status"], json!("waiting"));
    assert_eq!(queue.0.load(Ordering::SeqCst), 2);
}
