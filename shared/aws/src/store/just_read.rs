//! Items the store has just read or written, kept for the one read that follows them
//! in the same handling, so that it is not made twice: the run item a claim's write
//! returned, for the replay after it ([`RunStore::load_claimed_history`]), and the
//! callback record a webhook's lookup read, for the delivery after it.
//!
//! Each is taken once, and what it stands in for is a read whose staleness the reader
//! tolerates already: a replay's history as of the claimed version (its checkpoint is
//! conditioned on that version), a delivery's callback record (its write checks the
//! record is still open and in time, and is decided again on a fresh read if not).
//!
//! [`RunStore::load_claimed_history`]: siesta::ports::RunStore::load_claimed_history

use std::collections::HashMap;
use std::sync::Mutex;

use crate::item::Item;

/// How many items it keeps; past it, it forgets them all (a forgotten item costs the
/// read it would have saved).
const KEPT: usize = 1024;

/// Items by partition key, each taken at most once.
#[derive(Default)]
pub(crate) struct JustRead(Mutex<HashMap<String, Item>>);

impl JustRead {
    /// Keep `item`, read or written under partition key `pk`, for the next [`take`].
    ///
    /// [`take`]: JustRead::take
    pub(super) fn keep(&self, pk: String, item: Item) {
        let mut kept = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if kept.len() >= KEPT {
            kept.clear();
        }
        kept.insert(pk, item);
    }

    /// The item kept under `pk`, no longer kept.
    pub(super) fn take(&self, pk: &str) -> Option<Item> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).remove(pk)
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
    }

    #[test]
    fn past_its_bound_it_forgets_rather_than_grows() {
        let kept = JustRead::default();
        for i in 0..=KEPT {
            kept.keep(i.to_string(), item("x"));
        }
        assert_eq!(
            kept.take(&KEPT.to_string()),
            Some(item("x")),
            "the last kept"
        );
        assert_eq!(kept.take("0"), None, "the earlier ones forgotten");
    }
}
