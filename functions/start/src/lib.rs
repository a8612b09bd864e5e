//! The control API as a Lambda behind API Gateway (HTTP API, payload v2): `siesta_api`'s
//! router, the same one `siesta dev` serves, with the tenant taken from the JWT
//! authorizer's claim and idempotent replays counted.

mod runtime;

pub use runtime::run;

use std::time::Duration;

use axum::Router;
use axum::middleware::{self, Next};
use axum::response::Response;
use lambda_http::{Body, Request, RequestExt};
use siesta::Engine;
use siesta_api::{ControlApi, Deployments, MaxWait};
use siesta_lambda::http::{JwtClaim, answer};
use siesta_lambda::metrics::{Unit, emit, emit_by};

/// The longest API Gateway holds a request (its integration timeout is 30 s), less a
/// second to answer in.
pub const API_GATEWAY_WAIT: Duration = Duration::from_secs(29);

/// The longest a `Prefer: wait` request may be held: under API Gateway's limit and a
/// second before the invocation's deadline (`deadline_ms`, ms since the epoch).
pub fn max_wait(now_ms: i64, deadline_ms: Option<u64>) -> Duration {
    let left = deadline_ms.map_or(API_GATEWAY_WAIT, |d| {
        Duration::from_millis(u64::try_from(d as i64 - now_ms).unwrap_or(0))
            .saturating_sub(Duration::from_secs(1))
    });
    left.min(API_GATEWAY_WAIT)
}

/// The start function: built once per container.
#[derive(Clone)]
pub struct Start {
    router: Router,
}

impl Start {
    /// Over `engine`, reading the tenant from the JWT claim `tenant_claim`; `GET
    /// /builds` says only the serving build is deployed.
    pub fn new(engine: Engine, tenant_claim: impl Into<String>) -> Self {
        Self::from_api(ControlApi::new(engine).authenticate(JwtClaim::new(tenant_claim)))
    }

    /// As [`Start::new`], with `GET /builds` asking `deployments` which builds are
    /// still deployed (on Lambda, the build registry).
    pub fn with_deployments(
        engine: Engine,
        tenant_claim: impl Into<String>,
        deployments: impl Deployments,
    ) -> Self {
        Self::from_api(
            ControlApi::new(engine)
                .authenticate(JwtClaim::new(tenant_claim))
                .deployments(deployments),
        )
    }

    fn from_api(api: ControlApi) -> Self {
        let router = api
            .router()
            .layer(middleware::map_response(count_replays))
            .layer(middleware::from_fn(cap_wait))
            // Spans are sent before each invocation returns: a frozen container sends
            // nothing.
            .layer(middleware::map_response(siesta_lambda::otel::flush_after));
        Start { router }
    }

    /// The router, for `lambda_http::run`.
    pub fn router(&self) -> Router {
        self.router.clone()
    }

    /// Answer one API Gateway request, as the runtime does; its spans are sent before
    /// it returns (when traces are exported).
    pub async fn handle(&self, req: Request) -> lambda_http::Response<Body> {
        answer(&self.router, req).await
    }
}

/// A `Prefer: wait` ends before API Gateway or the invocation gives up.
async fn cap_wait(mut request: axum::extract::Request, next: Next) -> Response {
    let deadline = request
        .extensions()
        .lambda_context_ref()
        .map(|c| c.deadline);
    let cap = max_wait(siesta_lambda::now_ms(), deadline);
    request.extensions_mut().insert(MaxWait(cap));
    next.run(request).await
}

async fn count_replays(response: Response) -> Response {
    if response.headers().contains_key("idempotent-replayed") {
        emit("start", &[("IdempotentReplays", Unit::Count, &[1.0])]);
    }
    if let Some(queued) = response.extensions().get::<siesta_api::StartQueued>() {
        let metric = if queued.joined {
            "StartsJoined"
        } else {
            "StartsQueued"
        };
        emit_by(
            "start",
            &[("Limit", queued.by.as_str())],
            &[(metric, Unit::Count, &[1.0])],
        );
    }
    response
}

#[cfg(test)]
mod wait_cap_tests {
    use super::*;

    #[test]
    fn a_wait_ends_a_second_before_the_invocation_deadline() {
        assert_eq!(max_wait(1_000, Some(11_000)), Duration::from_secs(9));
        assert_eq!(max_wait(1_000, Some(1_500)), Duration::ZERO);
        assert_eq!(max_wait(1_000, Some(500)), Duration::ZERO);
    }

    #[test]
    fn a_wait_never_outlasts_api_gateway() {
        assert_eq!(max_wait(0, Some(900_000)), API_GATEWAY_WAIT);
        assert_eq!(max_wait(0, None), API_GATEWAY_WAIT);
    }
}
