//! `/healthz` answers from the liveness of the process's loops.

use bytes::Bytes;
use http::{HeaderMap, Method, StatusCode};
use siesta::{Liveness, Registry, TenantId};
use siesta_api::{ApiRequest, ControlApi};
use siesta_testing::TestEnv;

async fn healthz(api: &ControlApi) -> (StatusCode, serde_json::Value) {
    let req = ApiRequest {
        method: Method::GET,
        path: "/healthz".to_owned(),
        query: String::new(),
        headers: HeaderMap::new(),
        body: Bytes::new(),
    };
    let response = api.handle(&TenantId::from("default"), req).await;
    (response.status, response.body)
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
