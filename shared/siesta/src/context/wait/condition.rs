//! `wait_for_condition`: durable polling, the state threaded across checks and
//! journaled, with durable timers in between.

use crate::timeline as tl;
use std::future::{Future, IntoFuture};
use std::time::Duration;

use futures::future::BoxFuture;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::context::{Context, Delta, Op, StepContext};
use crate::error::{Error, ErrorKind, StepError};
use crate::model::*;
use crate::retry::RetryStrategy;
use crate::time::Timestamp;

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
    /// threaded across checks and journaled, so it survives suspension. A check that
    /// returns an error fails the operation with it at once, unless a retry strategy
    /// is given ([`ConditionBuilder::retry`]).
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
            // AWS's behaviour: a check that returns an error fails the operation at
            // once. Retrying it is the author's choice (`retry`).
            retry: RetryStrategy::none(),
        }
    }
}

impl<S, F> ConditionBuilder<S, F> {
    /// Use this wait strategy.
    pub fn strategy(mut self, strategy: WaitStrategy) -> Self {
        self.strategy = strategy;
        self
    }

    /// Retry a check that returns an error with this strategy, as a step's attempt is
    /// retried (for instance `.retry(RetryStrategy::default())`, a step's default:
    /// retryable errors, 6 attempts). Without it a check that returns an error fails
    /// the operation at once with that error, as on AWS Lambda durable functions: the
    /// workflow gets it from `.await` and may catch it and go on, or let it fail the
    /// run. Each failed check is recorded (`StepFailed`, with `Retrying` while the
    /// strategy retries it); the state stays the one the failed check was given.
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
        Box::pin(run_condition(self))
    }
}

/// The condition operation: its journaled state and attempt, then a live check, its
/// outcome recorded as a step attempt's.
async fn run_condition<S, F, Fut>(builder: ConditionBuilder<S, F>) -> Result<S, Error>
where
    S: Serialize + DeserializeOwned + Send + 'static,
    F: FnOnce(S, StepContext) -> Fut + Send + 'static,
    Fut: Future<Output = Result<ConditionCheck<S>, StepError>> + Send + 'static,
{
    let ConditionBuilder {
        ctx,
        op,
        initial,
        check,
        strategy,
        retry,
    } = builder;
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
        tl::EventDetails::StepStarted(tl::StepStarted { attempt }),
    );
    let streams = crate::context::stream::AttemptStreams::new(&ctx, &op.position, attempt);
    // A live check, as a step's attempt is: its own span (docs/telemetry.md).
    let span = tracing::info_span!(
        "durable_operation",
        operationId = %op.position,
        name = %op.name,
        kind = op.kind.as_str(),
        subType = ?SubType::WaitForCondition,
        attempt,
        isReplay = false,
        outcome = tracing::field::Empty,
        "error.kind" = tracing::field::Empty,
    );
    let step_ctx = StepContext {
        span: span.clone(),
        attempt,
        position: op.position.clone(),
        key: None,
        tenant: ctx.shared.tenant.clone(),
        run_id: ctx.shared.run_id.clone(),
        streams: streams.clone(),
    };
    // The check is user code that may reach the outside world, as a step's closure:
    // every held opening is durable before it runs.
    ctx.flush_openings().await;
    let checked = tracing::Instrument::instrument(check(state, step_ctx), span.clone()).await;
    match &checked {
        Ok(ConditionCheck::Done(_)) => span.record("outcome", "succeeded"),
        Ok(ConditionCheck::Continue(_)) => span.record("outcome", "not_yet"),
        Err(e) => span
            .record("outcome", "failed")
            .record("error.kind", e.info().kind.as_str()),
    };
    if checked.is_err() {
        streams.attempt_failed().await;
    }
    let (done, next_state) = match checked {
        Ok(ConditionCheck::Done(s)) => (true, ctx.encode(&s).await?),
        Ok(ConditionCheck::Continue(s)) => (false, ctx.encode(&s).await?),
        // A check error fails the operation (AWS), unless the author opted into a
        // retry strategy: then it is a failed attempt, as in a step, and the state
        // stays what it was.
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
            let delay = retry.delay(failures, rand::random::<f64>());
            let next_check_at = ctx.shared.now().plus(delay);
            let ev = ctx.event(
                EventType::StepFailed,
                SubType::WaitForCondition,
                &op,
                tl::EventDetails::StepFailed(tl::StepEnded {
                    attempt: Some(attempt),
                    error: Some(error),
                    next_attempt_at: Some(next_check_at),
                    next_attempt_delay_ms: Some(delay.as_millis() as u64),
                    retrying: Some(true),
                    ..Default::default()
                }),
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
            tl::EventDetails::StepSucceeded(tl::StepEnded {
                attempt: Some(attempt),
                result: Some(inline_detail(&next_state)),
                ..Default::default()
            }),
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
    // A check that says "not yet" succeeded, as AWS records it: the step
    // succeeded with the new state and the delay before the next check
    // (`Retrying` keeps the operation open); only a check that throws fails.
    let delay = strategy.delay(attempt);
    let next_check_at: Timestamp = ctx.shared.now().plus(delay);
    let ev = ctx.event(
        EventType::StepSucceeded,
        SubType::WaitForCondition,
        &op,
        tl::EventDetails::StepSucceeded(tl::StepEnded {
            attempt: Some(attempt),
            state: Some(inline_detail(&next_state)),
            next_attempt_at: Some(next_check_at),
            next_attempt_delay_ms: Some(delay.as_millis() as u64),
            retrying: Some(true),
            ..Default::default()
        }),
    );
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
        tl::EventDetails::StepFailed(tl::StepEnded {
            attempt: Some(attempt),
            error: Some(cause),
            ..Default::default()
        }),
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
