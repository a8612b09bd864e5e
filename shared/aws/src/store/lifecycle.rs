//! A run's life in the store, each write as [`crate::layout`] plans it: its creation
//! (counted among its tenant's unfinished runs, within a limit when there is one), its
//! claim by a worker and the renewal of the lease.

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::update_item::{UpdateItemError, UpdateItemOutput};
use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use siesta::ports::*;
use siesta::*;

use super::DynamoStore;
use super::tx::{TxOutcome, reason_of};
use crate::error::sdk;
use crate::item::*;
use crate::keys::*;
use crate::layout::{self, Role};

impl DynamoStore {
    /// Create a run with its first event, counted among its tenant's unfinished runs;
    /// with `max_unfinished`, only while the count is under it.
    pub(super) async fn create(
        &self,
        run: &Run,
        started: &TimelineEvent,
        max_unfinished: Option<u64>,
    ) -> Result<(), StoreError> {
        // Before the run, so that every run's build is listed (a create that then
        // fails leaves a build record that counts no run).
        self.note_build(run).await?;
        let plan = layout::create(run, started, max_unfinished, self.retention)?;
        match self.transact("create_run", &plan).await? {
            TxOutcome::Committed => Ok(()),
            TxOutcome::NotWritten(e) => Err(e),
            TxOutcome::Cancelled(reasons) => match reason_of(&reasons, Role::Quota) {
                // The run's own condition is checked too: an existing run is reported
                // as such, whatever the count.
                Some(quota) if reason_of(&reasons, Role::Run).is_none() => {
                    Err(StoreError::OverQuota(format!(
                        "tenant {} has {} unfinished runs; its limit is {}",
                        run.tenant,
                        unfinished_of(quota.item.as_ref()),
                        max_unfinished.unwrap_or_default()
                    )))
                }
                _ => Err(StoreError::AlreadyExists),
            },
        }
    }

    /// The outcome of a conditional `UpdateItem` on a run item (`ALL_NEW` on success,
    /// `ALL_OLD` on a failed condition): `Ok(run after)`, `Err(run as it is)` when the
    /// condition failed, [`StoreError::NotFound`] when there is no run.
    pub(super) fn updated_run(
        &self,
        op: &str,
        result: Result<UpdateItemOutput, SdkError<UpdateItemError, HttpResponse>>,
    ) -> Result<Result<Run, Box<Run>>, StoreError> {
        match result {
            Ok(out) => run_from_item(&out.attributes.unwrap_or_default()).map(Ok),
            Err(e) => match e.as_service_error() {
                Some(UpdateItemError::ConditionalCheckFailedException(c)) => {
                    match c.item().map(run_from_item).transpose()? {
                        Some(current) => Ok(Err(Box::new(current))),
                        None => Err(StoreError::NotFound),
                    }
                }
                _ => Err(sdk(op, e)),
            },
        }
    }
}

/// The count on a tenant's counter item (none yet: zero; below zero, after runs that
/// were started before the count was kept finished: zero).
pub(super) fn unfinished_of(item: Option<&Item>) -> u64 {
    match item.and_then(|i| i.get(UNFINISHED)) {
        Some(aws_sdk_dynamodb::types::AttributeValue::N(v)) => {
            v.parse::<i64>().map_or(0, |n| n.max(0) as u64)
        }
        _ => 0,
    }
}

/// [`RunStore::claim`]: one conditional `UpdateItem`.
pub(super) async fn claim(
    store: &DynamoStore,
    tenant: &TenantId,
    run_id: &RunId,
    claim: &Claim,
) -> Result<Run, StoreError> {
    let result = store
        .update_plain("claim", &layout::claim(tenant, run_id, claim))
        .await?;
    // The run item as claimed, for the replay that follows (`load_claimed_replay_input`).
    if let Ok(out) = &result
        && let Some(item) = &out.attributes
    {
        store.claimed.keep(run_pk(tenant, run_id), item.clone());
    }
    match store.updated_run("claim", result)? {
        Ok(run) => Ok(run),
        Err(current) => {
            // A retry of a claim that did apply finds its own lease.
            let ours = current
                .lease
                .as_ref()
                .is_some_and(|l| l.owner == claim.owner && l.expires_at == claim.expires_at);
            if ours && current.status == RunStatus::Running {
                Ok(*current)
            } else {
                Err(StoreError::Conflict(Some(current)))
            }
        }
    }
}

/// [`RunStore::renew_lease`]: one conditional `UpdateItem`.
pub(super) async fn renew_lease(
    store: &DynamoStore,
    tenant: &TenantId,
    run_id: &RunId,
    epoch: FencingEpoch,
    expires_at: Timestamp,
) -> Result<Run, StoreError> {
    let result = store
        .update_plain(
            "renew_lease",
            &layout::renewal(tenant, run_id, epoch, expires_at),
        )
        .await?;
    store
        .updated_run("renew_lease", result)?
        .map_err(|current| StoreError::Conflict(Some(current)))
}
