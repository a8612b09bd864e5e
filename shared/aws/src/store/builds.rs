//! The tenant's build records: noted as runs are written on a build, listed with the
//! runs of each that have not finished ([`RunStore::builds`]).

use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::ReturnConsumedCapacity;
use siesta::ports::*;
use siesta::*;

use super::DynamoStore;
use super::reads::item_key;
use crate::error::sdk;
use crate::item::*;
use crate::keys::*;
use crate::layout::names;

impl DynamoStore {
    /// Record that `run` is on its build, for [`RunStore::builds`]: the tenant's record
    /// of the build gets the run's creation time as its last seen (when later) and its
    /// first seen (when earlier, or new). One conditional `UpdateItem` for a run later
    /// than any before it (a start), a second only for an earlier one (an upgraded or
    /// late-written run); no write for a run that records no build.
    pub(super) async fn note_build(&self, run: &Run) -> Result<(), StoreError> {
        let Some(build) = &run.build_id else {
            return Ok(());
        };
        let record = key(builds_pk(&run.tenant), build);
        let at = n(run.created_at.0);
        for (update, condition) in [
            (
                "SET #first = if_not_exists(#first, :at), #last = :at",
                "attribute_not_exists(#last) OR #last < :at",
            ),
            (
                "SET #first = :at",
                "attribute_exists(#last) AND #first > :at",
            ),
        ] {
            let result = self
                .client
                .update_item()
                .table_name(&self.table)
                .set_key(Some(record.clone()))
                .update_expression(update)
                .condition_expression(condition)
                .set_expression_attribute_names(Some(names(&[
                    ("#first", FIRST_SEEN),
                    ("#last", LAST_SEEN),
                ])))
                .expression_attribute_values(":at", at.clone())
                .return_consumed_capacity(ReturnConsumedCapacity::Total)
                .send()
                .await;
            match result {
                Ok(out) => {
                    self.capacity
                        .note_update("note_build", "Build", out.consumed_capacity());
                    return Ok(());
                }
                Err(e) => match e.as_service_error() {
                    // Not later than the last seen: try it as an earlier first seen.
                    Some(UpdateItemError::ConditionalCheckFailedException(_)) => {}
                    _ => return Err(sdk("note_build", e)),
                },
            }
        }
        Ok(())
    }
}

/// [`RunStore::builds`]: the tenant's build records, and their runs not finished yet.
pub(super) async fn builds(
    store: &DynamoStore,
    tenant: &TenantId,
) -> Result<Vec<BuildSummary>, StoreError> {
    let pk = builds_pk(tenant);
    let records = store
        .query_pages(
            "builds",
            |q| {
                q.key_condition_expression("#pk = :pk")
                    .expression_attribute_names("#pk", PK)
                    .expression_attribute_values(":pk", s(&pk))
            },
            None,
        )
        .await?;
    let mut builds = Vec::with_capacity(records.len());
    for record in records {
        let (build_id, first_seen, last_seen) = build_from_item(&record)?;
        // The index holds keys only; the runs' statuses come from batch reads.
        let bk = build_key(tenant, &build_id);
        let entries = store
            .query_pages(
                "builds",
                |q| {
                    q.index_name(BUILD_INDEX)
                        .key_condition_expression("#bk = :bk")
                        .expression_attribute_names("#bk", BUILD_KEY)
                        .expression_attribute_values(":bk", s(&bk))
                },
                None,
            )
            .await?;
        let mut unfinished = std::collections::BTreeMap::new();
        for chunk in entries.chunks(100) {
            let keys: Vec<Item> = chunk
                .iter()
                .map(|e| item_key(e).map(|(pk, sk)| key(pk, sk)))
                .collect::<Result<_, _>>()?;
            for item in store.batch_get("builds", keys).await?.into_values() {
                let run = run_from_item(&item)?;
                // The index is eventually consistent: the run as read decides.
                if !run.status.is_finished() && run.build_id.as_deref() == Some(&build_id) {
                    *unfinished.entry(run.status).or_insert(0) += 1;
                }
            }
        }
        builds.push(BuildSummary {
            build_id,
            first_seen,
            last_seen,
            unfinished,
        });
    }
    Ok(builds)
}
