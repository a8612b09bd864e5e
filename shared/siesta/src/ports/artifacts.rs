//! The artifact store: content-addressed blobs, and where both backends put them.

use sha2::{Digest, Sha256};

use super::*;

/// Blob storage for artifacts and large values, content-addressed by SHA-256.
#[async_trait]
pub trait ArtifactStore: Send + Sync + 'static {
    /// Store `bytes` under `tenant/run/sha256`. One conditional put (`If-None-Match: *`):
    /// storing the same content twice is fine and returns the same reference.
    async fn put(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        media_type: &str,
        bytes: Bytes,
    ) -> Result<ArtifactRef, StoreError>;

    /// The artifact's content. [`StoreError::NotFound`] if it is missing.
    async fn get(&self, artifact: &ArtifactRef) -> Result<Bytes, StoreError>;

    /// The location [`ArtifactStore::put`] gives content with digest `sha256` of run
    /// `run_id` of `tenant`. A reference read back from anywhere a caller could have
    /// written is trusted only if its location is exactly this.
    fn location(&self, tenant: &TenantId, run_id: &RunId, sha256: &str) -> String;
}

/// The location both backends give an artifact: `<tenant>/<run>/<sha256>`, each id
/// with `%` and `/` percent-encoded so it stays one segment — a tenant named `a/b`
/// cannot mint or read a location under tenant `a`.
pub fn artifact_location(tenant: &TenantId, run_id: &RunId, sha256: &str) -> String {
    fn segment(s: &str) -> String {
        s.replace('%', "%25").replace('/', "%2F")
    }
    format!(
        "{}/{}/{sha256}",
        segment(tenant.as_str()),
        segment(run_id.as_str())
    )
}

/// The reference both backends' [`ArtifactStore::put`] gives `bytes` of run `run_id` of
/// `tenant`: their SHA-256, their size and their [`artifact_location`].
pub fn artifact_ref(
    tenant: &TenantId,
    run_id: &RunId,
    media_type: &str,
    bytes: &[u8],
) -> ArtifactRef {
    let sha256 = hex::encode(Sha256::digest(bytes));
    ArtifactRef {
        location: artifact_location(tenant, run_id, &sha256),
        sha256,
        size: bytes.len() as u64,
        media_type: media_type.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn artifact_locations_of_different_tenants_and_runs_never_meet() {
        let of =
            |t: &str, r: &str| artifact_location(&TenantId(t.into()), &RunId(r.into()), "00ff");
        assert_eq!(of("a/b", "r"), "a%2Fb/r/00ff");
        assert_ne!(of("a/b", "r"), of("a", "b/r"));
        assert_ne!(of("a%2Fb", "r"), of("a/b", "r"));
        assert!(!of("a/b", "r").starts_with("a/"));
    }
}
