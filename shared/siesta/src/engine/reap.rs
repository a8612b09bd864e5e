//! Removing finished runs past their retention ([`crate::retention`]).

use super::{Engine, EngineError};
use crate::retention::{ReapReport, RetentionPolicy, reap};

impl Engine {
    /// Remove the finished runs past their retention under `policy` at the engine's
    /// clock's now, one page of at most `limit` runs per pass
    /// ([`RetentionPolicy::passes`], over the registered workflows); call again while
    /// the report says `more`. A run that is not finished is never touched.
    /// [`crate::ports::StoreError::Unsupported`] (as [`EngineError::Store`]) on a
    /// backend that cannot remove runs.
    pub async fn reap(
        &self,
        policy: &RetentionPolicy,
        limit: usize,
    ) -> Result<ReapReport, EngineError> {
        let passes = policy.passes(self.registry.names(), self.clock.now());
        Ok(reap(self.backend.store.as_ref(), &passes, limit).await?)
    }
}
