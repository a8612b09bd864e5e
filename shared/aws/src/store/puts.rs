//! Plain puts, outside any transaction (half a transactional write's units): what a
//! writer puts before its conditional write of the run, where writing it early is
//! harmless — a history tail's archive (committed content), a callback's opening (a
//! record nothing can name yet).

use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::types::ReturnConsumedCapacity;
use siesta::ports::StoreError;

use super::DynamoStore;
use crate::error::sdk;
use crate::item::{Item, item_size};

impl DynamoStore {
    /// Put `item` — only if its key is new, with `only_new` — counting its capacity,
    /// and noting it in the cost breakdown as `what` written by `op`. `Ok(false)` when
    /// `only_new` and the key was taken.
    pub(super) async fn put_plain(
        &self,
        op: &str,
        what: &str,
        item: Item,
        only_new: bool,
    ) -> Result<bool, StoreError> {
        let size = item_size(&item);
        let mut put = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .return_consumed_capacity(ReturnConsumedCapacity::Total);
        if only_new {
            put = put.condition_expression("attribute_not_exists(pk)");
        }
        match put.send().await {
            Ok(out) => {
                self.capacity.add(true, out.consumed_capacity());
                self.capacity.note_write(op, what, false, size);
                Ok(true)
            }
            Err(e)
                if only_new
                    && matches!(
                        e.as_service_error(),
                        Some(PutItemError::ConditionalCheckFailedException(_))
                    ) =>
            {
                Ok(false)
            }
            Err(e) => Err(sdk(&format!("{op}: put {what}"), e)),
        }
    }
}
