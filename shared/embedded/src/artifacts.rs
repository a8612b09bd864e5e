//! The artifact store ([`ArtifactStore`]): large values, content-addressed, in the same
//! file as the runs that refer to them.

use async_trait::async_trait;
use bytes::Bytes;
use rusqlite::{OptionalExtension, params};
use siesta::ports::*;
use siesta::*;

use crate::{EmbeddedBackend, sql};

#[async_trait]
impl ArtifactStore for EmbeddedBackend {
    fn location(&self, tenant: &TenantId, run_id: &RunId, sha256: &str) -> String {
        siesta::ports::artifact_location(tenant, run_id, sha256)
    }

    async fn put(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        media_type: &str,
        bytes: Bytes,
    ) -> Result<ArtifactRef, StoreError> {
        let artifact = artifact_ref(tenant, run_id, media_type, &bytes);
        let a = artifact.clone();
        self.tx(move |tx, _| {
                // Content-addressed: a second writer of the same content changes nothing.
                tx.execute(
                    "INSERT OR IGNORE INTO artifacts (location, sha256, media_type, size, content) VALUES (?1, ?2, ?3, ?4, ?5)",
                    params![a.location, a.sha256, a.media_type, a.size as i64, bytes.as_ref()],
                )
                .map_err(sql)?;
                Ok(())
            })
            .await?;
        Ok(artifact)
    }

    async fn get(&self, artifact: &ArtifactRef) -> Result<Bytes, StoreError> {
        let location = artifact.location.clone();
        self.read(move |tx| {
            let content: Option<Vec<u8>> = tx
                .query_row(
                    "SELECT content FROM artifacts WHERE location = ?1",
                    params![location],
                    |r| r.get(0),
                )
                .optional()
                .map_err(sql)?;
            content.map(Bytes::from).ok_or(StoreError::NotFound)
        })
        .await
    }
}
