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

mod run;
mod settle;
mod slot;

use run::run_step;

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
    /// The step limit its attempts count against (`.limit(key, max)`).
    limit: Option<slot::StepLimit>,
    /// The rate limit its attempts go by (`.rate(key, n, per)`).
    rate: Option<slot::StepRate>,
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
                limit: None,
                rate: None,
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
        // A fork's calls carry the keys its origin's had (`Run::key_origin`).
        let origin = self.shared.state().run.key_origin().clone();
        let key = idempotency_key(&self.shared.tenant, &origin, &op.position, &payload);
        ToolCallBuilder(StepBuilder {
            ctx: self.clone(),
            op,
            f,
            spec: StepSpec {
                mode: Mode::Tool { key, lookup: None },
                retry: RetryStrategy::default(),
                park_on_exhaustion: false,
                sub_type: None,
                limit: None,
                rate: None,
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

    /// Count each attempt against the step limit `key`: at most `max` attempts of steps
    /// naming it in flight at once across the deployment (`--limits` may set another
    /// max for the key). An attempt over it waits durably — the run suspends, nothing
    /// runs — and goes on when a slot frees (docs/flow-control.md). Only an executing
    /// attempt holds a slot; one that crashed gives it back when its lease ends.
    ///
    /// ```ignore
    /// let answer = ctx.step("llm", |_| async { call_model().await }).limit("openai", 8).await?;
    /// ```
    pub fn limit(mut self, key: &str, max: u32) -> Self {
        self.spec.limit = Some(slot::StepLimit::new(key, max));
        self
    }

    /// Let at most `n` attempts of steps naming the rate limit `key` start per `per`
    /// across the deployment, evenly spaced (a provider's 500 requests a minute: one
    /// every 120 ms). An attempt before its turn waits durably — the run suspends until
    /// its turn, which is kept for it — and does not fail (docs/flow-control.md).
    ///
    /// ```ignore
    /// ctx.step("llm", |_| async { call_model().await })
    ///     .rate("openai-rpm", 500, Duration::from_secs(60))
    ///     .await?;
    /// ```
    pub fn rate(mut self, key: &str, n: u32, per: Duration) -> Self {
        self.spec.rate = Some(slot::StepRate::new(key, n, per));
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

    /// Count each attempt against the step limit `key` (see [`StepBuilder::limit`]).
    pub fn limit(mut self, key: &str, max: u32) -> Self {
        self.0.spec.limit = Some(slot::StepLimit::new(key, max));
        self
    }

    /// Start at most `n` attempts per `per` under the rate limit `key` (see
    /// [`StepBuilder::rate`]).
    pub fn rate(mut self, key: &str, n: u32, per: Duration) -> Self {
        self.0.spec.rate = Some(slot::StepRate::new(key, n, per));
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
