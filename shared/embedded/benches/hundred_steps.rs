//! Benchmark: a 100-step workflow on the embedded backend.
//!
//! Prints steps per second, store writes per step and bytes written per step. Figures,
//! not assertions: run it with `cargo bench -p siesta-embedded`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use siesta::ports::Backend;
use siesta::probe::ProbeStore;
use siesta::*;

const STEPS: u32 = 100;
const RUNS: usize = 20;

fn registry() -> Registry {
    let mut reg = Registry::new();
    reg.register("hundred", |ctx: Context, _: serde_json::Value| async move {
        let mut total = 0u64;
        for i in 0..STEPS {
            total += ctx
                .step("work", move |_| async move { Ok(u64::from(i)) })
                .await?;
        }
        Ok(total)
    });
    reg
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
    let engine = Engine::new(backend, clock, registry(), EngineConfig::default());
    let tenant = TenantId::from("bench");

    let started = Instant::now();
    for _ in 0..RUNS {
        let run = engine
            .start(&tenant, "hundred", serde_json::Value::Null, None)
            .await
            .expect("start");
        engine.run_until_idle(100).await.expect("work");
        let run = engine.get_run(&tenant, &run.id).await.expect("run");
        assert_eq!(run.status, RunStatus::Completed, "{:?}", run.error);
    }
    let elapsed = started.elapsed();
    let steps = f64::from(STEPS) * RUNS as f64;
    let writes = probe.writes.load(Ordering::SeqCst) as f64;
    let checkpoints = probe.checkpoints.load(Ordering::SeqCst) as f64;
    let bytes = probe.bytes_written.load(Ordering::SeqCst) as f64;
    let reads = probe.reads.load(Ordering::SeqCst) as f64;
    println!("100-step workflow on the embedded backend, {RUNS} runs ({steps} steps):");
    println!(
        "  steps per second:          {:>10.0}",
        steps / elapsed.as_secs_f64()
    );
    println!(
        "  store writes per step:     {:>10.3}  (checkpoints {:.3}, plus create/claim)",
        writes / steps,
        checkpoints / steps
    );
    println!("  store reads per step:      {:>10.3}", reads / steps);
    println!("  bytes written per step:    {:>10.0}", bytes / steps);
}
