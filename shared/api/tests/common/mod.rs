//! Helpers shared by the router's test binaries.

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
