//! Step rate limits' turns: the two items a turn depends on read in one
//! `BatchGetItem` (the turn kept for the step, the key's last turn), the plan of
//! [`crate::layout`]'s `rate_turns.rs` sent, and, when another taker wrote first (its
//! condition failed), read and planned again.

use std::time::Duration;

use siesta::Timestamp;
use siesta::ports::*;

use super::DynamoStore;
use super::limits::{LINE_ATTEMPTS, line_backoff};
use super::reads::item_key;
use super::tx::TxOutcome;
use crate::layout::{
    self, Action, LAST_TURN, TURN, TurnReads, kept_turn_key, rate_key_item_key, turn_of,
};

impl DynamoStore {
    /// [`RunStore::take_rate_turn`].
    pub(super) async fn take_rate_turn(
        &self,
        key: &str,
        interval: Duration,
        holder: &StepSlotHolder,
        now: Timestamp,
    ) -> Result<RateTurn, StoreError> {
        let op = "take_rate_turn";
        let (key_key, kept_key) = (rate_key_item_key(key), kept_turn_key(key, holder));
        let (key_id, kept_id) = (item_key(&key_key)?, item_key(&kept_key)?);
        for attempt in 0..LINE_ATTEMPTS {
            if attempt > 0 {
                line_backoff(attempt).await;
            }
            let found = self
                .batch_get(op, vec![key_key.clone(), kept_key.clone()])
                .await?;
            let reads = TurnReads {
                kept: found.get(&kept_id).map(|i| turn_of(i, TURN)).transpose()?,
                last: found
                    .get(&key_id)
                    .map(|i| turn_of(i, LAST_TURN))
                    .transpose()?,
            };
            let (turn, plan) = layout::rate_turn(key, interval, holder, now, reads);
            let written = if plan.transaction().next().is_some() {
                match self.transact(op, &plan).await? {
                    TxOutcome::Committed => true,
                    TxOutcome::Cancelled(_) => false,
                    TxOutcome::NotWritten(e) => return Err(e),
                }
            } else if let Some(write) = plan.plain().next() {
                match write.action {
                    Action::Delete { .. } => self.delete_plain(op, write).await?,
                    _ => self.put_plain(op, write).await?,
                }
            } else {
                true
            };
            if written {
                return Ok(turn);
            }
        }
        Err(StoreError::Unavailable(format!(
            "{op}: the rate key {key} kept being taken by others ({LINE_ATTEMPTS} attempts)"
        )))
    }
}
