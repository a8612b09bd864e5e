//! Benchmark: the sweep's AWS requests per fired timer, and its time per page, with N
//! runs due at the same instant (`SIESTA_SWEEP_RUNS`, default 100 000) on the emulators:
//! `cargo bench -p siesta-aws --bench sweep_per_timer` (or `cargo test … --bench`, the
//! counts do not depend on the profile) with `scripts/emulators env` exported.
//!
//! The sweep path is the real one: the due index queried on DynamoDB page by page, a
//! wake-up sent to SQS for each due run, its `resend_after` written back. Only the
//! seeding is short-cut: each run is written as it would stand asleep on a timer
//! (waiting, due at the deadline, nothing on its way) with one `create_run`, instead of
//! being started and driven to its wait by the engine (six requests a run, the slow
//! part on DynamoDB Local); and the wake-ups sent are not handled — handling one costs
//! the same whatever the backlog, and `tests/sweep_at_scale.rs` does it end to end
//! (`SIESTA_SWEEP_RUNS`, default 250) for runs with their whole journal and timeline.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

#[path = "../tests/support/mod.rs"]
mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use siesta::*;

/// The sweep's page size (the sweep function's default).
const PAGE: usize = 250;

fn main() {
    let runs: usize = std::env::var("SIESTA_SWEEP_RUNS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(100_000);
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            let Some(env) = support::emulators().await else {
                return;
            };
            // A table of its own: the due index is global across tenants.
            env.in_own_table(|env| async move { bench(&env, runs).await })
                .await;
        });
}

async fn bench(env: &support::Emulators, runs: usize) {
    let names = env.names(5).await;
    let (aws, counter) = env.counted_backend_with_names(names.clone());
    let backend = aws.backend();
    let clock = Arc::new(ManualClock::new(Timestamp(1_800_000_000_000)));
    let engine = Engine::new(
        backend.clone(),
        clock.clone(),
        Registry::new(),
        EngineConfig::default(),
    );
    let tenant = TenantId::from("sweep-per-timer");
    let now = clock.now();
    let deadline = now.plus(Duration::from_secs(3600));

    // Asleep on a timer past SQS's 15-minute delay: only the sweep wakes them.
    let ids: Vec<RunId> = (0..runs).map(|i| RunId(format!("timer-{i:07}"))).collect();
    let started = Instant::now();
    support::seed_waiting_runs(&*backend.store, &tenant, &ids, "timer", now, deadline).await;
    let seeding = started.elapsed();
    eprintln!(
        "{runs} runs asleep in {:.1} s ({:.0} runs/s)",
        seeding.as_secs_f64(),
        runs as f64 / seeding.as_secs_f64()
    );
    assert_eq!(
        engine.sweep(PAGE).await.unwrap().due,
        0,
        "none due before the deadline"
    );

    clock.set(deadline.plus(Duration::from_secs(1)));
    counter.reset();
    let started = Instant::now();
    let (mut fired, mut pages) = (0, Vec::new());
    loop {
        let t = Instant::now();
        let report = engine.sweep(PAGE).await.unwrap();
        if report.due == 0 {
            break;
        }
        assert_eq!(
            (report.woken, report.due_waits),
            (report.due, report.due),
            "{report:?}"
        );
        fired += report.woken;
        pages.push(t.elapsed());
    }
    let sweeping = started.elapsed();
    let counts = counter.snapshot();
    assert_eq!(fired, runs, "every timer fired once");
    assert_eq!(
        counts
            .get(&("sqs".to_owned(), "SendMessage".to_owned()))
            .copied(),
        Some(runs as u64),
        "one wake-up sent per fired timer: {counts:?}"
    );
    let ms = |d: &Duration| d.as_secs_f64() * 1000.0;
    let mut sorted: Vec<f64> = pages.iter().map(ms).collect();
    sorted.sort_by(f64::total_cmp);
    let tenth = pages.len() / 10;
    let mean = |p: &[Duration]| p.iter().map(ms).sum::<f64>() / p.len().max(1) as f64;
    println!(
        "{runs} timers due at one instant, fired by the sweep in {} pages of {PAGE} in \
         {:.1} s ({:.0} timers/s)",
        pages.len(),
        sweeping.as_secs_f64(),
        runs as f64 / sweeping.as_secs_f64()
    );
    println!(
        "  page time: median {:.0} ms; mean of the first tenth {:.0} ms, of the last \
         tenth {:.0} ms",
        sorted[sorted.len() / 2],
        mean(&pages[..tenth.max(1)]),
        mean(&pages[pages.len() - tenth.max(1)..]),
    );
    println!(
        "  the sweep's requests per fired timer: {}",
        support::requests_per(&counts, runs, 3)
    );

    // The wake-ups sent are not handled here: give the queues back.
    env.delete_queues(&names).await;
}
