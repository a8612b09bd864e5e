//! On DynamoDB and SQS (the emulators): a schedule fires from the sweep, one run per
//! tick though two sweeps fire it, and its state (paused, the tick fired) is kept in
//! the table — the deployment's own sweep function is all a schedule needs.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

mod support;

use std::sync::Arc;

use serde_json::json;
use siesta::schedule::tick_run_id;
use siesta::*;

/// 2027-01-15T00:00:00Z.
const START: i64 = 1_800_000_000_000 - 1_800_000_000_000 % 86_400_000;
const HOUR: i64 = 3_600_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_aws_a_tick_fires_once_from_two_sweeps_and_a_paused_schedule_fires_nothing() {
    let Some(env) = support::emulators().await else {
        return;
    };
    let tenant = format!("sched-{}", uuid::Uuid::new_v4().simple());
    let mut reg = Registry::new();
    reg.register(
        "report",
        |_: Context, input: serde_json::Value| async move { Ok::<_, Error>(input) },
    );
    reg.schedule(
        Schedule::new("nightly-report", "report", "0 2 * * *")
            .tenant(tenant.as_str())
            .overlap(Overlap::Allow)
            .input(json!({"issue": "nightly digest"})),
    )
    .unwrap();
    let backend = env.backend(5).await.backend();
    let clock = Arc::new(ManualClock::new(Timestamp(START)));
    let engine = |owner: &str| {
        Engine::new(
            backend.clone(),
            clock.clone(),
            reg.clone(),
            EngineConfig {
                owner: owner.into(),
                ..EngineConfig::default()
            },
        )
    };
    let (a, b) = (engine("a"), engine("b"));
    let tenant = TenantId::from(tenant.as_str());
    a.sweep(10).await.unwrap();

    clock.set(Timestamp(START + 2 * HOUR + 30_000));
    let (ra, rb) = tokio::join!(a.sweep(10), b.sweep(10));
    assert!(ra.unwrap().scheduled + rb.unwrap().scheduled >= 1);
    a.run_until_idle(10).await.unwrap();
    let id = tick_run_id("nightly-report", Timestamp(START + 2 * HOUR));
    let run = a.get_run(&tenant, &id).await.unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    let listed = a.schedules(&tenant).await.unwrap();
    assert_eq!(listed[0].last_run, Some(id));
    assert_eq!(listed[0].next, Some(Timestamp(START + 26 * HOUR)));

    a.pause_schedule(&tenant, "nightly-report").await.unwrap();
    clock.set(Timestamp(START + 26 * HOUR));
    assert_eq!(b.sweep(10).await.unwrap().scheduled, 0, "paused");
    let resumed = b.resume_schedule(&tenant, "nightly-report").await.unwrap();
    assert_eq!(resumed.next, Some(Timestamp(START + 50 * HOUR)));
}

/// What schedules cost on DynamoDB, in requests: a sweep that finds no tick due reads
/// each schedule's state (one `GetItem`); a tick adds the look for its run, the run's
/// start and the state's write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_aws_an_idle_schedule_costs_one_read_a_sweep_and_a_tick_a_start_and_three_requests_more()
{
    let Some(env) = support::emulators().await else {
        return;
    };
    let tenant = format!("cost-{}", uuid::Uuid::new_v4().simple());
    let mut reg = Registry::new();
    reg.register(
        "report",
        |_: Context, input: serde_json::Value| async move { Ok::<_, Error>(input) },
    );
    reg.schedule(Schedule::new("hourly", "report", "0 * * * *").tenant(tenant.as_str()))
        .unwrap();
    let (aws, counter) = env.counted_backend(5).await;
    let clock = Arc::new(ManualClock::new(Timestamp(START)));
    let engine = Engine::new(aws.backend(), clock.clone(), reg, EngineConfig::default());
    let total = || counter.snapshot().values().sum::<u64>();

    engine.fire_schedules().await;
    assert_eq!(total(), 2, "first seen: read, recorded");
    counter.reset();
    clock.set(Timestamp(START + HOUR / 2));
    engine.fire_schedules().await;
    assert_eq!(counter.snapshot(), {
        let mut idle = siesta_aws::RequestCounts::new();
        idle.insert(("dynamodb".into(), "GetItem".into()), 1);
        idle
    });

    counter.reset();
    clock.set(Timestamp(START + HOUR));
    assert_eq!(engine.fire_schedules().await.started, 1);
    let first_tick = counter.snapshot();
    eprintln!("the first tick: {first_tick:?}");
    engine.run_until_idle(10).await.unwrap();
    counter.reset();
    clock.set(Timestamp(START + 2 * HOUR));
    assert_eq!(engine.fire_schedules().await.started, 1);
    let tick = counter.snapshot();
    eprintln!("a tick after another: {tick:?}");
    let of = |counts: &siesta_aws::RequestCounts, op: &str| {
        counts
            .get(&("dynamodb".to_owned(), op.to_owned()))
            .copied()
            .unwrap_or(0)
    };
    // State, its run not there yet, the previous tick's run (unfinished?), and the
    // start's read of the workflow's pause (kept a second; the last was an hour ago).
    assert_eq!(of(&tick, "GetItem"), 4, "{tick:?}");
    assert_eq!(of(&tick, "PutItem"), 1, "the state: {tick:?}");
    assert_eq!(
        of(&tick, "TransactWriteItems"),
        1,
        "the run's create: {tick:?}"
    );
}
