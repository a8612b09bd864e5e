//! A panic in a workflow's step does not stop `siesta dev`: the attempt is retried,
//! other runs are served meanwhile, and `/healthz` stays ok.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

use std::time::Duration;

use serde_json::{Value, json};
use siesta::{Context, EventType, Registry, RetryStrategy, RunStatus};
use siesta_app::dev::{DevOptions, start};
use siesta_client::{Client, RunView, StartOptions};

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
async fn run(api: &Client, workflow: &str, input: Value) -> RunView {
    let options = StartOptions {
        wait_secs: Some(30),
        ..StartOptions::default()
    };
    api.start_run(workflow, &input, &options).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_step_is_retried_and_the_server_keeps_serving_other_runs() {
    let dir = tempfile::tempdir().unwrap();
    let mut options = DevOptions::new(dir.path().to_owned());
    options.sweep_every = Duration::from_millis(200);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = start(listener, options, registry()).await.unwrap();
    let base = format!("http://{}", server.addr);
    let api = Client::new(&base);

    let panicky = run(&api, "panicky", json!(null)).await;
    assert_eq!(panicky.status, RunStatus::Completed, "{panicky:?}");
    assert_eq!(
        panicky.output,
        Some(json!(2)),
        "the second attempt answered"
    );
    let timeline = api.timeline(&panicky.id, 0, None).await.unwrap();
    let failed: Vec<_> = timeline
        .events
        .iter()
        .filter(|e| e.event_type == EventType::StepFailed)
        .collect();
    assert_eq!(failed.len(), 1, "{timeline:?}");
    assert_eq!(
        failed[0].details.as_ref().unwrap()["Error"]["kind"],
        "Panicked"
    );

    for n in 0..3 {
        let steady = run(&api, "steady", json!(n)).await;
        assert_eq!(steady.status, RunStatus::Completed, "{steady:?}");
        assert_eq!(steady.output, Some(json!(n * 2)));
    }
    assert_eq!(api.health().await.unwrap().status, "ok");
    assert!(server.liveness.is_alive());
    server.stop();
}
