//! Benchmark: a bulk restart (issue 47) on the embedded backend — how many failed runs a
//! bulk action restarts per second, each going on to completion from its failed step.
//!
//! `RUNS` runs of a workflow fail for good at their third operation; the fix is made;
//! one bulk action (`restart`, filter workflow and status failed) at its highest rate
//! restarts them all; the queue is worked until the job is done and every run completed.
//! Prints runs per second (the job's pace and the runs' own work together) and store
//! writes and reads per restarted run. Figures, not assertions: `cargo bench -p
//! siesta-embedded --bench bulk_restart`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use siesta::ports::{Backend, RunFilter};
use siesta::probe::ProbeStore;
use siesta::*;

const RUNS: usize = 2_000;

/// `three`: two steps, then a step that fails for good (a 4xx) until `fixed`.
fn registry(fixed: Arc<AtomicBool>) -> Registry {
    let mut reg = Registry::new();
    reg.register("three", move |ctx: Context, _: serde_json::Value| {
        let fixed = fixed.clone();
        async move {
            ctx.step("fetch", |_| async { Ok(1u32) }).await?;
            ctx.step("search", |_| async { Ok(2u32) }).await?;
            ctx.step("notify", move |_| async move {
                if fixed.load(Ordering::SeqCst) {
                    Ok(3u32)
                } else {
                    Err(StepError::from_http_status(400, "the receiver said 400"))
                }
            })
            .await
        }
    });
    reg
}

async fn count(engine: &Engine, tenant: &TenantId, status: RunStatus) -> usize {
    let filter = RunFilter {
        status: Some(status),
        workflow: Some("three".into()),
    };
    let (mut n, mut cursor) = (0, None::<String>);
    loop {
        let page = engine
            .backend()
            .store
            .list_runs(tenant, &filter, cursor.as_deref(), 500)
            .await
            .unwrap();
        n += page.runs.len();
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => return n,
        }
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let dir = tempfile::tempdir().expect("temp dir");
    let clock = Arc::new(SystemClock);
    let embedded =
        siesta_embedded::EmbeddedBackend::open(dir.path().join("bench.db"), clock.clone())
            .expect("open");
    let base = embedded.backend();
    let probe = ProbeStore::new(base.store.clone());
    let backend = Backend {
        store: probe.clone(),
        artifacts: base.artifacts,
        queue: base.queue,
        streams: base.streams,
        schedules: base.schedules,
    };
    let fixed = Arc::new(AtomicBool::new(false));
    let engine = Engine::new(
        backend,
        clock,
        registry(fixed.clone()),
        EngineConfig::default(),
    );
    let tenant = TenantId::from("bench");
    for _ in 0..RUNS {
        engine
            .start(&tenant, "three", serde_json::Value::Null, None)
            .await
            .expect("start");
    }
    while count(&engine, &tenant, RunStatus::Failed).await < RUNS {
        engine.run_until_idle(1000).await.expect("work");
    }

    fixed.store(true, Ordering::SeqCst);
    let (writes, reads, bytes) = (
        probe.writes.load(Ordering::SeqCst),
        probe.reads.load(Ordering::SeqCst),
        probe.bytes_written.load(Ordering::SeqCst),
    );
    let started = Instant::now();
    let job = engine
        .start_action_job(
            &tenant,
            ActionRequest {
                action: BulkAction::Restart,
                filter: ActionFilter {
                    workflow: Some("three".into()),
                    status: Some(RunStatus::Failed),
                    ..ActionFilter::default()
                },
                restart: RestartOptions::default(),
                rate: Some(MAX_ACTION_RATE),
            },
            "bench",
        )
        .await
        .expect("the job");
    loop {
        engine.run_until_idle(1000).await.expect("work");
        let now = engine.action_job(&tenant, &job.id).await.expect("the job");
        if now.status != ActionJobStatus::Running
            && count(&engine, &tenant, RunStatus::Completed).await >= RUNS
        {
            assert_eq!((now.done, now.failed), (RUNS as u64, 0), "{now:?}");
            break;
        }
        // The next slice's wake-up is delayed by the pacing: wait for it.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let n = RUNS as f64;
    println!(
        "A bulk restart of {RUNS} failed runs on the embedded backend (rate {MAX_ACTION_RATE}/s asked):"
    );
    println!(
        "  runs restarted and completed per second: {:>8.0}  ({elapsed:.2} s)",
        n / elapsed
    );
    println!(
        "  store writes per restarted run:          {:>8.2}",
        (probe.writes.load(Ordering::SeqCst) - writes) as f64 / n
    );
    println!(
        "  store reads per restarted run:           {:>8.2}",
        (probe.reads.load(Ordering::SeqCst) - reads) as f64 / n
    );
    println!(
        "  bytes written per restarted run:         {:>8.0}",
        (probe.bytes_written.load(Ordering::SeqCst) - bytes) as f64 / n
    );
}
