//! On DynamoDB and SQS (the emulators): a start cut off between its write and its
//! wake-up's send begins as soon as it is retried with its key
//! ([`Engine::ensure_started`]), or, never retried, at the first sweep past the start's
//! short margin (`EngineConfig::start_resend_margin`) — counted in requests, as is the
//! normal path, which sends nothing more than before.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::json;
use siesta::ports::*;
use siesta::*;
use siesta_aws::RequestCounter;

fn registry() -> Registry {
    let mut reg = Registry::new();
    reg.register(
        "await_go",
        |ctx: Context, _: serde_json::Value| async move {
            let v: serde_json::Value = ctx.wait_for_event("go").await?;
            Ok(v)
        },
    );
    reg
}

/// SQS, but the next `lose` sends vanish without an error (and without a request), as
/// they do when the process dies between the write and the send.
struct LosesSends(AtomicUsize);

#[async_trait]
impl SendHook for LosesSends {
    async fn send(
        &self,
        queue: &dyn WakeQueue,
        wake: &WakeUp,
        delay: Duration,
    ) -> Result<(), StoreError> {
        let lost = self
            .0
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if lost {
            return Ok(());
        }
        queue.send(wake, delay).await
    }
}

struct World {
    engine: Engine,
    queue: Arc<HookedSends<LosesSends>>,
    counter: RequestCounter,
    clock: Arc<ManualClock>,
    tenant: TenantId,
}

impl World {
    async fn new(env: &support::Emulators) -> World {
        let (aws, counter) = env.counted_backend(5).await;
        let base = aws.backend();
        let queue = Arc::new(HookedSends::new(
            base.queue.clone(),
            LosesSends(AtomicUsize::new(0)),
        ));
        let clock = Arc::new(ManualClock::new(Timestamp(1_800_000_000_000)));
        let engine = Engine::new(
            Backend {
                queue: queue.clone(),
                ..base
            },
            clock.clone(),
            registry(),
            EngineConfig::default(),
        );
        World {
            engine,
            queue,
            counter,
            clock,
            tenant: TenantId(format!("lost-start-{}", uuid::Uuid::new_v4().simple())),
        }
    }

    /// Start `id`, its wake-up lost on the way.
    async fn start_cut_off(&self, id: &RunId) {
        self.queue.0.store(1, Ordering::SeqCst);
        self.engine
            .start(&self.tenant, "await_go", json!(null), Some(id.clone()))
            .await
            .unwrap();
        assert_eq!(self.queue.0.load(Ordering::SeqCst), 0, "the send was lost");
    }

    async fn status(&self, id: &RunId) -> RunStatus {
        self.engine.get_run(&self.tenant, id).await.unwrap().status
    }

    fn requests(&self, service: &str, operation: &str) -> u64 {
        self.counter.total(service, Some(operation))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_aws_a_start_cut_off_before_its_send_begins_as_soon_as_it_is_retried_with_its_key() {
    let Some(env) = support::emulators().await else {
        return;
    };
    let w = World::new(&env).await;
    let id = RunId(format!("key-{}", uuid::Uuid::new_v4().simple()));
    w.start_cut_off(&id).await;
    assert_eq!(w.engine.run_until_idle(10).await.unwrap(), 0);
    assert_eq!(w.status(&id).await, RunStatus::Pending);

    // The retry: the create finds the run, the replay reads it and sends its wake-up.
    w.counter.reset();
    let again = w
        .engine
        .start(&w.tenant, "await_go", json!(null), Some(id.clone()))
        .await;
    assert!(
        matches!(again, Err(EngineError::AlreadyExists)),
        "{again:?}"
    );
    let created = w.counter.snapshot();
    w.counter.reset();
    let found = w.engine.ensure_started(&w.tenant, &id).await.unwrap();
    assert_eq!(found.status, RunStatus::Pending);
    eprintln!(
        "a retried start: the create that finds the run {created:?}; \
         ensure_started {:?}",
        w.counter.snapshot()
    );
    assert_eq!(w.requests("sqs", "SendMessage"), 1, "its wake-up, again");
    assert_eq!(w.requests("dynamodb", "GetItem"), 1, "the run, read");
    assert_eq!(w.counter.snapshot().values().sum::<u64>(), 2);

    // The clock stands still: the retry's wake-up begins the run, not the sweep.
    assert_eq!(w.engine.run_until_idle(10).await.unwrap(), 1);
    assert_eq!(w.status(&id).await, RunStatus::Waiting);

    // Retried once it has begun: a read, nothing sent.
    w.counter.reset();
    w.engine.ensure_started(&w.tenant, &id).await.unwrap();
    assert_eq!(w.requests("sqs", "SendMessage"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_aws_a_start_cut_off_and_never_retried_is_woken_by_the_first_sweep_past_the_start_margin()
 {
    let Some(env) = support::emulators().await else {
        return;
    };
    // The sweep reads the global due index: a table of its own.
    env.in_own_table(|env| async move {
        let w = World::new(&env).await;
        let margin = EngineConfig::default().start_resend_margin;

        // The normal path first: a start costs one write, the tenant's build record
        // (`RunStore::builds`) and one send — the lost-start recovery adds nothing to
        // it — and once it has begun no sweep sends anything for it. The first start
        // of a workflow in a second also reads the workflow's pause (a process keeps
        // what it read a second: docs/operations.md, "Pause a workflow").
        let begun = RunId(format!("begun-{}", uuid::Uuid::new_v4().simple()));
        w.counter.reset();
        w.engine
            .start(&w.tenant, "await_go", json!(null), Some(begun.clone()))
            .await
            .unwrap();
        eprintln!("a start: {:?}", w.counter.snapshot());
        assert_eq!(w.requests("sqs", "SendMessage"), 1);
        assert_eq!(w.requests("dynamodb", "TransactWriteItems"), 1);
        assert_eq!(w.requests("dynamodb", "UpdateItem"), 1, "the build record");
        assert_eq!(w.requests("dynamodb", "GetItem"), 1, "the workflow's pause");
        assert_eq!(w.counter.snapshot().values().sum::<u64>(), 4);
        assert_eq!(w.engine.run_until_idle(10).await.unwrap(), 1);

        let lost = RunId(format!("lost-{}", uuid::Uuid::new_v4().simple()));
        w.start_cut_off(&lost).await;
        w.clock.advance(margin / 2);
        w.counter.reset();
        let report = w.engine.sweep(100).await.unwrap();
        assert_eq!((report.due, report.woken), (0, 0), "{report:?}");
        assert_eq!(w.requests("sqs", "SendMessage"), 0);

        w.clock.advance(margin / 2 + Duration::from_millis(1));
        w.counter.reset();
        let report = w.engine.sweep(100).await.unwrap();
        assert_eq!(
            (report.due, report.woken, report.lost_wakeups),
            (1, 1, 1),
            "{report:?}"
        );
        eprintln!(
            "the sweep that woke the lost start: {:?}",
            w.counter.snapshot()
        );
        assert_eq!(w.requests("sqs", "SendMessage"), 1);
        assert_eq!(
            w.requests("dynamodb", "UpdateItem"),
            1,
            "resend_after noted"
        );
        assert_eq!(w.engine.run_until_idle(10).await.unwrap(), 1);
        assert_eq!(w.status(&lost).await, RunStatus::Waiting);
        assert_eq!(w.status(&begun).await, RunStatus::Waiting);

        // Neither is due again: later sweeps send nothing.
        w.clock.advance(EngineConfig::default().resend_margin * 2);
        w.counter.reset();
        assert_eq!(w.engine.sweep(100).await.unwrap().woken, 0);
        assert_eq!(w.requests("sqs", "SendMessage"), 0);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_aws_a_start_queued_past_the_start_margin_costs_one_duplicate_then_none_for_the_general_margin()
 {
    let Some(env) = support::emulators().await else {
        return;
    };
    env.in_own_table(|env| async move {
        let w = World::new(&env).await;
        let id = RunId(format!("queued-{}", uuid::Uuid::new_v4().simple()));
        w.engine
            .start(&w.tenant, "await_go", json!(null), Some(id.clone()))
            .await
            .unwrap();
        // Its wake-up waits in SQS (a backlog); SQS cannot say it holds it.
        w.clock
            .advance(EngineConfig::default().start_resend_margin + Duration::from_secs(1));
        w.counter.reset();
        let report = w.engine.sweep(100).await.unwrap();
        assert_eq!((report.woken, report.lost_wakeups), (1, 1), "{report:?}");
        assert_eq!(w.requests("sqs", "SendMessage"), 1, "one duplicate");
        for _ in 0..3 {
            w.clock.advance(Duration::from_secs(60));
            assert_eq!(w.engine.sweep(100).await.unwrap().woken, 0);
        }
        assert_eq!(w.requests("sqs", "SendMessage"), 1, "and only one");
        // Both wake-ups are handled: one begins the run, the other is a no-op.
        assert_eq!(w.engine.run_until_idle(10).await.unwrap(), 2);
        let run = w.engine.get_run(&w.tenant, &id).await.unwrap();
        assert_eq!(run.status, RunStatus::Waiting);
        assert_eq!(run.epoch, FencingEpoch(1), "claimed once");
    })
    .await;
}
