//! Steps and side-effecting tool calls: run a closure, journal its outcome, retry it
//! on a durable timer.
//!
//! A step found started-but-unfinished after a crash is the interesting case:
//! - *at least once per retry* (the default) writes nothing before running, so the
//!   attempt simply runs again;
//! - *at most once per retry* records the attempt before running; finding that record
//!   means the attempt's outcome is lost, so it counts as failed and the retry policy
//!   decides;
//! - a *tool call* records `running` with its idempotency key before calling; finding
//!   that record, its lookup function (if any) asks the far side what happened, and
//!   without one the call is marked `unknown` and the run parked. Never blindly repeated.

use crate::timeline as tl;
use std::future::{Future, IntoFuture};
use std::time::Duration;

use futures::future::BoxFuture;
use serde::Serialize;
use serde::de::DeserializeOwned;
use sha2::{Digest, Sha256};

use super::stream::{AttemptStreams, StepStream};
use super::{Context, Delta, Op, Stop};
use crate::error::{Error, ErrorKind, StepError};
use crate::model::*;
use crate::retry::RetryStrategy;

/// How a step behaves when it is found started but unfinished after a crash.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StepSemantics {
    /// Run the attempt again (the default; cheapest: one write per step).
    #[default]
    AtLeastOncePerRetry,
    /// Record the attempt before running it; an interrupted attempt is not re-run but
    /// counts as failed, and the retry policy decides.
    AtMostOncePerRetry,
}

/// What a step's closure is told about the attempt it runs.
#[derive(Debug, Clone)]
pub struct StepContext {
    /// The attempt's `durable_operation` span: what an outgoing call's `traceparent`
    /// names, wherever the closure's futures run.
    pub(super) span: tracing::Span,
    pub(super) attempt: u32,
    pub(super) position: Position,
    pub(super) key: Option<IdempotencyKey>,
    pub(super) tenant: TenantId,
    pub(super) run_id: RunId,
    pub(super) streams: AttemptStreams,
}

impl StepContext {
    /// The run's stream `name`, to publish chunks from this attempt (a model's tokens):
    /// each is tagged with the step and the attempt, and a failed attempt's chunks are
    /// marked void (see [`StepStream::publish`]).
    ///
    /// ```ignore
    /// ctx.step("answer", |step| async move {
    ///     let tokens = step.stream("tokens");
    ///     for token in ["Hel", "lo"] { tokens.publish(token).await?; }
    ///     Ok("Hello".to_owned())
    /// }).await?;
    /// ```
    pub fn stream(&self, name: &str) -> StepStream {
        StepStream::new(self.streams.clone(), name)
    }

    /// The attempt number, from 1.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// The step's stable position in the run.
    pub fn position(&self) -> &Position {
        &self.position
    }

    /// The idempotency key, for tool calls: hand it to the tool so it can dedupe too.
    pub fn idempotency_key(&self) -> Option<&IdempotencyKey> {
        self.key.as_ref()
    }

    /// The W3C `traceparent` header value of this attempt's span, for an outgoing call
    /// to carry (`req.header("traceparent", v)`): the service called joins the run's
    /// trace under this attempt. `None` when spans are not exported.
    pub fn traceparent(&self) -> Option<String> {
        crate::telemetry::trace_parent_of(&self.span).map(|p| p.to_string())
    }

    /// Log at info level with the run, the step's position and the attempt. A step's
    /// closure runs only for an attempt that is live (replay returns the journaled
    /// outcome without calling it), so each line is written once per attempt, never
    /// again on replay.
    pub fn log(&self, message: impl AsRef<str>) {
        tracing::info!(
            target: "siesta::workflow",
            tenant = %self.tenant,
            run_id = %self.run_id,
            position = %self.position,
            attempt = self.attempt,
            "{}",
            message.as_ref()
        );
    }

    /// Log at warn level, once per attempt (see [`StepContext::log`]).
    pub fn warn(&self, message: impl AsRef<str>) {
        tracing::warn!(
            target: "siesta::workflow",
            tenant = %self.tenant,
            run_id = %self.run_id,
            position = %self.position,
            attempt = self.attempt,
            "{}",
            message.as_ref()
        );
    }
}

type Lookup<T> =
    Box<dyn FnOnce(IdempotencyKey) -> BoxFuture<'static, Result<Option<T>, StepError>> + Send>;

enum Mode<T> {
    Step(StepSemantics),
    Tool {
        key: IdempotencyKey,
        lookup: Option<Lookup<T>>,
    },
}

struct StepSpec<T> {
    mode: Mode<T>,
    retry: RetryStrategy,
    park_on_exhaustion: bool,
    /// The label of its timeline events when not the mode's own (a model call).
    sub_type: Option<SubType>,
}

/// A step being configured; `.await` it at once (replay relies on creation order).
#[must_use = "a step does nothing until awaited"]
pub struct StepBuilder<T, F> {
    ctx: Context,
    op: Op,
    f: F,
    spec: StepSpec<T>,
}

impl Context {
    /// A named step: runs `f` once (per retry), journals its result, and on replay
    /// returns the journaled result without running `f`.
    ///
    /// ```ignore
    /// let order = ctx.step("create_order", |_| async { Ok(create_order().await?) }).await?;
    /// ```
    pub fn step<T, F, Fut>(&self, name: &str, f: F) -> StepBuilder<T, F>
    where
        F: FnOnce(StepContext) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, StepError>> + Send + 'static,
        T: Serialize + DeserializeOwned + Send + 'static,
    {
        StepBuilder {
            ctx: self.clone(),
            op: self.mint(name, OperationKind::Step),
            f,
            spec: StepSpec {
                mode: Mode::Step(StepSemantics::default()),
                retry: RetryStrategy::default(),
                park_on_exhaustion: false,
                sub_type: None,
            },
        }
    }

    /// A side-effecting tool call with an idempotency key derived from its meaning
    /// (tenant, run, position and a hash of `payload`). It is recorded `running`
    /// before `f` is called and `succeeded`/`failed` after; see the module docs for
    /// what happens when it is found `running` after a crash.
    pub fn tool_call<P, T, F, Fut>(&self, name: &str, payload: &P, f: F) -> ToolCallBuilder<T, F>
    where
        P: Serialize + ?Sized,
        F: FnOnce(StepContext) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, StepError>> + Send + 'static,
        T: Serialize + DeserializeOwned + Send + 'static,
    {
        let op = self.mint(name, OperationKind::ToolCall);
        let payload = serde_json::to_vec(payload).unwrap_or_default();
        let key = idempotency_key(
            &self.shared.tenant,
            &self.shared.run_id,
            &op.position,
            &payload,
        );
        ToolCallBuilder(StepBuilder {
            ctx: self.clone(),
            op,
            f,
            spec: StepSpec {
                mode: Mode::Tool { key, lookup: None },
                retry: RetryStrategy::default(),
                park_on_exhaustion: false,
                sub_type: None,
            },
        })
    }
}

impl<T, F> StepBuilder<T, F> {
    /// Use this retry strategy (default: 6 attempts, 5 s, ×2, 60 s cap, full jitter).
    pub fn retry(mut self, strategy: RetryStrategy) -> Self {
        self.spec.retry = strategy;
        self
    }

    /// Label the step's timeline events with `sub_type` instead of `Step`, for
    /// libraries whose operations are steps underneath (a model call is a step
    /// labelled [`SubType::ModelCall`]). The journal and replay are a step's.
    pub fn sub_type(mut self, sub_type: SubType) -> Self {
        self.spec.sub_type = Some(sub_type);
        self
    }

    /// Choose at-least-once (default) or at-most-once per retry.
    pub fn semantics(mut self, semantics: StepSemantics) -> Self {
        if let Mode::Step(s) = &mut self.spec.mode {
            *s = semantics;
        }
        self
    }

    /// Shorthand for [`StepSemantics::AtMostOncePerRetry`].
    pub fn at_most_once(self) -> Self {
        self.semantics(StepSemantics::AtMostOncePerRetry)
    }

    /// When retries are exhausted, park the run for an operator instead of returning
    /// the error to the workflow.
    pub fn park_on_exhaustion(mut self) -> Self {
        self.spec.park_on_exhaustion = true;
        self
    }
}

impl<T, F, Fut> IntoFuture for StepBuilder<T, F>
where
    F: FnOnce(StepContext) -> Fut + Send + 'static,
    Fut: Future<Output = Result<T, StepError>> + Send + 'static,
    T: Serialize + DeserializeOwned + Send + 'static,
{
    type Output = Result<T, Error>;
    type IntoFuture = BoxFuture<'static, Result<T, Error>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(run_step(self.ctx, self.op, self.spec, self.f))
    }
}

/// A tool call being configured; `.await` it at once.
#[must_use = "a tool call does nothing until awaited"]
pub struct ToolCallBuilder<T, F>(StepBuilder<T, F>);

impl<T, F> ToolCallBuilder<T, F> {
    /// Use this retry strategy; every attempt carries the same idempotency key.
    pub fn retry(mut self, strategy: RetryStrategy) -> Self {
        self.0.spec.retry = strategy;
        self
    }

    /// Ask the far side, by idempotency key, whether an interrupted call happened:
    /// `Some(result)` if it did, `None` if it did not (then it is made again).
    pub fn lookup<L, LFut>(mut self, lookup: L) -> Self
    where
        L: FnOnce(IdempotencyKey) -> LFut + Send + 'static,
        LFut: Future<Output = Result<Option<T>, StepError>> + Send + 'static,
    {
        if let Mode::Tool { lookup: slot, .. } = &mut self.0.spec.mode {
            *slot = Some(Box::new(move |key| Box::pin(lookup(key))));
        }
        self
    }

    /// When retries are exhausted, park the run instead of returning the error.
    pub fn park_on_exhaustion(mut self) -> Self {
        self.0.spec.park_on_exhaustion = true;
        self
    }

    /// The call's idempotency key.
    pub fn key(&self) -> &IdempotencyKey {
        match &self.0.spec.mode {
            Mode::Tool { key, .. } => key,
            Mode::Step(_) => unreachable!("a tool call always has a key"),
        }
    }
}

impl<T, F, Fut> IntoFuture for ToolCallBuilder<T, F>
where
    F: FnOnce(StepContext) -> Fut + Send + 'static,
    Fut: Future<Output = Result<T, StepError>> + Send + 'static,
    T: Serialize + DeserializeOwned + Send + 'static,
{
    type Output = Result<T, Error>;
    type IntoFuture = BoxFuture<'static, Result<T, Error>>;

    fn into_future(self) -> Self::IntoFuture {
        self.0.into_future()
    }
}

/// The idempotency key of a tool call: SHA-256 over tenant, run, position and the
/// SHA-256 of the payload. The same call in the same run always has the same key; a
/// different payload or position never does.
pub fn idempotency_key(
    tenant: &TenantId,
    run_id: &RunId,
    position: &Position,
    payload: &[u8],
) -> IdempotencyKey {
    let payload_hash = Sha256::digest(payload);
    let mut h = Sha256::new();
    for part in [
        tenant.as_str().as_bytes(),
        run_id.as_str().as_bytes(),
        position.as_str().as_bytes(),
    ] {
        h.update((part.len() as u64).to_be_bytes());
        h.update(part);
    }
    h.update(payload_hash);
    IdempotencyKey(format!("idem_{}", hex::encode(h.finalize())))
}

fn step_failed(op: &Op, error: &ErrorInfo, attempts: u32) -> Error {
    Error::new(
        ErrorKind::StepFailed,
        format!(
            "step '{}' failed after {attempts} attempt(s): {error}",
            op.name
        ),
        Some(error.clone()),
    )
}

fn sub_type(mode_is_tool: bool) -> SubType {
    if mode_is_tool {
        SubType::ToolCall
    } else {
        SubType::Step
    }
}

async fn run_step<T, F, Fut>(ctx: Context, op: Op, spec: StepSpec<T>, f: F) -> Result<T, Error>
where
    F: FnOnce(StepContext) -> Fut + Send + 'static,
    Fut: Future<Output = Result<T, StepError>> + Send + 'static,
    T: Serialize + DeserializeOwned + Send + 'static,
{
    let StepSpec {
        mode,
        retry,
        park_on_exhaustion,
        sub_type: label,
    } = spec;
    let is_tool = matches!(mode, Mode::Tool { .. });
    let sub = label.unwrap_or_else(|| sub_type(is_tool));
    let (key, mut lookup, semantics) = match mode {
        Mode::Tool { key, lookup } => (Some(key), lookup, StepSemantics::AtMostOncePerRetry),
        Mode::Step(s) => (None, None, s),
    };
    let now = ctx.shared.now();
    // Which attempt to run, and whether its start is already recorded.
    // A call parked as unknown is looked at again as an interrupted one, so a lookup
    // added to the code since the park is asked before the run parks again.
    let recorded = ctx.lookup(&op).await.map(|e| match e.state {
        EntryState::Unknown { key, attempt } => EntryState::Started {
            attempt: attempt.max(1),
            key: Some(key),
        },
        other => other,
    });
    let (attempt, started) = match recorded {
        None => (1, false),
        Some(EntryState::Succeeded { value, .. }) => return ctx.decode(&value).await,
        Some(EntryState::Failed { error, attempt }) => {
            return Err(step_failed(&op, &error, attempt));
        }
        Some(EntryState::Retrying {
            attempt, retry_at, ..
        }) => {
            if now < retry_at {
                return ctx.suspend(Some(retry_at)).await;
            }
            // A failed tool call may still have happened (a timeout after the far side
            // acted): ask before calling again.
            if let (Some(key), Some(lookup)) = (&key, lookup.take()) {
                ctx.go_live();
                ctx.boundary().await;
                match lookup(key.clone()).await {
                    Ok(Some(value)) => {
                        return settle_success(
                            &ctx,
                            &op,
                            sub,
                            attempt,
                            Some(key.clone()),
                            value,
                            Vec::new(),
                            true,
                        )
                        .await;
                    }
                    Ok(None) => {}
                    Err(e) => {
                        return settle_failure(
                            &ctx,
                            &op,
                            sub,
                            &retry,
                            park_on_exhaustion,
                            attempt + 1,
                            e.info().clone(),
                            Some(key.clone()),
                            false,
                        )
                        .await;
                    }
                }
            }
            (attempt + 1, false)
        }
        Some(EntryState::Started { attempt, .. }) => match (&key, semantics) {
            (_, StepSemantics::AtLeastOncePerRetry) => (attempt, true),
            (None, StepSemantics::AtMostOncePerRetry) => {
                let error = ErrorInfo::new(
                    "Interrupted",
                    format!("attempt {attempt} was interrupted before its outcome was recorded"),
                    true,
                );
                return settle_failure(
                    &ctx,
                    &op,
                    sub,
                    &retry,
                    park_on_exhaustion,
                    attempt,
                    error,
                    None,
                    false,
                )
                .await;
            }
            (Some(key), _) => {
                ctx.go_live();
                ctx.boundary().await;
                match lookup.take() {
                    None => return park_unknown(&ctx, &op, key.clone(), attempt).await,
                    Some(lookup) => match lookup(key.clone()).await {
                        Ok(Some(value)) => {
                            return settle_success(
                                &ctx,
                                &op,
                                sub,
                                attempt,
                                Some(key.clone()),
                                value,
                                Vec::new(),
                                false,
                            )
                            .await;
                        }
                        // The far side never saw it: making the call now is safe.
                        Ok(None) => (attempt, true),
                        Err(e) => {
                            return settle_failure(
                                &ctx,
                                &op,
                                sub,
                                &retry,
                                park_on_exhaustion,
                                attempt,
                                e.info().clone(),
                                Some(key.clone()),
                                false,
                            )
                            .await;
                        }
                    },
                }
            }
        },
        Some(other) => {
            let message = format!(
                "non-determinism at {}: the journal holds a {:?} state for a step",
                op.position, other
            );
            return ctx.diverged(&op, op.kind, message).await;
        }
    };
    ctx.go_live();
    ctx.boundary().await;
    // Claimed until the step returns: dropped before (a combinator's loser), it gives
    // the messages back to the next boundary (see `claim`).
    let (drained, claim) = ctx.drain_messages(&op);
    let mut started_event_written = false;
    if semantics == StepSemantics::AtMostOncePerRetry && !started {
        let mut entry = op.entry(EntryState::Started {
            attempt,
            key: key.clone(),
        });
        entry.consumed = drained.clone();
        let mut delta = Delta {
            journal: vec![entry],
            timeline: vec![ctx.event(
                EventType::StepStarted,
                sub,
                &op,
                tl::EventDetails::StepStarted(tl::StepStarted { attempt }),
            )],
            ..Delta::default()
        };
        if let Some(key) = &key {
            delta
                .tool_calls
                .push(tool_record(&ctx, &op, key, ToolCallStatus::Running, None));
        }
        ctx.commit_or_suspend(delta).await;
        started_event_written = true;
    }
    let streams = AttemptStreams::new(&ctx, &op.position, attempt);
    // Only here, where an attempt runs, is a span opened: replay returns above, so a
    // replayed step is never reported again as if it ran (docs/telemetry.md).
    let span = tracing::info_span!(
        "durable_operation",
        operationId = %op.position,
        name = %op.name,
        kind = op.kind.as_str(),
        subType = ?sub,
        attempt,
        isReplay = false,
        outcome = tracing::field::Empty,
        "error.kind" = tracing::field::Empty,
    );
    let step_ctx = StepContext {
        span: span.clone(),
        attempt,
        position: op.position.clone(),
        key: key.clone(),
        tenant: ctx.shared.tenant.clone(),
        run_id: ctx.shared.run_id.clone(),
        streams: streams.clone(),
    };
    let outcome =
        tracing::Instrument::instrument(attempt_catching_panics(f, step_ctx), span.clone()).await;
    match &outcome {
        Ok(_) => span.record("outcome", "succeeded"),
        Err(e) => span
            .record("outcome", "failed")
            .record("error.kind", e.info().kind.as_str()),
    };
    if outcome.is_err() {
        // Before the failure is journaled: once the journal says the attempt failed,
        // its chunks are marked void.
        streams.attempt_failed().await;
    }
    let result = tracing::Instrument::instrument(
        async move {
            match outcome {
                Ok(value) => {
                    settle_success(
                        &ctx,
                        &op,
                        sub,
                        attempt,
                        key,
                        value,
                        if started_event_written {
                            Vec::new()
                        } else {
                            drained
                        },
                        !started_event_written && !started,
                    )
                    .await
                }
                Err(e) => {
                    settle_failure(
                        &ctx,
                        &op,
                        sub,
                        &retry,
                        park_on_exhaustion,
                        attempt,
                        e.info().clone(),
                        key,
                        !started_event_written && !started,
                    )
                    .await
                }
            }
        },
        span,
    )
    .await;
    claim.keep();
    result
}

/// Run one attempt of a step's closure; a panic in it (in the closure or in its
/// future) is a failed attempt of kind `Panicked`, never an unwinding worker.
async fn attempt_catching_panics<T, F, Fut>(f: F, step_ctx: StepContext) -> Result<T, StepError>
where
    F: FnOnce(StepContext) -> Fut + Send + 'static,
    Fut: Future<Output = Result<T, StepError>> + Send + 'static,
{
    use futures::FutureExt;
    // Unwind safety: nothing the closure shares with the engine is left half-changed
    // by a panic; the attempt's outcome is recorded from the error alone.
    std::panic::AssertUnwindSafe(async move { f(step_ctx).await })
        .catch_unwind()
        .await
        .unwrap_or_else(|payload| Err(StepError::panicked(payload.as_ref())))
}

fn tool_record(
    ctx: &Context,
    op: &Op,
    key: &IdempotencyKey,
    status: ToolCallStatus,
    outcome: Option<Result<Payload, ErrorInfo>>,
) -> ToolCallRecord {
    ToolCallRecord {
        key: key.clone(),
        tenant: ctx.shared.tenant.clone(),
        run_id: ctx.shared.run_id.clone(),
        position: op.position.clone(),
        status,
        outcome,
        updated_at: ctx.shared.now(),
    }
}

#[allow(clippy::too_many_arguments)]
async fn settle_success<T: Serialize + DeserializeOwned + Send + 'static>(
    ctx: &Context,
    op: &Op,
    sub: SubType,
    attempt: u32,
    key: Option<IdempotencyKey>,
    value: T,
    drained: Vec<DeliveryId>,
    with_started_event: bool,
) -> Result<T, Error> {
    // The workflow gets the journaled value decoded, exactly what replay returns.
    let (payload, decoded) = ctx.encode_decoded(&value).await?;
    drop(value);
    let mut entry = op.entry(EntryState::Succeeded {
        value: payload.clone(),
        attempt,
    });
    entry.consumed = drained;
    let mut timeline = Vec::with_capacity(2);
    if with_started_event {
        timeline.push(ctx.event(
            EventType::StepStarted,
            sub,
            op,
            tl::EventDetails::StepStarted(tl::StepStarted { attempt }),
        ));
    }
    let result_detail = match &payload {
        Payload::Inline(v) => tl::StepEnded {
            attempt: Some(attempt),
            result: Some(v.clone()),
            ..Default::default()
        },
        Payload::Artifact(a) => tl::StepEnded {
            attempt: Some(attempt),
            result_artifact: Some(serde_json::json!(a)),
            ..Default::default()
        },
    };
    timeline.push(ctx.event(
        EventType::StepSucceeded,
        sub,
        op,
        tl::EventDetails::StepSucceeded(result_detail),
    ));
    let mut delta = Delta {
        journal: vec![entry],
        timeline,
        ..Delta::default()
    };
    if let Some(key) = &key {
        delta.tool_calls.push(tool_record(
            ctx,
            op,
            key,
            ToolCallStatus::Succeeded,
            Some(Ok(payload)),
        ));
    }
    ctx.commit_or_suspend(delta).await;
    decoded
}

#[allow(clippy::too_many_arguments)]
async fn settle_failure<T>(
    ctx: &Context,
    op: &Op,
    sub: SubType,
    retry: &RetryStrategy,
    park_on_exhaustion: bool,
    attempt: u32,
    error: ErrorInfo,
    key: Option<IdempotencyKey>,
    with_started_event: bool,
) -> Result<T, Error> {
    // Every attempt that ran shows its StepStarted, failed ones included (AWS history).
    let mut timeline = Vec::with_capacity(3);
    if with_started_event {
        timeline.push(ctx.event(
            EventType::StepStarted,
            sub,
            op,
            tl::EventDetails::StepStarted(tl::StepStarted { attempt }),
        ));
    }
    if retry.should_retry(attempt, &error) {
        // A server that said when to come back (Retry-After) is taken at its word.
        let delay = match error.retry_after_ms {
            Some(ms) => Duration::from_millis(ms).min(crate::error::MAX_RETRY_AFTER),
            None => retry.delay(attempt, rand::random::<f64>()),
        };
        let retry_at = ctx.shared.now().plus(delay);
        timeline.push(ctx.event(
            EventType::StepFailed,
            sub,
            op,
            tl::EventDetails::StepFailed(tl::StepEnded {
                attempt: Some(attempt),
                error: Some(error.clone()),
                next_attempt_at: Some(retry_at),
                next_attempt_delay_ms: Some(delay.as_millis() as u64),
                retrying: Some(true),
                ..Default::default()
            }),
        ));
        ctx.commit_or_suspend(Delta {
            journal: vec![op.entry(EntryState::Retrying {
                attempt,
                error,
                retry_at,
            })],
            timeline,
            ..Delta::default()
        })
        .await;
        return ctx.suspend(Some(retry_at)).await;
    }
    timeline.push(ctx.event(
        EventType::StepFailed,
        sub,
        op,
        tl::EventDetails::StepFailed(tl::StepEnded {
            attempt: Some(attempt),
            error: Some(error.clone()),
            ..Default::default()
        }),
    ));
    let failure = step_failed(op, &error, attempt);
    if park_on_exhaustion {
        timeline.push(ctx.event(
            EventType::RunParked,
            sub,
            op,
            tl::EventDetails::RunParked(tl::RunParked {
                reason: Some(failure.to_string()),
                ..Default::default()
            }),
        ));
    }
    let mut delta = Delta {
        journal: vec![op.entry(EntryState::Failed {
            error: error.clone(),
            attempt,
        })],
        timeline,
        ..Delta::default()
    };
    if let Some(key) = &key {
        delta.tool_calls.push(tool_record(
            ctx,
            op,
            key,
            ToolCallStatus::Failed,
            Some(Err(error)),
        ));
    }
    ctx.commit_or_suspend(delta).await;
    if park_on_exhaustion {
        ctx.shared.set_stop(Stop::Park(ErrorInfo::new(
            "RetriesExhausted",
            failure.to_string(),
            false,
        )));
        return ctx.suspend(None).await;
    }
    Err(failure)
}

async fn park_unknown<T>(ctx: &Context, op: &Op, key: IdempotencyKey, attempt: u32) -> T {
    let reason = format!(
        "tool call '{}' at {} was interrupted and its outcome is unknown (idempotency key {}); an operator must resolve it",
        op.name, op.position, key
    );
    let already_unknown = matches!(
        ctx.shared
            .state()
            .journal
            .get(&op.position)
            .map(|e| &e.state),
        Some(EntryState::Unknown { .. })
    );
    if !already_unknown {
        ctx.commit_or_suspend(Delta {
            journal: vec![op.entry(EntryState::Unknown {
                key: key.clone(),
                attempt,
            })],
            timeline: vec![ctx.event(
                EventType::ToolCallRecorded,
                SubType::ToolCall,
                op,
                tl::EventDetails::ToolCallRecorded(tl::ToolCallRecorded {
                    status: "unknown".into(),
                    idempotency_key: Some(key.clone()),
                    ..Default::default()
                }),
            )],
            tool_calls: vec![tool_record(ctx, op, &key, ToolCallStatus::Unknown, None)],
            ..Delta::default()
        })
        .await;
    }
    ctx.shared.set_stop(Stop::Park(ErrorInfo::new(
        "UnknownSideEffect",
        reason,
        false,
    )));
    ctx.suspend(None).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn idempotency_key_is_stable_for_the_same_call() {
        let t = TenantId::from("acme");
        let r = RunId::from("run-1");
        let p = Position::from("charge#0");
        assert_eq!(
            idempotency_key(&t, &r, &p, b"{\"amount\":5}"),
            idempotency_key(&t, &r, &p, b"{\"amount\":5}")
        );
    }

    proptest! {
        #[test]
        fn idempotency_key_changes_with_any_part(a in "[a-z]{1,8}", b in "[a-z]{1,8}", c in "[a-z#0-9]{1,8}", d in proptest::collection::vec(any::<u8>(), 0..32), which in 0usize..4) {
            let base = idempotency_key(&TenantId(a.clone()), &RunId(b.clone()), &Position(c.clone()), &d);
            let changed = match which {
                0 => idempotency_key(&TenantId(format!("{a}x")), &RunId(b), &Position(c), &d),
                1 => idempotency_key(&TenantId(a), &RunId(format!("{b}x")), &Position(c), &d),
                2 => idempotency_key(&TenantId(a), &RunId(b), &Position(format!("{c}x")), &d),
                _ => { let mut d2 = d.clone(); d2.push(1); idempotency_key(&TenantId(a), &RunId(b), &Position(c), &d2) }
            };
            prop_assert_ne!(base, changed);
        }

        #[test]
        fn idempotency_key_parts_cannot_be_shifted(a in "[a-z]{2,8}", b in "[a-z]{2,8}") {
            // "ab" + "c" must differ from "a" + "bc": parts are length-prefixed.
            let p = Position::from("x#0");
            let k1 = idempotency_key(&TenantId(a.clone()), &RunId(b.clone()), &p, b"");
            let k2 = idempotency_key(&TenantId(format!("{a}{}", &b[..1])), &RunId(b[1..].to_owned()), &p, b"");
            prop_assert_ne!(k1, k2);
        }
    }
}
