//! The build registry: which version of the step function serves each build.
//!
//! A run is pinned to the build it started on. On Lambda each deploy publishes an
//! immutable version of the step function (`AutoPublishAlias`), and each version,
//! once per cold start, records itself here: one item per build, all in one partition
//! (`pk` = `BUILDS`, `sk` = the build id), holding the qualified ARN of the version
//! that serves it and when it was first and last seen (ms since the epoch, the table's
//! convention). A wake-up for a run of another build is forwarded to the version found
//! here (`siesta-step`). One partition, so the whole registry is one `Query`
//! ([`BuildRegistry::all`]: `GET /builds` says which builds are deployed, `builds
//! prune` and the sweep's drain metric read it); it holds one item per deployed build,
//! and `builds prune` removes a build's item with its versions, so it stays small. The
//! items carry neither a due shard nor a tenant, so neither index sees them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;
use siesta::ports::StoreError;

use crate::error::sdk;
use crate::keys::{PK, SK};

/// The partition of the registry: every build's item, sorted by build id.
pub const REGISTRY_PK: &str = "BUILDS";
/// The qualified ARN of the step function's version serving the build.
const STEP_VERSION: &str = "step_version";
const FIRST_SEEN: &str = "first_seen";
const LAST_SEEN: &str = "last_seen";

/// A build's item in the registry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegisteredBuild {
    /// The build id.
    pub build_id: String,
    /// The qualified ARN (or `NAME:VERSION`) of the step function's version serving it.
    pub step_version: String,
    /// When a version of it first registered (ms since the epoch).
    pub first_seen: i64,
    /// When a version of it last registered, at a cold start (ms since the epoch).
    pub last_seen: i64,
}

/// The build registry on the runs table, with an in-process cache of lookups.
#[derive(Clone)]
pub struct BuildRegistry {
    client: Client,
    table: String,
    /// Build id → its step version; a lookup is made once per build per container.
    /// Builds with no version are not cached: one may be registered a moment later.
    cache: Arc<Mutex<HashMap<String, String>>>,
}

impl BuildRegistry {
    /// The registry on `table`, with a client configured from `sdk`.
    pub fn from_sdk(sdk: &aws_config::SdkConfig, table: String) -> Self {
        Self::new(Client::new(sdk), table)
    }

    pub(crate) fn new(client: Client, table: String) -> Self {
        BuildRegistry {
            client,
            table,
            cache: Arc::default(),
        }
    }

    /// Record that `step_version` (a qualified ARN, `…:function:NAME:VERSION`) serves
    /// `build_id`, seen at `now_ms`: one `UpdateItem`; `first_seen` is kept if set.
    pub async fn register(
        &self,
        build_id: &str,
        step_version: &str,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        self.client
            .update_item()
            .table_name(&self.table)
            .key(PK, AttributeValue::S(REGISTRY_PK.into()))
            .key(SK, AttributeValue::S(build_id.into()))
            .update_expression(
                "SET #v = :v, #l = :now, #f = if_not_exists(#f, :now), build_id = :b",
            )
            .expression_attribute_names("#v", STEP_VERSION)
            .expression_attribute_names("#l", LAST_SEEN)
            .expression_attribute_names("#f", FIRST_SEEN)
            .expression_attribute_values(":v", AttributeValue::S(step_version.into()))
            .expression_attribute_values(":now", AttributeValue::N(now_ms.to_string()))
            .expression_attribute_values(":b", AttributeValue::S(build_id.into()))
            .send()
            .await
            .map_err(|e| sdk("register build", e))?;
        self.cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(build_id.to_owned(), step_version.to_owned());
        Ok(())
    }

    /// The qualified ARN of the step function's version serving `build_id`, or `None`
    /// when no version ever registered it (never published, or its item removed).
    /// Cached in-process once found.
    pub async fn step_version(&self, build_id: &str) -> Result<Option<String>, StoreError> {
        if let Some(found) = self
            .cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(build_id)
        {
            return Ok(Some(found.clone()));
        }
        let item = self
            .client
            .get_item()
            .table_name(&self.table)
            .key(PK, AttributeValue::S(REGISTRY_PK.into()))
            .key(SK, AttributeValue::S(build_id.into()))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| sdk("look up build", e))?;
        let version = item
            .item
            .as_ref()
            .and_then(|i| i.get(STEP_VERSION))
            .and_then(|v| v.as_s().ok())
            .cloned();
        if let Some(v) = &version {
            self.cache
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(build_id.to_owned(), v.clone());
        }
        Ok(version)
    }

    /// Every build in the registry, by build id: one `Query` of its partition (paged),
    /// strongly consistent.
    pub async fn all(&self) -> Result<Vec<RegisteredBuild>, StoreError> {
        let mut builds = Vec::new();
        let mut start = None;
        loop {
            let page = self
                .client
                .query()
                .table_name(&self.table)
                .key_condition_expression("#pk = :pk")
                .expression_attribute_names("#pk", PK)
                .expression_attribute_values(":pk", AttributeValue::S(REGISTRY_PK.into()))
                .consistent_read(true)
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(|e| sdk("list builds", e))?;
            for item in page.items() {
                let text = |name: &str| item.get(name).and_then(|v| v.as_s().ok()).cloned();
                let number = |name: &str| {
                    item.get(name)
                        .and_then(|v| v.as_n().ok())
                        .and_then(|n| n.parse::<i64>().ok())
                        .unwrap_or(0)
                };
                // An item without a version is no registration (none is written so).
                let (Some(build_id), Some(step_version)) = (text(SK), text(STEP_VERSION)) else {
                    continue;
                };
                builds.push(RegisteredBuild {
                    build_id,
                    step_version,
                    first_seen: number(FIRST_SEEN),
                    last_seen: number(LAST_SEEN),
                });
            }
            match page.last_evaluated_key {
                Some(key) if !key.is_empty() => start = Some(key),
                _ => return Ok(builds),
            }
        }
    }

    /// Of `builds`, which are deployed: a build is when the registry holds a version
    /// serving it (every published version registers at its cold start; `builds prune`
    /// removes the item with the versions). One [`BuildRegistry::all`].
    pub async fn deployed(&self, builds: &[String]) -> Result<HashMap<String, bool>, StoreError> {
        let registered: std::collections::HashSet<String> =
            self.all().await?.into_iter().map(|b| b.build_id).collect();
        Ok(builds
            .iter()
            .map(|b| (b.clone(), registered.contains(b)))
            .collect())
    }

    /// The unfinished runs of every tenant, counted by build: a `Scan` of the sparse
    /// `by_build` index (keys only), which holds a run from its creation until the
    /// checkpoint that finishes it — so it reads as many items as there are unfinished
    /// runs, never the table. Eventually consistent: a run that just finished may still
    /// be counted (a count errs high, never low for a run that existed before the scan).
    /// Runs that recorded no build are not in the index.
    pub async fn unfinished_runs_by_build(
        &self,
    ) -> Result<std::collections::BTreeMap<String, u64>, StoreError> {
        let mut counts = std::collections::BTreeMap::new();
        let mut start = None;
        loop {
            let page = self
                .client
                .scan()
                .table_name(&self.table)
                .index_name(crate::keys::BUILD_INDEX)
                .projection_expression("#bk")
                .expression_attribute_names("#bk", crate::keys::BUILD_KEY)
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(|e| sdk("count unfinished runs by build", e))?;
            for item in page.items() {
                let Some(build) = item
                    .get(crate::keys::BUILD_KEY)
                    .and_then(|v| v.as_s().ok())
                    .and_then(|k| crate::keys::build_of_build_key(k))
                else {
                    continue;
                };
                *counts.entry(build).or_insert(0) += 1;
            }
            match page.last_evaluated_key {
                Some(key) if !key.is_empty() => start = Some(key),
                _ => return Ok(counts),
            }
        }
    }

    /// Remove `build_id`'s item, only if it still names `step_version` (a version of the
    /// build that registered since — a redeploy of the same code — keeps it), and
    /// forget it in this process. Whether it was removed.
    pub async fn remove(&self, build_id: &str, step_version: &str) -> Result<bool, StoreError> {
        let result = self
            .client
            .delete_item()
            .table_name(&self.table)
            .key(PK, AttributeValue::S(REGISTRY_PK.into()))
            .key(SK, AttributeValue::S(build_id.into()))
            .condition_expression("#v = :v")
            .expression_attribute_names("#v", STEP_VERSION)
            .expression_attribute_values(":v", AttributeValue::S(step_version.into()))
            .send()
            .await;
        self.cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(build_id);
        match result {
            Ok(_) => Ok(true),
            Err(e)
                if e.as_service_error()
                    .is_some_and(|e| e.is_conditional_check_failed_exception()) =>
            {
                Ok(false)
            }
            Err(e) => Err(sdk("remove build", e)),
        }
    }
}

/// The qualified ARN of the running Lambda function's version, from the environment
/// Lambda sets (`AWS_LAMBDA_FUNCTION_NAME`, `AWS_LAMBDA_FUNCTION_VERSION`, `AWS_REGION`)
/// and the account of `invoked_arn` (the context's `invoked_function_arn`, the only
/// place Lambda names the account) — or the bare `NAME:VERSION` when that is not known,
/// which `Invoke` accepts as well. `None` when unpublished (`$LATEST`): nothing can be
/// forwarded to it, since `$LATEST` changes with every deploy.
pub fn own_version_from_env() -> Option<String> {
    let name = std::env::var("AWS_LAMBDA_FUNCTION_NAME").ok()?;
    let version = std::env::var("AWS_LAMBDA_FUNCTION_VERSION").ok()?;
    qualified(&name, &version)
}

/// `NAME:VERSION` for a published version; `None` for `$LATEST` or an empty version.
pub fn qualified(name: &str, version: &str) -> Option<String> {
    if version.is_empty() || version == "$LATEST" || name.is_empty() {
        return None;
    }
    // A name may already be an ARN; the version is appended either way.
    Some(format!("{name}:{version}"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn latest_is_no_version_to_forward_to() {
        assert_eq!(super::qualified("app-step", "$LATEST"), None);
        assert_eq!(super::qualified("app-step", ""), None);
        assert_eq!(
            super::qualified("app-step", "7").as_deref(),
            Some("app-step:7")
        );
    }
}
