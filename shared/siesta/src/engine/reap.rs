//! Removing finished runs past their retention ([`crate::retention`]).

use super::{Engine, EngineError};
use crate::retention::{ReapReport, RetentionRules};

impl Engine {
    /// Look at one page of at most `limit` finished runs due to be looked at by the
    /// engine's clock's now, and remove those past their retention under `rules` (the
    /// rest are put back until their retention ends); call again while the report says
    /// `more`. A run that is not finished is never touched.
    /// [`crate::ports::StoreError::Unsupported`] (as [`EngineError::Store`]) on a
    /// backend that cannot remove runs.
    pub async fn reap(
        &self,
        rules: &RetentionRules,
        limit: usize,
    ) -> Result<ReapReport, EngineError> {
        let now = self.clock.now();
        Ok(self
            .backend
            .store
            .reap_due(rules, now, limit.max(1))
            .await?)
    }

    /// When `rules` differ from those the store last reaped by, make every finished
    /// run put back due again, so that a retention shortened since (a server restarted
    /// with a new `--retention`) applies at once: call once when a server starts.
    pub async fn rearm_reaping(&self, rules: &RetentionRules) -> Result<(), EngineError> {
        let now = self.clock.now();
        Ok(self.backend.store.rearm_reaping(rules, now).await?)
    }
}
