//! A run's life in the store: its creation (counted among its tenant's unfinished runs,
//! within a limit when there is one), its claim by a worker and the renewal of the lease.

use std::collections::HashMap;

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::update_item::{UpdateItemError, UpdateItemOutput};
use aws_sdk_dynamodb::types::{
    ReturnConsumedCapacity, ReturnValue, ReturnValuesOnConditionCheckFailure,
};
use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use siesta::ports::*;
use siesta::*;

use super::DynamoStore;
use super::tx::{Role, Tx, TxOutcome, names, reason_of};
use crate::error::sdk;
use crate::history_item::created_items;
use crate::item::*;
use crate::keys::*;

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
        let mut tx = Tx::default();
        let (run_item, started_item) = created_items(run_item(run, self.retention)?, run, started)?;
        tx.insert(&self.table, Role::Run, run_item)?;
        if let Some(item) = started_item {
            tx.insert(&self.table, Role::Timeline, item)?;
        }
        if !run.status.is_finished() {
            tx.count_unfinished(&self.table, &run.tenant, 1, max_unfinished)?;
        }
        match self.transact("create_run", tx).await? {
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
            Ok(out) => {
                self.capacity.add(true, out.consumed_capacity());
                let item = out.attributes.unwrap_or_default();
                self.capacity.note_write(op, "Run", false, item_size(&item));
                self.capacity.note_run(op, &item, false);
                run_from_item(&item).map(Ok)
            }
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
        .client
        .update_item()
        .table_name(&store.table)
        .set_key(Some(key(run_pk(tenant, run_id), RUN_SK)))
        .update_expression(
            "SET #status = :running, #version = #version + :one, #epoch = #epoch + :one, \
             #lease_epoch = #epoch + :one, #lease_owner = :owner, #lease_expires = :expires, \
             #due_at = :expires, #sweep_at = :expires, #due_shard = :shard, \
             #updated_at = :now REMOVE #resend_after",
        )
        .condition_expression(
            "attribute_exists(pk) AND #status IN (:pending, :running, :waiting) \
             AND (attribute_not_exists(#lease_expires) OR #lease_expires <= :now)",
        )
        .set_expression_attribute_names(Some(names(&[
            ("#status", STATUS),
            ("#version", VERSION),
            ("#epoch", EPOCH),
            ("#lease_epoch", LEASE_EPOCH),
            ("#lease_owner", LEASE_OWNER),
            ("#lease_expires", LEASE_EXPIRES),
            ("#due_at", DUE_AT),
            ("#sweep_at", SWEEP_AT),
            ("#resend_after", RESEND_AFTER),
            ("#due_shard", DUE_SHARD),
            ("#updated_at", UPDATED_AT),
        ])))
        .set_expression_attribute_values(Some(HashMap::from([
            (":running".to_owned(), s(RunStatus::Running.as_str())),
            (":pending".to_owned(), s(RunStatus::Pending.as_str())),
            (":waiting".to_owned(), s(RunStatus::Waiting.as_str())),
            (":one".to_owned(), n(1)),
            (":owner".to_owned(), s(&claim.owner)),
            (":expires".to_owned(), n(claim.expires_at.0)),
            (":shard".to_owned(), s(due_shard(tenant, run_id))),
            (":now".to_owned(), n(claim.now.0)),
        ])))
        .return_values(ReturnValue::AllNew)
        .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
        .return_consumed_capacity(ReturnConsumedCapacity::Total)
        .send()
        .await;
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
        .client
        .update_item()
        .table_name(&store.table)
        .set_key(Some(key(run_pk(tenant, run_id), RUN_SK)))
        .update_expression(
            "SET #lease_expires = :expires, #due_at = :expires, #sweep_at = :expires, \
             #due_shard = :shard REMOVE #resend_after",
        )
        .condition_expression("#lease_epoch = :epoch")
        .set_expression_attribute_names(Some(names(&[
            ("#lease_epoch", LEASE_EPOCH),
            ("#lease_expires", LEASE_EXPIRES),
            ("#due_at", DUE_AT),
            ("#sweep_at", SWEEP_AT),
            ("#resend_after", RESEND_AFTER),
            ("#due_shard", DUE_SHARD),
        ])))
        .set_expression_attribute_values(Some(HashMap::from([
            (":expires".to_owned(), n(expires_at.0)),
            (":epoch".to_owned(), n(epoch.0)),
            (":shard".to_owned(), s(due_shard(tenant, run_id))),
        ])))
        .return_values(ReturnValue::AllNew)
        .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
        .return_consumed_capacity(ReturnConsumedCapacity::Total)
        .send()
        .await;
    store
        .updated_run("renew_lease", result)?
        .map_err(|current| StoreError::Conflict(Some(current)))
}
