//! Debounces' entries on the table: a strongly consistent `GetItem` to read one, a
//! conditional `PutItem` to write it (the plan is `layout/debounces.rs`'s).

use siesta::ports::*;
use siesta::*;

use super::DynamoStore;
use crate::layout::{debounce_entry_key, debounce_entry_of, debounce_entry_write};

impl DynamoStore {
    /// [`RunStore::get_debounce_entry`].
    pub(super) async fn debounce_entry(
        &self,
        tenant: &TenantId,
        name: &str,
        key: &str,
    ) -> Result<Option<DebounceEntry>, StoreError> {
        self.get_item("get_debounce_entry", debounce_entry_key(tenant, name, key))
            .await?
            .map(|item| debounce_entry_of(&item))
            .transpose()
    }

    /// [`RunStore::put_debounce_entry`].
    pub(super) async fn point_debounce_entry(
        &self,
        tenant: &TenantId,
        of: (&str, &str),
        run_id: &RunId,
        expected: u64,
        keep_until: Timestamp,
    ) -> Result<u64, StoreError> {
        let (name, key) = of;
        let write = debounce_entry_write(tenant, name, key, run_id, expected, keep_until);
        if self.put_plain("put_debounce_entry", &write).await? {
            Ok(expected + 1)
        } else {
            Err(StoreError::Conflict(None))
        }
    }
}
