//! Deliveries to a run: events, injected messages, callback outcomes and heartbeats,
//! each checked (typed payload, size quota) and written to the run's inbox.

use crate::timeline as tl;
use std::time::Duration;

use super::{Engine, EngineError};
use crate::model::*;
use crate::ports::*;
use crate::quota::{self, QuotaExceeded, QuotaLimit, json_size};

impl Engine {
    /// Deliver a named event (an approval, a signal) to a run. It is kept if the run is
    /// not waiting for it yet. `delivery_id` dedupes repeats (default: a fresh id).
    pub async fn deliver_event(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        name: &str,
        value: serde_json::Value,
        delivery_id: Option<DeliveryId>,
    ) -> Result<DeliverOutcome, EngineError> {
        self.check_delivery_size(tenant, &value)?;
        self.check_event(tenant, run_id, name, &value).await?;
        let payload = self.encode(tenant, run_id, &value).await?;
        let id =
            delivery_id.unwrap_or_else(|| DeliveryId(format!("event:{}", uuid::Uuid::new_v4())));
        let event = self.delivery_event(
            EventType::EventDelivered,
            Some(name),
            tl::EventDetails::EventDelivered(tl::Delivered {
                event: Some(name.to_owned()),
                delivery_id: id.0.clone(),
                reason: None,
            }),
        );
        self.deliver(
            tenant,
            run_id,
            id,
            DeliveryBody::Event {
                name: name.to_owned(),
                value: payload,
            },
            event,
        )
        .await
    }

    /// Refuse an event whose payload matches none of the typed waits for it the run has
    /// registered. An event that comes before any wait for it is kept unchecked (the
    /// run may never ask for a type); if it then does not decode, the wait sets it aside.
    /// Reads the run and its journal; its deliveries only to refuse, and only when some
    /// arrived since the run last took its inbox in (see [`Self::taken_by_earlier_events`]).
    async fn check_event(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        name: &str,
        value: &serde_json::Value,
    ) -> Result<(), EngineError> {
        let run = self
            .backend
            .store
            .get_run(tenant, run_id)
            .await?
            .ok_or(EngineError::NotFound)?;
        if run.status.is_finished() {
            return Ok(()); // the store answers: gone
        }
        let journal = self.backend.store.load_journal(tenant, run_id).await?;
        let schemas: Vec<&serde_json::Value> = journal
            .iter()
            .filter_map(|e| match &e.state {
                EntryState::Waiting(Wait {
                    kind:
                        WaitKind::Event {
                            name: waiting_for,
                            accepts,
                        },
                    ..
                }) if waiting_for == name => Some(accepts.as_ref()),
                _ => None,
            })
            .collect::<Option<Vec<_>>>()
            // An untyped wait for this event takes anything.
            .unwrap_or_default();
        let mut reasons = Vec::new();
        for schema in &schemas {
            match crate::accepts::check(schema, value) {
                Ok(()) => return Ok(()),
                Err(why) => reasons.push(why),
            }
        }
        if reasons.is_empty() || self.taken_by_earlier_events(&run, name, &schemas).await? {
            return Ok(());
        }
        Err(EngineError::DeliveryRejected(format!(
            "the payload does not match what the wait for event '{name}' accepts: {}",
            reasons.join(" | ")
        )))
    }

    /// Whether each of the run's stored waits for event `name` (typed by `schemas`, one
    /// per wait) already has an earlier event of that name to take: one that arrived
    /// since the run last took its inbox in (its journal does not list it as consumed
    /// yet, though the run may have taken it in memory, its wait's ending held for the
    /// next checkpoint) and that matches one of them (one that does not would be set
    /// aside, and leave its wait waiting; one stored as an artifact is counted). A new
    /// event is then for a later wait, whose type the journal does not show yet, so it
    /// is kept like an early one. Read only when the run's inbox holds deliveries the
    /// run has not looked at, so a run that holds messages it never drains costs
    /// nothing here.
    async fn taken_by_earlier_events(
        &self,
        run: &Run,
        name: &str,
        schemas: &[&serde_json::Value],
    ) -> Result<bool, EngineError> {
        if run.inbox_seq <= run.inbox_seen {
            return Ok(false);
        }
        let replay_input = self
            .backend
            .store
            .load_replay_input(&run.tenant, &run.id)
            .await?;
        let consumed: std::collections::HashSet<&DeliveryId> = replay_input
            .journal
            .iter()
            .flat_map(|e| e.consumed.iter())
            .collect();
        let answers = |value: &Payload| match value {
            Payload::Inline(value) => schemas
                .iter()
                .any(|schema| crate::accepts::check(schema, value).is_ok()),
            Payload::Artifact(_) => true,
        };
        let pending = replay_input
            .deliveries
            .iter()
            .filter(|d| !consumed.contains(&d.id))
            .filter(|d| matches!(&d.body, DeliveryBody::Event { name: n, value } if n == name && answers(value)))
            .count();
        Ok(pending >= schemas.len())
    }

    /// Inject a message into a run; it is drained at the run's next step boundary.
    pub async fn inject_message(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        value: serde_json::Value,
        delivery_id: Option<DeliveryId>,
    ) -> Result<DeliverOutcome, EngineError> {
        self.check_delivery_size(tenant, &value)?;
        // A large value is stored under the run before the delivery: for a run that does
        // not exist (never did, or was removed) nothing would ever remove it, so it is
        // stored only once the run is found. (An event's check reads the run already.)
        if json_size(&value) > self.config.inline_limit as u64 {
            self.get_run(tenant, run_id).await?;
        }
        let payload = self.encode(tenant, run_id, &value).await?;
        let id =
            delivery_id.unwrap_or_else(|| DeliveryId(format!("message:{}", uuid::Uuid::new_v4())));
        let event = self.delivery_event(
            EventType::MessageInjected,
            None,
            tl::EventDetails::MessageInjected(tl::Delivered {
                event: None,
                delivery_id: id.0.clone(),
                reason: None,
            }),
        );
        self.deliver(
            tenant,
            run_id,
            id,
            DeliveryBody::Message { value: payload },
            event,
        )
        .await
    }

    /// Complete a callback with success (`Ok(value)`) or failure (`Err(error)`). With
    /// `tenant` set (the authenticated API), another tenant's callback is not found;
    /// without it (a webhook), the callback id is the credential. The same
    /// `delivery_id` twice is a duplicate; a second outcome for a closed callback is
    /// [`EngineError::Gone`].
    pub async fn complete_callback(
        &self,
        callback_id: &CallbackId,
        tenant: Option<&TenantId>,
        outcome: Result<serde_json::Value, ErrorInfo>,
        delivery_id: Option<DeliveryId>,
    ) -> Result<DeliverOutcome, EngineError> {
        let record = self.callback(callback_id, tenant).await?;
        if let Ok(value) = &outcome {
            self.check_delivery_size(&record.tenant, value)?;
        }
        let id =
            delivery_id.unwrap_or_else(|| DeliveryId(format!("callback-outcome:{callback_id}")));
        if let (Ok(value), Some(schema), CallbackStatus::Open) =
            (&outcome, &record.accepts, record.status)
        {
            // Judged before anything is stored: a payload the workflow could not decode
            // must not use up the single-use callback. A closed callback is left to the
            // store (a duplicate or 410), whatever the body.
            crate::accepts::check(schema, value).map_err(|why| {
                EngineError::DeliveryRejected(format!(
                    "the payload does not match what callback '{}' accepts: {why}",
                    record.position
                ))
            })?;
        }
        let (body, status) = match outcome {
            Ok(value) => {
                let payload = self.encode(&record.tenant, &record.run_id, &value).await?;
                (
                    DeliveryBody::CallbackSucceeded {
                        callback_id: callback_id.clone(),
                        value: payload,
                    },
                    "succeeded",
                )
            }
            Err(error) => (
                DeliveryBody::CallbackFailed {
                    callback_id: callback_id.clone(),
                    error,
                },
                "failed",
            ),
        };
        let event = self.delivery_event(
            EventType::CallbackDelivered,
            None,
            tl::EventDetails::CallbackDelivered(tl::CallbackDelivered {
                callback_id: callback_id.0.clone(),
                outcome: status.to_owned(),
                delivery_id: Some(id.0.clone()),
                operation_id: record.position.0.clone(),
            }),
        );
        self.deliver(&record.tenant, &record.run_id, id, body, event)
            .await
    }

    /// Record a heartbeat for a callback, pushing back its heartbeat timeout.
    pub async fn heartbeat_callback(
        &self,
        callback_id: &CallbackId,
        tenant: Option<&TenantId>,
    ) -> Result<DeliverOutcome, EngineError> {
        let record = self.callback(callback_id, tenant).await?;
        let id = DeliveryId(format!("callback-heartbeat:{}", uuid::Uuid::new_v4()));
        let event = self.delivery_event(
            EventType::CallbackDelivered,
            None,
            tl::EventDetails::CallbackDelivered(tl::CallbackDelivered {
                callback_id: callback_id.0.clone(),
                outcome: "heartbeat".to_owned(),
                delivery_id: None,
                operation_id: record.position.0.clone(),
            }),
        );
        self.deliver(
            &record.tenant,
            &record.run_id,
            id,
            DeliveryBody::CallbackHeartbeat {
                callback_id: callback_id.clone(),
            },
            event,
        )
        .await
    }

    async fn callback(
        &self,
        callback_id: &CallbackId,
        tenant: Option<&TenantId>,
    ) -> Result<CallbackRecord, EngineError> {
        let record = self
            .backend
            .store
            .get_callback(callback_id)
            .await?
            .ok_or(EngineError::NotFound)?;
        if tenant.is_some_and(|t| *t != record.tenant) {
            return Err(EngineError::NotFound);
        }
        // Whether it is still open is checked by the store after its dedup check, so a
        // repeated delivery is acknowledged as a duplicate rather than refused as gone.
        Ok(record)
    }

    /// Refuse a delivery's value over the tenant's `max_delivery_bytes`.
    fn check_delivery_size(
        &self,
        tenant: &TenantId,
        value: &serde_json::Value,
    ) -> Result<(), QuotaExceeded> {
        quota::check_size(
            QuotaLimit::DeliveryBytes,
            "the delivery",
            json_size(value),
            self.config.quotas.for_tenant(tenant).max_delivery_bytes,
        )
    }

    fn delivery_event(
        &self,
        event_type: EventType,
        name: Option<&str>,
        details: tl::EventDetails,
    ) -> TimelineEvent {
        TimelineEvent {
            seq: 0,
            at: self.clock.now(),
            event_type,
            sub_type: None,
            id: None,
            parent_id: None,
            name: name.map(str::to_owned),
            details: details.to_value(),
        }
    }

    async fn deliver(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        id: DeliveryId,
        body: DeliveryBody,
        event: TimelineEvent,
    ) -> Result<DeliverOutcome, EngineError> {
        let now = self.clock.now();
        if let Some(max) = self.config.quotas.for_tenant(tenant).max_pending_deliveries {
            // Read, then written under the run's version: two deliveries racing for the
            // last place may both be taken, so the bound is approximate by that much.
            let run = self.get_run(tenant, run_id).await?;
            let pending = run.inbox_seq.saturating_sub(run.inbox_seen);
            if pending >= max && !run.status.is_finished() {
                return Err(QuotaExceeded::new(
                    QuotaLimit::PendingDeliveries,
                    format!(
                        "run {run_id} holds {pending} deliveries it has not taken in yet; \
                         this tenant's limit is {max}"
                    ),
                )
                .into());
            }
        }
        let delivery = NewDelivery {
            id,
            tenant: tenant.clone(),
            run_id: run_id.clone(),
            body,
            received_at: now,
            // Short: a process that dies between this write and the send below leaves the
            // delivery to the sweep, which looks only once this has passed.
            resend_after: self.delivery_resend_after(now),
            event,
        };
        let outcome = match self.backend.store.deliver(&delivery).await {
            Ok(outcome) => outcome,
            Err(StoreError::NotFound) => return Err(EngineError::NotFound),
            Err(StoreError::Gone(why)) => return Err(EngineError::Gone(why)),
            Err(e) => return Err(e.into()),
        };
        match &outcome {
            DeliverOutcome::Accepted(run) => {
                // The caller's span (a webhook's request) learns only now which run it woke.
                crate::telemetry::link_to_run(&tracing::Span::current(), run);
                self.send_wake(delivery_wake(run), Duration::ZERO, Some(now))
                    .await;
            }
            DeliverOutcome::Duplicate => self.wake_after_duplicate(tenant, run_id).await,
        }
        Ok(outcome)
    }

    /// Send the run a wake-up again if it has not looked at its inbox since: the first
    /// request of this duplicate may have been cut off between its write and its send
    /// (killed, a Lambda timeout), and the retry, answered as a duplicate, is then the
    /// only request left that can wake the run before the sweep. One read per duplicate;
    /// one send more when the run has a delivery it has not seen (the first send may
    /// merely be on its way: a duplicate wake-up is a no-op). A run that took its inbox
    /// in, or is held by a live lease (its holder sees the delivery when it releases),
    /// is sent nothing. A failed read or send is left to the sweep, which finds the run
    /// once the delivery's short margin has passed.
    async fn wake_after_duplicate(&self, tenant: &TenantId, run_id: &RunId) {
        let run = match self.backend.store.get_run(tenant, run_id).await {
            Ok(Some(run)) => run,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(tenant = %tenant, run_id = %run_id, error = %e, "a duplicate delivery could not read its run; the sweep wakes it");
                return;
            }
        };
        if !run.needs_attention(self.clock.now()) {
            return;
        }
        self.send_wake(delivery_wake(&run), Duration::ZERO, run.due_at)
            .await;
    }
}

/// The wake-up a delivery sends `run` (as it stood after the delivery).
fn delivery_wake(run: &Run) -> WakeUp {
    WakeUp {
        tenant: run.tenant.clone(),
        run_id: run.id.clone(),
        reason: WakeReason::Delivery,
        epoch_hint: run.epoch.0,
        seq_hint: Some(run.timeline_seq),
    }
}
