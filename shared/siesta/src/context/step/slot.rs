//! A step attempt's slot of a step limit: taken before the attempt runs, given back
//! when it ends; over the limit, the run suspends until a slot is handed to it. And its
//! turn under a rate limit: before its turn, the run suspends until then.

use super::*;
use crate::ports::{HandedSlot, RateTurn, StepSlot, StepSlotHolder, WakeReason, WakeUp};
use crate::time::Timestamp;

/// The step limit a step's attempts count against: its key and the max its code
/// declares (the deployment's `--limits` may set another).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StepLimit {
    key: String,
    max: u32,
}

impl StepLimit {
    /// # Panics
    /// When `key` is empty or `max` is 0: a mistake in the workflow's code.
    pub(super) fn new(key: &str, max: u32) -> Self {
        assert!(!key.is_empty(), "a step limit needs a key");
        assert!(
            max > 0,
            "the step limit {key} must let at least one attempt run"
        );
        StepLimit {
            key: key.to_owned(),
            max,
        }
    }
}

/// The rate limit a step's attempts go by: its key and the time between two turns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StepRate {
    key: String,
    interval: std::time::Duration,
}

impl StepRate {
    /// # Panics
    /// When `key` is empty, `n` is 0 or `per` is zero: a mistake in the workflow's code.
    pub(super) fn new(key: &str, n: u32, per: std::time::Duration) -> Self {
        assert!(!key.is_empty(), "a rate limit needs a key");
        assert!(
            n > 0 && !per.is_zero(),
            "the rate limit {key} must let attempts run"
        );
        StepRate {
            key: key.to_owned(),
            interval: per / n,
        }
    }
}

/// A slot held by the attempt about to run: give it back when the attempt ends.
pub(super) struct HeldSlot {
    key: String,
    max: u32,
    holder: StepSlotHolder,
}

/// Whether the attempt may run now.
pub(super) enum Turn {
    /// It holds a slot.
    Go(HeldSlot),
    /// Every slot is held: look again by then (a slot handed over wakes the run
    /// sooner); its place in line, when the store said.
    WaitUntil(Timestamp, Option<u64>),
}

impl Context {
    /// Take a slot of `limit` for the attempt of the step at `op`. A store that fails
    /// is looked at again soon rather than failing the run.
    pub(super) async fn take_step_slot(&self, limit: &StepLimit, op: &Op) -> Turn {
        let config = &self.shared.config;
        let max = config
            .limits
            .0
            .get(&limit.key)
            .copied()
            .unwrap_or(limit.max);
        let holder = self.step_holder(op);
        let now = self.shared.now();
        let look_again = now.plus(config.lease_ttl / 2);
        match self
            .shared
            .backend
            .store
            .take_step_slot(&limit.key, max, &holder, now, config.lease_ttl)
            .await
        {
            Ok((slot, handed)) => {
                self.wake_handed(&handed).await;
                match slot {
                    StepSlot::Held => Turn::Go(HeldSlot {
                        key: limit.key.clone(),
                        max,
                        holder,
                    }),
                    StepSlot::Queued { position } => {
                        tracing::info!(run_id = %holder.run_id, position = %op.position, limit = %limit.key, place = position, "step waits for a slot of its limit");
                        Turn::WaitUntil(look_again, Some(position))
                    }
                }
            }
            Err(e) => {
                tracing::warn!(run_id = %holder.run_id, position = %op.position, limit = %limit.key, error = %e, "step slot not taken; looking again");
                Turn::WaitUntil(now.plus(std::time::Duration::from_secs(1)), None)
            }
        }
    }

    /// The turn of the attempt of the step at `op` under `rate`: `None` to run now, or
    /// when to come back. A store that fails is asked again soon.
    pub(super) async fn take_rate_turn(&self, rate: &StepRate, op: &Op) -> Option<Timestamp> {
        let holder = self.step_holder(op);
        let now = self.shared.now();
        match self
            .shared
            .backend
            .store
            .take_rate_turn(&rate.key, rate.interval, &holder, now)
            .await
        {
            Ok(RateTurn::Now) => None,
            Ok(RateTurn::At(turn)) => {
                tracing::info!(run_id = %holder.run_id, position = %op.position, rate = %rate.key, turn_ms = turn.0, "step waits for its turn under its rate limit");
                Some(turn)
            }
            Err(e) => {
                tracing::warn!(run_id = %holder.run_id, position = %op.position, rate = %rate.key, error = %e, "rate turn not taken; asking again");
                Some(now.plus(std::time::Duration::from_secs(1)))
            }
        }
    }

    /// Give back the slot `held` (its attempt ended), waking the run it goes to. A
    /// store that fails leaves the slot to lapse with this run's lease.
    pub(super) async fn give_back_step_slot(&self, held: HeldSlot) {
        let config = &self.shared.config;
        match self
            .shared
            .backend
            .store
            .give_back_step_slot(
                &held.key,
                held.max,
                &held.holder,
                self.shared.now(),
                config.lease_ttl,
            )
            .await
        {
            Ok(handed) => self.wake_handed(&handed).await,
            Err(e) => {
                tracing::warn!(run_id = %held.holder.run_id, limit = %held.key, error = %e, "step slot not given back; it lapses with the lease")
            }
        }
    }

    /// Note in the timeline that the attempt of the step at `op` waits (`reason`:
    /// `rate` or `limit`) under `key` until `until`: the suspension writes it.
    pub(super) fn note_delayed(
        &self,
        op: &Op,
        sub: SubType,
        reason: &str,
        key: &str,
        until: Timestamp,
        place: Option<u64>,
    ) {
        let event = self.event(
            EventType::StepDelayed,
            sub,
            op,
            crate::timeline::EventDetails::StepDelayed(crate::timeline::StepDelayed {
                reason: reason.to_owned(),
                key: key.to_owned(),
                until,
                place,
            }),
        );
        self.shared.state().pending_events.push(event);
    }

    /// The key of a rate limit and of a step limit, for the timeline.
    pub(super) fn rate_key(rate: &StepRate) -> &str {
        &rate.key
    }

    /// See [`Context::rate_key`].
    pub(super) fn limit_key(limit: &StepLimit) -> &str {
        &limit.key
    }

    /// The attempt of the step at `op`, as a step slot or a rate turn is held for it.
    fn step_holder(&self, op: &Op) -> StepSlotHolder {
        StepSlotHolder {
            tenant: self.shared.tenant.clone(),
            run_id: self.shared.run_id.clone(),
            position: op.position.clone(),
            epoch: self.shared.epoch(),
        }
    }

    /// Wake the runs a step slot was handed to; a lost send is healed by the sweep (the
    /// run is due) or by its own next look.
    async fn wake_handed(&self, handed: &[HandedSlot]) {
        for run in handed {
            let wake = WakeUp::new(run.tenant.clone(), run.run_id.clone(), WakeReason::Timer);
            if let Err(e) = self
                .shared
                .backend
                .queue
                .send(&wake, std::time::Duration::ZERO)
                .await
            {
                tracing::warn!(run_id = %run.run_id, error = %e, "wake-up for a run handed a step slot not sent");
            }
        }
    }
}
