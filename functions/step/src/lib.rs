//! The step function: an SQS batch of wake-ups, each run advanced by the engine until
//! the invocation's deadline less a safety margin (then the engine checkpoints and
//! schedules its own continuation), and only the failed messages reported back
//! (`ReportBatchItemFailures`), so SQS redelivers those and no others.

pub mod forward;
mod runtime;

pub use forward::{Forwarded, Forwarder};
pub use runtime::run;

use std::time::{Duration, Instant};

use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent};
use siesta::ports::WakeUp;
use siesta::{BatchReport, Engine, Timestamp, WakeOutcome};
use siesta_lambda::metrics::{Unit, emit};
use tracing::Instrument;

/// Handle one SQS batch; `deadline_ms` is the invocation's deadline (ms since the
/// epoch, `Context::deadline`).
///
/// Each wake-up is handled as [`Engine::handle_batch`] does (concurrently, each with the
/// deadline; a run's duplicates folded into one handling), inside a span naming its tenant and run, and timed for the `StepLatency`
/// metric. A record whose body is not a wake-up (a poison message) is reported failed,
/// so the queue's redrive policy moves it to the dead-letter queue. The batch's spans
/// are sent before it returns (when traces are exported).
pub async fn handle(
    engine: &Engine,
    event: SqsEvent,
    deadline_ms: u64,
    safety_margin: Duration,
) -> SqsBatchResponse {
    handle_forwarding(engine, None, event, deadline_ms, safety_margin).await
}

/// [`handle`], with each wake-up for a run of another build
/// ([`WakeOutcome::OtherBuild`]) forwarded by `forwarder` to that build's version: the
/// record is reported failed (SQS redelivers it) unless that version handled it. A
/// build no version serves is logged as an error and counted
/// (`WakeupsForUnservedBuild`), and the record reported handled: the sweep re-sends
/// the wake-up after its margin. A record that was itself forwarded is never forwarded
/// again (no ping-pong between versions): if its run is still another build's, that is
/// logged as an error and the record reported handled.
pub async fn handle_forwarding(
    engine: &Engine,
    forwarder: Option<&Forwarder>,
    event: SqsEvent,
    deadline_ms: u64,
    safety_margin: Duration,
) -> SqsBatchResponse {
    let stop_at = Timestamp(siesta_lambda::stop_at(
        siesta_lambda::now_ms(),
        deadline_ms as i64,
        safety_margin,
    ));
    let mut failed: Vec<String> = Vec::new();
    let mut wakes = Vec::new();
    let mut ids = Vec::new();
    let mut records = Vec::new();
    let mut redelivered = 0usize;
    for record in event.records {
        let id = record.message_id.clone().unwrap_or_default();
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
                records.push(record);
            }
            Err(e) => {
                tracing::error!(message_id = %id, receives, error = %e, "not a wake-up; reported failed for the dead-letter queue");
                failed.push(id);
            }
        }
    }

    let unserved = std::sync::atomic::AtomicUsize::new(0);
    let forwarded = std::sync::atomic::AtomicUsize::new(0);
    let handled = futures::future::join_all(wakes.iter().zip(&ids).zip(&records).map(|((wake, id), record)| {
        let span = tracing::info_span!("wake", tenant = %wake.tenant, run_id = %wake.run_id, reason = ?wake.reason, message_id = %id);
        let (unserved, forwarded) = (&unserved, &forwarded);
        async move {
            let started = Instant::now();
            let mut outcome = engine
                .handle_wakeup_until(wake, Some(stop_at))
                .await
                .map_err(|e| e.to_string());
            if let (Ok(WakeOutcome::OtherBuild { build_id }), Some(forwarder)) = (&outcome, forwarder) {
                if forward::is_forwarded(record) {
                    tracing::error!(build_id, "a forwarded wake-up's run is another build's here too; not forwarded again (reported handled)");
                } else {
                    let wait = Duration::from_millis((stop_at.0 - siesta_lambda::now_ms()).max(0) as u64);
                    match forwarder.forward(build_id, record, wait).await {
                        Forwarded::Handled => {
                            forwarded.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            tracing::info!(build_id, "forwarded to its build's version");
                        }
                        Forwarded::Unserved => {
                            unserved.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            tracing::error!(build_id, "no published version serves this run's build: the wake-up waits (the sweep re-sends it) until one is deployed or the run is upgraded");
                        }
                        Forwarded::Failed(why) => outcome = Err(format!("forwarding to build {build_id}: {why}")),
                    }
                }
            }
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
                "Folded",
                Unit::Count,
                &[count(|o| matches!(o, WakeOutcome::Folded))],
            ),
            (
                "Aborted",
                Unit::Count,
                &[count(|o| matches!(o, WakeOutcome::Aborted(_)))],
            ),
            ("Retries", Unit::Count, &[redelivered as f64]),
            (
                "Forwarded",
                Unit::Count,
                &[forwarded.load(std::sync::atomic::Ordering::Relaxed) as f64],
            ),
            (
                "WakeupsForUnservedBuild",
                Unit::Count,
                &[unserved.load(std::sync::atomic::Ordering::Relaxed) as f64],
            ),
            ("BatchItemFailures", Unit::Count, &[failed.len() as f64]),
        ],
    );
    if !failed.is_empty() {
        tracing::warn!(failed = ?failed, "reporting batch item failures");
    }
    // Before the invocation returns: a frozen container sends nothing.
    siesta_lambda::otel::flush().await;
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
