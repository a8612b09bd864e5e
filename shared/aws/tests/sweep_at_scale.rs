//! 10 000 runs waiting on the same deadline are timed out by the sweep in bounded pages,
//! each exactly once, with the due index spread over every shard. `SIESTA_SWEEP_RUNS`
//! changes the count (default 10 000).

mod support;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures::StreamExt;
use serde_json::json;
use siesta::ports::*;
use siesta::*;
use siesta_aws::keys::{DUE_SHARDS, due_shard};

const PAGE: usize = 500;
const DEADLINE: Duration = Duration::from_secs(3600);
const IN_FLIGHT: usize = 48;

fn registry() -> Registry {
    let mut reg = Registry::new();
    reg.register("approve", |ctx: Context, _: serde_json::Value| async move {
        let approval = ctx
            .create_callback::<serde_json::Value>("approval")
            .timeout(DEADLINE)
            .await?;
        approval.wait().await
    });
    reg
}

/// A queue that drops what is sent: the runs are put to sleep by handling their first
/// wake-up directly, so that setting up 10 000 of them costs no SQS traffic; the sweep
/// under test uses the real queue.
struct NoQueue;

#[async_trait]
impl WakeQueue for NoQueue {
    async fn send(&self, _: &WakeUp, _: Duration) -> Result<(), StoreError> {
        Ok(())
    }
    async fn receive(&self, _: usize, _: Duration) -> Result<Vec<ReceivedWakeUp>, StoreError> {
        Ok(Vec::new())
    }
    async fn ack(&self, _: &str) -> Result<(), StoreError> {
        Ok(())
    }
    async fn extend_visibility(&self, _: &str, _: Duration) -> Result<(), StoreError> {
        Ok(())
    }
    async fn dead_letters(&self, _: usize) -> Result<Vec<WakeUp>, StoreError> {
        Ok(Vec::new())
    }
}

/// Take wake-ups off the queue and handle them, with `IN_FLIGHT` at a time, until it is
/// empty.
async fn drain(engine: &Engine, backend: &Backend) -> usize {
    let mut handled = 0;
    loop {
        let batches = futures::future::join_all(
            (0..IN_FLIGHT / 10).map(|_| backend.queue.receive(10, Duration::from_secs(120))),
        )
        .await;
        let messages: Vec<_> = batches.into_iter().flat_map(|b| b.unwrap()).collect();
        if messages.is_empty() {
            return handled;
        }
        handled += messages.len();
        futures::stream::iter(messages)
            .for_each_concurrent(IN_FLIGHT, |m| async move {
                engine.handle_wakeup(&m.wake).await.expect("handle");
                backend.queue.ack(&m.receipt).await.expect("ack");
            })
            .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ten_thousand_runs_waiting_on_one_deadline_are_timed_out_by_the_sweep_in_bounded_pages_each_once()
 {
    let Some(env) = support::emulators().await else {
        return;
    };
    let runs: usize = std::env::var("SIESTA_SWEEP_RUNS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(10_000);
    // The due index is global: a table of its own keeps other tests' runs out of it.
    let env = env.with_own_table().await;
    let backend = env.backend(5).await.backend();
    let clock = Arc::new(ManualClock::new(Timestamp(1_800_000_000_000)));
    let engine = Engine::new(
        backend.clone(),
        clock.clone(),
        registry(),
        EngineConfig::default(),
    );
    let tenant = TenantId::from("scale");

    let started = Instant::now();
    let setup = Engine::new(
        Backend {
            queue: Arc::new(NoQueue),
            ..backend.clone()
        },
        clock.clone(),
        registry(),
        EngineConfig::default(),
    );
    let ids: Vec<RunId> = futures::stream::iter(0..runs)
        .map(|_| {
            let (setup, tenant) = (&setup, &tenant);
            async move {
                let run = setup
                    .start(tenant, "approve", json!(null), None)
                    .await
                    .expect("start");
                let wake = WakeUp {
                    tenant: tenant.clone(),
                    run_id: run.id.clone(),
                    reason: WakeReason::Started,
                    epoch_hint: 0,
                };
                let outcome = setup.handle_wakeup(&wake).await.expect("handle");
                assert_eq!(outcome, WakeOutcome::Advanced(RunStatus::Waiting));
                run.id
            }
        })
        .buffer_unordered(IN_FLIGHT)
        .collect()
        .await;
    eprintln!(
        "{runs} runs started and waiting in {:.1} s",
        started.elapsed().as_secs_f64()
    );

    let deadline = clock.now().plus(DEADLINE);
    let mut per_shard: HashMap<String, usize> = HashMap::new();
    for id in &ids {
        *per_shard.entry(due_shard(&tenant, id)).or_default() += 1;
    }
    let even = runs / DUE_SHARDS as usize;
    assert_eq!(
        per_shard.len(),
        DUE_SHARDS as usize,
        "every shard holds some"
    );
    assert!(
        per_shard.values().all(|n| *n > even / 2 && *n < even * 2),
        "spread: {per_shard:?}"
    );
    let nothing_yet = engine.sweep(PAGE).await.unwrap();
    assert_eq!(
        nothing_yet.due, 0,
        "none is due before the deadline: {nothing_yet:?}"
    );

    clock.set(deadline.plus(Duration::from_secs(1)));
    let started = Instant::now();
    let (mut pages, mut swept) = (0, 0);
    loop {
        let report = engine.sweep(PAGE).await.unwrap();
        assert!(report.due <= PAGE, "bounded: {report:?}");
        if report.due == 0 {
            break;
        }
        assert_eq!(report.woken, report.due, "{report:?}");
        assert_eq!(report.due_waits, report.due, "{report:?}");
        pages += 1;
        swept += report.woken;
        assert_eq!(drain(&engine, &backend).await, report.woken);
    }
    eprintln!(
        "{swept} deadlines passed: {pages} sweep pages of at most {PAGE} in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert_eq!(swept, runs, "each run swept exactly once");
    assert_eq!(pages, runs.div_ceil(PAGE));

    let timed_out: Vec<usize> = futures::stream::iter(&ids)
        .map(|id| {
            let backend = &backend;
            let tenant = &tenant;
            async move {
                let run = backend.store.get_run(tenant, id).await.unwrap().unwrap();
                assert_eq!(run.status, RunStatus::Failed, "{run:?}");
                assert!(run.due_at.is_none(), "left the due index: {run:?}");
                backend
                    .store
                    .timeline(tenant, id, 0, 100)
                    .await
                    .unwrap()
                    .iter()
                    .filter(|e| e.event_type == EventType::CallbackTimedOut)
                    .count()
            }
        })
        .buffer_unordered(IN_FLIGHT)
        .collect()
        .await;
    assert!(
        timed_out.iter().all(|n| *n == 1),
        "every run timed out exactly once"
    );
}
