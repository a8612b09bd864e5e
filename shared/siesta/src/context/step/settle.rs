//! An attempt's outcome, recorded: the success, the failure and the retry policy's
//! decision on it, the tool-call records, and a tool call parked as unknown.

use super::*;

pub(super) fn tool_record(
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
pub(super) async fn settle_success<T: Serialize + DeserializeOwned + Send + 'static>(
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
pub(super) async fn settle_failure<T>(
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

pub(super) async fn park_unknown<T>(
    ctx: &Context,
    op: &Op,
    key: IdempotencyKey,
    attempt: u32,
) -> T {
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
