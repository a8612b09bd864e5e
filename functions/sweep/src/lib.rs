//! The sweep function, on a schedule: one bounded sweep — at most `page` due runs woken
//! per invocation — logged and returned as counts. A full page means more runs are due
//! than one invocation wakes: the next scheduled sweep takes the next ones (once these
//! have been handled and left the due index), and `SweepBacklog` says so.
//!
//! One page, not several in a row: [`Engine::sweep`] returns the earliest due runs, and
//! a run stays due until the step function has handled its wake-up, so a second page
//! taken at once would be the first page again — the same wake-ups sent twice.

mod runtime;

pub use runtime::run;

use serde_json::{Value, json};
use siesta::{Engine, EngineError};
use siesta_lambda::metrics::{Unit, emit};
use tracing::Instrument;

/// Wake at most `page` due runs; the counts. `event` is the scheduled event (EventBridge
/// Scheduler's input or a rule's `Scheduled Event`), logged for correlation.
pub async fn handle(engine: &Engine, event: &Value, page: usize) -> Result<Value, EngineError> {
    let span = tracing::info_span!("sweep", event_id = %event["id"], time = %event["time"]);
    async {
        let report = engine.sweep(page).await?;
        let backlog = report.due >= page;
        let counts = json!({
            "due": report.due,
            "woken": report.woken,
            "expired_leases": report.expired_leases,
            "due_waits": report.due_waits,
            "lost_wakeups": report.lost_wakeups,
            "already_queued": report.already_queued,
            "dead_letters": report.dead_letters,
            "parked_dead_letters": report.parked_dead_letters,
            "backlog": backlog,
        });
        if backlog {
            tracing::warn!(counts = %counts, page, "a full page: more runs are due than one sweep wakes; the next sweep goes on (raise SIESTA_SWEEP_PAGE to wake more at once)");
        } else {
            tracing::info!(counts = %counts, "swept");
        }
        emit(
            "sweep",
            &[
                ("SweepWoken", Unit::Count, &[report.woken as f64]),
                (
                    "SweepExpiredLeases",
                    Unit::Count,
                    &[report.expired_leases as f64],
                ),
                ("SweepDueWaits", Unit::Count, &[report.due_waits as f64]),
                ("SweepLostWakeUps", Unit::Count, &[report.lost_wakeups as f64]),
                ("SweepDeadLetters", Unit::Count, &[report.dead_letters as f64]),
                (
                    "SweepParkedDeadLetters",
                    Unit::Count,
                    &[report.parked_dead_letters as f64],
                ),
                ("SweepBacklog", Unit::Count, &[f64::from(u8::from(backlog))]),
            ],
        );
        Ok(counts)
    }
    .instrument(span)
    .await
}
