//! Callbacks completed from outside (a webhook to their URL, or the API): creating one,
//! waiting for its outcome, and timing out those whose deadline or heartbeat deadline
//! passed.

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
use crate::time::Timestamp;

/// A callback being configured; `.await` it to create the callback.
#[must_use = "a callback does nothing until awaited"]
pub struct CallbackBuilder<T> {
    ctx: Context,
    op: Op,
    pub(super) timeout: Option<Duration>,
    pub(super) heartbeat_timeout: Option<Duration>,
    accepts: Option<serde_json::Value>,
    _t: PhantomData<fn() -> T>,
}

/// A created callback: its id and URL go to a third party, and [`Callback::wait`]
/// suspends the run until the outcome arrives or a timeout passes.
pub struct Callback<T> {
    ctx: Context,
    op: Op,
    id: CallbackId,
    accepts: Option<serde_json::Value>,
    /// The opening this pass recorded and holds for the next checkpoint (see
    /// `Context::hold_opening`): what [`Callback::wait`] waits on until it is written.
    held: Option<JournalEntry>,
    _t: PhantomData<fn() -> T>,
}

impl Context {
    /// Create a callback: a durable wait completed from outside, by a webhook to its URL
    /// or through the API. `T` is the success payload's type; its JSON Schema is recorded
    /// with the callback, so a success payload that does not match is refused on arrival
    /// (422) and the callback stays open. Derive [`JsonSchema`] on `T`,
    /// or see [`Context::create_callback_unchecked`].
    pub fn create_callback<T: JsonSchema>(&self, name: &str) -> CallbackBuilder<T> {
        self.callback_builder(name, Some(schema_of::<T>()))
    }

    /// [`Context::create_callback`] for a `T` without a JSON Schema: any JSON payload is
    /// accepted on arrival; one that then does not decode as `T` is set aside when the
    /// workflow consumes it (a `DeliveryRejected` timeline event) and the wait goes on.
    pub fn create_callback_unchecked<T>(&self, name: &str) -> CallbackBuilder<T> {
        self.callback_builder(name, None)
    }

    pub(super) fn callback_builder<T>(
        &self,
        name: &str,
        accepts: Option<serde_json::Value>,
    ) -> CallbackBuilder<T> {
        CallbackBuilder {
            ctx: self.clone(),
            op: self.mint(name, OperationKind::Callback),
            timeout: None,
            heartbeat_timeout: None,
            accepts,
            _t: PhantomData,
        }
    }
}

impl<T> CallbackBuilder<T> {
    /// Fail with [`ErrorKind::CallbackTimedOut`] if no outcome arrives within `d`.
    pub fn timeout(mut self, d: Duration) -> Self {
        self.timeout = Some(d);
        self
    }

    /// Fail with [`ErrorKind::CallbackTimedOut`] if no heartbeat (or outcome) arrives
    /// for `d`.
    pub fn heartbeat_timeout(mut self, d: Duration) -> Self {
        self.heartbeat_timeout = Some(d);
        self
    }
}

impl<T: Send + 'static> IntoFuture for CallbackBuilder<T> {
    type Output = Result<Callback<T>, Error>;
    type IntoFuture = BoxFuture<'static, Result<Callback<T>, Error>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move {
            let CallbackBuilder {
                ctx,
                op,
                timeout,
                heartbeat_timeout,
                accepts,
                ..
            } = self;
            if let Some(entry) = ctx.lookup(&op).await {
                let id = match (&entry.state, entry.handle) {
                    (
                        EntryState::Waiting(Wait {
                            kind: WaitKind::Callback { callback_id, .. },
                            ..
                        }),
                        _,
                    ) => callback_id.clone(),
                    (_, Some(handle)) => CallbackId(handle),
                    (_, None) => CallbackId(String::new()),
                };
                return Ok(Callback {
                    ctx,
                    op,
                    id,
                    accepts,
                    held: None,
                    _t: PhantomData,
                });
            }
            ctx.go_live();
            ctx.boundary().await;
            let now = ctx.shared.now();
            let id = CallbackId::generate();
            let deadline = timeout.map(|d| now.plus(d));
            let wait = Wait {
                kind: WaitKind::Callback {
                    callback_id: id.clone(),
                    heartbeat_timeout_ms: heartbeat_timeout.map(|d| d.as_millis() as u64),
                },
                deadline,
                started_at: now,
            };
            let mut entry = op.entry(EntryState::Waiting(wait));
            entry.handle = Some(id.0.clone());
            let record = CallbackRecord {
                callback_id: id.clone(),
                tenant: ctx.shared.tenant.clone(),
                run_id: ctx.shared.run_id.clone(),
                position: op.position.clone(),
                status: CallbackStatus::Open,
                deadline,
                created_at: now,
                accepts: accepts.clone(),
                heartbeat: heartbeat_timeout.map(|d| CallbackHeartbeat::new(d, now)),
            };
            let event = ctx.event(
                EventType::CallbackStarted,
                SubType::Callback,
                &op,
                tl::EventDetails::CallbackStarted(tl::CallbackStarted {
                    callback_id: id.0.clone(),
                    timeout: deadline,
                    heartbeat_timeout_ms: heartbeat_timeout.map(|d| d.as_millis() as u64),
                }),
            );
            // Not written on its own: the callback's id is random and has not left the
            // process, so the record goes with the next checkpoint (the suspension's
            // when the workflow waits next), and whatever could hand the id out (a
            // step's closure, a stream publish) makes it durable first (see
            // `coalesce`). A crash before loses an id nobody knows.
            ctx.hold_opening(Delta {
                journal: vec![entry.clone()],
                timeline: vec![event],
                callbacks: vec![record],
                ..Delta::default()
            })
            .await;
            Ok(Callback {
                ctx,
                op,
                id,
                accepts,
                held: Some(entry),
                _t: PhantomData,
            })
        })
    }
}

impl<T> Callback<T> {
    /// The callback's id; also the token of its webhook URL.
    pub fn id(&self) -> &CallbackId {
        &self.id
    }

    /// The public webhook URL that completes this callback.
    pub fn url(&self) -> String {
        format!(
            "{}/hooks/{}",
            self.ctx
                .shared
                .config
                .callback_base_url
                .trim_end_matches('/'),
            self.id
        )
    }
}

impl<T: DeserializeOwned + Send + 'static> Callback<T> {
    /// Suspend until the callback succeeds (its payload), fails
    /// ([`ErrorKind::CallbackFailed`]) or times out ([`ErrorKind::CallbackTimedOut`]).
    pub async fn wait(self) -> Result<T, Error> {
        let Callback {
            ctx,
            op,
            id,
            accepts,
            held,
            ..
        } = self;
        // Held and not yet written, the opening is not in the journal yet.
        let entry = ctx
            .shared
            .state()
            .journal
            .get(&op.position)
            .cloned()
            .or(held);
        let Some(entry) = entry else {
            return Err(Error::new(
                ErrorKind::CallbackFailed,
                format!("callback '{}' was never created", op.name),
                None,
            ));
        };
        let (heartbeat_ms, deadline, started_at) = match entry.state {
            EntryState::Succeeded { value, .. } => return ctx.decode(&value).await,
            EntryState::Failed { error, .. } => return Err(Error::from_info(&error)),
            EntryState::Waiting(Wait {
                kind:
                    WaitKind::Callback {
                        heartbeat_timeout_ms,
                        ..
                    },
                deadline,
                started_at,
            }) => (heartbeat_timeout_ms, deadline, started_at),
            other => {
                return Err(Error::new(
                    ErrorKind::CallbackFailed,
                    format!("callback '{}' is in an unexpected state {other:?}", op.name),
                    None,
                ));
            }
        };
        let waiting = EntryState::Waiting(Wait {
            kind: WaitKind::Callback {
                callback_id: id.clone(),
                heartbeat_timeout_ms: heartbeat_ms,
            },
            deadline,
            started_at,
        });
        // The outcome taken is claimed until the wait returns: dropped before (a
        // combinator's loser), the wait gives it back (see `claim`).
        while let Some((delivery, claim)) = ctx.take_delivery(&op, Some(waiting.clone()), |d| {
            d.body.answered_callback() == Some(&id)
        }) {
            ctx.go_live();
            let (state, event, result) = match delivery.body {
                DeliveryBody::CallbackSucceeded { value, .. } => {
                    let result = ctx.decode::<T>(&value).await;
                    if let Some(e) = undecodable(&result) {
                        // Open again: the store closed it when it took the delivery.
                        let reopened = CallbackRecord {
                            callback_id: id.clone(),
                            tenant: ctx.shared.tenant.clone(),
                            run_id: ctx.shared.run_id.clone(),
                            position: op.position.clone(),
                            status: CallbackStatus::Open,
                            deadline,
                            created_at: started_at,
                            accepts: accepts.clone(),
                            heartbeat: heartbeat_ms.map(|ms| CallbackHeartbeat {
                                timeout_ms: ms,
                                deadline: heartbeat_deadline(
                                    &id,
                                    ms,
                                    started_at,
                                    &ctx.deliveries_for(|_| true),
                                ),
                            }),
                        };
                        set_aside(
                            &ctx,
                            &op,
                            SubType::Callback,
                            &delivery.id,
                            e,
                            vec![reopened],
                        )
                        .await;
                        claim.keep();
                        continue;
                    }
                    (
                        EntryState::Succeeded { value, attempt: 0 },
                        EventType::CallbackSucceeded,
                        result,
                    )
                }
                DeliveryBody::CallbackFailed { error, .. } => {
                    // The sender's message reaches the workflow as it was sent; its
                    // kind stays in the cause.
                    let err = Error::new(
                        ErrorKind::CallbackFailed,
                        error.message.clone(),
                        Some(error),
                    );
                    (
                        EntryState::Failed {
                            error: err.to_info(),
                            attempt: 0,
                        },
                        EventType::CallbackFailed,
                        Err(err),
                    )
                }
                _ => unreachable!("only completions are taken"),
            };
            let mut entry = op.entry(state);
            entry.consumed = consumed_with(&ctx, &op, &delivery.id);
            entry.handle = Some(id.0.clone());
            let ev = ctx.event(
                event,
                SubType::Callback,
                &op,
                tl::EventDetails::CallbackSucceeded(tl::CallbackEnded {
                    callback_id: id.0.clone(),
                    delivery_id: Some(delivery.id.0.clone()),
                    reason: None,
                }),
            );
            // Derived again from the delivery on a replay: held for the next
            // checkpoint rather than written on its own.
            ctx.hold_ending(Delta {
                journal: vec![entry],
                timeline: vec![ev],
                ..Delta::default()
            })
            .await;
            claim.keep();
            return result;
        }
        let now = ctx.shared.now();
        let heartbeats = ctx.deliveries_for(|d| matches!(&d.body, DeliveryBody::CallbackHeartbeat { callback_id } if *callback_id == id));
        let wait = Wait {
            kind: WaitKind::Callback {
                callback_id: id.clone(),
                heartbeat_timeout_ms: heartbeat_ms,
            },
            deadline,
            started_at,
        };
        match callback_due(&wait, &heartbeats) {
            Some((due, which)) if now >= due => {
                ctx.go_live();
                let (entry, record, ev) = callback_timeout(
                    &ctx.shared,
                    &op.entry(EntryState::Waiting(wait)),
                    which,
                    now,
                );
                let err = timed_out_error(&op.name, which);
                ctx.commit_or_suspend(Delta {
                    journal: vec![entry],
                    timeline: vec![ev],
                    callbacks: vec![record],
                    ..Delta::default()
                })
                .await;
                Err(err)
            }
            due => ctx.suspend(due.map(|(at, _)| at)).await,
        }
    }
}

/// When a waiting callback gives up, and why: its deadline, or its heartbeat deadline
/// (the last heartbeat in `deliveries`, or its start, plus the heartbeat timeout),
/// whichever comes first. `None` for a callback that waits for ever.
pub(crate) fn callback_due(
    wait: &Wait,
    deliveries: &[Delivery],
) -> Option<(Timestamp, &'static str)> {
    let WaitKind::Callback {
        callback_id,
        heartbeat_timeout_ms,
    } = &wait.kind
    else {
        return None;
    };
    let heartbeat_deadline = heartbeat_timeout_ms
        .map(|ms| heartbeat_deadline(callback_id, ms, wait.started_at, deliveries));
    let due = [wait.deadline, heartbeat_deadline]
        .into_iter()
        .flatten()
        .min()?;
    let which = if heartbeat_deadline == Some(due) && wait.deadline != Some(due) {
        "heartbeat timeout"
    } else {
        "timeout"
    };
    Some((due, which))
}

/// The last heartbeat of `callback_id` in `deliveries` (or its start) plus its heartbeat
/// timeout: the same deadline the store keeps on its record
/// ([`CallbackRecord::heartbeat_received`]).
fn heartbeat_deadline(
    callback_id: &CallbackId,
    timeout_ms: u64,
    started_at: Timestamp,
    deliveries: &[Delivery],
) -> Timestamp {
    deliveries
        .iter()
        .filter(|d| matches!(&d.body, DeliveryBody::CallbackHeartbeat { callback_id: c } if c == callback_id))
        .map(|d| d.received_at)
        .max()
        .unwrap_or(started_at)
        .max(started_at)
        .plus(Duration::from_millis(timeout_ms))
}

/// The error a callback that passed its `which` ("timeout", "heartbeat timeout") gives.
fn timed_out_error(name: &str, which: &str) -> Error {
    Error::new(
        ErrorKind::CallbackTimedOut,
        format!("callback '{name}' passed its {which}"),
        None,
    )
}

/// What recording the timeout of the callback waiting at `waiting` writes: its journal
/// entry (failed), its record (timed out) and its `CallbackTimedOut` event.
pub(crate) fn callback_timeout(
    shared: &crate::context::Shared,
    waiting: &JournalEntry,
    which: &str,
    now: Timestamp,
) -> (JournalEntry, CallbackRecord, TimelineEvent) {
    let EntryState::Waiting(Wait {
        kind: WaitKind::Callback { callback_id, .. },
        deadline,
        started_at,
    }) = &waiting.state
    else {
        unreachable!("only waiting callbacks time out")
    };
    let err = timed_out_error(&waiting.name, which);
    let mut entry = waiting.clone();
    entry.state = EntryState::Failed {
        error: err.to_info(),
        attempt: 0,
    };
    entry.handle = Some(callback_id.0.clone());
    let record = CallbackRecord {
        callback_id: callback_id.clone(),
        tenant: shared.tenant.clone(),
        run_id: shared.run_id.clone(),
        position: waiting.position.clone(),
        status: CallbackStatus::TimedOut,
        deadline: *deadline,
        created_at: *started_at,
        accepts: None,
        heartbeat: None,
    };
    let event = TimelineEvent {
        seq: 0,
        at: now,
        event_type: EventType::CallbackTimedOut,
        sub_type: Some(SubType::Callback),
        id: Some(waiting.position.0.clone()),
        parent_id: waiting.position.parent().map(|p| p.0),
        name: Some(waiting.name.clone()),
        details: tl::EventDetails::CallbackTimedOut(tl::CallbackEnded {
            callback_id: callback_id.0.clone(),
            delivery_id: None,
            reason: Some(which.to_string()),
        })
        .to_value(),
    };
    (entry, record, event)
}

/// The earliest deadline (or heartbeat deadline) of the callbacks whose opening is held
/// for the next checkpoint (see `Context::hold_opening`): not in the journal yet, so
/// [`expire_callbacks`] does not see them, while the suspension must still wake the run
/// for them.
pub(crate) fn held_callbacks_due(shared: &crate::context::Shared) -> Option<Timestamp> {
    let waits = shared.held_waits();
    let st = shared.state();
    waits
        .iter()
        .filter_map(|wait| callback_due(wait, &st.deliveries).map(|(due, _)| due))
        .min()
}

/// Time out every callback of the run that passed its deadline at `now` with no
/// outcome delivered, whether or not the workflow awaits it now: the timeout is
/// recorded at the deadline, not when the workflow gets round to awaiting it. Returns
/// what to write, and the earliest deadline of the callbacks still open.
pub(crate) fn expire_callbacks(
    shared: &crate::context::Shared,
    st: &crate::context::ExecState,
    now: Timestamp,
) -> (Delta, Option<Timestamp>) {
    let mut delta = Delta::default();
    let mut next = None::<Timestamp>;
    // Only the waiting callbacks, kept in position order as the journal changes: a run's
    // journal grows with every cycle, and this runs at every suspension (a continued
    // run would otherwise pay O(N) here for every wake-up).
    let waiting = st.waiting_callbacks.iter().filter_map(|position| {
        let entry = st.journal.get(position)?;
        match &entry.state {
            EntryState::Waiting(wait) => match &wait.kind {
                WaitKind::Callback { callback_id, .. } => Some((entry, wait, callback_id)),
                _ => None,
            },
            _ => None,
        }
    });
    for (entry, wait, callback_id) in waiting {
        let answered = st
            .deliveries
            .iter()
            .any(|d| d.body.answered_callback() == Some(callback_id));
        if answered {
            continue;
        }
        match callback_due(wait, &st.deliveries) {
            Some((due, which)) if now >= due => {
                let (entry, record, event) = callback_timeout(shared, entry, which, now);
                delta.journal.push(entry);
                delta.callbacks.push(record);
                delta.timeline.push(event);
            }
            Some((due, _)) => next = Some(next.map_or(due, |n| n.min(due))),
            None => {}
        }
    }
    (delta, next)
}
