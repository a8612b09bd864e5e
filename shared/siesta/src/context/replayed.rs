//! A run's replay input decoded as replay uses it: the journal by position, the
//! deliveries in order. What a pass starts from, whether read from the store or kept by
//! the replay cache (`crate::replay_cache`, which hands it back here).

use std::collections::HashMap;

use crate::model::{Delivery, JournalEntry, Position};
use crate::ports::ReplayInput;

/// A run's journal and deliveries, decoded, as replay uses them.
#[derive(Debug, Default)]
pub(crate) struct Replayed {
    /// Every journal entry replay uses, by position.
    pub journal: HashMap<Position, JournalEntry>,
    /// The entries a restart superseded ([`JournalEntry::superseded`]), by position: never
    /// replayed, looked at only where an operation is done again after the restart
    /// (see `carried`).
    pub superseded: HashMap<Position, JournalEntry>,
    /// Every delivery, in `seq` order.
    pub deliveries: Vec<Delivery>,
}

impl Replayed {
    /// Put back among the live entries those marked by a restart the run has not had
    /// yet (its marks landed, its final write did not: see `engine::restart`), for a
    /// run that has had `restarts` restarts.
    pub(crate) fn live_for(&mut self, restarts: u32) {
        let pending: Vec<Position> = self
            .superseded
            .iter()
            .filter(|(_, e)| !e.is_superseded(restarts))
            .map(|(p, _)| p.clone())
            .collect();
        for position in pending {
            if let Some(entry) = self.superseded.remove(&position) {
                self.journal.entry(position).or_insert(entry);
            }
        }
    }
}

impl From<ReplayInput> for Replayed {
    fn from(replay_input: ReplayInput) -> Self {
        let (superseded, journal): (Vec<_>, Vec<_>) = replay_input
            .journal
            .into_iter()
            .partition(|entry| entry.superseded.is_some());
        let by_position = |entries: Vec<JournalEntry>| {
            entries
                .into_iter()
                .map(|entry| (entry.position.clone(), entry))
                .collect()
        };
        Replayed {
            journal: by_position(journal),
            superseded: by_position(superseded),
            deliveries: replay_input.deliveries,
        }
    }
}
