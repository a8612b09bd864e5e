//! Step rate limits' turns in the table ([`siesta::ports::RunStore::take_rate_turn`]):
//! the writes that give an attempt its turn, from what the store read.
//!
//! Two kinds of item, in the rate key's own partition ([`rate_key_pk`]):
//! - the **key** item ([`RECORD_SK`]): the last turn given (`last_turn`);
//! - a **kept turn** per run's step waiting for its turn ([`rate_turn_sk`]): the turn
//!   (`turn`), deleted when used, and let go by the table's TTL ([`EXPIRES_AT`]) an hour
//!   after its turn if its run never comes back for it.
//!
//! The invariant: no two attempts get the same turn, and turns are `interval` apart.
//! It holds under any interleaving because every write is conditioned on what the plan
//! decided from: the key item is written on the `last_turn` read (or on there being
//! none), so of two racing takers one fails and reads again; a kept turn is inserted on
//! `attribute_not_exists` and deleted on the turn read, so it is used once. A plan that
//! gives a new turn writes the key item alone when the turn is now (one conditional
//! `PutItem`), else the key item and the kept turn in one `TransactWriteItems`; a plan
//! that uses a kept turn deletes it alone (one conditional `DeleteItem`); a plan that
//! finds a kept turn still to come writes nothing.

use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use siesta::Timestamp;
use siesta::ports::{RateTurn, StepSlotHolder, StoreError};

use super::{Action, Billed, Condition, PlannedWrite, Role, WritePlan, names};
use crate::item::*;
use crate::keys::*;

/// The key item's attribute: the last turn given (ms since the epoch).
pub(crate) const LAST_TURN: &str = "last_turn";
/// A kept turn's attribute: the turn (ms since the epoch).
pub(crate) const TURN: &str = "turn";

/// How long a kept turn (and a key item) outlives its instant before the table's TTL
/// lets it go: a kept turn's run finished or was cancelled without coming back for it.
pub(crate) const FORGOTTEN_AFTER: Duration = Duration::from_secs(3600);

/// The key of a rate key's item.
pub(crate) fn rate_key_item_key(rate_key: &str) -> Item {
    key(rate_key_pk(rate_key), RECORD_SK)
}

/// The key of the turn kept for `holder`'s step under a rate key.
pub(crate) fn kept_turn_key(rate_key: &str, holder: &StepSlotHolder) -> Item {
    key(
        rate_key_pk(rate_key),
        rate_turn_sk(&holder.tenant, &holder.run_id, &holder.position),
    )
}

/// What the store read for a turn: the turn kept for the step and the key's last turn
/// (`None`: no such item).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct TurnReads {
    /// The turn kept for the step.
    pub(crate) kept: Option<Timestamp>,
    /// The key's last turn.
    pub(crate) last: Option<Timestamp>,
}

/// The instant an item read back holds under `attribute`.
pub(crate) fn turn_of(item: &Item, attribute: &str) -> Result<Timestamp, StoreError> {
    Ok(Timestamp(get_n(item, attribute, "rate turn")?))
}

/// The TTL (seconds since the epoch) of an item let go `after` past `at`.
fn expiry(at: Timestamp, after: Duration) -> AttributeValue {
    n((at.0.max(0) as u64 / 1000).saturating_add(after.as_secs()))
}

/// The turn of `holder`'s attempt under `rate_key`, whose turns are `interval` apart,
/// at `now`, and the writes that give it, from `reads`: the kept turn if there is one
/// (used when it has come), else the later of `now` and the last turn plus `interval`
/// (kept when still to come).
pub(crate) fn rate_turn(
    rate_key: &str,
    interval: Duration,
    holder: &StepSlotHolder,
    now: Timestamp,
    reads: TurnReads,
) -> (RateTurn, WritePlan) {
    if let Some(turn) = reads.kept {
        if turn > now {
            return (RateTurn::At(turn), WritePlan::default());
        }
        let used = PlannedWrite {
            role: Role::RateTurn,
            billed: Billed::Bytes(item_size(&kept_item(rate_key, holder, turn))),
            action: Action::Delete {
                key: kept_turn_key(rate_key, holder),
            },
            condition: Some(on_turn(TURN, turn)),
            transactional: false,
            run_after: None,
        };
        return (RateTurn::Now, WritePlan { writes: vec![used] });
    }
    let turn = reads.last.map_or(now, |last| last.plus(interval).max(now));
    let later = turn > now;
    let mut key_item = rate_key_item_key(rate_key);
    key_item.insert(LAST_TURN.into(), n(turn.0));
    key_item.insert(EXPIRES_AT.into(), expiry(turn, interval + FORGOTTEN_AFTER));
    let condition = match reads.last {
        Some(last) => on_turn(LAST_TURN, last),
        None => Condition::new_item(),
    };
    let mut writes = vec![PlannedWrite::put(
        Role::RateKey,
        key_item,
        Some(condition),
        later,
    )];
    if later {
        writes.push(PlannedWrite::insert(
            Role::RateTurn,
            kept_item(rate_key, holder, turn),
        ));
        return (RateTurn::At(turn), WritePlan { writes });
    }
    (RateTurn::Now, WritePlan { writes })
}

/// The item of a turn kept for `holder`'s step.
fn kept_item(rate_key: &str, holder: &StepSlotHolder, turn: Timestamp) -> Item {
    let mut item = kept_turn_key(rate_key, holder);
    item.insert(TURN.into(), n(turn.0));
    item.insert(EXPIRES_AT.into(), expiry(turn, FORGOTTEN_AFTER));
    item
}

/// That the item's `attribute` is the turn `turn` read.
fn on_turn(attribute: &str, turn: Timestamp) -> Condition {
    Condition {
        expression: "#turn = :turn".into(),
        names: names(&[("#turn", attribute)]),
        values: [(":turn".to_owned(), n(turn.0))].into_iter().collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use siesta::{FencingEpoch, Position, RunId, TenantId};

    const EVERY: Duration = Duration::from_millis(100);
    const NOW: Timestamp = Timestamp(1_000_000);

    fn holder(run: &str) -> StepSlotHolder {
        StepSlotHolder {
            tenant: TenantId("t".into()),
            run_id: RunId(run.into()),
            position: Position("call#0".into()),
            epoch: FencingEpoch(1),
        }
    }

    fn put_item(write: &PlannedWrite) -> &Item {
        write.item().expect("a put")
    }

    #[test]
    fn a_first_turn_is_now_and_only_the_key_item_is_written_on_its_absence() {
        // GIVEN a key never used WHEN an attempt asks
        let (turn, plan) = rate_turn("rpm", EVERY, &holder("a"), NOW, TurnReads::default());
        // THEN its turn is now: the key item alone, plain, on there being none
        assert_eq!(turn, RateTurn::Now);
        assert_eq!(plan.writes.len(), 1);
        let write = &plan.writes[0];
        assert_eq!((write.role, write.transactional), (Role::RateKey, false));
        assert_eq!(write.condition, Some(Condition::new_item()));
        assert_eq!(put_item(write).get(LAST_TURN), Some(&n(NOW.0)));
        assert_eq!(
            put_item(write).get(EXPIRES_AT),
            Some(&n(NOW.0 as u64 / 1000 + 3600))
        );
    }

    #[test]
    fn a_turn_still_to_come_is_kept_in_one_transaction_on_the_last_turn_read() {
        // GIVEN the key's last turn is now WHEN another attempt asks
        let reads = TurnReads {
            kept: None,
            last: Some(NOW),
        };
        let (turn, plan) = rate_turn("rpm", EVERY, &holder("b"), NOW, reads);
        // THEN its turn is an interval later, kept for it, both in the transaction
        let at = NOW.plus(EVERY);
        assert_eq!(turn, RateTurn::At(at));
        assert_eq!(plan.transaction().count(), 2);
        let key_write = plan.of(Role::RateKey).unwrap();
        assert_eq!(put_item(key_write).get(LAST_TURN), Some(&n(at.0)));
        let condition = key_write.condition.as_ref().unwrap();
        assert_eq!(condition.expression, "#turn = :turn");
        assert_eq!(
            condition.names.get("#turn").map(String::as_str),
            Some(LAST_TURN)
        );
        assert_eq!(condition.values.get(":turn"), Some(&n(NOW.0)));
        let kept = plan.of(Role::RateTurn).unwrap();
        assert_eq!(kept.condition, Some(Condition::new_item()));
        let item = put_item(kept);
        assert_eq!(item.get(TURN), Some(&n(at.0)));
        assert_eq!(item.get(EXPIRES_AT), Some(&n(at.0 as u64 / 1000 + 3600)));
        assert_eq!(Some(&kept_turn_key("rpm", &holder("b"))[SK]), item.get(SK));
    }

    #[test]
    fn a_last_turn_long_past_gives_a_turn_now() {
        let reads = TurnReads {
            kept: None,
            last: Some(Timestamp(NOW.0 - 5_000)),
        };
        let (turn, plan) = rate_turn("rpm", EVERY, &holder("c"), NOW, reads);
        assert_eq!(turn, RateTurn::Now);
        assert_eq!(plan.writes.len(), 1);
        assert!(!plan.writes[0].transactional);
    }

    #[test]
    fn a_kept_turn_is_given_again_until_it_comes_then_used_once() {
        let at = NOW.plus(EVERY);
        let reads = TurnReads {
            kept: Some(at),
            last: Some(NOW.plus(EVERY * 3)),
        };
        // WHEN asked before its turn THEN the same turn, nothing written
        let (turn, plan) = rate_turn("rpm", EVERY, &holder("d"), NOW, reads);
        assert_eq!((turn, plan.writes.len()), (RateTurn::At(at), 0));
        // WHEN asked at its turn THEN now, the kept turn deleted on the turn read
        let (turn, plan) = rate_turn("rpm", EVERY, &holder("d"), at, reads);
        assert_eq!(turn, RateTurn::Now);
        assert_eq!(plan.writes.len(), 1);
        let used = &plan.writes[0];
        assert_eq!((used.role, used.transactional), (Role::RateTurn, false));
        assert_eq!(
            used.action,
            Action::Delete {
                key: kept_turn_key("rpm", &holder("d"))
            }
        );
        assert_eq!(
            used.condition.as_ref().unwrap().values.get(":turn"),
            Some(&n(at.0))
        );
    }

    #[test]
    fn steps_of_different_runs_keep_their_turns_apart_under_one_key() {
        let a = kept_turn_key("k#1", &holder("a"));
        let b = kept_turn_key("k#1", &holder("a#b"));
        assert_eq!(a[PK], b[PK]);
        assert_ne!(a[SK], b[SK]);
        assert_ne!(rate_key_pk("k#1"), rate_key_pk("k%231"));
    }
}
