//! [`ArtifactStore`] on S3: content-addressed, tenant-prefixed, encrypted, written once.

use async_trait::async_trait;
use aws_sdk_s3::Client;
use aws_sdk_s3::operation::get_object::GetObjectError;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::ServerSideEncryption;
use bytes::{Bytes, BytesMut};
use sha2::{Digest, Sha256};
use siesta::ports::{ArtifactStore, StoreError, artifact_location, artifact_ref};
use siesta::{ArtifactRef, RunId, TenantId};

use crate::error::{code, sdk};

/// Artifacts in one S3 bucket.
pub(crate) struct S3Artifacts {
    client: Client,
    bucket: String,
}

impl S3Artifacts {
    pub(crate) fn new(client: Client, bucket: String) -> Self {
        S3Artifacts { client, bucket }
    }
}

/// The object key of content with digest `sha256`, under its tenant's prefix.
pub(crate) fn object_key(tenant: &TenantId, run_id: &RunId, sha256: &str) -> String {
    artifact_location(tenant, run_id, sha256)
}

#[async_trait]
impl ArtifactStore for S3Artifacts {
    fn location(&self, tenant: &TenantId, run_id: &RunId, sha256: &str) -> String {
        object_key(tenant, run_id, sha256)
    }

    async fn put(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        media_type: &str,
        bytes: Bytes,
    ) -> Result<ArtifactRef, StoreError> {
        let artifact = artifact_ref(tenant, run_id, media_type, &bytes);
        let result = self
            .client
            .put_object()
            .bucket(&self.bucket)
            .key(&artifact.location)
            .content_type(media_type)
            .server_side_encryption(ServerSideEncryption::Aes256)
            // Written once: the same key always holds the same content, so a second
            // writer (a replay, a racing invocation) has nothing to add.
            .if_none_match("*")
            .body(ByteStream::from(bytes))
            .send()
            .await;
        match result {
            Ok(_) => Ok(artifact),
            Err(e) => match (e.raw_response().map(|r| r.status().as_u16()), code(&e)) {
                (Some(412), _) | (_, Some("PreconditionFailed")) => Ok(artifact),
                // A concurrent conditional write of the same key is in flight.
                (Some(409), _) | (_, Some("ConditionalRequestConflict")) => Ok(artifact),
                _ => Err(sdk("put artifact", e)),
            },
        }
    }

    async fn get(&self, artifact: &ArtifactRef) -> Result<Bytes, StoreError> {
        let out = self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(&artifact.location)
            .send()
            .await
            .map_err(|e| match e.as_service_error() {
                Some(GetObjectError::NoSuchKey(_)) => StoreError::NotFound,
                _ if code(&e) == Some("NoSuchKey") => StoreError::NotFound,
                _ => sdk("get artifact", e),
            })?;
        // Stream into one buffer sized up front, checking the digest on the way: the
        // content is held once, never collected and then copied.
        let size = usize::try_from(artifact.size).unwrap_or(0);
        let mut buffer = BytesMut::with_capacity(size);
        let mut hasher = Sha256::new();
        let mut body = out.body;
        while let Some(chunk) = body
            .try_next()
            .await
            .map_err(|e| StoreError::Unavailable(format!("reading artifact: {e}")))?
        {
            hasher.update(&chunk);
            buffer.extend_from_slice(&chunk);
        }
        let digest = hex::encode(hasher.finalize());
        if digest != artifact.sha256 {
            return Err(StoreError::Invalid(format!(
                "artifact {} has digest {digest}, expected {}",
                artifact.location, artifact.sha256
            )));
        }
        Ok(buffer.freeze())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_keys_stay_under_their_tenant_prefix() {
        let key = object_key(&TenantId("a/b".into()), &RunId("r".into()), "00ff");
        assert_eq!(key, "a%2Fb/r/00ff");
        assert!(!key.starts_with("a/"));
    }
}
