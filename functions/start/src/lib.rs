//! The control API as a Lambda behind API Gateway (HTTP API, payload v2): the tenant is
//! the JWT authorizer's claim; everything else is [`ControlApi`].

use lambda_http::{Body, Request, Response};
use siesta::{Engine, TenantId};
use siesta_api::ControlApi;
use siesta_lambda::http::{from_api_response, no_tenant, tenant, to_api_request};
use siesta_lambda::metrics::{Unit, emit};
use tracing::Instrument;

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
        async {
            let response = self.api.handle(&tenant, to_api_request(req)).await;
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
