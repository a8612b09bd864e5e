//! Concurrency limits as they stand: who holds and waits for each key
//! (`GET /limits`), and a queued run's place in its line.

use serde::Serialize;

use super::{Engine, EngineError};
use crate::flow::KeySource;
use crate::model::*;
use crate::ports::LimitUsage;

/// One concurrency limit of a tenant as it stands ([`Engine::limits`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LimitReport {
    /// The limit's name.
    pub name: String,
    /// The most runs per key on this deployment; `None` for a limit no longer declared
    /// whose slots runs still hold (they keep them until they finish).
    pub max: Option<u32>,
    /// Where its key comes from; `None` when no longer declared.
    pub key: Option<KeySource>,
    /// The workflows it applies to.
    pub workflows: Vec<String>,
    /// Each key held or waited for, by key.
    pub keys: Vec<LimitUsage>,
}

impl Engine {
    /// Every concurrency limit declared on the registry, and any still held under a
    /// name no longer declared, each with the keys `tenant`'s runs hold or wait for.
    pub async fn limits(&self, tenant: &TenantId) -> Result<Vec<LimitReport>, EngineError> {
        let mut usage = self.backend.store.limit_usage(tenant).await?;
        let mut reports: Vec<LimitReport> = self
            .registry
            .limits()
            .map(|limit| LimitReport {
                name: limit.name().to_owned(),
                max: Some(self.config.limits.max_of(limit)),
                key: Some(limit.key().clone()),
                workflows: limit.workflows().map(str::to_owned).collect(),
                keys: Vec::new(),
            })
            .collect();
        usage.sort_by(|a, b| (&a.limit, &a.key).cmp(&(&b.limit, &b.key)));
        for keyed in usage {
            match reports.iter_mut().find(|r| r.name == keyed.limit) {
                Some(report) => report.keys.push(keyed),
                None => reports.push(LimitReport {
                    name: keyed.limit.clone(),
                    max: None,
                    key: None,
                    workflows: Vec::new(),
                    keys: vec![keyed],
                }),
            }
        }
        reports.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(reports)
    }

    /// The place of `run` in the line it waits in (1: next), or `None` when it is not
    /// queued.
    pub async fn queue_position(&self, run: &Run) -> Result<Option<u64>, EngineError> {
        match (&run.queued, run.status) {
            (Some(at), RunStatus::Queued) => Ok(Some(
                self.backend.store.queue_position(&run.tenant, at).await?,
            )),
            _ => Ok(None),
        }
    }
}
