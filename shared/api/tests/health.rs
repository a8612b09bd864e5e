//! `/healthz` answers from the liveness of the process's loops; the run view names its build.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

use http::StatusCode;
use siesta::{Liveness, Registry};
use siesta_api::ControlApi;
use siesta_testing::TestEnv;
use tower::ServiceExt;

async fn healthz(api: &ControlApi) -> (StatusCode, serde_json::Value) {
    let req = http::Request::get("/healthz")
        .body(axum::body::Body::empty())
        .unwrap();
    let response = api.clone().router().oneshot(req).await.unwrap();
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    (status, serde_json::from_slice(&bytes).unwrap())
}

#[tokio::test]
async fn healthz_is_ok_while_every_loop_runs_and_503_once_one_stopped() {
    let env = TestEnv::new(Registry::new());
    let liveness = Liveness::new();
    let api = ControlApi::new(env.engine()).with_liveness(liveness.clone());
    let worker = liveness.register("worker");
    let _sweep = liveness.register("sweep");
    assert_eq!(healthz(&api).await.0, StatusCode::OK);

    drop(worker);
    let (status, body) = healthz(&api).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(body["error"]["code"], "unavailable");
    assert_eq!(body["error"]["message"], "stopped: worker");
}

#[tokio::test]
async fn healthz_without_loops_is_ok() {
    let env = TestEnv::new(Registry::new());
    let (status, body) = healthz(&ControlApi::new(env.engine())).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["status"], "ok");
}

#[tokio::test]
async fn the_run_view_shows_the_build_the_run_started_on() {
    let mut registry = Registry::new();
    registry.register(
        "quick",
        |_: siesta::Context, n: u32| async move { Ok(n + 1) },
    );
    let config = siesta::EngineConfig {
        build_id: "shop@1.4.0+9f2c1e0".to_owned(),
        ..siesta_testing::default_engine_config()
    };
    let env = TestEnv::builder(registry).engine_config(config).build();
    let run = env.execute("quick", 1).await;
    let keys = siesta_api::ApiKeys::new(std::collections::HashMap::from([(
        "k".to_owned(),
        env.tenant().clone(),
    )]));
    let req = http::Request::get(format!("/runs/{}", run.id))
        .header("authorization", "Bearer k")
        .body(axum::body::Body::empty())
        .unwrap();
    let response = ControlApi::new(env.engine())
        .authenticate(keys)
        .router()
        .oneshot(req)
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(json["build_id"], "shop@1.4.0+9f2c1e0");
}
