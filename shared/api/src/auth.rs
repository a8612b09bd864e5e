//! Who is calling: the tenant of a request to an authenticated route. The transport
//! decides how (API keys in `siesta dev`, the JWT authorizer's claim behind API Gateway),
//! so the router takes an [`Authenticate`] and the handlers take a [`Tenant`].

use std::collections::HashMap;
use std::sync::Arc;

use http::request::Parts;
use sha2::Digest;
use siesta::TenantId;

use crate::ApiError;

/// Decides the tenant of a request to an authenticated route, or refuses it (401).
pub trait Authenticate: Send + Sync + 'static {
    /// The caller's tenant, from the request's head (headers, extensions).
    fn authenticate(&self, request: &Parts) -> Result<TenantId, ApiError>;

    /// Who the caller is, for the record of what they did (an operator resolving a tool
    /// call): asked after [`Authenticate::authenticate`] accepted the request. By
    /// default the tenant (`tenant:<id>`); a scheme that knows more says more.
    fn caller(&self, request: &Parts, tenant: &TenantId) -> String {
        let _ = request;
        format!("tenant:{tenant}")
    }
}

/// API keys, each mapped to a tenant, presented as `Authorization: Bearer <key>`. With
/// no keys configured, authentication is off and every caller is tenant `default`.
#[derive(Clone, Default)]
pub struct ApiKeys {
    keys: Arc<HashMap<String, TenantId>>,
}

impl std::fmt::Debug for ApiKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The keys are secrets: only their number is shown.
        f.debug_struct("ApiKeys")
            .field("keys", &self.keys.len())
            .finish()
    }
}

impl ApiKeys {
    /// These keys; an empty map turns authentication off.
    pub fn new(keys: HashMap<String, TenantId>) -> Self {
        ApiKeys {
            keys: Arc::new(keys),
        }
    }
}

impl Authenticate for ApiKeys {
    fn authenticate(&self, request: &Parts) -> Result<TenantId, ApiError> {
        if self.keys.is_empty() {
            return Ok(TenantId::from("default"));
        }
        bearer(request)
            .and_then(|k| self.keys.get(k).cloned())
            .ok_or_else(|| {
                ApiError::unauthorized("a valid 'Authorization: Bearer <api key>' is required")
            })
    }

    /// `dev` when authentication is off; otherwise the key's fingerprint (the first 12
    /// hex digits of its SHA-256: the key is a secret) and its tenant.
    fn caller(&self, request: &Parts, tenant: &TenantId) -> String {
        if self.keys.is_empty() {
            return "dev".into();
        }
        let key = bearer(request).unwrap_or_default();
        let digest = hex::encode(sha2::Sha256::digest(key.as_bytes()));
        format!("api-key:{}@{tenant}", &digest[..12])
    }
}

/// The token of `Authorization: Bearer <token>`, if sent.
fn bearer(request: &Parts) -> Option<&str> {
    request
        .headers
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(str::trim)
}

/// Refuses every caller: what a [`crate::ControlApi`] authenticates with until it is
/// told how.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NoCallers;

impl Authenticate for NoCallers {
    fn authenticate(&self, _: &Parts) -> Result<TenantId, ApiError> {
        Err(ApiError::unauthorized(
            "this server has no way to authenticate callers configured",
        ))
    }
}

/// The caller's tenant, as the router's [`Authenticate`] decided it. A handler that
/// takes one is an authenticated route; the tenant is also recorded on the request's
/// span.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tenant(pub TenantId);

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(authorization: Option<&str>) -> Parts {
        let mut builder = http::Request::builder().uri("/runs");
        if let Some(a) = authorization {
            builder = builder.header("authorization", a);
        }
        builder.body(()).unwrap().into_parts().0
    }

    #[test]
    fn without_keys_every_caller_is_the_default_tenant() {
        let keys = ApiKeys::default();
        assert_eq!(
            keys.authenticate(&parts(None)).unwrap(),
            TenantId::from("default")
        );
    }

    #[test]
    fn with_keys_a_bearer_key_names_its_tenant_and_anything_else_is_401() {
        let keys = ApiKeys::new(HashMap::from([("k1".to_owned(), TenantId::from("acme"))]));
        assert_eq!(
            keys.authenticate(&parts(Some("Bearer k1"))).unwrap(),
            TenantId::from("acme")
        );
        for bad in [None, Some("Bearer k2"), Some("k1"), Some("Basic k1")] {
            let e = keys.authenticate(&parts(bad)).unwrap_err();
            assert_eq!(e.status, http::StatusCode::UNAUTHORIZED, "{bad:?}");
        }
    }
}
