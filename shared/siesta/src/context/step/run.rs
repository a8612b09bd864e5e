//! The step operation: find what the journal holds for the step, resume or replay it,
//! run an attempt, and hand its outcome to be recorded.

use super::settle::{park_unknown, settle_failure, settle_success, tool_record};
use super::*;

pub(super) async fn run_step<T, F, Fut>(
    ctx: Context,
    op: Op,
    spec: StepSpec<T>,
    f: F,
) -> Result<T, Error>
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
        limit,
        rate,
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
        // A tool call a restart set aside after it succeeded is answered from its
        // recorded outcome, not made again (see `carried`).
        None if is_tool && let Some((value, attempt)) = ctx.carried_tool_call(&op) => {
            ctx.go_live();
            ctx.boundary().await;
            let value: T = ctx.decode(&value).await?;
            return settle_success(&ctx, &op, sub, attempt, key, value, Vec::new(), false).await;
        }
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
                // The lookup asks the far side: held openings are durable first.
                ctx.flush_openings().await;
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
                // The lookup asks the far side: what it could be handed (a held
                // callback's id) is durable first.
                ctx.flush_openings().await;
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
    // Before its turn under its rate limit, the attempt waits: the run suspends until
    // the turn kept for it, and replays to here.
    if let Some(rate) = &rate
        && let Some(turn) = ctx.take_rate_turn(rate, &op).await
    {
        ctx.note_delayed(&op, sub, "rate", Context::rate_key(rate), turn, None);
        return ctx.suspend(Some(turn)).await;
    }
    // Over its step limit, the attempt waits: the run suspends until a slot is handed
    // to it (or it looks again), and replays to here.
    let slot = match &limit {
        Some(limit) => match ctx.take_step_slot(limit, &op).await {
            super::slot::Turn::Go(held) => Some(held),
            super::slot::Turn::WaitUntil(at, place) => {
                ctx.note_delayed(&op, sub, "limit", Context::limit_key(limit), at, place);
                return ctx.suspend(Some(at)).await;
            }
        },
        None => None,
    };
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
    // The closure may hand anything it can reach to the outside world (a held
    // callback's id or URL above all): every held opening is durable before it runs.
    ctx.flush_openings().await;
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
    // Only an executing attempt holds a slot: the next in line may go now.
    if let Some(held) = slot {
        ctx.give_back_step_slot(held).await;
    }
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
