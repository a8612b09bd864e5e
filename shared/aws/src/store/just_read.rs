//! Items the store has just read or written, kept for the one read that follows them
//! in the same handling, so that it is not made twice: the run item a claim's write
//! returned, for the replay after it ([`RunStore::load_claimed_replay_input`]), and the
//! callback record a webhook's lookup read, for the delivery after it.
//!
//! Each is taken once, and what it stands in for is a read whose staleness the reader
//! tolerates already: a replay's history as of the claimed version (its checkpoint is
//! conditioned on that version), a delivery's callback record (its write checks the
//! record is still open and in time, and is decided again on a fresh read if not).
//!
//! [`RunStore::load_claimed_replay_input`]: siesta::ports::RunStore::load_claimed_replay_input

use std::collections::HashMap;
use std::sync::Mutex;

use crate::item::{Item, item_size};

/// How many bytes of items it keeps; past it, it forgets them all (a forgotten item
/// costs the read it would have saved). Bounded in bytes, not items: a run item holds
/// the run's input inline up to 32 KB, and a claimed item is not taken at all when the
/// replay continues from the engine's cache.
const KEPT_BYTES: usize = 4 << 20;

/// Items by partition key, each taken at most once.
#[derive(Default)]
pub(crate) struct JustRead(Mutex<Kept>);

/// The items kept and their size.
#[derive(Default)]
pub(crate) struct Kept {
    items: HashMap<String, Item>,
    bytes: usize,
}

impl JustRead {
    /// Keep `item`, read or written under partition key `pk`, for the next [`take`].
    ///
    /// [`take`]: JustRead::take
    pub(super) fn keep(&self, pk: String, item: Item) {
        let mut kept = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let size = item_size(&item);
        if kept.bytes + size > KEPT_BYTES {
            *kept = Kept::default();
        }
        kept.bytes += size;
        if let Some(replaced) = kept.items.insert(pk, item) {
            kept.bytes -= item_size(&replaced);
        }
    }

    /// The item kept under `pk`, no longer kept.
    pub(super) fn take(&self, pk: &str) -> Option<Item> {
        let mut kept = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let item = kept.items.remove(pk)?;
        kept.bytes -= item_size(&item);
        Some(item)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_dynamodb::types::AttributeValue;

    fn item(v: &str) -> Item {
        HashMap::from([("v".to_owned(), AttributeValue::S(v.to_owned()))])
    }

    #[test]
    fn an_item_is_taken_once_and_the_latest_kept_wins() {
        let kept = JustRead::default();
        kept.keep("a".into(), item("1"));
        kept.keep("a".into(), item("2"));
        assert_eq!(kept.take("a"), Some(item("2")));
        assert_eq!(kept.take("a"), None);
        assert_eq!(kept.take("b"), None);
        assert_eq!(kept.0.lock().unwrap().bytes, 0);
    }

    #[test]
    fn past_its_bound_in_bytes_it_forgets_rather_than_grows() {
        let kept = JustRead::default();
        let large = item(&"x".repeat(32 << 10));
        let fit = KEPT_BYTES / item_size(&large);
        for i in 0..=fit {
            kept.keep(i.to_string(), large.clone());
        }
        assert_eq!(kept.take(&fit.to_string()), Some(large), "the last kept");
        assert_eq!(kept.take("0"), None, "the earlier ones forgotten");
        let held = kept.0.lock().unwrap();
        assert_eq!(held.bytes, 0, "bytes counted down as items are taken");
        assert!(held.items.is_empty());
    }
}
