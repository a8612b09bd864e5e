//! The step function: an SQS batch of wake-ups, each run advanced by the engine until
//! the invocation's deadline less a safety margin (then the engine checkpoints and
//! schedules its own continuation), and only the failed messages reported back
//! (`ReportBatchItemFailures`), so SQS redelivers those and no others.

use std::time::{Duration, Instant};

use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent};
use siesta::ports::WakeUp;
use siesta::{Engine, Timestamp, WakeOutcome};
use siesta_lambda::metrics::{Unit, emit};

/// Handle one SQS batch; `deadline_ms` is the invocation's deadline (ms since the
/// epoch, `Context::deadline`).
pub async fn handle(
    engine: &Engine,
    event: SqsEvent,
    deadline_ms: u64,
    safety_margin: Duration,
) -> SqsBatchResponse {
    let started = Instant::now();
    let stop_at = Timestamp(deadline_ms as i64 - safety_margin.as_millis() as i64);
    let mut failed: Vec<String> = Vec::new();
    let mut wakes = Vec::new();
    let mut ids = Vec::new();
    for record in event.records {
        let id = record.message_id.unwrap_or_default();
        match serde_json::from_str::<WakeUp>(record.body.as_deref().unwrap_or_default()) {
            Ok(wake) => {
                wakes.push(wake);
                ids.push(id);
            }
            Err(e) => {
                // A poison message: reported failed, so the redrive policy moves it to
                // the dead-letter queue instead of it being lost.
                tracing::error!(message_id = %id, error = %e, "not a wake-up");
                failed.push(id);
            }
        }
    }
    let report = engine.handle_batch(&wakes, Some(stop_at)).await;
    for (wake, outcome) in wakes.iter().zip(&report.outcomes) {
        let _run =
            tracing::info_span!("run", tenant = %wake.tenant, run_id = %wake.run_id).entered();
        match outcome {
            Ok(o) => tracing::info!(outcome = ?o, "handled"),
            Err(e) => tracing::warn!(error = %e, "failed; SQS will redeliver it"),
        }
    }
    failed.extend(report.failed().into_iter().map(|i| ids[i].clone()));
    let count = |f: fn(&WakeOutcome) -> bool| {
        report
            .outcomes
            .iter()
            .filter(|o| o.as_ref().is_ok_and(f))
            .count() as f64
    };
    emit(
        "step",
        &[
            (
                "StepLatency",
                Unit::Milliseconds,
                started.elapsed().as_secs_f64() * 1000.0,
            ),
            ("WakeUps", Unit::Count, report.outcomes.len() as f64),
            (
                "Advanced",
                Unit::Count,
                count(|o| matches!(o, WakeOutcome::Advanced(_))),
            ),
            (
                "Conflicts",
                Unit::Count,
                count(|o| matches!(o, WakeOutcome::Busy)),
            ),
            ("Retries", Unit::Count, failed.len() as f64),
        ],
    );
    let mut response = SqsBatchResponse::default();
    response.batch_item_failures = failed
        .into_iter()
        .map(|id| {
            let mut f = BatchItemFailure::default();
            f.item_identifier = id;
            f
        })
        .collect();
    response
}
