//! The sweep function, on a schedule: one bounded sweep — at most `page` due runs woken
//! per invocation — logged and returned as counts. A full page means more runs are due
//! than one invocation wakes: the next scheduled sweep takes the next ones (once these
//! have been handled and left the due index), and `SweepBacklog` says so.
//!
//! Before the due runs, the schedules' due ticks are fired ([`Engine::fire_schedules`]:
//! one run per tick, `SweepScheduled` counts them; docs/flow-control.md, "Schedules"):
//! this function is all a deployment's schedules need. So is it for bulk actions' jobs
//! that stalled (a lost wake-up, a process that died in a slice): it wakes them again,
//! `SweepActionJobs` counts them (docs/operations.md, "Bulk actions by filter").
//!
//! One page, not several in a row: [`Engine::sweep`] returns the earliest due runs, and
//! a run stays due until the step function has handled its wake-up, so a second page
//! taken at once would be the first page again — the same wake-ups sent twice.
//!
//! After the sweep, in the same invocation, the **reaper** ([`reap`]): finished runs
//! past their retention removed with everything that is theirs (docs/retention.md),
//! a page at a time while the invocation has time, `ReapRemoved` and `ReapBacklog`
//! counted.
//!
//! On a schedule of its own (every five minutes, its event `{"check": "builds"}`), the
//! same function makes the **drain check** instead ([`check_builds`]): the unfinished
//! runs of every tenant by build, and of those the runs whose build is no longer
//! deployed (no step version in the build registry serves it, and it is not this
//! build) — `RunsOnUndeployedBuilds`, which the template's alarm watches. Such runs do
//! not move until their build is deployed again or they are upgraded.

mod runtime;

pub use runtime::run;

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};
use siesta::ports::StoreError;
use siesta::{Engine, EngineError, Timestamp};
use siesta_aws::builds::BuildRegistry;
use siesta_aws::retention::{ReapReport, Reaper};
use siesta_lambda::metrics::{Unit, emit};
use siesta_lambda::now_ms;
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
            "scheduled": report.scheduled,
            "action_jobs": report.action_jobs,
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
                ("SweepScheduled", Unit::Count, &[report.scheduled as f64]),
                ("SweepActionJobs", Unit::Count, &[report.action_jobs as f64]),
            ],
        );
        Ok(counts)
    }
    .instrument(span)
    .await
}

/// Reap pages of at most `page` finished runs past their retention until none is left
/// or `stop_at_ms` (ms since the epoch) has passed; the counts. A run claimed when the
/// invocation ends is finished by a later one (its claim runs out).
pub async fn reap(reaper: &Reaper, page: usize, stop_at_ms: i64) -> Result<Value, StoreError> {
    let span = tracing::info_span!("reap");
    async {
        let mut total = ReapReport::default();
        let mut pages = 0;
        loop {
            let report = reaper.reap(Timestamp(now_ms()), page).await?;
            pages += 1;
            total.looked_at += report.looked_at;
            total.removed.extend(report.removed);
            total.rescheduled += report.rescheduled;
            total.kept_for_ever += report.kept_for_ever;
            total.waiting_for_parent += report.waiting_for_parent;
            total.items_deleted += report.items_deleted;
            total.records_deleted += report.records_deleted;
            total.objects_deleted += report.objects_deleted;
            total.more = report.more;
            if !report.more || now_ms() >= stop_at_ms {
                break;
            }
        }
        let counts = json!({
            "pages": pages,
            "looked_at": total.looked_at,
            "removed": total.removed.len(),
            "rescheduled": total.rescheduled,
            "kept_for_ever": total.kept_for_ever,
            "waiting_for_parent": total.waiting_for_parent,
            "items_deleted": total.items_deleted,
            "records_deleted": total.records_deleted,
            "objects_deleted": total.objects_deleted,
            "backlog": total.more,
        });
        if total.more {
            tracing::warn!(counts = %counts, "more finished runs are past their retention than one invocation removes; the next goes on");
        } else {
            tracing::info!(counts = %counts, "reaped");
        }
        emit(
            "sweep",
            &[
                ("ReapRemoved", Unit::Count, &[total.removed.len() as f64]),
                ("ReapItemsDeleted", Unit::Count, &[total.items_deleted as f64]),
                ("ReapObjectsDeleted", Unit::Count, &[total.objects_deleted as f64]),
                ("ReapBacklog", Unit::Count, &[f64::from(u8::from(total.more))]),
            ],
        );
        Ok(counts)
    }
    .instrument(span)
    .await
}

/// Whether `event` is the drain check's schedule (`{"check": "builds"}`) rather than
/// the sweep's.
pub fn is_builds_check(event: &Value) -> bool {
    event["check"] == "builds"
}

/// Of `unfinished` (runs by build), the builds not deployed and their runs: neither
/// `serving` (this build, deployed even before its step version registers) nor in
/// `registered`.
pub fn undeployed(
    unfinished: &BTreeMap<String, u64>,
    registered: &BTreeSet<String>,
    serving: &str,
) -> BTreeMap<String, u64> {
    unfinished
        .iter()
        .filter(|(build, n)| **n > 0 && build.as_str() != serving && !registered.contains(*build))
        .map(|(b, n)| (b.clone(), *n))
        .collect()
}

/// The drain check: count every tenant's unfinished runs by build (a keys-only `Scan`
/// of the sparse `by_build` index: as many items as unfinished runs), read the build
/// registry (one `Query`), and emit `RunsOnUndeployedBuilds` and `UndeployedBuilds`
/// (each build is logged, with its runs). The counts, as logged.
pub async fn check_builds(registry: &BuildRegistry, serving: &str) -> Result<Value, StoreError> {
    let unfinished = registry.unfinished_runs_by_build().await?;
    let registered: BTreeSet<String> = registry
        .all()
        .await?
        .into_iter()
        .map(|b| b.build_id)
        .collect();
    let undeployed = undeployed(&unfinished, &registered, serving);
    let runs: u64 = undeployed.values().sum();
    for (build, n) in &undeployed {
        tracing::warn!(build_id = %build, unfinished = n, "unfinished runs of a build that is no longer deployed: they wait until it is deployed again or they are upgraded");
    }
    emit(
        "sweep",
        &[
            ("RunsOnUndeployedBuilds", Unit::Count, &[runs as f64]),
            ("UndeployedBuilds", Unit::Count, &[undeployed.len() as f64]),
        ],
    );
    let counts = json!({
        "unfinished_by_build": unfinished,
        "undeployed": undeployed,
        "runs_on_undeployed_builds": runs,
    });
    tracing::info!(counts = %counts, "builds checked");
    Ok(counts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_of_a_build_neither_serving_nor_registered_are_on_an_undeployed_build() {
        let unfinished = BTreeMap::from([
            ("a".to_owned(), 2),
            ("b".to_owned(), 1),
            ("c".to_owned(), 3),
            ("d".to_owned(), 0),
        ]);
        let registered = BTreeSet::from(["b".to_owned()]);
        assert_eq!(
            undeployed(&unfinished, &registered, "c"),
            BTreeMap::from([("a".to_owned(), 2)])
        );
    }

    #[test]
    fn only_the_drain_checks_schedule_asks_for_it() {
        assert!(is_builds_check(&json!({"check": "builds"})));
        assert!(!is_builds_check(
            &json!({"id": "e-1", "time": "2026-11-26T10:00:00Z"})
        ));
    }
}
