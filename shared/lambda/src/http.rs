//! API Gateway HTTP API (payload v2) requests to [`ApiRequest`] and [`ApiResponse`]
//! back; the tenant from the JWT authorizer's claims.

use bytes::Bytes;
use lambda_http::request::RequestContext;
use lambda_http::{Body, Request, RequestExt, Response};
use siesta::TenantId;
use siesta_api::{ApiRequest, ApiResponse};

/// The request as the handler logic takes it: the raw body bytes (base64-decoded by
/// `lambda_http` when API Gateway sent `isBase64Encoded`), untouched, so a webhook's
/// signature is checked over exactly what the sender signed.
pub fn to_api_request(req: Request) -> ApiRequest {
    let (parts, body) = req.into_parts();
    let body = match body {
        Body::Empty => Bytes::new(),
        Body::Text(t) => Bytes::from(t),
        Body::Binary(b) => Bytes::from(b),
        _ => Bytes::new(),
    };
    ApiRequest {
        method: parts.method,
        path: parts.uri.path().to_owned(),
        query: parts.uri.query().unwrap_or_default().to_owned(),
        headers: parts.headers,
        body,
    }
}

/// The handler logic's answer as a Lambda HTTP response (JSON body).
pub fn from_api_response(r: ApiResponse) -> Response<Body> {
    let mut response = Response::new(Body::Text(r.body.to_string()));
    *response.status_mut() = r.status;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response.headers_mut().extend(r.headers);
    response
}

/// The tenant named by the JWT authorizer's `claim`, if the request carries one.
pub fn tenant(req: &Request, claim: &str) -> Option<TenantId> {
    match req.request_context_ref()? {
        RequestContext::ApiGatewayV2(ctx) => ctx
            .authorizer
            .as_ref()?
            .jwt
            .as_ref()?
            .claims
            .get(claim)
            .filter(|t| !t.trim().is_empty())
            .map(|t| TenantId::from(t.as_str())),
        #[allow(unreachable_patterns)]
        _ => None,
    }
}

/// The 401 answer for a request without a tenant claim.
pub fn no_tenant(claim: &str) -> Response<Body> {
    from_api_response(
        siesta_api::ApiError::new(
            http::StatusCode::UNAUTHORIZED,
            "unauthorized",
            format!("the token carries no '{claim}' claim naming a tenant"),
        )
        .into(),
    )
}
