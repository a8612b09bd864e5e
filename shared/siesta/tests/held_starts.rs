//! Starts held back until an instant, on the harness's clock: a debounce gathers the
//! starts that share its key into one queued run, released a period after the last
//! (at most its maximum delay after the first) with the latest input; a batch gathers
//! every input, released when full; a start rate queues a start until its turn.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use siesta::*;
use support::world;

const S: Duration = Duration::from_secs(1);

fn registry() -> Registry {
    let mut reg = Registry::new();
    reg.register(
        "sync_order",
        |_: Context, input: Value| async move { Ok(input) },
    )
    .register("digest", |_: Context, items: Vec<Value>| async move {
        Ok(json!({"items": items}))
    })
    .register("call_provider", |_: Context, input: Value| async move {
        Ok(input)
    })
    .debounce(
        Debounce::new("order-updates", 10 * S)
            .max_delay(25 * S)
            .key_from_input("/order")
            .workflow("sync_order"),
    )
    .debounce(Debounce::new("digest", 60 * S).batch(3).workflow("digest"))
    .start_rate(
        StartRate::new("provider", 2, S)
            .key_from_input("/account")
            .workflow("call_provider"),
    );
    reg
}

async fn start(w: &siesta_testing::TestEnv, workflow: &str, input: Value) -> Started {
    let started = w
        .engine()
        .start_or_join(w.tenant(), workflow, input, StartOptions::default())
        .await
        .unwrap();
    w.run_until_idle().await;
    started
}

fn events(timeline: &[TimelineEvent], t: EventType) -> Vec<&TimelineEvent> {
    timeline.iter().filter(|e| e.event_type == t).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starts_of_one_key_within_the_period_collapse_into_one_run_with_the_latest_input() {
    let w = world(registry());
    let first = start(&w, "sync_order", json!({"order": "o-1", "rev": 1})).await;
    assert!(!first.joined);
    assert_eq!(first.run.status, RunStatus::Queued);
    let other = start(&w, "sync_order", json!({"order": "o-2", "rev": 1})).await;
    w.advance(4 * S).await;
    let second = start(&w, "sync_order", json!({"order": "o-1", "rev": 2})).await;
    w.advance(4 * S).await;
    let third = start(&w, "sync_order", json!({"order": "o-1", "rev": 3})).await;
    assert!(second.joined && third.joined, "later starts join");
    assert_eq!(second.run.id, first.run.id);
    assert_eq!(third.run.id, first.run.id);
    assert_ne!(other.run.id, first.run.id, "another key has its own run");

    let held = w.run(&first.run.id).await;
    assert_eq!(held.status, RunStatus::Queued);
    let until = held.held.as_ref().expect("held").until;
    assert_eq!(until, w.now().plus(10 * S), "a period after the last start");
    assert!(
        w.journal(&first.run.id).await.is_empty(),
        "nothing has run yet"
    );

    // o-2's period ends first: it runs alone.
    w.advance(3 * S).await;
    assert_eq!(w.status(&other.run.id).await, RunStatus::Completed);
    assert_eq!(w.status(&first.run.id).await, RunStatus::Queued);
    w.advance(7 * S).await;
    let done = w.run(&first.run.id).await;
    assert_eq!(done.status, RunStatus::Completed);
    assert_eq!(
        support::output(&done),
        json!({"order": "o-1", "rev": 3}),
        "the latest input"
    );
    let timeline = w.timeline(&first.run.id).await;
    assert_eq!(events(&timeline, EventType::StartJoined).len(), 2);
    let released = events(&timeline, EventType::StartReleased);
    assert_eq!(released.len(), 1);
    assert_eq!(released[0].details["HeldBy"], json!("debounce"));
    assert_eq!(released[0].details["Starts"], json!(3));
    assert_eq!(released[0].at, until, "released at its instant");

    let after = start(&w, "sync_order", json!({"order": "o-1", "rev": 4})).await;
    assert!(!after.joined, "a run that began takes no more starts");
    assert_ne!(after.run.id, first.run.id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steady_stream_of_starts_is_released_at_the_maximum_delay_after_the_first() {
    let w = world(registry());
    let first = start(&w, "sync_order", json!({"order": "o-1", "rev": 0})).await;
    let began = w.now();
    let mut rev = 0;
    // A start every 5 s, inside the 10 s period each time: only the 25 s cap ends it.
    while w.status(&first.run.id).await == RunStatus::Queued {
        w.advance(5 * S).await;
        rev += 1;
        let next = start(&w, "sync_order", json!({"order": "o-1", "rev": rev})).await;
        if next.run.id != first.run.id {
            break;
        }
    }
    let run = w.run(&first.run.id).await;
    assert_eq!(run.status, RunStatus::Completed);
    let released = w.timeline(&first.run.id).await;
    let released = events(&released, EventType::StartReleased)[0].at;
    assert_eq!(
        released,
        began.plus(25 * S),
        "the maximum delay after the first"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_gathers_every_input_in_order_and_is_released_when_full() {
    let w = world(registry());
    let a = start(&w, "digest", json!("a")).await;
    let b = start(&w, "digest", json!("b")).await;
    assert_eq!(w.status(&a.run.id).await, RunStatus::Queued);
    let c = start(&w, "digest", json!("c")).await;
    let d = start(&w, "digest", json!("d")).await;
    assert_eq!(b.run.id, a.run.id);
    assert_eq!(c.run.id, a.run.id);
    assert_ne!(d.run.id, a.run.id, "the fourth begins the next batch");
    let full = w.run(&a.run.id).await;
    assert_eq!(
        full.status,
        RunStatus::Completed,
        "released the moment it was full"
    );
    assert_eq!(support::output(&full), json!({"items": ["a", "b", "c"]}));

    assert_eq!(w.status(&d.run.id).await, RunStatus::Queued);
    w.advance(60 * S).await;
    let rest = w.run(&d.run.id).await;
    assert_eq!(
        support::output(&rest),
        json!({"items": ["d"]}),
        "a period on, as it is"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starts_racing_on_one_key_all_land_in_one_run() {
    let w = world(registry());
    let engine = w.engine();
    let starts = (0..12).map(|i| {
        let engine = engine.clone();
        let tenant = w.tenant().clone();
        tokio::spawn(async move {
            engine
                .start_or_join(&tenant, "digest", json!(i), StartOptions::default())
                .await
                .unwrap()
                .run
                .id
        })
    });
    let mut ids = Vec::new();
    for s in starts {
        ids.push(s.await.unwrap());
    }
    w.advance(60 * S).await;
    let mut runs: Vec<RunId> = ids.clone();
    runs.sort();
    runs.dedup();
    assert_eq!(runs.len(), 4, "12 starts, batches of 3: {ids:?}");
    let mut gathered = Vec::new();
    for id in &runs {
        let out = support::output(&w.run(id).await);
        let items = out["items"].as_array().unwrap().clone();
        assert_eq!(items.len(), 3);
        assert_eq!(
            ids.iter().filter(|i| *i == id).count(),
            3,
            "each start was answered with the run that holds its input"
        );
        gathered.extend(items);
    }
    gathered.sort_by_key(|v| v.as_i64());
    assert_eq!(gathered, (0..12).map(|i| json!(i)).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_gathering_run_takes_no_more_starts() {
    let w = world(registry());
    let first = start(&w, "sync_order", json!({"order": "o-1"})).await;
    let cancelled = w.cancel(&first.run.id).await;
    assert_eq!(cancelled.status, RunStatus::Cancelled);
    let next = start(&w, "sync_order", json!({"order": "o-1"})).await;
    assert!(!next.joined);
    assert_ne!(next.run.id, first.run.id);
    w.advance(10 * S).await;
    assert_eq!(w.status(&next.run.id).await, RunStatus::Completed);
    assert_eq!(w.status(&first.run.id).await, RunStatus::Cancelled);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_debounced_start_with_a_run_id_or_without_its_key_is_refused() {
    let w = world(registry());
    let with_id = w
        .try_start(
            "sync_order",
            json!({"order": "o-1"}),
            Some(RunId("mine".into())),
        )
        .await;
    assert!(matches!(with_id, Err(EngineError::InvalidInput(m)) if m.contains("order-updates")));
    let no_key = w.try_start("sync_order", json!({"rev": 1}), None).await;
    assert!(matches!(no_key, Err(EngineError::InvalidInput(m)) if m.contains("/order")));
    let not_a_list = w.try_start("digest", json!({"x": 1}), None).await;
    assert!(
        not_a_list.is_ok(),
        "a batch's start gives one item of its list"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starts_over_a_start_rate_are_queued_until_their_turn_and_spaced_by_it() {
    let w = world(registry());
    let mut runs = Vec::new();
    for i in 0..5 {
        runs.push(start(&w, "call_provider", json!({"account": "a", "n": i})).await);
    }
    let other = start(&w, "call_provider", json!({"account": "b"})).await;
    assert_eq!(
        w.status(&runs[0].run.id).await,
        RunStatus::Completed,
        "its turn was now"
    );
    assert_eq!(
        w.status(&other.run.id).await,
        RunStatus::Completed,
        "another key's too"
    );
    let queued = w.run(&runs[4].run.id).await;
    assert_eq!(queued.status, RunStatus::Queued);
    let held = queued.held.clone().expect("held for its turn");
    assert_eq!(
        held.reason,
        HoldReason::Rate {
            name: "provider".into(),
            key: "a".into()
        }
    );
    assert_eq!(held.until, w.now().plus(2 * S), "2 a second: 500 ms apart");
    for _ in 0..25 {
        w.advance(Duration::from_millis(100)).await;
    }
    let mut began = Vec::new();
    for run in &runs {
        assert_eq!(w.status(&run.run.id).await, RunStatus::Completed);
        let timeline = w.timeline(&run.run.id).await;
        let at = events(&timeline, EventType::StartReleased)
            .first()
            .map_or(timeline[0].at, |e| e.at);
        began.push(at.0);
    }
    for pair in began.windows(2) {
        assert!(pair[1] - pair[0] >= 500, "turns 500 ms apart: {began:?}");
    }
}

#[test]
fn a_schedule_of_a_debounced_workflow_is_refused_at_registration() {
    let mut reg = registry();
    let refused = reg.schedule(siesta::schedule::Schedule::new(
        "hourly",
        "sync_order",
        "0 * * * *",
    ));
    assert!(
        matches!(&refused, Err(siesta::schedule::ScheduleError::Debounced { debounce, .. }) if debounce == "order-updates"),
        "{:?}",
        refused.err()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_s_limits_set_a_start_rate_s_max() {
    let mut config = siesta_testing::default_engine_config();
    config.limits = LimitOverrides::parse(r#"{"provider": 4}"#).unwrap();
    let w = siesta_testing::TestEnv::builder(registry())
        .tenant("acme")
        .engine_config(config)
        .build();
    let mut runs = Vec::new();
    for _ in 0..3 {
        runs.push(start(&w, "call_provider", json!({"account": "a"})).await);
    }
    let until = w.run(&runs[2].run.id).await.held.expect("held").until;
    assert_eq!(
        until,
        w.now().plus(Duration::from_millis(500)),
        "4 a second: 250 ms apart"
    );
}

/// A batch that a start would push over the tenant's input quota takes no more: that
/// start begins the key's next batch (no start is lost or refused), and the full one is
/// released at its time as it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_that_would_outgrow_the_input_quota_starts_the_next_one() {
    let mut config = siesta_testing::default_engine_config();
    config.quotas = Quotas::parse(r#"{"default": {"max_input_bytes": 39}}"#).unwrap();
    let w = siesta_testing::TestEnv::builder(registry())
        .tenant("acme")
        .engine_config(config)
        .build();
    let item = json!("0123456789"); // 12 bytes as JSON; two make a 27-byte list, three a 40-byte one
    let a = start(&w, "digest", item.clone()).await;
    let b = start(&w, "digest", item.clone()).await;
    assert_eq!(b.run.id, a.run.id);
    let c = start(&w, "digest", item.clone()).await;
    assert!(
        !c.joined,
        "the third would make the list 40 bytes, over 39: a new batch"
    );
    assert_ne!(c.run.id, a.run.id);
    w.advance(60 * S).await;
    assert_eq!(
        support::output(&w.run(&a.run.id).await),
        json!({"items": [item.clone(), item.clone()]})
    );
    assert_eq!(
        support::output(&w.run(&c.run.id).await),
        json!({"items": [item]})
    );
}
