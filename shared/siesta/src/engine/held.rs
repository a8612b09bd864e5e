//! Starts held back until an instant (docs/flow-control.md): a debounce gathering the
//! starts that share its key into one queued run, a start rate queuing a start until
//! its turn, and the wake-up that releases such a run when its instant comes. The
//! rules are [`crate::flow::held`]'s; this is where they meet the store.

use std::time::Duration;

use super::start::{StartOptions, Started};
use super::{Engine, EngineError};
use crate::flow::held::{Debounce, StartRate};
use crate::lifecycle::{LifecycleEvent, decide};
use crate::model::*;
use crate::ports::*;
use crate::quota::{QuotaLimit, check_size, json_size};
use crate::time::Timestamp;
use crate::timeline as tl;

/// How many times a start goes round when other starts of its key keep writing first
/// (each round is a read and a conditional write; a round is lost only to a write
/// that made progress).
const DEBOUNCE_ROUNDS: usize = 16;

/// How long a debounce's entry is kept past the last instant its run could take a
/// start: long enough that no start finds it missing while its run is still open.
const ENTRY_KEPT: Duration = Duration::from_secs(3600);

impl Engine {
    /// A start of `workflow` under `debounce`: joins the run its key's entry points to
    /// when that run still gathers starts, else creates one (queued, released a
    /// period on) and points the entry at it. Races with other starts of the key are
    /// settled by the store's conditions: the entry's version, the run's version, and
    /// the create of a run id that exists already — whoever loses reads again.
    pub(super) async fn start_debounced(
        &self,
        tenant: &TenantId,
        workflow: &str,
        debounce: &Debounce,
        input: serde_json::Value,
        options: StartOptions,
        now: Timestamp,
    ) -> Result<Started, EngineError> {
        if options.run_id.is_some() {
            return Err(EngineError::InvalidInput(format!(
                "the debounce {} gathers the starts of {workflow} into runs it names: such a start takes no run id (or Idempotency-Key)",
                debounce.name()
            )));
        }
        let key = debounce
            .key_of(&input, options.concurrency_key.as_deref())
            .map_err(EngineError::InvalidInput)?;
        let store = &self.backend.store;
        let keep_until = now.plus(debounce.max_delay_after_first() + ENTRY_KEPT);
        for _ in 0..DEBOUNCE_ROUNDS {
            let entry = store
                .get_debounce_entry(tenant, debounce.name(), &key)
                .await?;
            let pointed = match &entry {
                Some(entry) => store.get_run(tenant, &entry.run_id).await?,
                None => None,
            };
            let run_id = match (entry, pointed) {
                (Some(entry), Some(run)) => {
                    if let Some(hold) = debounce.join(&run, &key, now) {
                        match self.join(&run, hold, debounce, &key, &input, now).await? {
                            Joined::Into(joined) => {
                                return Ok(Started {
                                    run: *joined,
                                    joined: true,
                                });
                            }
                            Joined::Raced => continue,
                            Joined::TooLarge => {}
                        }
                    }
                    // It began (or is full, or past its delay, or would outgrow the input
                    // quota): the key's next run.
                    let fresh = RunId::generate();
                    match store
                        .put_debounce_entry(
                            tenant,
                            debounce.name(),
                            &key,
                            &fresh,
                            entry.version,
                            keep_until,
                        )
                        .await
                    {
                        Ok(_) => fresh,
                        Err(StoreError::Conflict(_)) => continue,
                        Err(e) => return Err(e.into()),
                    }
                }
                // The entry names a run not created yet (a start that wrote the entry
                // is creating it, or died before): create it; if that start is first,
                // this one finds it created and joins.
                (Some(entry), None) => entry.run_id,
                (None, _) => {
                    let fresh = RunId::generate();
                    match store
                        .put_debounce_entry(tenant, debounce.name(), &key, &fresh, 0, keep_until)
                        .await
                    {
                        Ok(_) => fresh,
                        Err(StoreError::Conflict(_)) => continue,
                        Err(e) => return Err(e.into()),
                    }
                }
            };
            let gathered = match debounce.batch_size() {
                Some(_) => serde_json::Value::Array(vec![input.clone()]),
                None => input.clone(),
            };
            let payload = self.encode(tenant, &run_id, &gathered).await?;
            let (mut run, started) = self.new_run(tenant, run_id, workflow, payload, &options, now);
            hold(
                &mut run,
                debounce.first_hold(&key, now),
                self.start_margin(),
            );
            match self.create(run, &started, now).await {
                Ok(run) => {
                    return Ok(Started { run, joined: false });
                }
                Err(EngineError::AlreadyExists) => continue,
                Err(e) => return Err(e),
            }
        }
        Err(StoreError::Unavailable(format!(
            "the debounce {} for key {key:?}: other starts kept writing first; try again",
            debounce.name()
        ))
        .into())
    }

    /// Gather a start of `input` into the queued `run` with its new `hold`: one
    /// conditional write on the run's version (so a run released meanwhile takes
    /// nothing), with a `StartJoined` event; then the wake-up for its new release.
    /// [`Joined::Raced`] when another write came first (read again). A batch that would
    /// outgrow the input quota is not joined ([`Joined::TooLarge`]): the start begins
    /// the key's next batch, and this one is released at its time, as it is.
    async fn join(
        &self,
        run: &Run,
        hold: HeldStart,
        debounce: &Debounce,
        key: &str,
        input: &serde_json::Value,
        now: Timestamp,
    ) -> Result<Joined, EngineError> {
        let mut next = run.clone();
        if debounce.batch_size().is_some() {
            let mut gathered: Vec<serde_json::Value> =
                crate::context::decode_payload(&self.backend, &run.input)
                    .await
                    .map_err(|e| StoreError::Unavailable(format!("a batch's input: {e}")))?;
            gathered.push(input.clone());
            let gathered = serde_json::Value::Array(gathered);
            let quota = self.config.quotas.for_tenant(&run.tenant);
            if check_size(
                QuotaLimit::InputBytes,
                "the batch",
                json_size(&gathered),
                quota.max_input_bytes,
            )
            .is_err()
            {
                return Ok(Joined::TooLarge);
            }
            next.input = self.encode(&run.tenant, &run.id, &gathered).await?;
        } else {
            next.input = self.encode(&run.tenant, &run.id, input).await?;
        }
        let HoldReason::Debounce { starts, .. } = &hold.reason else {
            return Ok(Joined::Raced);
        };
        let joined = tl::StartJoined {
            debounce: debounce.name().to_owned(),
            key: key.to_owned(),
            starts: *starts,
            release_at: hold.until,
        };
        next.due_at = Some(hold.until);
        next.held = Some(hold);
        Ok(match self.write_join(run, next, joined, now).await? {
            Some(run) => Joined::Into(Box::new(run)),
            None => Joined::Raced,
        })
    }

    /// Write `next` over the queued `run` (its version + 1, with the `StartJoined`
    /// event), then send the wake-up for its release. `None` when another write came
    /// first.
    async fn write_join(
        &self,
        run: &Run,
        mut next: Run,
        joined: tl::StartJoined,
        now: Timestamp,
    ) -> Result<Option<Run>, EngineError> {
        next.version += 1;
        next.updated_at = now;
        next.resend_after = next.due_at.map(|due| due.plus(self.start_margin()));
        next.timeline_seq += 1;
        let mut checkpoint = Checkpoint::new(next.clone(), run.version, None);
        checkpoint.timeline.push(TimelineEvent {
            seq: next.timeline_seq,
            at: now,
            event_type: EventType::StartJoined,
            sub_type: None,
            id: None,
            parent_id: None,
            name: Some(next.workflow.clone()),
            details: tl::EventDetails::StartJoined(joined).to_value(),
        });
        match self.backend.store.checkpoint(&checkpoint).await {
            Ok(()) => {}
            Err(StoreError::Conflict(_)) => return Ok(None),
            Err(e) => return Err(e.into()),
        }
        self.send_release(&next, now).await;
        Ok(Some(next))
    }

    /// Hold `run` for its turn under `rate` when the turn is not now: queued until it
    /// comes (the turn is kept for the run, so a retried start finds the same one).
    pub(super) async fn hold_for_turn(
        &self,
        run: &mut Run,
        rate: &StartRate,
        input: &serde_json::Value,
        options: &StartOptions,
        now: Timestamp,
    ) -> Result<(), EngineError> {
        let key = rate
            .key_of(input, options.concurrency_key.as_deref())
            .map_err(EngineError::InvalidInput)?;
        let holder = StepSlotHolder {
            tenant: run.tenant.clone(),
            run_id: run.id.clone(),
            position: Position("start".to_owned()),
            epoch: FencingEpoch(0),
        };
        // The deployment's own maximum (`--limits`), as for a concurrency limit.
        let max = self.config.limits.max_for(rate.name(), rate.max());
        let turn = self
            .backend
            .store
            .take_rate_turn(
                &rate.turns_key(&run.tenant, &key),
                rate.per() / max.max(1),
                &holder,
                now,
            )
            .await?;
        if let RateTurn::At(until) = turn {
            let reason = HoldReason::Rate {
                name: rate.name().to_owned(),
                key,
            };
            hold(run, HeldStart { reason, until }, self.start_margin());
        }
        Ok(())
    }

    /// Send the wake-up that releases the held `run` at its instant.
    pub(super) async fn send_release(&self, run: &Run, now: Timestamp) {
        let until = run.held.as_ref().map_or(now, |h| h.until);
        self.send_start_after(run, now.until(until)).await;
    }

    /// Release the held `run`, its instant come: it becomes pending and due now, with
    /// a `StartReleased` event, in one write on its version. `None` when another write
    /// came first (a start joined it and moved its release: its own wake-up comes).
    pub(super) async fn release(
        &self,
        run: &Run,
        now: Timestamp,
    ) -> Result<Option<Run>, EngineError> {
        let Some(held) = &run.held else {
            return Ok(None);
        };
        let mut next = run.clone();
        next.status = decide(run.status, LifecycleEvent::Admit)
            .map_err(|e| EngineError::Gone(e.to_string()))?;
        next.held = None;
        next.version += 1;
        next.updated_at = now;
        next.due_at = Some(now);
        next.resend_after = None;
        next.timeline_seq += 1;
        let (name, key, starts) = match &held.reason {
            HoldReason::Debounce {
                name, key, starts, ..
            } => (name, key, Some(*starts)),
            HoldReason::Rate { name, key } => (name, key, None),
        };
        let released = TimelineEvent {
            seq: next.timeline_seq,
            at: now,
            event_type: EventType::StartReleased,
            sub_type: None,
            id: None,
            parent_id: None,
            name: Some(run.workflow.clone()),
            details: tl::EventDetails::StartReleased(tl::StartReleased {
                held_by: held.reason.kind().to_owned(),
                name: name.clone(),
                key: key.clone(),
                starts,
            })
            .to_value(),
        };
        let mut checkpoint = Checkpoint::new(next.clone(), run.version, None);
        checkpoint.timeline.push(released);
        match self.backend.store.checkpoint(&checkpoint).await {
            Ok(()) => {
                tracing::info!(tenant = %run.tenant, run_id = %run.id, held_by = held.reason.kind(), "held start released");
                Ok(Some(next))
            }
            Err(StoreError::Conflict(_)) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }
}

/// `run`, held by `held`: queued, due (and its wake-up sent) for the release.
fn hold(run: &mut Run, held: HeldStart, margin: Duration) {
    run.status = RunStatus::Queued;
    run.due_at = Some(held.until);
    run.resend_after = Some(held.until.plus(margin));
    run.held = Some(held);
}

/// What gathering a start into a queued run did ([`Engine::join`]).
enum Joined {
    /// The start is in the run, written.
    Into(Box<Run>),
    /// Another write came first: read again.
    Raced,
    /// The batch would outgrow the input quota: the start begins the key's next one.
    TooLarge,
}
