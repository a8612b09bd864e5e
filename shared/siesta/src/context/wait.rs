//! Waits: durable timers, callbacks completed from outside, named events, and durable
//! polling. Each records its deadline in the journal the first time it runs, so the
//! deadline does not move when the run replays, and suspends until a delivery or the
//! deadline wakes the run.

use std::future::{Future, IntoFuture};
use std::marker::PhantomData;
use std::time::Duration;

use futures::future::BoxFuture;
use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{Context, Delta, Op, StepContext};
use crate::accepts::schema_of;
use crate::error::{Error, ErrorKind, StepError};
use crate::model::*;
use crate::retry::RetryStrategy;
use crate::time::Timestamp;

/// A durable timer being configured; `.await` it at once.
#[must_use = "a wait does nothing until awaited"]
pub struct WaitBuilder {
    ctx: Context,
    op: Op,
    duration: Duration,
}

impl Context {
    /// Sleep for `duration` on a durable timer: the run suspends, costs nothing while it
    /// sleeps, and wakes when the timer fires. Named `sleep`; see [`Context::wait`].
    pub fn sleep(&self, duration: Duration) -> WaitBuilder {
        self.wait("sleep", duration)
    }

    /// A named durable timer (AWS durable functions' `wait`).
    pub fn wait(&self, name: &str, duration: Duration) -> WaitBuilder {
        WaitBuilder {
            ctx: self.clone(),
            op: self.mint(name, OperationKind::Wait),
            duration,
        }
    }
}

impl IntoFuture for WaitBuilder {
    type Output = Result<(), Error>;
    type IntoFuture = BoxFuture<'static, Result<(), Error>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move {
            let WaitBuilder { ctx, op, duration } = self;
            // Each turn re-evaluates the timer against the journal: after a re-arm (a
            // continuation), exactly as a replay from the top would.
            loop {
                let now = ctx.shared.now();
                let fire_at = match ctx.lookup(&op).await.map(|e| e.state) {
                    Some(EntryState::Succeeded { .. }) => return Ok(()),
                    Some(EntryState::Waiting(Wait {
                        deadline: Some(at), ..
                    })) => at,
                    Some(EntryState::Failed { error, .. }) => return Err(Error::from_info(&error)),
                    _ => {
                        ctx.go_live();
                        ctx.boundary().await;
                        let fire_at = now.plus(duration);
                        let wait = Wait {
                            kind: WaitKind::Timer,
                            deadline: Some(fire_at),
                            started_at: now,
                        };
                        let event = ctx.event(
                            EventType::WaitStarted,
                            SubType::Wait,
                            &op,
                            serde_json::json!({"ScheduledEndTimestamp": fire_at}),
                        );
                        ctx.commit_or_suspend(Delta {
                            journal: vec![op.entry(EntryState::Waiting(wait))],
                            timeline: vec![event],
                            ..Delta::default()
                        })
                        .await;
                        fire_at
                    }
                };
                if now < fire_at {
                    ctx.park(Some(fire_at)).await;
                    continue;
                }
                let event = ctx.event(
                    EventType::WaitSucceeded,
                    SubType::Wait,
                    &op,
                    serde_json::Value::Null,
                );
                ctx.commit_or_suspend(Delta {
                    journal: vec![op.entry(EntryState::Succeeded {
                        value: Payload::Inline(serde_json::Value::Null),
                        attempt: 0,
                    })],
                    timeline: vec![event],
                    ..Delta::default()
                })
                .await;
                return Ok(());
            }
        })
    }
}

/// A callback being configured; `.await` it to create the callback.
#[must_use = "a callback does nothing until awaited"]
pub struct CallbackBuilder<T> {
    ctx: Context,
    op: Op,
    timeout: Option<Duration>,
    heartbeat_timeout: Option<Duration>,
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

    fn callback_builder<T>(
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

    /// Create a callback, hand its id and URL to a third party in `submitter` (a step),
    /// and wait for the outcome. Like AWS's `waitForCallback`, it is a context operation
    /// of its own (`SubType` `WaitForCallback`) with the callback (under the same name)
    /// and the submitter step (`submit`) nested under it.
    /// The payload is checked on arrival as with [`Context::create_callback`].
    pub fn wait_for_callback<T, F, Fut>(
        &self,
        name: &str,
        submitter: F,
    ) -> WaitForCallbackBuilder<T, F>
    where
        T: JsonSchema,
        F: FnOnce(CallbackId, String, StepContext) -> Fut + Send + 'static,
        Fut: Future<Output = Result<(), StepError>> + Send + 'static,
    {
        self.wait_for_callback_builder(name, submitter, Some(schema_of::<T>()))
    }

    /// [`Context::wait_for_callback`] for a `T` without a JSON Schema (see
    /// [`Context::create_callback_unchecked`]).
    pub fn wait_for_callback_unchecked<T, F, Fut>(
        &self,
        name: &str,
        submitter: F,
    ) -> WaitForCallbackBuilder<T, F>
    where
        F: FnOnce(CallbackId, String, StepContext) -> Fut + Send + 'static,
        Fut: Future<Output = Result<(), StepError>> + Send + 'static,
    {
        self.wait_for_callback_builder(name, submitter, None)
    }

    fn wait_for_callback_builder<T, F>(
        &self,
        name: &str,
        submitter: F,
        accepts: Option<serde_json::Value>,
    ) -> WaitForCallbackBuilder<T, F> {
        WaitForCallbackBuilder {
            ctx: self.clone(),
            op: self.mint(name, OperationKind::Context),
            timeout: None,
            heartbeat_timeout: None,
            retry: RetryStrategy::default(),
            accepts,
            submitter,
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
                serde_json::json!({"CallbackId": id, "Timeout": deadline, "HeartbeatTimeoutMs": heartbeat_timeout.map(|d| d.as_millis() as u64)}),
            );
            ctx.commit_or_suspend(Delta {
                journal: vec![entry],
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
            ..
        } = self;
        let entry = ctx.shared.state().journal.get(&op.position).cloned();
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
        while let Some(delivery) = ctx.take_delivery(|b| {
            matches!(b, DeliveryBody::CallbackSucceeded { callback_id, .. } | DeliveryBody::CallbackFailed { callback_id, .. } if *callback_id == id)
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
                                deadline: heartbeat_deadline(&id, ms, started_at, &ctx.deliveries_for(|_| true)),
                            }),
                        };
                        set_aside(&ctx, &op, SubType::Callback, &delivery.id, e, vec![reopened])
                            .await;
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
                serde_json::json!({"CallbackId": id, "DeliveryId": delivery.id}),
            );
            ctx.commit_or_suspend(Delta {
                journal: vec![entry],
                timeline: vec![ev],
                ..Delta::default()
            })
            .await;
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
    shared: &super::Shared,
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
        details: serde_json::json!({"CallbackId": callback_id, "Reason": which}),
    };
    (entry, record, event)
}

/// Time out every callback of the run that passed its deadline at `now` with no
/// outcome delivered, whether or not the workflow awaits it now: the timeout is
/// recorded at the deadline, not when the workflow gets round to awaiting it. Returns
/// what to write, and the earliest deadline of the callbacks still open.
pub(crate) fn expire_callbacks(
    shared: &super::Shared,
    st: &super::ExecState,
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
        let answered = st.deliveries.iter().any(|d| {
            matches!(&d.body, DeliveryBody::CallbackSucceeded { callback_id: c, .. } | DeliveryBody::CallbackFailed { callback_id: c, .. } if c == callback_id)
        });
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

/// `wait_for_callback` being configured; `.await` it at once.
#[must_use = "a callback does nothing until awaited"]
pub struct WaitForCallbackBuilder<T, F> {
    ctx: Context,
    op: Op,
    timeout: Option<Duration>,
    heartbeat_timeout: Option<Duration>,
    retry: RetryStrategy,
    accepts: Option<serde_json::Value>,
    submitter: F,
    _t: PhantomData<fn() -> T>,
}

impl<T, F> WaitForCallbackBuilder<T, F> {
    /// Fail with [`ErrorKind::CallbackTimedOut`] if no outcome arrives within `d`.
    pub fn timeout(mut self, d: Duration) -> Self {
        self.timeout = Some(d);
        self
    }

    /// Fail if no heartbeat arrives for `d`.
    pub fn heartbeat_timeout(mut self, d: Duration) -> Self {
        self.heartbeat_timeout = Some(d);
        self
    }

    /// Retry the submitter with this strategy (default: a step's default); once it
    /// gives up, the operation fails with [`ErrorKind::StepFailed`] and the callback is
    /// never awaited.
    pub fn submitter_retry(mut self, retry: RetryStrategy) -> Self {
        self.retry = retry;
        self
    }
}

impl<T, F, Fut> IntoFuture for WaitForCallbackBuilder<T, F>
where
    T: Serialize + DeserializeOwned + Send + 'static,
    F: FnOnce(CallbackId, String, StepContext) -> Fut + Send + 'static,
    Fut: Future<Output = Result<(), StepError>> + Send + 'static,
{
    type Output = Result<T, Error>;
    type IntoFuture = BoxFuture<'static, Result<T, Error>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move {
            let WaitForCallbackBuilder {
                ctx,
                op,
                timeout,
                heartbeat_timeout,
                retry,
                accepts,
                submitter,
                ..
            } = self;
            let name = op.name.clone();
            super::batch::run_context(
                &ctx,
                &op,
                SubType::WaitForCallback,
                false,
                move |scope| async move {
                    let mut callback = scope.callback_builder::<T>(&name, accepts);
                    callback.timeout = timeout;
                    callback.heartbeat_timeout = heartbeat_timeout;
                    let callback = callback.await?;
                    let (id, url) = (callback.id().clone(), callback.url());
                    scope
                        .step("submit", move |s| submitter(id, url, s))
                        .retry(retry)
                        .await?;
                    callback.wait().await
                },
            )
            .await
        })
    }
}

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

/// The deliveries the operation consumed so far, and `id`.
fn consumed_with(ctx: &Context, op: &Op, id: &DeliveryId) -> Vec<DeliveryId> {
    let mut consumed = ctx
        .shared
        .state()
        .journal
        .get(&op.position)
        .map(|e| e.consumed.clone())
        .unwrap_or_default();
    consumed.push(id.clone());
    consumed
}

/// Set aside a delivery the wait cannot decode: journal it as consumed by the still
/// waiting operation (so it is never taken again), say so on the timeline, and write
/// `callbacks` (a callback reopened). The run is not failed by what a sender posted.
async fn set_aside(
    ctx: &Context,
    op: &Op,
    sub_type: SubType,
    delivery: &DeliveryId,
    why: &Error,
    callbacks: Vec<CallbackRecord>,
) {
    let Some(mut entry) = ctx.shared.state().journal.get(&op.position).cloned() else {
        return;
    };
    entry.consumed.push(delivery.clone());
    let event = ctx.event(
        EventType::DeliveryRejected,
        sub_type,
        op,
        serde_json::json!({"DeliveryId": delivery, "Reason": why.to_string()}),
    );
    ctx.commit_or_suspend(Delta {
        journal: vec![entry],
        timeline: vec![event],
        callbacks,
        ..Delta::default()
    })
    .await;
}

/// The error of a payload that did not decode as the wait's type (not a storage error
/// reading an offloaded one, which is retried like any other).
fn undecodable<T>(result: &Result<T, Error>) -> Option<&Error> {
    result
        .as_ref()
        .err()
        .filter(|e| e.kind() == ErrorKind::Serialization)
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
                    serde_json::json!({"Event": event_name, "Timeout": deadline}),
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
            while let Some(delivery) = ctx.take_delivery(
                |b| matches!(b, DeliveryBody::Event { name, .. } if *name == event_name),
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
                    serde_json::json!({"Event": event_name, "DeliveryId": delivery.id}),
                ));
                ctx.commit_or_suspend(Delta {
                    journal: vec![entry],
                    timeline,
                    ..Delta::default()
                })
                .await;
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
                    serde_json::json!({"Event": event_name, "Error": err.to_info()}),
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
                ctx.commit_or_suspend(Delta {
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

/// What a condition check found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub enum ConditionCheck<S> {
    /// The condition holds; finish with this state.
    Done(S),
    /// Not yet; check again later with this state.
    Continue(S),
}

/// How long to wait between condition checks, and how many to make.
#[derive(Debug, Clone, PartialEq)]
pub struct WaitStrategy {
    /// Delay after the first check.
    pub initial_delay: Duration,
    /// No delay is longer than this.
    pub max_delay: Duration,
    /// Growth factor per check.
    pub multiplier: f64,
    /// Checks in all before giving up with [`ErrorKind::ConditionNotMet`].
    pub max_attempts: u32,
}

impl Default for WaitStrategy {
    /// 5 s, ×1.5, capped at 5 min, 60 checks.
    fn default() -> Self {
        WaitStrategy {
            initial_delay: Duration::from_secs(5),
            max_delay: Duration::from_secs(300),
            multiplier: 1.5,
            max_attempts: 60,
        }
    }
}

impl WaitStrategy {
    fn delay(&self, attempt: u32) -> Duration {
        let secs = self.initial_delay.as_secs_f64()
            * self
                .multiplier
                .max(1.0)
                .powi(attempt.saturating_sub(1).min(64) as i32);
        Duration::from_secs_f64(secs.min(self.max_delay.as_secs_f64()).max(0.0))
    }
}

/// `wait_for_condition` being configured; `.await` it at once.
#[must_use = "a wait does nothing until awaited"]
pub struct ConditionBuilder<S, F> {
    ctx: Context,
    op: Op,
    initial: S,
    check: F,
    strategy: WaitStrategy,
    retry: RetryStrategy,
}

impl Context {
    /// Durable polling: call `check` with the current state until it returns
    /// [`ConditionCheck::Done`], sleeping on durable timers in between. The state is
    /// threaded across checks and journaled, so it survives suspension.
    pub fn wait_for_condition<S, F, Fut>(
        &self,
        name: &str,
        initial: S,
        check: F,
    ) -> ConditionBuilder<S, F>
    where
        S: Serialize + DeserializeOwned + Send + 'static,
        F: FnOnce(S, StepContext) -> Fut + Send + 'static,
        Fut: Future<Output = Result<ConditionCheck<S>, StepError>> + Send + 'static,
    {
        ConditionBuilder {
            ctx: self.clone(),
            op: self.mint(name, OperationKind::Condition),
            initial,
            check,
            strategy: WaitStrategy::default(),
            retry: RetryStrategy::default(),
        }
    }
}

impl<S, F> ConditionBuilder<S, F> {
    /// Use this wait strategy.
    pub fn strategy(mut self, strategy: WaitStrategy) -> Self {
        self.strategy = strategy;
        self
    }

    /// Retry a check that returns an error with this strategy (default: a step's
    /// default); once it gives up, the operation fails with the check's error. Like a
    /// step attempt, each failed check is recorded.
    pub fn retry(mut self, retry: RetryStrategy) -> Self {
        self.retry = retry;
        self
    }
}

impl<S, F, Fut> IntoFuture for ConditionBuilder<S, F>
where
    S: Serialize + DeserializeOwned + Send + 'static,
    F: FnOnce(S, StepContext) -> Fut + Send + 'static,
    Fut: Future<Output = Result<ConditionCheck<S>, StepError>> + Send + 'static,
{
    type Output = Result<S, Error>;
    type IntoFuture = BoxFuture<'static, Result<S, Error>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move {
            let ConditionBuilder {
                ctx,
                op,
                initial,
                check,
                strategy,
                retry,
            } = self;
            let now = ctx.shared.now();
            let (attempt, state, failures) = match ctx.lookup(&op).await.map(|e| e.state) {
                Some(EntryState::Succeeded { value, .. }) => return ctx.decode(&value).await,
                Some(EntryState::Failed { error, .. }) => return Err(Error::from_info(&error)),
                Some(EntryState::Polling {
                    attempt,
                    state,
                    next_check_at,
                    failures,
                }) => {
                    if now < next_check_at {
                        return ctx.suspend(Some(next_check_at)).await;
                    }
                    (attempt + 1, ctx.decode::<S>(&state).await?, failures)
                }
                _ => (1, initial, 0),
            };
            ctx.go_live();
            ctx.boundary().await;
            let fallback = ctx.encode(&state).await?;
            // Each check is an attempt of the condition's step: StepStarted, then its
            // outcome with the state it produced.
            let started = ctx.event(
                EventType::StepStarted,
                SubType::WaitForCondition,
                &op,
                serde_json::json!({"Attempt": attempt}),
            );
            let step_ctx = StepContext {
                attempt,
                position: op.position.clone(),
                key: None,
                tenant: ctx.shared.tenant.clone(),
                run_id: ctx.shared.run_id.clone(),
            };
            let (done, next_state) = match check(state, step_ctx).await {
                Ok(ConditionCheck::Done(s)) => (true, ctx.encode(&s).await?),
                Ok(ConditionCheck::Continue(s)) => (false, ctx.encode(&s).await?),
                // A check error is a failed attempt, as in a step: the retry policy
                // decides, the state stays what it was, and the error is recorded.
                Err(e) => {
                    let failures = failures + 1;
                    let error = e.info().clone();
                    if !retry.should_retry(failures, &error) {
                        let err = Error::new(
                            ErrorKind::StepFailed,
                            format!(
                                "condition '{}' check failed after {failures} attempt(s): {e}",
                                op.name
                            ),
                            Some(error.clone()),
                        );
                        return finish_failed(&ctx, &op, started, attempt, err, error).await;
                    }
                    let next_check_at = ctx
                        .shared
                        .now()
                        .plus(retry.delay(failures, rand::random::<f64>()));
                    let ev = ctx.event(
                        EventType::StepFailed,
                        SubType::WaitForCondition,
                        &op,
                        serde_json::json!({"Attempt": attempt, "Error": error, "NextAttemptAt": next_check_at, "Retrying": true}),
                    );
                    ctx.commit_or_suspend(Delta {
                        journal: vec![op.entry(EntryState::Polling {
                            attempt,
                            state: fallback,
                            next_check_at,
                            failures,
                        })],
                        timeline: vec![started, ev],
                        ..Delta::default()
                    })
                    .await;
                    return ctx.suspend(Some(next_check_at)).await;
                }
            };
            if done {
                let value: S = ctx.decode(&next_state).await?;
                let ev = ctx.event(
                    EventType::StepSucceeded,
                    SubType::WaitForCondition,
                    &op,
                    serde_json::json!({"Attempt": attempt, "Result": inline_detail(&next_state)}),
                );
                ctx.commit_or_suspend(Delta {
                    journal: vec![op.entry(EntryState::Succeeded {
                        value: next_state,
                        attempt,
                    })],
                    timeline: vec![started, ev],
                    ..Delta::default()
                })
                .await;
                return Ok(value);
            }
            if attempt >= strategy.max_attempts {
                let err = Error::new(
                    ErrorKind::ConditionNotMet,
                    format!("condition '{}' not met after {attempt} checks", op.name),
                    None,
                );
                let cause = err.to_info();
                return finish_failed(&ctx, &op, started, attempt, err, cause).await;
            }
            let next_check_at: Timestamp = ctx.shared.now().plus(strategy.delay(attempt));
            let ev = ctx.event(EventType::StepFailed, SubType::WaitForCondition, &op, serde_json::json!({"Attempt": attempt, "State": inline_detail(&next_state), "NextAttemptAt": next_check_at, "Retrying": true}));
            ctx.commit_or_suspend(Delta {
                journal: vec![op.entry(EntryState::Polling {
                    attempt,
                    state: next_state,
                    next_check_at,
                    failures: 0,
                })],
                timeline: vec![started, ev],
                ..Delta::default()
            })
            .await;
            ctx.suspend(Some(next_check_at)).await
        })
    }
}

/// Fail the condition with `err`; its timeline event shows `cause` (the check's own
/// error, as a step's last failed attempt does).
async fn finish_failed<S>(
    ctx: &Context,
    op: &Op,
    started: TimelineEvent,
    attempt: u32,
    err: Error,
    cause: ErrorInfo,
) -> Result<S, Error> {
    let ev = ctx.event(
        EventType::StepFailed,
        SubType::WaitForCondition,
        op,
        serde_json::json!({"Attempt": attempt, "Error": cause}),
    );
    ctx.commit_or_suspend(Delta {
        journal: vec![op.entry(EntryState::Failed {
            error: err.to_info(),
            attempt,
        })],
        timeline: vec![started, ev],
        ..Delta::default()
    })
    .await;
    Err(err)
}

/// A payload as a timeline detail: the value inline, or its artifact reference.
fn inline_detail(payload: &Payload) -> serde_json::Value {
    match payload {
        Payload::Inline(v) => v.clone(),
        Payload::Artifact(a) => serde_json::json!({"Artifact": a}),
    }
}
