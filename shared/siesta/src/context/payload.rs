//! Payloads in the journal: a value inline, or offloaded to the artifact store when its
//! JSON is over the inline limit.

use bytes::Bytes;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::ContextConfig;
use crate::error::{Error, ErrorKind};
use crate::model::*;
use crate::ports::Backend;

/// Serialise `value` to a payload, offloading it to the artifact store when large.
/// Serialises before the first await, so `value` need not be `Sync`.
pub(crate) fn encode_payload<T: Serialize>(
    backend: &Backend,
    config: &ContextConfig,
    tenant: &TenantId,
    run_id: &RunId,
    value: &T,
) -> impl std::future::Future<Output = Result<Payload, Error>> + Send + 'static {
    let json = serde_json::to_vec(value);
    let inline_limit = config.inline_limit;
    let (artifacts, tenant, run_id) = (backend.artifacts.clone(), tenant.clone(), run_id.clone());
    async move {
        let json = json?;
        if json.len() <= inline_limit {
            return Ok(Payload::Inline(serde_json::from_slice(&json)?));
        }
        let artifact = artifacts
            .put(&tenant, &run_id, "application/json", Bytes::from(json))
            .await
            .map_err(|e| {
                Error::new(
                    ErrorKind::Storage,
                    format!("offloading a large value: {e}"),
                    None,
                )
            })?;
        Ok(Payload::Artifact(artifact))
    }
}

/// Read a payload back, fetching it from the artifact store when it was offloaded.
pub(crate) async fn decode_payload<T: DeserializeOwned>(
    backend: &Backend,
    payload: &Payload,
) -> Result<T, Error> {
    match payload {
        Payload::Inline(v) => Ok(T::deserialize(v)?),
        Payload::Artifact(a) => {
            let bytes = backend.artifacts.get(a).await.map_err(|e| {
                Error::new(
                    ErrorKind::Storage,
                    format!("reading offloaded value {}: {e}", a.sha256),
                    None,
                )
            })?;
            Ok(serde_json::from_slice(&bytes)?)
        }
    }
}
