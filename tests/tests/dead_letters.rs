//! The dead-letter API end to end on the AWS backend (DynamoDB Local and LocalStack):
//! wake-ups dead-lettered by SQS's redrive policy, their runs parked by the sweep, then
//! listed through the router (the AWS backend's cursor used raw in the URL), redriven one
//! and then all, and completed from SQS.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use http::{Method, StatusCode};
use serde_json::{Value, json};
use siesta::*;
use siesta_api::{ApiKeys, ControlApi};
use tower::ServiceExt;

/// Receives before SQS dead-letters a wake-up, in this test.
const MAX_RECEIVES: u32 = 2;
/// Runs dead-lettered.
const RUNS: usize = 7;

fn registry() -> Registry {
    let mut reg = Registry::new();
    reg.register("quick", |ctx: Context, n: u32| async move {
        let m = ctx.step("add", move |_| async move { Ok(n + 1) }).await?;
        Ok(m)
    });
    reg
}

async fn call(router: &Router, method: Method, path: &str) -> (StatusCode, Value) {
    let request = http::Request::builder()
        .method(method)
        .uri(path)
        .header("authorization", "Bearer ops-key")
        .body(axum::body::Body::empty())
        .unwrap();
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    (status, serde_json::from_slice(&bytes).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_aws_dead_letters_are_listed_with_raw_cursors_redriven_and_completed() {
    let Some(env) = siesta_aws::testing::emulators().await else {
        return;
    };
    let backend = env.backend(MAX_RECEIVES).await.backend();
    let engine = Engine::new(
        backend.clone(),
        Arc::new(SystemClock),
        registry(),
        EngineConfig::default(),
    );
    // A tenant of its own: the shared table holds other tests' runs.
    let tenant = TenantId(format!("dead-letter-api-{}", uuid::Uuid::new_v4().simple()));
    let router = ControlApi::new(engine.clone())
        .authenticate(ApiKeys::new(HashMap::from([(
            "ops-key".to_owned(),
            tenant.clone(),
        )])))
        .router();
    let mut ids = BTreeSet::new();
    for n in 0..RUNS {
        let run = engine
            .start(&tenant, "quick", json!(n), None)
            .await
            .unwrap();
        ids.insert(run.id.to_string());
    }
    siesta_aws::testing::fail_all_until_dead_lettered(&backend.queue, MAX_RECEIVES).await;
    let mut parked = 0;
    for _ in 0..5 {
        parked += engine.sweep(100).await.unwrap().parked_dead_letters;
        if parked == RUNS {
            break;
        }
    }
    assert_eq!(parked, RUNS, "every run parked by its dead letter");

    // Listed page by page, the AWS cursor passed as it came.
    let mut listed = BTreeSet::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let path = match &cursor {
            Some(c) => format!("/dead-letters?limit=3&cursor={c}"),
            None => "/dead-letters?limit=3".to_owned(),
        };
        let (status, body) = call(&router, Method::GET, &path).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        pages += 1;
        for letter in body["dead_letters"].as_array().unwrap() {
            assert!(listed.insert(letter["run_id"].as_str().unwrap().to_owned()));
            assert!(letter["parked_at"].as_str().unwrap().ends_with('Z'));
        }
        match body["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => break,
        }
    }
    assert_eq!(listed, ids);
    assert!(pages >= 3, "{pages}");

    let first = ids.iter().next().unwrap().clone();
    let (status, body) = call(
        &router,
        Method::POST,
        &format!("/dead-letters/{first}/redrive"),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let (status, body) = call(&router, Method::POST, "/dead-letters/redrive").await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body["redriven"], json!(RUNS - 1));

    // Their wake-ups come from SQS; each run completes.
    for _ in 0..50 {
        engine.run_until_idle(100).await.unwrap();
        let mut done = 0;
        for id in &ids {
            let run = engine
                .get_run(&tenant, &RunId::from(id.as_str()))
                .await
                .unwrap();
            done += usize::from(run.status == RunStatus::Completed);
        }
        if done == RUNS {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for id in &ids {
        let run = engine
            .get_run(&tenant, &RunId::from(id.as_str()))
            .await
            .unwrap();
        assert_eq!(run.status, RunStatus::Completed, "{id}");
    }
    let (_, body) = call(&router, Method::GET, "/dead-letters").await;
    assert_eq!(body["dead_letters"], json!([]));
}
