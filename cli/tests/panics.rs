//! A panic in a workflow's step does not stop `siesta dev`: the attempt is retried,
//! other runs are served meanwhile, and `/healthz` stays ok.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

use std::time::Duration;

use serde_json::{Value, json};
use siesta::{Context, Registry, RetryStrategy};
use siesta_app::dev::{DevOptions, start};

fn registry() -> Registry {
    let mut registry = Registry::new();
    registry.register("panicky", |ctx: Context, _: ()| async move {
        ctx.step("call", |s| async move {
            if s.attempt() == 1 {
                panic!("the first attempt blows up");
            }
            Ok(s.attempt())
        })
        .retry(RetryStrategy::fixed(3, Duration::from_millis(50)))
        .await
    });
    registry.register("steady", |ctx: Context, n: u32| async move {
        ctx.step("double", move |_| async move { Ok(n * 2) }).await
    });
    registry
}

/// Start a run and wait for its outcome in the same request.
async fn run(client: &reqwest::Client, base: &str, workflow: &str, input: Value) -> Value {
    let response = client
        .post(format!("{base}/runs"))
        .header("Prefer", "wait=30")
        .json(&json!({"workflow": workflow, "input": input}))
        .send()
        .await
        .unwrap();
    assert!(response.status().is_success(), "{}", response.status());
    response.json().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_step_is_retried_and_the_server_keeps_serving_other_runs() {
    let dir = tempfile::tempdir().unwrap();
    let mut options = DevOptions::new(dir.path().to_owned());
    options.sweep_every = Duration::from_millis(200);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = start(listener, options, registry()).await.unwrap();
    let base = format!("http://{}", server.addr);
    let client = reqwest::Client::new();

    let panicky = run(&client, &base, "panicky", json!(null)).await;
    assert_eq!(panicky["status"], "completed", "{panicky}");
    assert_eq!(panicky["output"], 2, "the second attempt answered");
    let id = panicky["id"].as_str().unwrap();
    let timeline: Value = client
        .get(format!("{base}/runs/{id}/timeline"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let failed: Vec<&Value> = timeline["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["EventType"] == "StepFailed")
        .collect();
    assert_eq!(failed.len(), 1, "{timeline}");
    assert_eq!(failed[0]["Details"]["Error"]["kind"], "Panicked");

    for n in 0..3 {
        let steady = run(&client, &base, "steady", json!(n)).await;
        assert_eq!(steady["status"], "completed", "{steady}");
        assert_eq!(steady["output"], n * 2);
    }
    let health = client.get(format!("{base}/healthz")).send().await.unwrap();
    assert_eq!(health.status(), 200);
    assert!(server.liveness.is_alive());
    server.stop();
}
