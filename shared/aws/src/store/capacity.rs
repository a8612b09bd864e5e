//! What the store's requests cost: the capacity DynamoDB reports, and the items written
//! by request and kind, for the cost breakdown ([`crate::AwsBackend::written_items`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use aws_sdk_dynamodb::types::ConsumedCapacity;

use crate::index_writes::{IndexWrite, index_writes, indexed_part};
use crate::item::{Item, get_s, item_size};
use crate::keys::PK;
use crate::layout::{Billed, PlannedWrite, write_units};

/// How many run items' indexed attributes a meter remembers; past it, it forgets them
/// all (a run's next write then counts no index write).
const REMEMBERED_RUNS: usize = 4096;

/// DynamoDB capacity consumed, in units, as DynamoDB reports it.
#[derive(Debug, Default)]
pub(crate) struct CapacityMeter {
    /// Write capacity units, in thousandths.
    write_milli: AtomicU64,
    /// Read capacity units, in thousandths.
    read_milli: AtomicU64,
    /// The items written, by request and item kind, for the cost breakdown.
    written: Mutex<BTreeMap<String, WrittenItems>>,
    /// What the indexes hold of each run item this store wrote last, by partition key:
    /// what its next write is compared with for the index writes it makes.
    indexed: Mutex<HashMap<String, Item>>,
}

/// Items of one kind written by one kind of request, and what they cost
/// ([`crate::AwsBackend::written_items`]).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct WrittenItems {
    /// How many items were written.
    pub items: u64,
    /// Their size in bytes, as DynamoDB sizes items (attribute names and values).
    pub bytes: u64,
    /// The write units they cost: per item, its size rounded up to the next KB, twice
    /// over in a transaction. Estimated from the sizes; DynamoDB reports only totals per
    /// request.
    pub write_units: f64,
}

impl CapacityMeter {
    /// Count the capacity one request consumed (a list per table of a transaction or a
    /// batch, or the one of a single-item request, when DynamoDB reported any).
    pub(crate) fn add<'a>(
        &self,
        write: bool,
        consumed: impl IntoIterator<Item = &'a ConsumedCapacity>,
    ) {
        let units: f64 = consumed
            .into_iter()
            .filter_map(|c| c.capacity_units())
            .sum();
        let milli = (units * 1000.0).round() as u64;
        let counter = if write {
            &self.write_milli
        } else {
            &self.read_milli
        };
        counter.fetch_add(milli, Ordering::Relaxed);
    }

    /// Note that a request `op` wrote an item of kind `what` of `bytes` bytes,
    /// `transactional` or not.
    pub(crate) fn note_write(&self, op: &str, what: &str, transactional: bool, bytes: usize) {
        let label = format!(
            "{op}: {what}{}",
            if transactional {
                " (transactional)"
            } else {
                ""
            }
        );
        let mut written = self.written.lock().unwrap_or_else(|e| e.into_inner());
        let entry = written.entry(label).or_default();
        entry.items += 1;
        entry.bytes += bytes as u64;
        entry.write_units += write_units(bytes, transactional);
    }

    /// Note the planned `write` of request `op` as the plan bills it — by the item
    /// `returned` when the plan bills it so ([`Billed::Returned`]) — and the index writes
    /// of the run item it writes, if it writes one.
    pub(crate) fn note_planned(&self, op: &str, write: &PlannedWrite, returned: Option<&Item>) {
        match write.billed {
            Billed::Bytes(bytes) => {
                self.note_write(op, &write.role.label(), write.transactional, bytes);
                if let Some((after, new)) = &write.run_after
                    && let Some(before) = self.remember_run(after, *new)
                {
                    self.note_index_writes(op, &write.index_effects(before.as_ref()));
                }
            }
            Billed::Returned => {
                let item = returned.cloned().unwrap_or_default();
                self.note_write(
                    op,
                    &write.role.label(),
                    write.transactional,
                    item_size(&item),
                );
                self.note_run(op, &item, false);
            }
        }
    }

    /// Note the index writes ([`crate::index_writes`]) of request `op` writing run item
    /// `after` (its attributes the indexes hold, at least), over the item as this store
    /// last wrote it — or over none, for a run it creates (`new`).
    fn note_run(&self, op: &str, after: &Item, new: bool) {
        if let Some(before) = self.remember_run(after, new) {
            let writes = index_writes(before.as_ref(), Some(&indexed_part(after)));
            self.note_index_writes(op, &writes);
        }
    }

    /// Remember what the indexes hold of run item `after`, returning what they held
    /// of it as this store last wrote it (`Some(None)`: none, a run it creates, `new`).
    /// `None` for a run the store has not written before, which is only remembered: its
    /// index writes are not known.
    fn remember_run(&self, after: &Item, new: bool) -> Option<Option<Item>> {
        let pk = get_s(after, PK, "run").ok()?;
        let after = indexed_part(after);
        let before = {
            let mut indexed = self.indexed.lock().unwrap_or_else(|e| e.into_inner());
            if indexed.len() >= REMEMBERED_RUNS {
                indexed.clear();
            }
            indexed.insert(pk.to_owned(), after)
        };
        (before.is_some() || new).then_some(before)
    }

    /// Note `writes` to the indexes by request `op`, each entry written a write of its
    /// own.
    fn note_index_writes(&self, op: &str, writes: &[IndexWrite]) {
        for write in writes {
            for _ in 0..write.writes {
                self.note_write(
                    op,
                    &format!("{} index", write.index),
                    false,
                    write.entry_bytes,
                );
            }
        }
    }

    /// Count the capacity a single-item request `op` consumed, and note that it wrote an
    /// item of kind `what` whose size it does not see, at that capacity.
    pub(crate) fn note_update(&self, op: &str, what: &str, consumed: Option<&ConsumedCapacity>) {
        self.add(true, consumed);
        let mut written = self.written.lock().unwrap_or_else(|e| e.into_inner());
        let entry = written.entry(format!("{op}: {what}")).or_default();
        entry.items += 1;
        entry.write_units += consumed.and_then(|c| c.capacity_units()).unwrap_or(0.0);
    }

    /// The items written so far, by request and item kind.
    pub(crate) fn written(&self) -> BTreeMap<String, WrittenItems> {
        self.written
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// (write units, read units) consumed so far.
    pub(crate) fn totals(&self) -> (f64, f64) {
        (
            self.write_milli.load(Ordering::Relaxed) as f64 / 1000.0,
            self.read_milli.load(Ordering::Relaxed) as f64 / 1000.0,
        )
    }
}
