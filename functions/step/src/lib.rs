//! The step function: an SQS batch of wake-ups, each run advanced by the engine until
//! the invocation's deadline less a safety margin (then the engine checkpoints and
//! schedules its own continuation), and only the failed messages reported back
//! (`ReportBatchItemFailures`), so SQS redelivers those and no others.

use std::time::{Duration, Instant};

use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent};
use siesta::ports::WakeUp;
use siesta::{BatchReport, Engine, Timestamp, WakeOutcome};
use siesta_lambda::metrics::{Unit, emit};
use tracing::Instrument;

/// When to stop taking new work: `margin` before the deadline — but never in the first
/// half of the time left, so a function whose timeout is shorter than twice the margin
/// still makes progress instead of handing over at once, forever.
pub fn stop_at(now_ms: i64, deadline_ms: i64, margin: Duration) -> i64 {
    let left = (deadline_ms - now_ms).max(0);
    (deadline_ms - margin.as_millis() as i64).max(now_ms + left / 2)
}

/// Handle one SQS batch; `deadline_ms` is the invocation's deadline (ms since the
/// epoch, `Context::deadline`).
///
/// Each wake-up is handled as [`Engine::handle_batch`] does (concurrently, each with the
/// deadline), inside a span naming its tenant and run, and timed for the `StepLatency`
/// metric. A record whose body is not a wake-up (a poison message) is reported failed,
/// so the queue's redrive policy moves it to the dead-letter queue.
pub async fn handle(
    engine: &Engine,
    event: SqsEvent,
    deadline_ms: u64,
    safety_margin: Duration,
) -> SqsBatchResponse {
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let stop_at = Timestamp(stop_at(now_ms, deadline_ms as i64, safety_margin));
    let mut failed: Vec<String> = Vec::new();
    let mut wakes = Vec::new();
    let mut ids = Vec::new();
    let mut redelivered = 0usize;
    for record in event.records {
        let id = record.message_id.unwrap_or_default();
        let receives = record
            .attributes
            .get("ApproximateReceiveCount")
            .and_then(|n| n.parse::<u32>().ok())
            .unwrap_or(1);
        if receives > 1 {
            redelivered += 1;
        }
        match serde_json::from_str::<WakeUp>(record.body.as_deref().unwrap_or_default()) {
            Ok(wake) => {
                wakes.push(wake);
                ids.push(id);
            }
            Err(e) => {
                tracing::error!(message_id = %id, receives, error = %e, "not a wake-up; reported failed for the dead-letter queue");
                failed.push(id);
            }
        }
    }

    let handled = futures::future::join_all(wakes.iter().zip(&ids).map(|(wake, id)| {
        let span = tracing::info_span!("wake", tenant = %wake.tenant, run_id = %wake.run_id, reason = ?wake.reason, message_id = %id);
        async move {
            let started = Instant::now();
            let outcome = engine
                .handle_wakeup_until(wake, Some(stop_at))
                .await
                .map_err(|e| e.to_string());
            let ms = started.elapsed().as_secs_f64() * 1000.0;
            match &outcome {
                Ok(WakeOutcome::Aborted(why)) => {
                    tracing::warn!(ms, why = %why, "aborted; SQS will redeliver it")
                }
                Ok(o) => tracing::info!(ms, outcome = ?o, "handled"),
                Err(e) => tracing::warn!(ms, error = %e, "failed; SQS will redeliver it"),
            }
            (outcome, ms)
        }
        .instrument(span)
    }))
    .await;
    let (outcomes, latencies): (Vec<_>, Vec<f64>) = handled.into_iter().unzip();
    let report = BatchReport { outcomes };
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
            ("StepLatency", Unit::Milliseconds, &latencies),
            ("WakeUps", Unit::Count, &[report.outcomes.len() as f64]),
            (
                "Advanced",
                Unit::Count,
                &[count(|o| matches!(o, WakeOutcome::Advanced(_)))],
            ),
            (
                "Conflicts",
                Unit::Count,
                &[count(|o| matches!(o, WakeOutcome::Busy))],
            ),
            (
                "Aborted",
                Unit::Count,
                &[count(|o| matches!(o, WakeOutcome::Aborted(_)))],
            ),
            ("Retries", Unit::Count, &[redelivered as f64]),
            ("BatchItemFailures", Unit::Count, &[failed.len() as f64]),
        ],
    );
    if !failed.is_empty() {
        tracing::warn!(failed = ?failed, "reporting batch item failures");
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_stops_a_safety_margin_before_the_deadline() {
        assert_eq!(stop_at(0, 900_000, Duration::from_secs(10)), 890_000);
    }

    #[test]
    fn a_timeout_shorter_than_twice_the_margin_still_leaves_half_the_time_for_work() {
        assert_eq!(stop_at(1_000, 7_000, Duration::from_secs(10)), 4_000);
        assert_eq!(
            stop_at(5_000, 4_000, Duration::from_secs(10)),
            5_000,
            "already late"
        );
    }
}
