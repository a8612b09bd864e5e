//! The sweep function, on a schedule: up to `pages` bounded sweeps, stopping early when
//! a page comes back short; logs and returns what it did.

use serde_json::{Value, json};
use siesta::{Engine, EngineError, SweepReport};
use siesta_lambda::metrics::{Unit, emit};
use tracing::Instrument;

/// Sweep up to `pages` pages of `page` due runs; the counts of all of them. `event` is
/// the scheduled event (EventBridge Scheduler's input or a rule's `Scheduled Event`),
/// logged for correlation.
pub async fn handle(
    engine: &Engine,
    event: &Value,
    page: usize,
    pages: usize,
) -> Result<Value, EngineError> {
    let span = tracing::info_span!("sweep", event_id = %event["id"], time = %event["time"]);
    sweep(engine, page, pages).instrument(span).await
}

async fn sweep(engine: &Engine, page: usize, pages: usize) -> Result<Value, EngineError> {
    let mut total = SweepReport::default();
    let mut swept_pages = 0;
    for _ in 0..pages.max(1) {
        let report = engine.sweep(page).await?;
        swept_pages += 1;
        total.due += report.due;
        total.woken += report.woken;
        total.expired_leases += report.expired_leases;
        total.due_waits += report.due_waits;
        total.lost_wakeups += report.lost_wakeups;
        total.parked_dead_letters += report.parked_dead_letters;
        if report.due < page {
            break;
        }
    }
    let counts = json!({
        "pages": swept_pages,
        "due": total.due,
        "woken": total.woken,
        "expired_leases": total.expired_leases,
        "due_waits": total.due_waits,
        "lost_wakeups": total.lost_wakeups,
        "parked_dead_letters": total.parked_dead_letters,
    });
    tracing::info!(counts = %counts, "swept");
    emit(
        "sweep",
        &[
            ("SweepWoken", Unit::Count, &[total.woken as f64]),
            (
                "SweepExpiredLeases",
                Unit::Count,
                &[total.expired_leases as f64],
            ),
            ("SweepDueWaits", Unit::Count, &[total.due_waits as f64]),
            (
                "SweepLostWakeUps",
                Unit::Count,
                &[total.lost_wakeups as f64],
            ),
            (
                "SweepParkedDeadLetters",
                Unit::Count,
                &[total.parked_dead_letters as f64],
            ),
        ],
    );
    Ok(counts)
}
