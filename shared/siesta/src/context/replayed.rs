//! A run's replay input decoded as replay uses it: the journal by position, the
//! deliveries in order. What a pass starts from, whether read from the store or kept by
//! the replay cache (`crate::replay_cache`, which hands it back here).

use std::collections::HashMap;

use crate::model::{Delivery, JournalEntry, Position};
use crate::ports::ReplayInput;

/// A run's journal and deliveries, decoded, as replay uses them.
#[derive(Debug, Default)]
pub(crate) struct Replayed {
    /// Every journal entry, by position.
    pub journal: HashMap<Position, JournalEntry>,
    /// Every delivery, in `seq` order.
    pub deliveries: Vec<Delivery>,
}

impl From<ReplayInput> for Replayed {
    fn from(replay_input: ReplayInput) -> Self {
        Replayed {
            journal: replay_input
                .journal
                .into_iter()
                .map(|entry| (entry.position.clone(), entry))
                .collect(),
            deliveries: replay_input.deliveries,
        }
    }
}
