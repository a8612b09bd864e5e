//! The HTTP functions (start, webhook) serve `siesta_api`'s router through `lambda_http`:
//! the tenant of an authenticated route is the API Gateway JWT authorizer's claim
//! ([`JwtClaim`]), and [`answer`] is what the runtime does with one request, for tests
//! that drive a function with an event.

use axum::Router;
use lambda_http::request::RequestContext;
use lambda_http::{Body, IntoResponse, Request, RequestExt, Response};
use siesta::TenantId;
use siesta_api::{ApiError, Authenticate};
use tower::ServiceExt;

/// The tenant is the JWT authorizer's claim named here (API Gateway HTTP API, payload
/// v2); a request without it is 401.
#[derive(Debug, Clone)]
pub struct JwtClaim {
    claim: String,
}

impl JwtClaim {
    /// Read the tenant from the claim `claim`.
    pub fn new(claim: impl Into<String>) -> Self {
        JwtClaim {
            claim: claim.into(),
        }
    }
}

impl Authenticate for JwtClaim {
    fn authenticate(&self, request: &http::request::Parts) -> Result<TenantId, ApiError> {
        let claimed = match request.extensions.request_context_ref() {
            Some(RequestContext::ApiGatewayV2(ctx)) => ctx
                .authorizer
                .as_ref()
                .and_then(|a| a.jwt.as_ref())
                .and_then(|jwt| jwt.claims.get(&self.claim))
                .filter(|t| !t.trim().is_empty())
                .map(|t| TenantId::from(t.as_str())),
            #[allow(unreachable_patterns)]
            _ => None,
        };
        claimed.ok_or_else(|| {
            ApiError::unauthorized(format!(
                "the token carries no '{}' claim naming a tenant",
                self.claim
            ))
        })
    }

    /// `jwt:<sub>`: the token's subject (the person or client behind it), or the tenant
    /// when the authorizer passed no `sub` claim.
    fn caller(&self, request: &http::request::Parts, tenant: &TenantId) -> String {
        let subject = match request.extensions.request_context_ref() {
            Some(RequestContext::ApiGatewayV2(ctx)) => ctx
                .authorizer
                .as_ref()
                .and_then(|a| a.jwt.as_ref())
                .and_then(|jwt| jwt.claims.get("sub"))
                .filter(|s| !s.trim().is_empty())
                .cloned(),
            #[allow(unreachable_patterns)]
            _ => None,
        };
        format!("jwt:{}", subject.unwrap_or_else(|| tenant.to_string()))
    }
}

/// Answer one request with `router`, exactly as `lambda_http::run(router)` does: the
/// body (base64-decoded by `lambda_http` when API Gateway sent `isBase64Encoded`) reaches
/// the handlers untouched, and the answer is converted back to a Lambda response.
pub async fn answer(router: &Router, request: Request) -> Response<Body> {
    let response = match router.clone().oneshot(request).await {
        Ok(response) => response,
        Err(never) => match never {},
    };
    response.into_response().await
}

/// `GET /builds`'s answer to which builds are still deployed, on Lambda: the build
/// registry's (a build is while a published step function version serves it).
#[derive(Clone)]
pub struct RegistryDeployments(pub siesta_aws::builds::BuildRegistry);

#[async_trait::async_trait]
impl siesta_api::Deployments for RegistryDeployments {
    async fn deployed(
        &self,
        builds: &[String],
    ) -> Result<std::collections::HashMap<String, bool>, String> {
        self.0.deployed(builds).await.map_err(|e| e.to_string())
    }
}
