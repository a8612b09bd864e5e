//! The history tail: a step's checkpoint kept in the run item, packed, archived as the
//! checkpoint item it stands for when the next one replaces it, and read back with it.

use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;
use serde::Deserialize;
use siesta::ports::StoreError;
use siesta::*;

use super::PACKED;
use super::packing::{entries_and_events, in_parts, inflate, pack, tagged_json, unpack};
use crate::error::corrupt;
use crate::item::{Item, TAIL, TAIL_SK, VERSION, get_n, get_s, item_size, key, s};
use crate::keys::*;

/// How many checkpoints a history tail holds at most: the checkpoint that would add one
/// more archives it instead (a write request per this many steps).
pub(crate) const TAIL_CHECKPOINTS: u64 = 3;
/// How many bytes a history tail holds at most, deflated: every write of the run item
/// is billed for it, so a checkpoint that would take it past this archives it instead.
pub(crate) const TAIL_BYTES: usize = 1024;

/// Whether a history tail under `sk` (holding journal entries or not) may be joined by,
/// or taken into, a write conditioned on the run at `version` with its timeline at
/// `timeline_seq`: when its last checkpoint made `version` (nothing was written
/// since), or when it holds deliveries' events alone and no event was written since (a
/// claim, which writes none, may have come between). Either way no item sorts between
/// the tail and the write, and the seqs the item it becomes holds overlap no other
/// item's: a replay's journal (the later entry at a position wins) and the timeline's
/// paging (each kind of item read in seq order) rely on both.
pub(super) fn may_take(sk: &str, has_entries: bool, version: u64, timeline_seq: u64) -> bool {
    checkpoint_version(sk) == Some(version)
        || (!has_entries && checkpoint_seq(sk) == Some(timeline_seq))
}

/// A history tail as it is deflated ([`pack`]): the entries and events of its
/// checkpoints in the order they were written (what an archived tail holds,
/// [`PACKED`]), and how many checkpoints they are. Read to join one more, so each
/// entry and event is kept as JSON.
#[derive(Deserialize, PartialEq)]
pub(super) struct PackedTail {
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
