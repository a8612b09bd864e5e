//! The control API as a Lambda behind API Gateway (HTTP API, payload v2): the tenant is
//! the JWT authorizer's claim; everything else is [`ControlApi`].

use std::time::Duration;

use lambda_http::{Body, Request, RequestExt, Response};
use siesta::{Engine, TenantId};
use siesta_api::ControlApi;
use siesta_lambda::http::{from_api_response, no_tenant, tenant, to_api_request};
use siesta_lambda::metrics::{Unit, emit};
use tracing::Instrument;

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
    api: ControlApi,
    tenant_claim: String,
}

impl Start {
    /// Over `engine`, reading the tenant from the JWT claim `tenant_claim`.
    pub fn new(engine: Engine, tenant_claim: impl Into<String>) -> Self {
        Start {
            api: ControlApi::new(engine),
            tenant_claim: tenant_claim.into(),
        }
    }

    /// Answer one API Gateway request.
    pub async fn handle(&self, req: Request) -> Response<Body> {
        let public = matches!(req.uri().path(), "/healthz" | "/openapi.json");
        let tenant = match tenant(&req, &self.tenant_claim) {
            Some(t) => t,
            None if public => TenantId::from("default"),
            None => return no_tenant(&self.tenant_claim),
        };
        let span = tracing::info_span!("request", tenant = %tenant, method = %req.method(), path = %req.uri().path());
        let deadline = req.lambda_context_ref().map(|c| c.deadline);
        let api = self
            .api
            .clone()
            .with_max_wait(max_wait(siesta_lambda::now_ms(), deadline));
        async {
            let response = api.handle(&tenant, to_api_request(req)).await;
            let replayed = response.headers.contains_key("idempotent-replayed");
            tracing::info!(status = response.status.as_u16(), "answered");
            if replayed {
                emit("start", &[("IdempotentReplays", Unit::Count, &[1.0])]);
            }
            from_api_response(response)
        }
        .instrument(span)
        .await
    }
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
