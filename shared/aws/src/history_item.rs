//! How a run's history is laid out: the items a checkpoint writes for its journal
//! entries and timeline events, and the deliveries beside them.
//!
//! A checkpoint's journal entries and timeline events go together in one **checkpoint
//! item** (more when they pass [`CHECKPOINT_ITEM_BYTES`]), keyed by
//! [`checkpoint_sk`]: in a `TransactWriteItems`, where each item costs two write units
//! per KB, a step's entry and its events in one item cost two units where two items
//! cost four. A delivery's event, and a run's first, that find no room in the run item
//! ([`tail_with_event`], [`created_items`]) have a timeline item of their own under
//! [`timeline_sk`].
//!
//! A checkpoint of the run's own build that needs one checkpoint item and writes no
//! other record (a step's, typically) leaves it in the run item instead, as the run's
//! **history tail** ([`TAIL`], [`TAIL_SK`]): one plain conditional write of one item,
//! one write unit when the run item stays under 1 KB, where a transaction of two items
//! costs four. The next such checkpoint first archives the tail as the checkpoint item
//! it stands for (a plain put of committed content, so repeating it is harmless), then
//! replaces it; other writers keep it. A reader reads the run item first and its
//! history after ([`with_tail`]): the tail a later write replaces is archived before
//! that write, so the reader finds it one place or the other.
//!
//! A journal entry may be replaced by a later checkpoint (a retried step's new attempt,
//! a call's outcome): the journal is what the items hold read in sort-key order, the
//! last one holding a position winning ([`Journal`]); checkpoint items sort in the
//! order they were written.

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
use crate::item::{
    Item, TAIL, TAIL_SK, VERSION, from_json, get_n, get_s, item_size, key, s, to_json,
};
use crate::keys::*;

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
/// DynamoDB's write unit: an item's size is billed rounded up to it.
pub(crate) const WRITE_UNIT_BYTES: usize = 1024;
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

/// How many checkpoints a history tail holds at most: the checkpoint that would add one
/// more archives it instead (a write request per this many steps).
const TAIL_CHECKPOINTS: u64 = 3;
/// How many bytes a history tail holds at most, deflated: every write of the run item
/// is billed for it, so a checkpoint that would take it past this archives it instead.
const TAIL_BYTES: usize = 1024;

/// Whether a history tail under `sk` (holding journal entries or not) may be joined by,
/// or taken into, a write conditioned on the run at `version` with its timeline at
/// `timeline_seq`: when its last checkpoint made `version` (nothing was written
/// since), or when it holds deliveries' events alone and no event was written since (a
/// claim, which writes none, may have come between). Either way no item sorts between
/// the tail and the write, and the seqs the item it becomes holds overlap no other
/// item's: a replay's journal (the later entry at a position wins) and the timeline's
/// paging (each kind of item read in seq order) rely on both.
fn may_take(sk: &str, has_entries: bool, version: u64, timeline_seq: u64) -> bool {
    checkpoint_version(sk) == Some(version)
        || (!has_entries && checkpoint_seq(sk) == Some(timeline_seq))
}

/// A history tail as it is deflated ([`pack`]): the entries and events of its
/// checkpoints in the order they were written (what an archived tail holds,
/// [`PACKED`]), and how many checkpoints they are. Read to join one more, so each
/// entry and event is kept as JSON.
#[derive(Deserialize, PartialEq)]
struct PackedTail {
    journal: Vec<serde_json::Value>,
    events: Vec<serde_json::Value>,
    #[serde(default)]
    checkpoints: u64,
}

/// What a checkpoint kept in the run item writes: the history tail it leaves, and the
/// tail it replaces to archive first, if any.
pub(crate) struct TailWrite {
    /// The tail's sort key once archived: its last checkpoint's ([`checkpoint_sk`]).
    pub(crate) sk: String,
    /// The tail, deflated.
    pub(crate) packed: Vec<u8>,
    /// The tail it replaces, as the checkpoint item it is archived as.
    pub(crate) archive: Option<Item>,
}

impl TailWrite {
    /// Put the tail into `run_item`, the run item the write writes.
    pub(crate) fn put_in(self, run_item: &mut Item) {
        run_item.insert(TAIL_SK.into(), s(self.sk));
        run_item.insert(TAIL.into(), AttributeValue::B(Blob::new(self.packed)));
    }

    /// The size of `run_item` (holding no tail) with this tail in it: an item's size is
    /// the sum of its attributes', so the run item is not copied to measure it.
    pub(crate) fn size_in(&self, run_item: &Item) -> usize {
        let mut tail = Item::new();
        TailWrite {
            sk: self.sk.clone(),
            packed: self.packed.clone(),
            archive: None,
        }
        .put_in(&mut tail);
        item_size(run_item) + item_size(&tail)
    }
}

impl PackedTail {
    /// This tail with `entries` and `events` after its own, counted as `checkpoints`,
    /// deflated.
    fn pack_with(
        self,
        entries: &[String],
        events: &[String],
        checkpoints: u64,
    ) -> Result<Vec<u8>, StoreError> {
        let json = |v: Vec<serde_json::Value>, more: &[String]| {
            let mut all: Vec<String> = v.iter().map(serde_json::Value::to_string).collect();
            all.extend_from_slice(more);
            all
        };
        pack(
            &json(self.journal, entries),
            &json(self.events, events),
            Some(checkpoints),
        )
    }
}

/// The history tail a checkpoint leaves in the run item instead of its checkpoint item,
/// given the tail `previous` the run item holds at `expected_version` (as the item it
/// is archived as). The checkpoint joins that tail when the tail's last checkpoint made
/// `expected_version` (no other write came between: the tail's checkpoints are
/// consecutive, so nothing sorts between them once archived as one item) and it stays
/// within [`TAIL_CHECKPOINTS`] and [`TAIL_BYTES`]; else `previous` is archived and the
/// checkpoint starts a tail. `None` when the checkpoint writes neither entries nor
/// events, or more than [`TAIL_BYTES`] deflated.
pub(crate) fn next_tail(
    run: &Run,
    expected_version: u64,
    journal: &[JournalEntry],
    events: &[TimelineEvent],
    previous: Option<Item>,
) -> Result<Option<TailWrite>, StoreError> {
    let mut parts = in_parts(tagged_json(journal, events))?;
    if parts.len() != 1 {
        return Ok(None);
    }
    let (entries, events) = entries_and_events(parts.remove(0));
    // In a tail every entry and event is written as `serde_json::Value` writes it
    // (keys sorted), as the tail's earlier checkpoints are when it is read back to join
    // one more: the same key order throughout deflates smaller (in the bench, enough
    // to keep a step's run item under 1 KB).
    let sorted = |jsons: Vec<String>| {
        jsons
            .iter()
            .map(|j| serde_json::from_str::<serde_json::Value>(j).map(|v| v.to_string()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| StoreError::Invalid(e.to_string()))
    };
    let (entries, events) = (sorted(entries)?, sorted(events)?);
    let sk = checkpoint_sk(run.timeline_seq, run.version, 0);
    let fresh = pack(&entries, &events, Some(1))?;
    if fresh.len() > TAIL_BYTES {
        // Every write of the run item until the next step (a claim, a renewal, a
        // delivery) would be billed for it: a checkpoint item of its own instead.
        return Ok(None);
    }
    let Some(previous) = previous else {
        return Ok(Some(TailWrite {
            sk,
            packed: fresh,
            archive: None,
        }));
    };
    let previous_sk = get_s(&previous, SK, "history tail")?.to_owned();
    let before = timeline_before(run, events.len());
    let joined = unpack::<PackedTail>(&previous, "history tail")?;
    if let Some(joined) = joined.filter(|j| {
        may_take(
            &previous_sk,
            !j.journal.is_empty(),
            expected_version,
            before,
        )
    }) {
        // A tail with entries holds one checkpoint at least; deliveries' events, none.
        let held = match joined.journal.is_empty() {
            true => joined.checkpoints,
            false => joined.checkpoints.max(1),
        };
        let checkpoints = held + 1;
        let packed = joined.pack_with(&entries, &events, checkpoints)?;
        if checkpoints <= TAIL_CHECKPOINTS && packed.len() <= TAIL_BYTES {
            return Ok(Some(TailWrite {
                sk,
                packed,
                archive: None,
            }));
        }
    }
    Ok(Some(TailWrite {
        sk,
        packed: fresh,
        archive: Some(previous),
    }))
}

/// The run's last timeline seq before the `events` of the checkpoint that leaves it as
/// `run` (a checkpoint's events follow the run's timeline without a gap).
pub(crate) fn timeline_before(run: &Run, events: usize) -> u64 {
    run.timeline_seq.saturating_sub(events as u64)
}

/// What a history tail (as the item it is archived as) holds, when its last
/// checkpoint made `version`: for a transaction's checkpoint conditioned on that
/// version to write ahead of its own entries and events, in its own checkpoint items
/// (the two are consecutive, so nothing sorts between them). `None` when it did not.
pub(crate) fn tail_before(
    tail: &Item,
    version: u64,
    timeline_seq: u64,
) -> Result<Option<TailContents>, StoreError> {
    let sk = get_s(tail, SK, "history tail")?;
    let contents = unpack::<TailContents>(tail, "history tail")?
        .ok_or_else(|| corrupt("history tail", "not deflated"))?;
    Ok(may_take(sk, !contents.journal.is_empty(), version, timeline_seq).then_some(contents))
}

/// The history tail a delivery to `run` (as the delivery leaves it) writes: the tail
/// `previous` the run item holds, if any (as the item it is archived as), with the
/// delivery's `event` after its events, under the key of the delivery's seq and
/// version — so that the delivery's event needs no item of its own: the run's next
/// checkpoint by its own build takes it along, into its tail or its checkpoint item.
/// `None` when the tail would pass [`TAIL_BYTES`]: the event then goes in an item of
/// its own.
pub(crate) fn tail_with_event(
    run: &Run,
    read_version: u64,
    previous: Option<&Item>,
    event: &TimelineEvent,
) -> Result<Option<TailWrite>, StoreError> {
    let event_seq = event.seq;
    let json = serde_json::to_value(event)
        .map_err(|e| StoreError::Invalid(e.to_string()))?
        .to_string();
    let event = [json];
    let packed = match previous {
        Some(previous) => {
            let tail = unpack::<PackedTail>(previous, "history tail")?
                .ok_or_else(|| corrupt("history tail", "not deflated"))?;
            let sk = get_s(previous, SK, "history tail")?;
            let before = event_seq.saturating_sub(1);
            if !may_take(sk, !tail.journal.is_empty(), read_version, before) {
                // Moved under the delivery's key, it would sort after what came
                // between: the event has an item of its own.
                return Ok(None);
            }
            let checkpoints = tail.checkpoints;
            tail.pack_with(&[], &event, checkpoints)?
        }
        None => pack(&[], &event, Some(0))?,
    };
    Ok((packed.len() <= TAIL_BYTES).then(|| TailWrite {
        sk: checkpoint_sk(run.timeline_seq, run.version, 0),
        packed,
        archive: None,
    }))
}

/// Room a run item holding a history tail leaves under [`WRITE_UNIT_BYTES`] for the
/// lease the claim that follows adds (owner, expiry, epoch: about 70 bytes), so that
/// the claim stays one unit too.
pub(crate) const CLAIM_ROOM: usize = 100;

/// The items a run created with its first event writes, given its `run_item`: the run
/// item holding the event in its tail, as a delivery's event is held
/// ([`tail_with_event`]), when it stays within one write unit with room for the claim
/// after it — the create's transaction then writes one item
/// fewer (two write units) and no later write of the run item is billed a unit more;
/// else the run item as given and the event's own timeline item (a large input, which
/// the run item's body holds, leaves no room). The tail is keyed by the run's timeline
/// seq, so only an event at that seq goes in it.
pub(crate) fn created_items(
    run_item: Item,
    run: &Run,
    started: &TimelineEvent,
) -> Result<(Item, Option<Item>), StoreError> {
    if started.seq == run.timeline_seq
        && let Some(tail) = tail_with_event(run, run.version, None, started)?
        && tail.size_in(&run_item) + CLAIM_ROOM <= WRITE_UNIT_BYTES
    {
        let mut with_tail = run_item;
        tail.put_in(&mut with_tail);
        return Ok((with_tail, None));
    }
    let event = crate::item::timeline_item(&run.tenant, &run.id, started)?;
    Ok((run_item, Some(event)))
}

/// Whether the history tail `held` (a run item as read) holds is the one `written` (the
/// run item a step's write wrote) put in it, or grew from it by deliveries' events
/// alone ([`tail_with_event`]): how a step's write whose answer was lost knows, on its
/// retry, that it was applied.
pub(crate) fn tail_grew_from(held: &Item, written: &Item) -> Result<bool, StoreError> {
    const WHAT: &str = "history tail";
    let tail = |item: &Item| match (item.get(TAIL_SK), item.get(TAIL)) {
        (Some(AttributeValue::S(sk)), Some(AttributeValue::B(packed))) => {
            Some((sk.clone(), packed.clone()))
        }
        _ => None,
    };
    let (Some((held_sk, held)), Some((sk, written))) = (tail(held), tail(written)) else {
        return Ok(false);
    };
    if held_sk == sk && held == written {
        return Ok(true);
    }
    let held: PackedTail = inflate(held.as_ref(), WHAT)?;
    let ours: PackedTail = inflate(written.as_ref(), WHAT)?;
    // Grown by deliveries alone: under a later key, the same checkpoints, the same
    // entries, and our events followed by theirs.
    Ok(checkpoint_version(&held_sk) > checkpoint_version(&sk)
        && held.checkpoints == ours.checkpoints
        && held.journal == ours.journal
        && held.events.len() > ours.events.len()
        && held.events[..ours.events.len()] == ours.events[..])
}

/// What a history tail holds: its checkpoints' entries and events, in order.
#[derive(Debug, PartialEq, Deserialize)]
pub(crate) struct TailContents {
    #[serde(default)]
    pub(crate) journal: Vec<JournalEntry>,
    #[serde(default)]
    pub(crate) events: Vec<TimelineEvent>,
}

/// The history tail `run_item` holds, as the checkpoint item it is archived as.
pub(crate) fn archived_tail(run_item: &Item) -> Result<Option<Item>, StoreError> {
    const WHAT: &str = "history tail";
    let Some(tail) = run_item.get(TAIL) else {
        return Ok(None);
    };
    let mut item = key(
        get_s(run_item, PK, WHAT)?.to_owned(),
        get_s(run_item, TAIL_SK, WHAT)?,
    );
    item.insert(PACKED.into(), tail.clone());
    Ok(Some(item))
}

/// `items`, read after `run_item`, without the checkpoint items of checkpoints
/// committed after that read (of a version past the run item's).
pub(crate) fn committed_by(items: Vec<Item>, run_item: &Item) -> Result<Vec<Item>, StoreError> {
    let version: u64 = get_n(run_item, VERSION, "run")?;
    let mut kept = Vec::with_capacity(items.len() + 1);
    for item in items {
        let sk = get_s(&item, SK, "history")?;
        if checkpoint_version(sk).is_none_or(|v| v <= version) {
            kept.push(item);
        }
    }
    Ok(kept)
}

/// How many bytes a history tail (as the item it is archived as) adds to its run item.
pub(crate) fn tail_size(tail: &Item) -> usize {
    let sk = tail
        .get(SK)
        .map_or(0, |sk| sk.as_s().map_or(0, String::len));
    let packed = tail
        .get(PACKED)
        .map_or(0, |z| z.as_b().map_or(0, |b| b.as_ref().len()));
    TAIL_SK.len() + sk + TAIL.len() + packed
}

/// What the run's history was when `run_item` was read: `items`, from one query of its
/// history in sort-key order made after that read ([`committed_by`] it), with the run
/// item's tail among them in its place. A tail archived since the read is found once.
pub(crate) fn with_tail(
    items: Vec<Item>,
    run_item: Option<&Item>,
) -> Result<Vec<Item>, StoreError> {
    let Some(run_item) = run_item else {
        return Ok(items);
    };
    let mut items = committed_by(items, run_item)?;
    if let Some(tail) = archived_tail(run_item)? {
        let sk = get_s(&tail, SK, "history tail")?.to_owned();
        let at = items.partition_point(|i| get_s(i, SK, "history").is_ok_and(|k| k < sk.as_str()));
        let archived = items
            .get(at)
            .is_some_and(|i| get_s(i, SK, "history").is_ok_and(|k| k == sk));
        if !archived {
            items.insert(at, tail);
        }
    }
    Ok(items)
}

/// A checkpoint's entries and events as JSON, in that order, each tagged with whether
/// it is an entry (else an event): what [`in_parts`] groups.
fn tagged_json<'a>(
    journal: &'a [JournalEntry],
    events: &'a [TimelineEvent],
) -> impl Iterator<Item = Result<(String, bool), StoreError>> + 'a {
    journal
        .iter()
        .map(|e| to_json(e).map(|j| (j, true)))
        .chain(events.iter().map(|e| to_json(e).map(|j| (j, false))))
}

/// One part of [`tagged_json`]: its entries' JSON, its events' JSON.
fn entries_and_events(part: Vec<(String, bool)>) -> (Vec<String>, Vec<String>) {
    let (entries, events): (Vec<_>, Vec<_>) = part.into_iter().partition(|(_, e)| *e);
    let json = |v: Vec<(String, bool)>| v.into_iter().map(|(j, _)| j).collect();
    (json(entries), json(events))
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
/// entries and events; a history tail's with `"checkpoints": n` too ([`PackedTail`]).
fn pack(
    entries: &[String],
    events: &[String],
    checkpoints: Option<u64>,
) -> Result<Vec<u8>, StoreError> {
    let count = checkpoints.map_or(String::new(), |n| format!(",\"checkpoints\":{n}"));
    let json = format!(
        "{{\"journal\":[{}],\"events\":[{}]{count}}}",
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
    inflate(blob.as_ref(), what).map(Some)
}

/// The JSON object deflated in `bytes` ([`pack`]); `T` picks what is parsed.
fn inflate<T: DeserializeOwned>(bytes: &[u8], what: &str) -> Result<T, StoreError> {
    let mut json = Vec::new();
    DeflateDecoder::new(bytes)
        .read_to_end(&mut json)
        .map_err(|e| corrupt(what, e))?;
    serde_json::from_slice(&json).map_err(|e| corrupt(what, e))
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
            minted: Vec::new(),
            within: None,
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

    #[test]
    fn a_new_runs_first_event_is_held_in_its_run_item_when_it_leaves_room_for_the_claim() {
        let run = run(1, 1);
        let run_item = crate::item::run_item(&run, std::time::Duration::ZERO).unwrap();
        let (held, own) = created_items(run_item.clone(), &run, &event(1, json!(null))).unwrap();
        assert!(own.is_none(), "no item of its own");
        let tail = archived_tail(&held).unwrap().expect("a tail");
        assert_eq!(checkpoint_seq(get_s(&tail, SK, "tail").unwrap()), Some(1));
        assert_eq!(
            timeline_from_item(&tail).unwrap(),
            vec![event(1, json!(null))]
        );

        // An event at another seq than the run's: not under the run's key.
        let (alone, own) = created_items(run_item.clone(), &run, &event(2, json!(null))).unwrap();
        assert_eq!(alone, run_item);
        assert!(own.is_some());

        // An event too large to leave that room even deflated: an item of its own.
        // (The engine's carries no input; a large input fills the run item's body.)
        let mut state = 1_u64;
        let note: String = (0..900)
            .map(|_| {
                state = state
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                char::from(b'a' + (state >> 33) as u8 % 26)
            })
            .collect();
        let large = event(1, json!({ "note": note }));
        let (alone, own) = created_items(run_item.clone(), &run, &large).unwrap();
        assert_eq!(alone, run_item, "the run item as given");
        let own = own.expect("the event's own item");
        assert_eq!(get_s(&own, SK, "event").unwrap(), timeline_sk(1));
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
        let mut items = vec![second[0].clone(), first[0].clone()];
        items.sort_by_key(|item| get_s(item, SK, "test").unwrap().to_owned());
        assert_eq!(journal_of(&items), vec![entry("a#1", 3), entry("b#1", 1)]);
    }

    /// The tail a checkpoint starts: its sort key and content.
    fn checkpoint_tail(
        run: &Run,
        journal: &[JournalEntry],
        events: &[TimelineEvent],
    ) -> Result<Option<(String, Vec<u8>)>, StoreError> {
        Ok(next_tail(run, 0, journal, events, None)?.map(|t| (t.sk, t.packed)))
    }

    #[test]
    fn consecutive_checkpoints_share_a_tail_which_the_one_past_its_limit_archives() {
        let (tenant, run_id) = ids();
        let mut current = run(1, 1);
        current.tenant = tenant.clone();
        current.id = run_id.clone();
        let mut tail: Option<Item> = None;
        let mut archived = Vec::new();
        let mut written = Vec::new();
        for step in 0..7u64 {
            let expected = current.version;
            current.version += 1;
            current.timeline_seq += 1;
            let e = entry(&format!("s#{step}"), 1);
            let ev = event(current.timeline_seq, json!({"Result": step}));
            written.push((e.clone(), ev.clone()));
            let mut write = next_tail(&current, expected, &[e], &[ev], tail.take())
                .unwrap()
                .unwrap();
            assert_eq!(
                write.sk,
                checkpoint_sk(current.timeline_seq, current.version, 0)
            );
            archived.extend(write.archive.take());
            let mut run_item = crate::item::run_item(&current, std::time::Duration::ZERO).unwrap();
            write.put_in(&mut run_item);
            tail = archived_tail(&run_item).unwrap();
        }
        // Three checkpoints to a tail: steps 0-2 and 3-5 archived, 6 in the tail.
        assert_eq!(archived.len(), 2);
        assert_eq!(archived[0].get(SK), Some(&s(checkpoint_sk(4, 4, 0))));
        assert_eq!(archived[1].get(SK), Some(&s(checkpoint_sk(7, 7, 0))));
        let mut items = archived.clone();
        items.extend(tail);
        let events: Vec<_> = items
            .iter()
            .flat_map(|i| timeline_from_item(i).unwrap())
            .collect();
        assert_eq!(
            events,
            written.iter().map(|(_, ev)| ev.clone()).collect::<Vec<_>>()
        );
        assert_eq!(
            journal_of(&items),
            written.iter().map(|(e, _)| e.clone()).collect::<Vec<_>>()
        );
    }

    #[test]
    fn a_checkpoint_after_another_write_archives_the_tail_instead_of_joining_it() {
        let first = next_tail(&run(2, 2), 1, &[entry("a#1", 1)], &[], None)
            .unwrap()
            .unwrap();
        let (tenant, run_id) = ids();
        let mut previous = key(run_pk(&tenant, &run_id), first.sk.clone());
        previous.insert(PACKED.into(), AttributeValue::B(Blob::new(first.packed)));
        // A delivery made version 3: the next checkpoint is conditioned on it.
        let next = next_tail(
            &run(3, 4),
            3,
            &[entry("b#1", 1)],
            &[],
            Some(previous.clone()),
        )
        .unwrap()
        .unwrap();
        assert_eq!(next.archive, Some(previous.clone()));
        // Without it, the two share the tail.
        let joined = next_tail(&run(3, 3), 2, &[entry("b#1", 1)], &[], Some(previous))
            .unwrap()
            .unwrap();
        assert!(joined.archive.is_none());
    }

    #[test]
    fn a_tail_is_taken_into_the_next_checkpoint_only_when_it_came_right_before() {
        let (tenant, run_id) = ids();
        let events = vec![event(3, json!(null))];
        let first = next_tail(&run(3, 5), 4, &[entry("a#1", 1)], &events, None)
            .unwrap()
            .unwrap();
        let mut tail = key(run_pk(&tenant, &run_id), first.sk);
        tail.insert(PACKED.into(), AttributeValue::B(Blob::new(first.packed)));
        assert_eq!(
            tail_before(&tail, 5, 3).unwrap(),
            Some(TailContents {
                journal: vec![entry("a#1", 1)],
                events
            })
        );
        assert_eq!(
            tail_before(&tail, 6, 3).unwrap(),
            None,
            "a write came between"
        );
    }

    /// A tail as the run item holds it after `write`, as the item it is archived as.
    fn tail_item(write: TailWrite) -> Item {
        let (tenant, run_id) = ids();
        let mut tail = key(run_pk(&tenant, &run_id), write.sk);
        tail.insert(PACKED.into(), AttributeValue::B(Blob::new(write.packed)));
        tail
    }

    #[test]
    fn a_deliverys_event_joins_the_tail_under_its_own_key_and_a_later_checkpoint_takes_it() {
        // A run waiting after a transaction (no tail): the delivery starts one.
        let delivered = event(4, json!({"callback": "cb"}));
        let alone = tail_with_event(&run(4, 7), 6, None, &delivered)
            .unwrap()
            .unwrap();
        assert_eq!(alone.sk, checkpoint_sk(4, 7, 0));
        let alone = tail_item(alone);
        assert_eq!(timeline_from_item(&alone).unwrap(), vec![delivered.clone()]);
        assert_eq!(journal_of(std::slice::from_ref(&alone)), vec![]);
        // A claim came between (version 8): a transaction's checkpoint takes it all
        // the same, and a step joins it — it holds no entry whose place could move.
        assert_eq!(
            tail_before(&alone, 8, 4).unwrap(),
            Some(TailContents {
                journal: vec![],
                events: vec![delivered.clone()]
            })
        );
        // But not once an event came between (the control plane's): the item it would
        // join would hold seqs around another item's, which the timeline's paging
        // cannot read in order.
        assert_eq!(tail_before(&alone, 9, 5).unwrap(), None);
        let after_another = next_tail(
            &run(6, 10),
            9,
            &[entry("s#1", 1)],
            &[event(6, json!(null))],
            Some(alone.clone()),
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            after_another.archive,
            Some(alone.clone()),
            "archived, not joined"
        );
        let step = event(5, json!({"Result": 1}));
        let joined = next_tail(
            &run(5, 9),
            8,
            &[entry("s#1", 1)],
            std::slice::from_ref(&step),
            Some(alone),
        )
        .unwrap()
        .unwrap();
        assert!(joined.archive.is_none(), "joined, not archived");
        let joined = tail_item(joined);
        assert_eq!(timeline_from_item(&joined).unwrap(), vec![delivered, step]);
        assert_eq!(journal_of(&[joined]), vec![entry("s#1", 1)]);
    }

    #[test]
    fn a_deliverys_event_after_a_steps_tail_keeps_its_entries_and_a_retry_knows_its_write() {
        let mine = next_tail(
            &run(3, 5),
            4,
            &[entry("a#1", 1)],
            &[event(3, json!(null))],
            None,
        )
        .unwrap()
        .unwrap();
        // The run item the step's write wrote.
        let mut written = crate::item::run_item(&run(3, 5), std::time::Duration::ZERO).unwrap();
        TailWrite {
            sk: mine.sk.clone(),
            packed: mine.packed.clone(),
            archive: None,
        }
        .put_in(&mut written);
        let tail = tail_item(mine);
        let delivered = event(4, json!({"go": true}));
        // Entries are joined only right after their checkpoint: moved under the
        // delivery's key, they would sort after what came between.
        assert!(
            tail_with_event(&run(4, 7), 6, Some(&tail), &delivered)
                .unwrap()
                .is_none()
        );
        let grown = tail_with_event(&run(4, 6), 5, Some(&tail), &delivered)
            .unwrap()
            .unwrap();
        assert_eq!(grown.sk, checkpoint_sk(4, 6, 0));
        let mut run_item = crate::item::run_item(&run(4, 6), std::time::Duration::ZERO).unwrap();
        grown.put_in(&mut run_item);
        let held = archived_tail(&run_item).unwrap().unwrap();
        assert_eq!(
            journal_of(std::slice::from_ref(&held)),
            vec![entry("a#1", 1)]
        );
        assert_eq!(
            timeline_from_item(&held).unwrap(),
            vec![event(3, json!(null)), delivered]
        );
        // The step's write, retried after its answer was lost, finds its own tail grown
        // by the delivery: applied. Another tail is not its.
        assert!(tail_grew_from(&run_item, &written).unwrap());
        let other = next_tail(&run(3, 5), 4, &[entry("b#1", 1)], &[], None)
            .unwrap()
            .unwrap();
        let mut not_written = crate::item::run_item(&run(3, 5), std::time::Duration::ZERO).unwrap();
        other.put_in(&mut not_written);
        assert!(!tail_grew_from(&run_item, &not_written).unwrap());
        // A tail with entries is still taken by a transaction only right after it.
        assert_eq!(tail_before(&held, 7, 4).unwrap(), None);
        assert!(tail_before(&held, 6, 4).unwrap().is_some());
    }

    #[test]
    fn a_checkpoint_or_a_delivery_that_would_take_the_tail_past_its_bytes_leaves_it() {
        // Text deflate cannot shrink much: pseudo-random hex (xorshift), each half a
        // tail deflated.
        let noise = |n: usize| {
            let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ n as u64;
            (0..n)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    format!("{:x}", x % 16)
                })
                .collect::<String>()
        };
        assert!(
            tail_with_event(&run(4, 7), 6, None, &event(4, json!(noise(TAIL_BYTES * 3))))
                .unwrap()
                .is_none(),
            "a delivery's event past the bytes: a timeline item of its own"
        );
        let mut big = entry("a#1", 1);
        big.name = noise(TAIL_BYTES * 3);
        assert!(
            next_tail(&run(2, 2), 1, &[big.clone()], &[], None)
                .unwrap()
                .is_none(),
            "alone past the bytes: a checkpoint item of its own"
        );
        big.name = noise(TAIL_BYTES);
        let first = next_tail(&run(2, 2), 1, &[big], &[], None)
            .unwrap()
            .unwrap();
        let (tenant, run_id) = ids();
        let mut previous = key(run_pk(&tenant, &run_id), first.sk);
        previous.insert(PACKED.into(), AttributeValue::B(Blob::new(first.packed)));
        let mut next_big = entry("b#1", 1);
        next_big.name = noise(TAIL_BYTES + 7);
        let next = next_tail(&run(3, 3), 2, &[next_big], &[], Some(previous.clone()))
            .unwrap()
            .unwrap();
        assert_eq!(next.archive, Some(previous));
    }

    /// The run item of `run` holding the tail `tail` (a checkpoint's, from
    /// [`checkpoint_tail`]).
    fn run_with_tail(run: &Run, tail: Option<(String, Vec<u8>)>) -> Item {
        let mut item = crate::item::run_item(run, std::time::Duration::ZERO).unwrap();
        if let Some((sk, packed)) = tail {
            item.insert(TAIL_SK.into(), s(sk));
            item.insert(TAIL.into(), AttributeValue::B(Blob::new(packed)));
        }
        item
    }

    #[test]
    fn a_tail_archived_is_the_checkpoint_item_it_stands_for() {
        let (tenant, run_id) = ids();
        let mut step = run(5, 9);
        step.tenant = tenant.clone();
        step.id = run_id.clone();
        let entries = vec![entry("charge#1", 1)];
        let events = vec![event(4, json!(null)), event(5, json!({"a": 1}))];
        let tail = checkpoint_tail(&step, &entries, &events).unwrap().unwrap();
        assert_eq!(tail.0, checkpoint_sk(5, 9, 0));
        let archived = archived_tail(&run_with_tail(&step, Some(tail)))
            .unwrap()
            .unwrap();
        assert_eq!(archived.get(SK), Some(&s(checkpoint_sk(5, 9, 0))));
        assert_eq!(archived.get(PK), Some(&s(run_pk(&tenant, &run_id))));
        assert_eq!(timeline_from_item(&archived).unwrap(), events);
        assert_eq!(journal_of(&[archived]), entries);
        assert!(
            archived_tail(&run_with_tail(&step, None))
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn a_checkpoint_of_more_than_one_item_or_of_nothing_has_no_tail() {
        let big = "x".repeat(CHECKPOINT_ITEM_BYTES / 2);
        let events: Vec<_> = (1..=3).map(|i| event(i, json!(big))).collect();
        assert!(checkpoint_tail(&run(3, 2), &[], &events).unwrap().is_none());
        assert!(checkpoint_tail(&run(3, 2), &[], &[]).unwrap().is_none());
    }

    #[test]
    fn the_history_read_after_the_run_item_has_its_tail_once_in_its_place() {
        let (tenant, run_id) = ids();
        let at = |seq, version| {
            let mut r = run(seq, version);
            r.tenant = tenant.clone();
            r.id = run_id.clone();
            r
        };
        let item = |r: &Run, e: JournalEntry| {
            checkpoint_items(&tenant, &run_id, r, &[e], &[])
                .unwrap()
                .remove(0)
        };
        // Checkpoints at versions 3 and 5 in items, 6 in the tail (a delivery made 4,
        // then 7 moved the run on, keeping the tail).
        let mut current = at(7, 7);
        let tail = checkpoint_tail(&at(6, 6), &[entry("a#1", 3)], &[]).unwrap();
        let first = item(&at(3, 3), entry("a#1", 1));
        let second = item(&at(5, 5), entry("b#1", 1));
        let run_item = run_with_tail(&current, tail);
        let archived = archived_tail(&run_item).unwrap().unwrap();
        let sks = |items: &[Item]| {
            items
                .iter()
                .map(|i| get_s(i, SK, "test").unwrap().to_owned())
                .collect::<Vec<_>>()
        };
        // Not archived yet: the tail joins in its place, last here.
        let history = with_tail(vec![first.clone(), second.clone()], Some(&run_item)).unwrap();
        assert_eq!(
            sks(&history),
            sks(&[first.clone(), second.clone(), archived.clone()])
        );
        assert_eq!(journal_of(&history), vec![entry("a#1", 3), entry("b#1", 1)]);
        // Archived between the two reads, and a checkpoint of version 8 committed (as a
        // checkpoint item): the tail once, the later checkpoint not at all.
        let later = item(&at(8, 8), entry("a#1", 9));
        let read = vec![first.clone(), second.clone(), archived.clone(), later];
        let history = with_tail(read, Some(&run_item)).unwrap();
        assert_eq!(
            sks(&history),
            sks(&[first.clone(), second.clone(), archived.clone()])
        );
        assert_eq!(journal_of(&history), vec![entry("a#1", 3), entry("b#1", 1)]);
        // A tail older than a checkpoint item (a transaction's, which keeps the tail):
        // the later item's entry wins.
        current.version = 9;
        let tx_item = item(&at(8, 8), entry("a#1", 4));
        let run_item = run_with_tail(
            &current,
            checkpoint_tail(&at(6, 6), &[entry("a#1", 3)], &[]).unwrap(),
        );
        let history = with_tail(vec![first, tx_item], Some(&run_item)).unwrap();
        assert_eq!(journal_of(&history), vec![entry("a#1", 4)]);
        // No run item, nothing to add.
        assert!(with_tail(Vec::new(), None).unwrap().is_empty());
    }

    #[test]
    fn checkpoint_sort_keys_order_by_timeline_seq_then_version() {
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
    }
}
