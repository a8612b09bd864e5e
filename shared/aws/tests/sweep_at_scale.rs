//! The sweep over the due index on DynamoDB, with many runs due at once. Two tests:
//!
//! - End to end: runs waiting on the same deadline are timed out by the sweep in
//!   bounded pages, each exactly once, each run on its shard of the due index.
//!   `SIESTA_SWEEP_RUNS` changes the count (default 250, in pages of 100: two full pages
//!   and a part). The runs are created through the engine and driven to waiting by
//!   handling their first wake-up at once (their start messages are recorded, not
//!   queued: that is set-up, not what is tested). From the deadline on, everything goes
//!   through the real services: the sweep queries the due index on DynamoDB and sends its
//!   wake-ups to SQS, and those are received from SQS and handled by the engine.
//! - The bound per page, whatever the backlog: with 500 and with 2 000 runs due, a page
//!   of the sweep costs the same requests (one `Query` per shard, nothing that grows with
//!   the backlog) and reads the same capacity units of the due index; at 2 000 the due
//!   index is spread evenly over every shard. The runs are
//!   written as they stand waiting, one `create_run` each
//!   (`siesta_aws::testing::seed_waiting_runs`, as `benches/sweep_per_timer.rs` seeds
//!   them): driving thousands through the engine would prove nothing more about the
//!   sweep and cost minutes.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

mod support;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::{AttributeValue, Select};
use futures::StreamExt;
use serde_json::json;
use siesta::ports::{
    Backend, HookedSends, ReceivedWakeUp, SendHook, StoreError, WakeQueue, WakeUp,
};
use siesta::*;
use siesta_aws::RequestCounts;
use siesta_aws::keys::{DUE_INDEX, DUE_SHARD, DUE_SHARDS, SWEEP_AT, due_shard, shard_name};

/// The sweep's page size end to end.
const PAGE: usize = 100;
/// The sweep's page size where two backlogs are compared: smaller than every shard's
/// share of the smaller backlog, so that each shard's query fills its page at both sizes
/// and a sweep reading more than its page would read more of the larger one.
const COMPARED_PAGE: usize = 10;
/// Pages swept and compared at each backlog.
const COMPARED_PAGES: usize = 3;
/// How long every run waits for its approval.
const DEADLINE: Duration = Duration::from_secs(3600);
/// Requests in flight at once while creating, draining and checking.
const IN_FLIGHT: usize = 64;

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

/// A send hook for the SQS queue: every wake-up sent through it recorded; while
/// `forward` is off the wake-ups are only recorded (the test handles them itself).
struct Recording {
    forward: std::sync::atomic::AtomicBool,
    sent: Mutex<Vec<WakeUp>>,
}

impl Recording {
    fn take(&self) -> Vec<WakeUp> {
        std::mem::take(&mut self.sent.lock().unwrap())
    }
}

#[async_trait::async_trait]
impl SendHook for Recording {
    async fn send(
        &self,
        queue: &dyn WakeQueue,
        wake: &WakeUp,
        delay: Duration,
    ) -> Result<(), StoreError> {
        if self.forward.load(std::sync::atomic::Ordering::SeqCst) {
            queue.send(wake, delay).await?;
        }
        self.sent.lock().unwrap().push(wake.clone());
        Ok(())
    }
}

/// Receive `expected` wake-ups from SQS and handle each, `IN_FLIGHT` at a time; the run
/// ids received, in the order handled.
async fn drain(engine: &Engine, queue: &HookedSends<Recording>, expected: usize) -> Vec<RunId> {
    let received = Mutex::new(0usize);
    let messages = futures::stream::unfold((), |()| async {
        let started = Instant::now();
        loop {
            if *received.lock().unwrap() >= expected {
                return None;
            }
            let batch = queue
                .receive(10, Duration::from_secs(600))
                .await
                .expect("receive");
            if !batch.is_empty() {
                *received.lock().unwrap() += batch.len();
                return Some((futures::stream::iter(batch), ()));
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "only {} of {expected} wake-ups arrived",
                received.lock().unwrap()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .flatten();
    let handled = Mutex::new(Vec::with_capacity(expected));
    messages
        .for_each_concurrent(IN_FLIGHT, |m: ReceivedWakeUp| {
            let handled = &handled;
            async move {
                let outcome = engine.handle_wakeup(&m.wake).await.expect("handle");
                assert_eq!(
                    outcome,
                    WakeOutcome::Advanced(RunStatus::Failed),
                    "{:?}",
                    m.wake
                );
                queue.ack(&m.receipt).await.expect("ack");
                handled.lock().unwrap().push(m.wake.run_id);
            }
        })
        .await;
    handled.into_inner().unwrap()
}

/// How many items of the due index the sweep looks at exactly at `at` (no wake-up was
/// sent for them: their deadline is past SQS's 15 minutes), per shard, read from the
/// index itself.
async fn due_index_at(env: &support::Emulators, at: Timestamp) -> HashMap<String, usize> {
    let client = aws_sdk_dynamodb::Client::new(&env.sdk);
    let mut per_shard = HashMap::new();
    for shard in (0..DUE_SHARDS).map(shard_name) {
        let mut count = 0;
        let mut start = None;
        loop {
            let out = client
                .query()
                .table_name(&env.table)
                .index_name(DUE_INDEX)
                .key_condition_expression("#shard = :shard AND #sweep_at = :at")
                .expression_attribute_names("#shard", DUE_SHARD)
                .expression_attribute_names("#sweep_at", SWEEP_AT)
                .expression_attribute_values(":shard", AttributeValue::S(shard.clone()))
                .expression_attribute_values(":at", AttributeValue::N(at.0.to_string()))
                .select(Select::Count)
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .expect("count the due index");
            count += out.count as usize;
            start = out.last_evaluated_key.filter(|k| !k.is_empty());
            if start.is_none() {
                break;
            }
        }
        if count > 0 {
            per_shard.insert(shard, count);
        }
    }
    per_shard
}

/// Every one of `ids` is in the due index at `at`, on the shard `due_shard` gives it,
/// and nothing else is; from 100 runs a shard on, every shard is used, evenly.
async fn in_the_due_index(
    env: &support::Emulators,
    at: Timestamp,
    tenant: &TenantId,
    ids: &[RunId],
) {
    let runs = ids.len();
    let per_shard = due_index_at(env, at).await;
    let mut expected_shards: HashMap<String, usize> = HashMap::new();
    for id in ids {
        *expected_shards.entry(due_shard(tenant, id)).or_default() += 1;
    }
    assert_eq!(
        per_shard, expected_shards,
        "each run on the shard due_shard gives it"
    );
    assert_eq!(per_shard.values().sum::<usize>(), runs);
    if runs >= 100 * DUE_SHARDS as usize {
        let even = runs / DUE_SHARDS as usize;
        assert_eq!(
            per_shard.len(),
            DUE_SHARDS as usize,
            "every shard used: {per_shard:?}"
        );
        assert!(
            per_shard.values().all(|n| *n > even / 2 && *n < even * 2),
            "evenly spread: {per_shard:?}"
        );
    }
    let mut spread: Vec<_> = per_shard.iter().collect();
    spread.sort();
    eprintln!("{runs} runs in the due index, per shard: {spread:?}");
}

/// The requests of one sweep of `due` runs, none of them already queued: the
/// dead-letter queue read once, one `Query` per shard of the due index (each shard's
/// share fits in one) and one of the active bulk actions' jobs, and per due run its
/// wake-up sent and its `resend_after` written.
fn one_sweep(due: u64) -> RequestCounts {
    let mut expected = RequestCounts::new();
    let mut add = |service: &str, op: &str, n: u64| {
        if n > 0 {
            expected.insert((service.to_owned(), op.to_owned()), n);
        }
    };
    add("sqs", "ReceiveMessage", 1);
    // One per due shard, and one of the active bulk actions' jobs (`AJ`), whose stalled
    // slices the sweep sends again.
    add("dynamodb", "Query", u64::from(DUE_SHARDS) + 1);
    add("sqs", "SendMessage", due);
    add("dynamodb", "UpdateItem", due);
    expected
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn runs_waiting_on_one_deadline_are_timed_out_by_the_sweep_in_bounded_pages_each_once() {
    let Some(env) = support::emulators().await else {
        return;
    };
    let runs: usize = std::env::var("SIESTA_SWEEP_RUNS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(250);
    // The due index is global across tenants: a table of its own keeps the runs of tests
    // running beside this one out of it.
    env.in_own_table(|env| async move { sweep_at_scale(&env, runs).await })
        .await;
}

async fn sweep_at_scale(env: &support::Emulators, runs: usize) {
    let total = Instant::now();
    let (aws, counter) = env.counted_backend(5).await;
    let capacity = aws.clone();
    let aws = aws.backend();
    let queue = Arc::new(HookedSends::new(
        aws.queue.clone(),
        Recording {
            forward: false.into(),
            sent: Mutex::new(Vec::new()),
        },
    ));
    let backend = Backend {
        queue: queue.clone(),
        ..aws
    };
    let clock = Arc::new(ManualClock::new(Timestamp(1_800_000_000_000)));
    let engine = Engine::new(
        backend.clone(),
        clock.clone(),
        registry(),
        EngineConfig::default(),
    );
    let tenant = TenantId::from("sweep-at-scale");
    // Fixed ids: the spread over the shards is the same on every run of the test.
    let ids: Vec<RunId> = (0..runs).map(|i| RunId(format!("run-{i:06}"))).collect();

    counter.reset();
    let started = Instant::now();
    let seeded = std::sync::atomic::AtomicUsize::new(0);
    futures::stream::iter(&ids)
        .for_each_concurrent(IN_FLIGHT, |id| {
            let (engine, tenant, seeded) = (&engine, &tenant, &seeded);
            async move {
                let run = engine
                    .start(tenant, "approve", json!(null), Some(id.clone()))
                    .await
                    .expect("start");
                let wake = WakeUp {
                    tenant: tenant.clone(),
                    run_id: run.id,
                    reason: siesta::ports::WakeReason::Started,
                    epoch_hint: 0,
                    seq_hint: None,
                };
                assert_eq!(
                    engine.handle_wakeup(&wake).await.expect("handle"),
                    WakeOutcome::Advanced(RunStatus::Waiting)
                );
                let n = seeded.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                if n % 10_000 == 0 {
                    eprintln!(
                        "{n} runs waiting after {:.0} s",
                        started.elapsed().as_secs_f64()
                    );
                }
            }
        })
        .await;
    let creation = started.elapsed();
    assert_eq!(
        queue.take().len(),
        runs,
        "one start wake-up each, and no delayed wake-up: the deadline is past SQS's 15 minutes"
    );
    eprintln!(
        "{runs} runs started and waiting in {:.1} s ({:.1} runs/s); per run: {}",
        creation.as_secs_f64(),
        runs as f64 / creation.as_secs_f64(),
        support::requests_per(&counter.snapshot(), runs, 2)
    );

    // Every run is in the due index at the deadline, on its shard.
    let deadline = clock.now().plus(DEADLINE);
    in_the_due_index(env, deadline, &tenant, &ids).await;

    let nothing_yet = engine.sweep(PAGE).await.unwrap();
    assert_eq!(
        nothing_yet,
        SweepReport::default(),
        "none is due before the deadline"
    );

    queue
        .forward
        .store(true, std::sync::atomic::Ordering::SeqCst);
    clock.set(deadline.plus(Duration::from_secs(1)));
    let ours: HashSet<&RunId> = ids.iter().collect();
    let mut woken: HashMap<RunId, usize> = HashMap::new();
    counter.reset();
    let started = Instant::now();
    let (mut sweeping, mut handling) = (Duration::ZERO, Duration::ZERO);
    let mut pages = 0;
    let mut sweep_rcu = 0.0;
    // The sweep's own requests (it and the handling take turns, so the difference of
    // the counts around each sweep is the sweep's), and its first and last full pages'
    // times: the cost per fired deadline must not grow with how many are due.
    let mut sweep_requests: RequestCounts = RequestCounts::new();
    let mut page_times = Vec::new();
    loop {
        let t = Instant::now();
        let before = capacity.consumed_capacity();
        let counted = counter.snapshot();
        let report = engine.sweep(PAGE).await.unwrap();
        for (key, n) in counter.snapshot() {
            let n = n - counted.get(&key).copied().unwrap_or(0);
            if n > 0 {
                *sweep_requests.entry(key).or_default() += n;
            }
        }
        sweep_rcu += capacity.consumed_capacity().read_units - before.read_units;
        page_times.push(t.elapsed());
        sweeping += t.elapsed();
        assert!(report.due <= PAGE, "bounded: {report:?}");
        let sent = queue.take();
        assert_eq!(sent.len(), report.woken, "{report:?}");
        if report.due == 0 {
            break;
        }
        pages += 1;
        assert_eq!(
            report,
            SweepReport {
                due: report.due,
                woken: report.due,
                due_waits: report.due,
                ..SweepReport::default()
            },
            "page {pages}: only due waits"
        );
        for wake in &sent {
            assert!(ours.contains(&wake.run_id), "{wake:?}");
            let n = woken.entry(wake.run_id.clone()).or_default();
            *n += 1;
            assert_eq!(*n, 1, "page {pages}: {} woken twice", wake.run_id);
        }
        let t = Instant::now();
        let mut handled = drain(&engine, &queue, sent.len()).await;
        handling += t.elapsed();
        let mut sent: Vec<RunId> = sent.into_iter().map(|w| w.run_id).collect();
        handled.sort();
        sent.sort();
        assert_eq!(handled, sent, "page {pages}: each wake-up handled once");
        assert!(
            queue.take().is_empty(),
            "timing out sends no further wake-up"
        );
    }
    eprintln!(
        "{} deadlines passed: {pages} sweep pages of at most {PAGE} in {:.1} s \
         (sweeping {:.1} s reading {sweep_rcu:.0} RCU of the due index, receiving and \
         handling {:.1} s); per run: {}",
        woken.len(),
        started.elapsed().as_secs_f64(),
        sweeping.as_secs_f64(),
        handling.as_secs_f64(),
        support::requests_per(&counter.snapshot(), runs, 2)
    );
    let ms = |d: &Duration| d.as_secs_f64() * 1000.0;
    let full = &page_times[..page_times.len().saturating_sub(2)];
    eprintln!(
        "the sweep's own requests per fired deadline: {}; a page of {PAGE}: first {:.0} ms, \
         median {:.0} ms, last full {:.0} ms",
        support::requests_per(&sweep_requests, woken.len(), 3),
        full.first().map(ms).unwrap_or_default(),
        {
            let mut sorted: Vec<f64> = full.iter().map(ms).collect();
            sorted.sort_by(f64::total_cmp);
            sorted.get(sorted.len() / 2).copied().unwrap_or_default()
        },
        full.last().map(ms).unwrap_or_default(),
    );
    assert_eq!(
        sweep_requests
            .get(&("sqs".to_owned(), "SendMessage".to_owned()))
            .copied(),
        Some(runs as u64),
        "one wake-up sent per fired deadline: {sweep_requests:?}"
    );
    // Each sweep (the pages and the last, which finds nothing) one `Query` per shard, one
    // of the active jobs and one read of the dead-letter queue; each fired deadline one
    // send and one write.
    let mut expected = one_sweep(runs as u64);
    for (service, op) in [("dynamodb", "Query"), ("sqs", "ReceiveMessage")] {
        *expected
            .get_mut(&(service.to_owned(), op.to_owned()))
            .unwrap() *= runs.div_ceil(PAGE) as u64 + 1;
    }
    assert_eq!(
        sweep_requests,
        expected,
        "the sweep's requests, {} sweeps of {runs} runs",
        runs.div_ceil(PAGE) + 1
    );
    assert_eq!(woken.len(), runs, "every run swept");
    assert_eq!(pages, runs.div_ceil(PAGE), "full pages");
    assert!(
        due_index_at(env, deadline).await.is_empty(),
        "the due index is empty"
    );
    assert!(
        queue
            .receive(10, Duration::from_secs(1))
            .await
            .unwrap()
            .is_empty(),
        "no wake-up left over"
    );

    // Each run failed, timed out exactly once.
    let started = Instant::now();
    let timelines: Vec<(RunId, Vec<EventType>)> = futures::stream::iter(&ids)
        .map(|id| {
            let (backend, tenant) = (&backend, &tenant);
            async move {
                let timeline = backend.store.timeline(tenant, id, 0, 100).await.unwrap();
                (
                    id.clone(),
                    timeline.iter().map(|e| e.event_type).collect::<Vec<_>>(),
                )
            }
        })
        .buffer_unordered(IN_FLIGHT)
        .collect()
        .await;
    for (id, events) in &timelines {
        let count = |t: EventType| events.iter().filter(|e| **e == t).count();
        // Two invocations wrote to it: the one that made it wait and the one that
        // timed it out.
        assert_eq!(
            (
                count(EventType::CallbackTimedOut),
                count(EventType::ExecutionFailed),
                count(EventType::InvocationCompleted),
            ),
            (1, 1, 2),
            "{id}: {events:?}"
        );
    }
    eprintln!(
        "{runs} timelines checked in {:.1} s; total {:.1} s",
        started.elapsed().as_secs_f64(),
        total.elapsed().as_secs_f64()
    );
}

/// What one sweep page cost: its requests and the capacity units it read.
#[derive(Debug, Clone, PartialEq)]
struct PageCost {
    requests: RequestCounts,
    read_units: f64,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sweep_page_costs_the_same_requests_and_reads_with_500_or_2000_runs_due() {
    let Some(env) = support::emulators().await else {
        return;
    };
    let mut costs = Vec::new();
    for runs in [500, 2_000] {
        let cost = Arc::new(Mutex::new(Vec::new()));
        let out = cost.clone();
        // A table of its own for each backlog: the due index is global across tenants.
        env.in_own_table(|env| async move {
            *out.lock().unwrap() = first_pages(&env, runs).await;
        })
        .await;
        let cost = std::mem::take(&mut *cost.lock().unwrap());
        costs.push((runs, cost));
    }
    let [(_, small), (_, large)] = &costs[..] else {
        unreachable!()
    };
    for (runs, pages) in &costs {
        assert_eq!(pages.len(), COMPARED_PAGES, "{runs} runs");
        for (i, page) in pages.iter().enumerate() {
            assert_eq!(
                page.requests,
                one_sweep(COMPARED_PAGE as u64),
                "{runs} runs, page {}",
                i + 1
            );
            assert!(
                page.read_units > 0.0,
                "{runs} runs, page {}: {page:?}",
                i + 1
            );
        }
    }
    assert_eq!(
        small, large,
        "a page reads and requests the same with 500 runs due as with 2 000"
    );
}

/// Seed `runs` runs waiting on one deadline (one `create_run` each), check the due index,
/// and sweep the first [`COMPARED_PAGES`] pages of [`COMPARED_PAGE`] after the deadline:
/// what each cost.
async fn first_pages(env: &support::Emulators, runs: usize) -> Vec<PageCost> {
    let names = env.names(5).await;
    let (aws, counter) = env.counted_backend_with_names(names.clone());
    let backend = aws.backend();
    let clock = Arc::new(ManualClock::new(Timestamp(1_800_000_000_000)));
    let engine = Engine::new(
        backend.clone(),
        clock.clone(),
        registry(),
        EngineConfig::default(),
    );
    let tenant = TenantId::from("sweep-at-scale");
    let now = clock.now();
    let deadline = now.plus(DEADLINE);
    // Fixed ids, of one width at both sizes: the same spread and item sizes every time.
    let ids: Vec<RunId> = (0..runs).map(|i| RunId(format!("run-{i:06}"))).collect();
    let started = Instant::now();
    support::seed_waiting_runs(&*backend.store, &tenant, &ids, "approve", now, deadline).await;
    eprintln!(
        "{runs} runs waiting, written in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    in_the_due_index(env, deadline, &tenant, &ids).await;
    assert_eq!(
        engine.sweep(COMPARED_PAGE).await.unwrap(),
        SweepReport::default(),
        "none is due before the deadline"
    );

    clock.set(deadline.plus(Duration::from_secs(1)));
    let mut pages = Vec::new();
    for page in 1..=COMPARED_PAGES {
        counter.reset();
        let before = aws.consumed_capacity().read_units;
        let report = engine.sweep(COMPARED_PAGE).await.unwrap();
        let read_units = aws.consumed_capacity().read_units - before;
        assert_eq!(
            report,
            SweepReport {
                due: COMPARED_PAGE,
                woken: COMPARED_PAGE,
                due_waits: COMPARED_PAGE,
                ..SweepReport::default()
            },
            "{runs} runs, page {page}: a full page of due waits"
        );
        pages.push(PageCost {
            requests: counter.snapshot(),
            read_units,
        });
    }
    eprintln!("{runs} runs due, the first pages of {COMPARED_PAGE}: {pages:?}");

    // The wake-ups are not handled here: give the queues back.
    env.delete_queues(&names).await;
    pages
}
