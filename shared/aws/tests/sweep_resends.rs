//! What the sweep re-sends on SQS and DynamoDB (the emulators), counted in requests:
//! while the wake-ups sent for started runs wait in the queue, sweep after sweep sends
//! none again (SQS cannot be searched by run, so it is the due index that knows a
//! wake-up is on its way: `resend_after`); a wake-up whose send failed after its write
//! is sent by the next sweep, once.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

mod support;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use siesta::*;
use siesta_aws::{AwsBackend, ResourceNames};

/// Started runs whose wake-ups wait in the queue.
const RUNS: usize = 30;

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_while_wake_ups_are_queued_sends_none_again_and_one_after_a_lost_send_does() {
    let Some(env) = support::emulators().await else {
        return;
    };
    // The due index is global across tenants: a table of its own keeps the runs of
    // tests running beside this one out of it.
    env.in_own_table(|env| async move { sweeps(&env).await })
        .await;
}

async fn sweeps(env: &support::Emulators) {
    let names = env.names(5).await;
    let (aws, counter) = env.counted_backend_with_names(names.clone());
    let clock = Arc::new(ManualClock::new(Timestamp(1_800_000_000_000)));
    let engine = Engine::new(
        aws.backend(),
        clock.clone(),
        registry(),
        EngineConfig::default(),
    );
    let tenant = TenantId(format!("resends-{}", uuid::Uuid::new_v4().simple()));
    let sends = || counter.total("sqs", Some("SendMessage"));

    let mut started = Vec::new();
    for _ in 0..RUNS {
        started.push(
            engine
                .start(&tenant, "await_go", json!(null), None)
                .await
                .unwrap()
                .id,
        );
    }
    assert_eq!(sends(), RUNS as u64, "one start wake-up each");

    // Due, their wake-ups queued and not handled: no sweep within the start's margin
    // (`EngineConfig::start_resend_margin`, 30 s; this test stays within it) sends
    // another. Past it, each still queued would be sent once more
    // (tests/lost_start.rs).
    counter.reset();
    for _ in 0..3 {
        clock.advance(Duration::from_secs(5));
        let report = engine.sweep(1000).await.unwrap();
        assert_eq!((report.due, report.woken), (0, 0), "{report:?}");
    }
    assert_eq!(sends(), 0, "no duplicate wake-up");
    assert_eq!(
        counter.total("dynamodb", Some("UpdateItem")),
        0,
        "nothing to note either"
    );

    // A start whose wake-up could not be sent (its queue is gone): the write happened,
    // the message did not.
    let broken = AwsBackend::new(
        &env.sdk,
        ResourceNames {
            queue_url: format!("{}-missing", names.queue_url),
            ..names.clone()
        },
    );
    let failing = Engine::new(
        broken.backend(),
        clock.clone(),
        registry(),
        EngineConfig::default(),
    );
    let lost = failing
        .start(&tenant, "await_go", json!(null), None)
        .await
        .unwrap()
        .id;

    counter.reset();
    let report = engine.sweep(1000).await.unwrap();
    assert_eq!(
        (report.due, report.woken, report.lost_wakeups),
        (1, 1, 1),
        "{report:?}"
    );
    assert_eq!(sends(), 1, "the lost one, sent again");
    eprintln!(
        "the sweep that re-sent one lost wake-up: {:?}",
        counter.snapshot()
    );
    counter.reset();
    for _ in 0..2 {
        clock.advance(Duration::from_secs(5));
        assert_eq!(engine.sweep(1000).await.unwrap().woken, 0);
    }
    assert_eq!(sends(), 0, "and only once");

    // The queue holds one wake-up per run, no more.
    let mut received: HashMap<RunId, usize> = HashMap::new();
    let mut empty = 0;
    while empty < 3 {
        let page = aws
            .backend()
            .queue
            .receive(10, Duration::from_secs(60))
            .await
            .unwrap();
        if page.is_empty() {
            empty += 1;
            continue;
        }
        empty = 0;
        for m in page {
            *received.entry(m.wake.run_id).or_default() += 1;
        }
    }
    started.push(lost);
    assert_eq!(received.len(), RUNS + 1, "{received:?}");
    for id in &started {
        assert_eq!(received.get(id), Some(&1), "{id}: {received:?}");
    }
}
