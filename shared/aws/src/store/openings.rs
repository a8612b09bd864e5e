//! The callbacks a checkpoint opens, written before it by plain puts rather than in
//! its transaction, where each would cost twice the units (DynamoDB bills a
//! transaction's write double).
//!
//! Why that is safe: a callback's id is random and leaves the process only once the
//! checkpoint that opens it has committed (the callback's `hold_opening` in the core),
//! so until then no webhook, heartbeat or lookup can name the record, and the sweep
//! finds timeouts through the run item, not through callback records. A record put
//! for a checkpoint that is then refused is deleted again; one whose checkpoint's
//! outcome is unknown (a lost answer) is kept, since that checkpoint may have
//! committed. What is left behind (docs/dynamodb.md says when: a lost answer, a
//! process that dies between the put and the transaction) is a record nothing names,
//! the one item of a run the reaper cannot find.

use aws_sdk_dynamodb::types::ReturnConsumedCapacity;
use siesta::ports::StoreError;
use siesta::{CallbackRecord, CallbackStatus, Timestamp};

use super::DynamoStore;
use crate::callback_state::is_in_run;
use crate::error::sdk;
use crate::item::*;
use crate::keys::*;
use crate::layout;

/// The callback records a checkpoint opens (to put first) and the rest (closings,
/// written in its transaction).
pub(super) fn split_openings(
    records: &[CallbackRecord],
) -> (Vec<&CallbackRecord>, Vec<&CallbackRecord>) {
    records
        .iter()
        .partition(|r| r.status == CallbackStatus::Open)
}

/// Put the records of the callbacks a checkpoint opens (the first `in_run` as indexes of
/// callbacks whose state its run item holds), each only if its key is new,
/// adding to `created` the keys of those this call created (so that a failure part
/// way through can withdraw them). A retried checkpoint finds its records there
/// already, and must not delete them if it is refused, since the attempt before may
/// have committed.
///
/// Returns, for each record, whether its state goes in the run item: as put, or for a
/// record found there already, as that record says — an attempt before this one may
/// have decided otherwise (it knew what the run item held, this one does not), and the
/// run item must agree with the record a webhook will read.
pub(super) async fn put_openings(
    store: &DynamoStore,
    opened: &[&CallbackRecord],
    in_run: usize,
    at: Timestamp,
    created: &mut Vec<Item>,
) -> Result<Vec<bool>, StoreError> {
    let mut states_in_run = Vec::with_capacity(opened.len());
    for (i, record) in opened.iter().enumerate() {
        let write = layout::opening(record, i < in_run, at, store.retention)?;
        let record_key = key(callback_pk(&record.callback_id), RECORD_SK);
        if store.put_plain("checkpoint", &write).await? {
            created.push(record_key);
            states_in_run.push(i < in_run);
        } else {
            let found = store
                .get_item("checkpoint: a callback's record put before", record_key)
                .await?;
            states_in_run.push(match found {
                Some(found) => is_in_run(&found),
                None => i < in_run,
            });
        }
    }
    Ok(states_in_run)
}

/// Delete the records [`put_openings`] created for a checkpoint that was refused: no
/// one can know their ids. A failure is logged, not returned: the checkpoint's own
/// outcome is what its caller acts on, and the record is only left over.
pub(super) async fn withdraw_openings(store: &DynamoStore, created: &[Item]) {
    for key in created {
        let result = store
            .client
            .delete_item()
            .table_name(&store.table)
            .set_key(Some(key.clone()))
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await;
        match result {
            Ok(out) => store.capacity.add(true, out.consumed_capacity()),
            Err(e) => tracing::warn!(
                error = %sdk("checkpoint: withdraw a callback's opening", e),
                "the record of a callback opened by a refused checkpoint is left over"
            ),
        }
    }
}
