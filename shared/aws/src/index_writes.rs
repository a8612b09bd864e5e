//! What DynamoDB writes to the table's global secondary indexes ([`INDEXES`]) when a
//! run item changes, for the cost breakdown: DynamoDB bills each index write like a
//! write of the table, by the size of the index entry, rounded up per KB.
//!
//! Its rules: an item has an entry in an index when it has both of the index's keys
//! (the indexes are sparse). An entry added or removed is one write; an entry whose
//! keys change is two (the old one deleted, the new one put); an entry whose keys stay
//! but whose projected attributes change is one; an entry unchanged is none — however
//! the item was written (`SET` of the same values included). Writes in a transaction
//! reach the indexes after it commits, like any other write's.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;

use crate::item::{Item, item_size};
use crate::keys::{INDEXES, IndexShape, PK, SK};

/// One index's writes for one change of an item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexWrite {
    /// The index's name.
    pub index: &'static str,
    /// How many writes DynamoDB makes to it: 1 or 2.
    pub writes: u32,
    /// The size of the index entry written (or deleted), in bytes: the table's keys, the
    /// index's keys and the attributes it projects.
    pub entry_bytes: usize,
}

/// The index writes for an item changing from `before` to `after` (`None`: no item,
/// before its creation or after its deletion), per index that is written.
pub fn index_writes(
    before: Option<&HashMap<String, AttributeValue>>,
    after: Option<&HashMap<String, AttributeValue>>,
) -> Vec<IndexWrite> {
    INDEXES
        .iter()
        .filter_map(|index| {
            let old = before.and_then(|item| entry(index, item));
            let new = after.and_then(|item| entry(index, item));
            let (writes, written) = match (&old, &new) {
                (None, None) => return None,
                (Some(old), None) => (1, old),
                (None, Some(new)) => (1, new),
                (Some(old), Some(new)) if keys(index, old) != keys(index, new) => (2, new),
                (Some(old), Some(new)) if old != new => (1, new),
                (Some(_), Some(_)) => return None,
            };
            Some(IndexWrite {
                index: index.name,
                writes,
                entry_bytes: item_size(written),
            })
        })
        .collect()
}

/// Of `item`, only what the indexes hold: the table's keys and each index's keys and
/// projected attributes (what [`index_writes`] compares, kept small).
pub(crate) fn indexed_part(item: &Item) -> Item {
    let names = INDEXES.iter().flat_map(|i| {
        [i.hash, i.range]
            .into_iter()
            .chain(i.include.iter().copied())
    });
    picked(item, [PK, SK].into_iter().chain(names))
}

/// `item`'s entry in `index`: `None` when it lacks one of the index's keys.
fn entry(index: &IndexShape, item: &Item) -> Option<Item> {
    if !item.contains_key(index.hash) || !item.contains_key(index.range) {
        return None;
    }
    let names = [PK, SK, index.hash, index.range]
        .into_iter()
        .chain(index.include.iter().copied());
    Some(picked(item, names))
}

/// The attributes of `item` named in `names` (those it has).
fn picked<'a>(item: &Item, names: impl Iterator<Item = &'a str>) -> Item {
    names
        .filter_map(|name| Some((name.to_owned(), item.get(name)?.clone())))
        .collect()
}

/// The index's keys in `entry`.
fn keys<'a>(index: &IndexShape, entry: &'a Item) -> [Option<&'a AttributeValue>; 2] {
    [entry.get(index.hash), entry.get(index.range)]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::item::{n, s};
    use crate::keys::*;

    fn run_item(extra: &[(&str, AttributeValue)]) -> Item {
        let mut item: Item = [
            (PK, s("R#t#r")),
            (SK, s("RUN")),
            (TENANT, s("t")),
            (CREATED_KEY, s("0001#r")),
            (crate::item::STATUS, s("waiting")),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        for (k, v) in extra {
            item.insert((*k).to_owned(), v.clone());
        }
        item
    }

    fn writes(before: Option<&Item>, after: Option<&Item>) -> Vec<(&'static str, u32)> {
        index_writes(before, after)
            .into_iter()
            .map(|w| (w.index, w.writes))
            .collect()
    }

    #[test]
    fn a_new_item_puts_one_entry_in_each_index_it_has_both_keys_of() {
        let item = run_item(&[(DUE_SHARD, s("3")), (SWEEP_AT, n(10))]);
        assert_eq!(
            writes(None, Some(&item)),
            vec![(DUE_INDEX, 1), (TENANT_INDEX, 1)]
        );
        // Deleted, each entry is deleted once.
        assert_eq!(
            writes(Some(&item), None),
            vec![(DUE_INDEX, 1), (TENANT_INDEX, 1)]
        );
    }

    #[test]
    fn a_changed_sort_key_is_a_delete_and_a_put_and_a_projected_attribute_one_write() {
        let before = run_item(&[(DUE_SHARD, s("3")), (SWEEP_AT, n(10)), (DUE_AT, n(10))]);
        let moved = run_item(&[(DUE_SHARD, s("3")), (SWEEP_AT, n(20)), (DUE_AT, n(10))]);
        assert_eq!(writes(Some(&before), Some(&moved)), vec![(DUE_INDEX, 2)]);
        let projected = run_item(&[(DUE_SHARD, s("3")), (SWEEP_AT, n(10)), (DUE_AT, n(5))]);
        assert_eq!(
            writes(Some(&before), Some(&projected)),
            vec![(DUE_INDEX, 1)]
        );
    }

    #[test]
    fn an_item_written_again_with_the_same_indexed_values_writes_no_index() {
        let before = run_item(&[(DUE_SHARD, s("3")), (SWEEP_AT, n(10))]);
        let mut after = before.clone();
        // Attributes no index holds.
        after.insert("version".into(), n(7));
        after.insert("body".into(), s("{}"));
        assert!(writes(Some(&before), Some(&after)).is_empty());
        assert_eq!(indexed_part(&after), indexed_part(&before));
    }

    #[test]
    fn a_finished_run_leaves_the_due_index_and_enters_the_reap_index() {
        let waiting = run_item(&[(DUE_SHARD, s("3")), (SWEEP_AT, n(10))]);
        let finished = run_item(&[(REAP_SHARD, s("3")), (REAP_AT, n(99))]);
        assert_eq!(
            writes(Some(&waiting), Some(&finished)),
            vec![(DUE_INDEX, 1), (REAP_INDEX, 1)]
        );
    }
}
