//! A debounce's entry for a key: one item per tenant, debounce and key (partition
//! [`debounces_pk`], sort key [`debounce_entry_sk`]) naming the run the key's starts
//! join now, with its version, written whole by one plain `PutItem` conditioned on the
//! version read (on no item for the first). DynamoDB's TTL removes it after its
//! `keep_until`, when its run takes no more starts.

use siesta::ports::{DebounceEntry, StoreError};
use siesta::{RunId, TenantId, Timestamp};

use super::{Condition, PlannedWrite, Role, names};
use crate::item::*;
use crate::keys::*;

/// The key of `tenant`'s debounce `name`'s entry for `key`.
pub(crate) fn debounce_entry_key(tenant: &TenantId, name: &str, key: &str) -> Item {
    crate::item::key(debounces_pk(tenant), debounce_entry_sk(name, key))
}

/// The write that points the entry at `run_id`, on the stored one being at `expected`
/// (0: none); the item written is at the next version and expires (TTL, in seconds)
/// at `keep_until`.
pub(crate) fn debounce_entry_write(
    tenant: &TenantId,
    name: &str,
    key: &str,
    run_id: &RunId,
    expected: u64,
    keep_until: Timestamp,
) -> PlannedWrite {
    let mut item = debounce_entry_key(tenant, name, key);
    item.insert(RUN_ID.to_owned(), s(run_id.as_str()));
    item.insert(VERSION.to_owned(), n(expected + 1));
    item.insert(
        EXPIRES_AT.to_owned(),
        n((keep_until.0.max(0) as u64).div_ceil(1000)),
    );
    let condition = if expected == 0 {
        Condition::new_item()
    } else {
        Condition {
            expression: "#version = :version".into(),
            names: names(&[("#version", VERSION)]),
            values: Item::from([(":version".to_owned(), n(expected))]),
        }
    };
    PlannedWrite::put(Role::DebounceEntry, item, Some(condition), false)
}

/// The entry an item holds. One past its `keep_until` that DynamoDB's TTL has not
/// removed yet reads as it is: its run takes no more starts, so the next start points
/// it at a new one, on its version.
pub(crate) fn debounce_entry_of(item: &Item) -> Result<DebounceEntry, StoreError> {
    Ok(DebounceEntry {
        run_id: RunId(get_s(item, RUN_ID, "debounce entry")?.to_owned()),
        version: get_n(item, VERSION, "debounce entry")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{Action, write_units};

    #[test]
    fn a_first_entry_is_put_on_no_item_and_a_later_one_on_the_version_read() {
        let tenant = TenantId("acme".into());
        let run = RunId("r-1".into());
        let first = debounce_entry_write(&tenant, "orders", "o-1", &run, 0, Timestamp(5_500));
        assert_eq!(
            first.condition.as_ref().unwrap().expression,
            "attribute_not_exists(pk)"
        );
        let later = debounce_entry_write(&tenant, "orders", "o-1", &run, 3, Timestamp(5_500));
        let condition = later.condition.as_ref().unwrap();
        assert_eq!(condition.expression, "#version = :version");
        assert_eq!(condition.values[":version"], n(3));
        let Action::Put(item) = &later.action else {
            panic!("a put")
        };
        assert_eq!(item[PK], s("D#acme"));
        assert_eq!(item[SK], s("orders#o-1"));
        assert_eq!(item[VERSION], n(4));
        assert_eq!(item[EXPIRES_AT], n(6), "TTL in whole seconds, rounded up");
        assert!(!later.transactional);
        assert_eq!(write_units(item_size(item), false), 1.0);
    }

    #[test]
    fn an_entry_reads_back_as_written_at_the_next_version() {
        let write = debounce_entry_write(
            &TenantId("acme".into()),
            "orders",
            "o-1",
            &RunId("r-1".into()),
            1,
            Timestamp(10_000),
        );
        let Action::Put(item) = &write.action else {
            panic!("a put")
        };
        assert_eq!(
            debounce_entry_of(item).unwrap(),
            DebounceEntry {
                run_id: RunId("r-1".into()),
                version: 2
            }
        );
    }
}
