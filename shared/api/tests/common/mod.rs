//! Helpers shared by the router's test binaries.
#![allow(dead_code, reason = "each test binary uses some of these helpers")]

use siesta::TenantId;
use siesta_api::{ApiError, Authenticate};

/// The caller names its tenant in the `x-test-tenant` header: the router's
/// authentication is pluggable, and these tests are about what a tenant sees, not how
/// it is proven.
pub(crate) struct TenantHeader;

impl Authenticate for TenantHeader {
    fn authenticate(&self, request: &http::request::Parts) -> Result<TenantId, ApiError> {
        request
            .headers
            .get("x-test-tenant")
            .and_then(|v| v.to_str().ok())
            .map(TenantId::from)
            .ok_or_else(|| ApiError::unauthorized("no x-test-tenant"))
    }
}

/// The router of `env`'s engine, a tenant's API key `k` naming `env`'s tenant.
pub(crate) fn keyed_api(env: &siesta_testing::TestEnv) -> siesta_api::ControlApi {
    let keys = siesta_api::ApiKeys::new(std::collections::HashMap::from([(
        "k".to_owned(),
        env.tenant().clone(),
    )]));
    siesta_api::ControlApi::new(env.engine()).authenticate(keys)
}

/// The router of `engine` (over `env`'s store: another build's, say), the same key `k`.
pub(crate) fn keyed_api_over(
    env: &siesta_testing::TestEnv,
    engine: siesta::Engine,
) -> siesta_api::ControlApi {
    let keys = siesta_api::ApiKeys::new(std::collections::HashMap::from([(
        "k".to_owned(),
        env.tenant().clone(),
    )]));
    siesta_api::ControlApi::new(engine).authenticate(keys)
}

/// Send `method path` (with `body` as JSON, and `headers`) to `api` with the key `k`;
/// the status and the body as JSON (`null` when it is not JSON).
pub(crate) async fn call_keyed(
    api: &siesta_api::ControlApi,
    method: &str,
    path: &str,
    body: Option<serde_json::Value>,
    headers: &[(&str, &str)],
) -> (http::StatusCode, serde_json::Value) {
    use tower::ServiceExt;
    let mut req = http::Request::builder()
        .method(method)
        .uri(path)
        .header("authorization", "Bearer k");
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    let body = match body {
        Some(b) => {
            req = req.header("content-type", "application/json");
            axum::body::Body::from(b.to_string())
        }
        None => axum::body::Body::empty(),
    };
    let response = api
        .clone()
        .router()
        .oneshot(req.body(body).expect("a request"))
        .await
        .expect("an answer");
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .expect("its body");
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null),
    )
}
