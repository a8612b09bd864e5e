//! The build registry: which version of the step function serves each build.
//!
//! A run is pinned to the build it started on. On Lambda each deploy publishes an
//! immutable version of the step function (`AutoPublishAlias`), and each version,
//! once per cold start, records itself here: one item per build, `pk` =
//! `BUILD#<build id>`, `sk` = `BUILD`, holding the qualified ARN of the version that
//! serves it and when it was first and last seen (ms since the epoch, the table's
//! convention). A wake-up for a run of another build is forwarded to the version found
//! here (`siesta-step`). The items carry neither a due shard nor a tenant, so neither
//! index sees them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;
use siesta::ports::StoreError;

use crate::error::sdk;
use crate::keys::{PK, SK};

/// The sort key of a build's item.
const BUILD_SK: &str = "BUILD";
/// The qualified ARN of the step function's version serving the build.
const STEP_VERSION: &str = "step_version";
const FIRST_SEEN: &str = "first_seen";
const LAST_SEEN: &str = "last_seen";

/// The partition key of a build's item.
pub fn build_pk(build_id: &str) -> String {
    format!("BUILD#{}", build_id.replace('%', "%25").replace('#', "%23"))
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
            .key(PK, AttributeValue::S(build_pk(build_id)))
            .key(SK, AttributeValue::S(BUILD_SK.into()))
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
            .key(PK, AttributeValue::S(build_pk(build_id)))
            .key(SK, AttributeValue::S(BUILD_SK.into()))
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

    #[test]
    fn build_ids_are_escaped_into_their_key() {
        assert_eq!(super::build_pk("app@1.0#x"), "BUILD#app@1.0%23x");
    }
}
