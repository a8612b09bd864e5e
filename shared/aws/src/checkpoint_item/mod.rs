//! How a run's checkpoint items are laid out: the items a checkpoint writes for its
//! journal entries and timeline events, and the deliveries beside them.
//!
//! A checkpoint's journal entries and timeline events go together in one **checkpoint
//! item** (more when they pass [`CHECKPOINT_ITEM_BYTES`]), keyed by
//! [`checkpoint_sk`]: in a `TransactWriteItems`, where each item costs two write units
//! per KB, a step's entry and its events in one item cost two units where two items
//! cost four. A delivery's event, and a run's first, that find no room in the run item
//! ([`tail_with_event`], [`crate::layout::created_items`]) have a timeline item of their own under
//! [`timeline_sk`].
//!
//! A checkpoint of the run's own build that needs one checkpoint item and writes no other
//! record (a step's, typically) leaves it in the run item instead, as the run's
//! **checkpoint tail** ([`TAIL`](crate::item::TAIL), [`TAIL_SK`](crate::item::TAIL_SK)):
//! one plain conditional write of one item, one write unit when the run item stays under
//! 1 KB, where a transaction of two items costs four. The next such checkpoint first archives
//! the tail as the checkpoint item it stands for (a plain put of committed content, so
//! repeating it is harmless), then replaces it; other writers keep it. A reader reads the
//! run item first and its checkpoint items after ([`with_tail`]): the tail a later write
//! replaces is archived before that write, so the reader finds it one place or the other.
//!
//! A journal entry may be replaced by a later checkpoint (a retried step's new attempt,
//! a call's outcome): the journal is what the items hold read in sort-key order, the
//! last one holding a position winning ([`Journal`]); checkpoint items sort in the
//! order they were written.
//!
//! A file per job: this one the checkpoint items' layout, `tail` the checkpoint tail kept in
//! the run item, `packing` the JSON and deflated forms items hold, `reading` the items
//! read back (the journal, the timeline, the replay input).

mod packing;
mod reading;
mod tail;
#[cfg(test)]
mod tests;

use packing::{entries_and_events, in_parts, pack, tagged_json};
pub(crate) use reading::*;
pub(crate) use tail::*;

use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;
use siesta::ports::StoreError;
use siesta::*;

use crate::item::{Item, item_size, key, s};
use crate::keys::*;
use crate::layout::WRITE_UNIT_BYTES;

/// A checkpoint item's journal entries, as a JSON array.
const JOURNAL: &str = "journal";
/// A checkpoint item's timeline events, as a JSON array (a timeline item holds its one
/// event in `body`).
pub(crate) const EVENTS: &str = "events";
/// A checkpoint item's entries and events deflated together (a JSON object with
/// `journal` and `events`), instead of [`JOURNAL`] and [`EVENTS`], when that puts the
/// item under fewer KB: DynamoDB bills writes by the KB, and a wait's checkpoint (two
/// entries, three events) is just over one as JSON and well under it deflated.
const PACKED: &str = "z";
/// How many bytes of entries and events one checkpoint item holds at most; what a
/// checkpoint writes beyond goes in the next one (DynamoDB items hold 400 KB, a larger
/// entry gets an item of its own).
pub(crate) const CHECKPOINT_ITEM_BYTES: usize = 32 * 1024;

/// The items that hold a checkpoint's journal entries and timeline events: as few as
/// [`CHECKPOINT_ITEM_BYTES`] allows, keyed by [`checkpoint_sk`] with the run's
/// `timeline_seq` and `version` after the checkpoint. None when it writes neither.
pub(crate) fn checkpoint_items(
    tenant: &TenantId,
    run_id: &RunId,
    run: &Run,
    journal: &[JournalEntry],
    events: &[TimelineEvent],
) -> Result<Vec<Item>, StoreError> {
    let parts = in_parts(tagged_json(journal, events))?
        .into_iter()
        .map(entries_and_events);
    parts
        .enumerate()
        .map(|(part, (entries, events))| {
            let sk = checkpoint_sk(run.timeline_seq, run.version, part as u16);
            let mut item = key(run_pk(tenant, run_id), sk);
            let plain_item = {
                let mut plain = item.clone();
                if !entries.is_empty() {
                    plain.insert(JOURNAL.into(), s(format!("[{}]", entries.join(","))));
                }
                if !events.is_empty() {
                    plain.insert(EVENTS.into(), s(format!("[{}]", events.join(","))));
                }
                plain
            };
            let plain_units = item_size(&plain_item).div_ceil(WRITE_UNIT_BYTES);
            if plain_units <= 1 {
                return Ok(plain_item);
            }
            let packed = pack(&entries, &events, None)?;
            item.insert(PACKED.into(), AttributeValue::B(Blob::new(packed)));
            Ok(
                if item_size(&item).div_ceil(WRITE_UNIT_BYTES) < plain_units {
                    item
                } else {
                    plain_item
                },
            )
        })
        .collect()
}
