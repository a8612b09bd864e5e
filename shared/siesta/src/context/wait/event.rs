//! `wait_for_event`: waiting for a named event delivered through the API.

use crate::timeline as tl;
use std::future::IntoFuture;
use std::marker::PhantomData;
use std::time::Duration;

use futures::future::BoxFuture;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;

use super::{consumed_with, set_aside, undecodable};
use crate::accepts::schema_of;
use crate::context::{Context, Delta, Op};
use crate::error::{Error, ErrorKind};
use crate::model::*;

/// `wait_for_event` being configured; `.await` it at once.
#[must_use = "a wait does nothing until awaited"]
pub struct EventBuilder<T> {
    ctx: Context,
    op: Op,
    event_name: String,
    timeout: Option<Duration>,
    accepts: Option<serde_json::Value>,
    _t: PhantomData<fn() -> T>,
}

impl Context {
    /// Wait for the named event (an approval, a signal) delivered through the API. An
    /// event that arrived before the run got here is kept and consumed now; each event
    /// is consumed once. `T`'s JSON Schema is recorded with the wait: while the run
    /// waits, an event that does not match is refused on arrival (422); one that came
    /// earlier and does not decode is set aside (a `DeliveryRejected` timeline event)
    /// and the wait goes on.
    pub fn wait_for_event<T: JsonSchema>(&self, name: &str) -> EventBuilder<T> {
        self.event_builder(name, Some(schema_of::<T>()))
    }

    /// [`Context::wait_for_event`] for a `T` without a JSON Schema: events are not
    /// checked on arrival, only set aside when they do not decode.
    pub fn wait_for_event_unchecked<T>(&self, name: &str) -> EventBuilder<T> {
        self.event_builder(name, None)
    }

    fn event_builder<T>(&self, name: &str, accepts: Option<serde_json::Value>) -> EventBuilder<T> {
        EventBuilder {
            ctx: self.clone(),
            op: self.mint(name, OperationKind::Event),
            event_name: name.to_owned(),
            timeout: None,
            accepts,
            _t: PhantomData,
        }
    }
}

impl<T> EventBuilder<T> {
    /// Fail with [`ErrorKind::EventTimedOut`] if the event has not arrived within `d`.
    pub fn timeout(mut self, d: Duration) -> Self {
        self.timeout = Some(d);
        self
    }
}

impl<T: DeserializeOwned + Send + 'static> IntoFuture for EventBuilder<T> {
    type Output = Result<T, Error>;
    type IntoFuture = BoxFuture<'static, Result<T, Error>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move {
            let EventBuilder {
                ctx,
                op,
                event_name,
                timeout,
                accepts,
                ..
            } = self;
            let now = ctx.shared.now();
            let mut fresh = false;
            let (deadline, started_at) = match ctx.lookup(&op).await.map(|e| e.state) {
                Some(EntryState::Succeeded { value, .. }) => return ctx.decode(&value).await,
                Some(EntryState::Failed { error, .. }) => return Err(Error::from_info(&error)),
                Some(EntryState::Waiting(w)) => (w.deadline, w.started_at),
                _ => {
                    ctx.go_live();
                    ctx.boundary().await;
                    fresh = true;
                    (timeout.map(|d| now.plus(d)), now)
                }
            };
            let started_event = || {
                ctx.event(
                    EventType::WaitStarted,
                    SubType::WaitForEvent,
                    &op,
                    tl::EventDetails::WaitStarted(tl::WaitStarted {
                        event: Some(event_name.to_string()),
                        timeout: Some(deadline),
                        ..Default::default()
                    }),
                )
            };
            let waiting = || Wait {
                kind: WaitKind::Event {
                    name: event_name.clone(),
                    accepts: accepts.clone(),
                },
                deadline,
                started_at,
            };
            // Each delivery taken is claimed until the wait returns: dropped before (a
            // combinator's loser), the wait gives it back for the wait live then.
            while let Some((delivery, claim)) = ctx.take_delivery(
                &op,
                Some(EntryState::Waiting(waiting())),
                |d| matches!(&d.body, DeliveryBody::Event { name, .. } if *name == event_name),
            ) {
                ctx.go_live();
                let DeliveryBody::Event { value, .. } = delivery.body else {
                    unreachable!("only events are taken")
                };
                let result = ctx.decode::<T>(&value).await;
                if let Some(e) = undecodable(&result) {
                    if fresh {
                        // The wait is recorded first, so the set-aside has an entry.
                        ctx.commit_or_suspend(Delta {
                            journal: vec![op.entry(EntryState::Waiting(waiting()))],
                            timeline: vec![started_event()],
                            ..Delta::default()
                        })
                        .await;
                        fresh = false;
                    }
                    set_aside(
                        &ctx,
                        &op,
                        SubType::WaitForEvent,
                        &delivery.id,
                        e,
                        Vec::new(),
                    )
                    .await;
                    claim.keep();
                    continue;
                }
                let mut entry = op.entry(EntryState::Succeeded { value, attempt: 0 });
                entry.consumed = consumed_with(&ctx, &op, &delivery.id);
                let mut timeline = if fresh {
                    vec![started_event()]
                } else {
                    Vec::new()
                };
                timeline.push(ctx.event(
                    EventType::WaitSucceeded,
                    SubType::WaitForEvent,
                    &op,
                    tl::EventDetails::WaitSucceeded(tl::WaitEnded {
                        event: Some(event_name.to_string()),
                        delivery_id: Some(delivery.id.0.clone()),
                        error: None,
                    }),
                ));
                // Derived again from the delivery on a replay: held for the next
                // checkpoint rather than written on its own.
                ctx.hold_ending(Delta {
                    journal: vec![entry],
                    timeline,
                    ..Delta::default()
                })
                .await;
                claim.keep();
                return result;
            }
            if let Some(deadline) = deadline.filter(|d| now >= *d) {
                ctx.go_live();
                let err = Error::new(
                    ErrorKind::EventTimedOut,
                    format!(
                        "event '{event_name}' did not arrive by {}",
                        deadline.millis()
                    ),
                    None,
                );
                let ev = ctx.event(
                    EventType::WaitFailed,
                    SubType::WaitForEvent,
                    &op,
                    tl::EventDetails::WaitFailed(tl::WaitEnded {
                        event: Some(event_name.to_string()),
                        delivery_id: None,
                        error: Some(err.to_info()),
                    }),
                );
                ctx.commit_or_suspend(Delta {
                    journal: vec![op.entry(EntryState::Failed {
                        error: err.to_info(),
                        attempt: 0,
                    })],
                    timeline: vec![ev],
                    ..Delta::default()
                })
                .await;
                return Err(err);
            }
            if fresh {
                // The branch suspends next: the opening goes with the next checkpoint
                // (the suspension's), not in one of its own.
                ctx.hold_opening(Delta {
                    journal: vec![op.entry(EntryState::Waiting(waiting()))],
                    timeline: vec![started_event()],
                    ..Delta::default()
                })
                .await;
            }
            ctx.suspend(deadline).await
        })
    }
}
