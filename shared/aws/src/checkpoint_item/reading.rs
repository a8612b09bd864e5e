//! A run's checkpoint items and deliveries read back: timeline events, journal entries, the
//! journal as the last item holding each position says.

use std::collections::HashMap;

use serde::Deserialize;
use siesta::ports::StoreError;
use siesta::*;

use super::packing::unpack;
use super::{EVENTS, JOURNAL};
use crate::error::corrupt;
use crate::item::{Item, from_json, get_s};
use crate::keys::*;

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

/// One item of a run's replay input: a checkpoint item or a delivery.
pub(crate) enum ReplayItem {
    /// A checkpoint item's journal entries (its events are not read).
    Checkpoint(Vec<JournalEntry>),
    /// A delivery.
    Delivery(Delivery),
}

/// What `item`, found under [`REPLAY_INPUT_PREFIX`], holds for a replay.
pub(crate) fn replay_item(item: &Item) -> Result<ReplayItem, StoreError> {
    let sk = get_s(item, SK, "replay input")?;
    if sk.starts_with(CHECKPOINT_PREFIX) {
        const WHAT: &str = "checkpoint's journal entries";
        if let Some(packed) = unpack::<PackedJournal>(item, WHAT)? {
            return Ok(ReplayItem::Checkpoint(packed.journal));
        }
        Ok(ReplayItem::Checkpoint(match item.get(JOURNAL) {
            Some(_) => {
                serde_json::from_str(get_s(item, JOURNAL, WHAT)?).map_err(|e| corrupt(WHAT, e))?
            }
            None => Vec::new(),
        }))
    } else if sk.starts_with(DELIVERY_PREFIX) {
        Ok(ReplayItem::Delivery(from_json(item, "delivery")?))
    } else {
        Err(corrupt("replay input", format!("unexpected sort key {sk}")))
    }
}

/// A run's journal gathered from its checkpoint items in sort-key order: an entry read
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

    /// Adds what an item of the replay input holds of the journal; a delivery is handed back.
    pub(crate) fn take(&mut self, item: ReplayItem) -> Option<Delivery> {
        match item {
            ReplayItem::Checkpoint(entries) => entries.into_iter().for_each(|e| self.push(e)),
            ReplayItem::Delivery(delivery) => return Some(delivery),
        }
        None
    }

    /// The entries, one per position.
    pub(crate) fn into_entries(self) -> Vec<JournalEntry> {
        self.entries
    }
}
