//! How a run's history is laid out: the items a checkpoint writes for its journal
//! entries and timeline events, and the deliveries beside them.
//!
//! A checkpoint's journal entries and timeline events go together in one **checkpoint
//! item** (more when they pass [`CHECKPOINT_ITEM_BYTES`]), keyed by
//! [`checkpoint_sk`]: in a `TransactWriteItems`, where each item costs two write units
//! per KB, a step's entry and its events in one item cost two units where two items
//! cost four. Items written before checkpoints were grouped — one journal entry per item
//! under [`journal_sk`], one or more timeline events per item under [`timeline_sk`] —
//! are still read, and the deliveries' and run creations' events still have items of
//! their own.
//!
//! A journal entry may be replaced by a later checkpoint (a retried step's new attempt,
//! a call's outcome): the journal is what the items hold read in sort-key order, the
//! last one holding a position winning ([`Journal`]). Ungrouped entries sort before
//! every checkpoint item, and checkpoint items sort in the order they were written.

use std::collections::HashMap;
use std::io::{Read, Write};

use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;
use flate2::Compression;
use flate2::read::DeflateDecoder;
use flate2::write::DeflateEncoder;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use siesta::ports::StoreError;
use siesta::*;

use crate::error::corrupt;
use crate::item::{BODY, Item, from_json, get_s, item_size, key, s, to_json};
use crate::keys::*;

/// A checkpoint item's journal entries, as a JSON array.
const JOURNAL: &str = "journal";
/// A checkpoint item's timeline events, and a timeline item's when it holds more than
/// one, as a JSON array; a timeline item holding one has it in `body`.
pub(crate) const EVENTS: &str = "events";
/// A checkpoint item's entries and events deflated together (a JSON object with
/// `journal` and `events`), instead of [`JOURNAL`] and [`EVENTS`], when that puts the
/// item under fewer KB: DynamoDB bills writes by the KB, and a wait's checkpoint (two
/// entries, three events) is just over one as JSON and well under it deflated.
const PACKED: &str = "z";
/// DynamoDB's write unit: an item's size is billed rounded up to it.
const WRITE_UNIT_BYTES: usize = 1024;
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
    // Each JSON tagged with whether it is an entry (else an event).
    let jsons = journal
        .iter()
        .map(|e| to_json(e).map(|j| (j, true)))
        .chain(events.iter().map(|e| to_json(e).map(|j| (j, false))));
    let parts = in_parts(jsons)?.into_iter().map(|part| {
        let (entries, events): (Vec<_>, Vec<_>) = part.into_iter().partition(|(_, e)| *e);
        let json = |v: Vec<(String, bool)>| v.into_iter().map(|(j, _)| j).collect::<Vec<_>>();
        (json(entries), json(events))
    });
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
            let packed = pack(&entries, &events)?;
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

/// `jsons`, in order, in groups of at most [`CHECKPOINT_ITEM_BYTES`] of JSON each (one
/// larger alone in its group), each JSON with its tag.
fn in_parts<T>(
    jsons: impl Iterator<Item = Result<(String, T), StoreError>>,
) -> Result<Vec<Vec<(String, T)>>, StoreError> {
    let mut parts = Vec::new();
    let mut part = Vec::new();
    let mut bytes = 0;
    for json in jsons {
        let (json, tag) = json?;
        if !part.is_empty() && bytes + json.len() > CHECKPOINT_ITEM_BYTES {
            parts.push(std::mem::take(&mut part));
            bytes = 0;
        }
        bytes += json.len() + 1;
        part.push((json, tag));
    }
    if !part.is_empty() {
        parts.push(part);
    }
    Ok(parts)
}

/// The deflated JSON object `{"journal": [...], "events": [...]}` of already serialized
/// entries and events.
fn pack(entries: &[String], events: &[String]) -> Result<Vec<u8>, StoreError> {
    let json = format!(
        "{{\"journal\":[{}],\"events\":[{}]}}",
        entries.join(","),
        events.join(",")
    );
    let mut deflate = DeflateEncoder::new(Vec::new(), Compression::default());
    deflate
        .write_all(json.as_bytes())
        .and_then(|()| deflate.finish())
        .map_err(|e| StoreError::Invalid(format!("deflating a checkpoint item: {e}")))
}

/// What a packed checkpoint item holds, as its JSON object; `T` picks what is parsed.
fn unpack<T: DeserializeOwned>(item: &Item, what: &str) -> Result<Option<T>, StoreError> {
    let Some(packed) = item.get(PACKED) else {
        return Ok(None);
    };
    let AttributeValue::B(blob) = packed else {
        return Err(corrupt(what, format!("{PACKED} is not binary")));
    };
    let mut json = Vec::new();
    DeflateDecoder::new(blob.as_ref())
        .read_to_end(&mut json)
        .map_err(|e| corrupt(what, e))?;
    serde_json::from_slice(&json)
        .map(Some)
        .map_err(|e| corrupt(what, e))
}

/// A packed checkpoint item's events (its entries are skipped, not parsed).
#[derive(Deserialize)]
struct PackedEvents {
    #[serde(default)]
    events: Vec<TimelineEvent>,
}

/// A packed checkpoint item's entries (its events are skipped, not parsed).
#[derive(Deserialize)]
struct PackedJournal {
    #[serde(default)]
    journal: Vec<JournalEntry>,
}

/// The items of a checkpoint written for a run whose history has no checkpoint item
/// by code other than the run's own build ([`Checkpoint::by_own_build`]): the layout
/// from before checkpoints were grouped, which every build reads — one item per
/// journal entry under [`journal_sk`], to put (replacing the entry at its position),
/// and the events in as few timeline items as [`CHECKPOINT_ITEM_BYTES`] allows, each
/// under the sort key of its last event, to insert.
pub(crate) fn ungrouped_items(
    tenant: &TenantId,
    run_id: &RunId,
    journal: &[JournalEntry],
    events: &[TimelineEvent],
) -> Result<(Vec<Item>, Vec<Item>), StoreError> {
    let pk = run_pk(tenant, run_id);
    let entries = journal
        .iter()
        .map(|entry| {
            let mut item = key(pk.clone(), journal_sk(&entry.position));
            item.insert(BODY.into(), s(to_json(entry)?));
            Ok(item)
        })
        .collect::<Result<_, StoreError>>()?;
    let jsons = events.iter().map(|e| to_json(e).map(|j| (j, e.seq)));
    let timeline = in_parts(jsons)?
        .into_iter()
        .map(|group| {
            // Keyed by its last event.
            let last = group.last().map_or(0, |(_, seq)| *seq);
            let mut item = key(pk.clone(), timeline_sk(last));
            let events: Vec<_> = group.into_iter().map(|(j, _)| j).collect();
            item.insert(EVENTS.into(), s(format!("[{}]", events.join(","))));
            item
        })
        .collect();
    Ok((entries, timeline))
}

/// The timeline events stored in a timeline item or a checkpoint item, in `seq` order.
pub(crate) fn timeline_from_item(item: &Item) -> Result<Vec<TimelineEvent>, StoreError> {
    const WHAT: &str = "timeline event";
    let checkpoint = get_s(item, SK, WHAT)?.starts_with(CHECKPOINT_PREFIX);
    if let Some(packed) = unpack::<PackedEvents>(item, WHAT)? {
        return Ok(packed.events);
    }
    match item.get(EVENTS) {
        Some(_) => serde_json::from_str(get_s(item, EVENTS, WHAT)?).map_err(|e| corrupt(WHAT, e)),
        None if checkpoint => Ok(Vec::new()),
        None => Ok(vec![from_json(item, WHAT)?]),
    }
}

/// One item of a run's history.
pub(crate) enum HistoryItem {
    /// A journal entry written alone, before checkpoints were grouped.
    Entry(JournalEntry),
    /// A checkpoint item's journal entries (its events are not read).
    Checkpoint(Vec<JournalEntry>),
    /// A delivery.
    Delivery(Delivery),
}

/// What `item`, found under [`HISTORY_PREFIX`], holds for a replay.
pub(crate) fn history_from_item(item: &Item) -> Result<HistoryItem, StoreError> {
    let sk = get_s(item, SK, "history")?;
    if sk.starts_with(CHECKPOINT_PREFIX) {
        const WHAT: &str = "checkpoint's journal entries";
        if let Some(packed) = unpack::<PackedJournal>(item, WHAT)? {
            return Ok(HistoryItem::Checkpoint(packed.journal));
        }
        Ok(HistoryItem::Checkpoint(match item.get(JOURNAL) {
            Some(_) => {
                serde_json::from_str(get_s(item, JOURNAL, WHAT)?).map_err(|e| corrupt(WHAT, e))?
            }
            None => Vec::new(),
        }))
    } else if sk.starts_with(JOURNAL_PREFIX) {
        Ok(HistoryItem::Entry(from_json(item, "journal entry")?))
    } else if sk.starts_with(DELIVERY_PREFIX) {
        Ok(HistoryItem::Delivery(from_json(item, "delivery")?))
    } else {
        Err(corrupt("history", format!("unexpected sort key {sk}")))
    }
}

/// A run's journal gathered from its history items in sort-key order: an entry read
/// later replaces one at the same position read earlier.
#[derive(Default)]
pub(crate) struct Journal {
    entries: Vec<JournalEntry>,
    at: HashMap<Position, usize>,
}

impl Journal {
    /// Adds `entry`, replacing the entry at its position if there is one.
    pub(crate) fn push(&mut self, entry: JournalEntry) {
        match self.at.get(&entry.position) {
            Some(&i) => self.entries[i] = entry,
            None => {
                self.at.insert(entry.position.clone(), self.entries.len());
                self.entries.push(entry);
            }
        }
    }

    /// Adds what a history item holds of the journal; a delivery is handed back.
    pub(crate) fn take(&mut self, item: HistoryItem) -> Option<Delivery> {
        match item {
            HistoryItem::Entry(entry) => self.push(entry),
            HistoryItem::Checkpoint(entries) => entries.into_iter().for_each(|e| self.push(e)),
            HistoryItem::Delivery(delivery) => return Some(delivery),
        }
        None
    }

    /// The entries, one per position.
    pub(crate) fn into_entries(self) -> Vec<JournalEntry> {
        self.entries
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(timeline_seq: u64, version: u64) -> Run {
        let mut run = Run::new(
            TenantId("t".into()),
            RunId("r".into()),
            "order",
            Payload::Inline(json!(null)),
            Timestamp(0),
        );
        run.timeline_seq = timeline_seq;
        run.version = version;
        run
    }

    fn entry(position: &str, attempt: u32) -> JournalEntry {
        JournalEntry {
            position: Position(position.into()),
            index: 0,
            kind: OperationKind::Step,
            name: position.into(),
            state: EntryState::Started { attempt, key: None },
            consumed: Vec::new(),
            handle: None,
            updated_at: Timestamp(0),
        }
    }

    fn event(seq: u64, details: serde_json::Value) -> TimelineEvent {
        let mut e = TimelineEvent::execution_started(Timestamp(1_000), "order", details);
        e.seq = seq;
        e
    }

    fn ids() -> (TenantId, RunId) {
        (TenantId("t".into()), RunId("r".into()))
    }

    fn journal_of(items: &[Item]) -> Vec<JournalEntry> {
        let mut journal = Journal::default();
        for item in items {
            assert!(journal.take(history_from_item(item).unwrap()).is_none());
        }
        journal.into_entries()
    }

    #[test]
    fn a_steps_entry_and_events_share_one_item() {
        let (tenant, run_id) = ids();
        let entries = vec![entry("charge#1", 1)];
        let events = vec![event(4, json!(null)), event(5, json!({"a": 1}))];
        let items = checkpoint_items(&tenant, &run_id, &run(5, 9), &entries, &events).unwrap();
        assert_eq!(items.len(), 1);
        assert_eq!(items[0].get(SK), Some(&s(checkpoint_sk(5, 9, 0))));
        assert!(
            !items[0].contains_key(PACKED),
            "under a write unit as JSON: kept readable"
        );
        assert_eq!(timeline_from_item(&items[0]).unwrap(), events);
        assert_eq!(journal_of(&items), entries);
    }

    #[test]
    fn a_checkpoint_item_over_a_write_unit_as_json_is_deflated_under_it() {
        let (tenant, run_id) = ids();
        let entries = vec![entry("approval#3", 2), entry("approval#4", 1)];
        let events: Vec<_> = (10..16)
            .map(|seq| event(seq, json!({"Result": {"approved": true, "by": "ada"}})))
            .collect();
        let items = checkpoint_items(&tenant, &run_id, &run(15, 30), &entries, &events).unwrap();
        assert_eq!(items.len(), 1);
        let mut plain = key(run_pk(&tenant, &run_id), checkpoint_sk(15, 30, 0));
        let entry_json: Vec<_> = entries.iter().map(|e| to_json(e).unwrap()).collect();
        let event_json: Vec<_> = events.iter().map(|e| to_json(e).unwrap()).collect();
        plain.insert(JOURNAL.into(), s(format!("[{}]", entry_json.join(","))));
        plain.insert(EVENTS.into(), s(format!("[{}]", event_json.join(","))));
        assert!(
            item_size(&plain) > WRITE_UNIT_BYTES,
            "{} B as JSON",
            item_size(&plain)
        );
        assert!(items[0].contains_key(PACKED));
        assert!(!items[0].contains_key(JOURNAL) && !items[0].contains_key(EVENTS));
        assert!(
            item_size(&items[0]) <= WRITE_UNIT_BYTES,
            "{} B deflated",
            item_size(&items[0])
        );
        assert_eq!(timeline_from_item(&items[0]).unwrap(), events);
        assert_eq!(journal_of(&items), entries);
    }

    #[test]
    fn a_packed_item_that_does_not_inflate_is_an_error_not_a_panic() {
        let (tenant, run_id) = ids();
        let mut item = key(run_pk(&tenant, &run_id), checkpoint_sk(1, 1, 0));
        item.insert(PACKED.into(), AttributeValue::B(Blob::new(vec![0xff; 8])));
        assert!(matches!(
            timeline_from_item(&item),
            Err(StoreError::Invalid(_))
        ));
        assert!(matches!(
            history_from_item(&item),
            Err(StoreError::Invalid(_))
        ));
    }

    #[test]
    fn a_checkpoint_without_entries_or_events_writes_no_item() {
        let (tenant, run_id) = ids();
        assert!(
            checkpoint_items(&tenant, &run_id, &run(5, 9), &[], &[])
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn an_item_without_events_has_an_empty_timeline() {
        let (tenant, run_id) = ids();
        let items =
            checkpoint_items(&tenant, &run_id, &run(5, 9), &[entry("a#1", 1)], &[]).unwrap();
        assert!(!items[0].contains_key(EVENTS));
        assert_eq!(timeline_from_item(&items[0]).unwrap(), Vec::new());
    }

    #[test]
    fn a_checkpoint_too_large_for_one_item_goes_in_several_in_order() {
        let (tenant, run_id) = ids();
        let big = "x".repeat(CHECKPOINT_ITEM_BYTES / 3);
        let entries: Vec<_> = (1..=4)
            .map(|i| {
                let mut e = entry(&format!("s#{i}"), 1);
                e.name = big.clone();
                e
            })
            .collect();
        let events: Vec<_> = (1..=5).map(|i| event(i, json!(big))).collect();
        let items = checkpoint_items(&tenant, &run_id, &run(5, 2), &entries, &events).unwrap();
        assert!(items.len() > 2, "{} items", items.len());
        let mut back = Vec::new();
        for (i, item) in items.iter().enumerate() {
            assert!(crate::item::item_size(item) < 400 * 1024);
            assert_eq!(item.get(SK), Some(&s(checkpoint_sk(5, 2, i as u16))));
            back.extend(timeline_from_item(item).unwrap());
        }
        assert_eq!(back, events);
        assert_eq!(journal_of(&items), entries);
    }

    #[test]
    fn a_later_checkpoints_entry_replaces_an_earlier_one_at_its_position() {
        let (tenant, run_id) = ids();
        // Written before checkpoints were grouped: one entry per item.
        let mut legacy = key(
            run_pk(&tenant, &run_id),
            journal_sk(&Position("a#1".into())),
        );
        legacy.insert(BODY.into(), s(to_json(&entry("a#1", 1)).unwrap()));
        let first =
            checkpoint_items(&tenant, &run_id, &run(3, 4), &[entry("a#1", 2)], &[]).unwrap();
        let second = checkpoint_items(
            &tenant,
            &run_id,
            &run(3, 5),
            &[entry("a#1", 3), entry("b#1", 1)],
            &[],
        )
        .unwrap();
        let mut items = vec![second[0].clone(), legacy, first[0].clone()];
        items.sort_by_key(|item| get_s(item, SK, "test").unwrap().to_owned());
        assert_eq!(journal_of(&items), vec![entry("a#1", 3), entry("b#1", 1)]);
    }

    #[test]
    fn the_ungrouped_layout_reads_back_as_the_grouped_one_does() {
        let (tenant, run_id) = ids();
        let entries = vec![entry("a#1", 1), entry("b#1", 2)];
        let big = "x".repeat(CHECKPOINT_ITEM_BYTES / 3);
        let events: Vec<_> = (4..=8).map(|i| event(i, json!(big))).collect();
        let (entry_items, timeline_items) =
            ungrouped_items(&tenant, &run_id, &entries, &events).unwrap();
        assert_eq!(entry_items.len(), 2, "one item per entry");
        assert!(
            entry_items
                .iter()
                .all(|i| { get_s(i, SK, "test").unwrap().starts_with(JOURNAL_PREFIX) })
        );
        assert_eq!(journal_of(&entry_items), entries);
        assert!(timeline_items.len() > 1, "{} items", timeline_items.len());
        let mut back = Vec::new();
        for item in &timeline_items {
            let held = timeline_from_item(item).unwrap();
            assert_eq!(
                item.get(SK),
                Some(&s(timeline_sk(held.last().unwrap().seq))),
                "a timeline item is keyed by its last event"
            );
            back.extend(held);
        }
        assert_eq!(back, events);
    }

    #[test]
    fn checkpoint_sort_keys_order_by_timeline_seq_then_version_after_one_per_item_entries() {
        // (timeline seq, version) of successive checkpoints: events or none, and
        // deliveries' events between them (that writers produce such pairs, the
        // conformance suite's replacing checkpoints check through the store).
        let written = [(3, 4), (3, 5), (5, 6), (9, 7), (9, 8), (12, 9)];
        let keys: Vec<_> = written
            .iter()
            .map(|&(seq, version)| checkpoint_sk(seq, version, 0))
            .collect();
        let mut sorted = keys.clone();
        sorted.sort();
        assert_eq!(keys, sorted);
        assert!(journal_sk(&Position("~".into())) < keys[0]);
    }
}
