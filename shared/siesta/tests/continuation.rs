//! Continuations: a long-lived engine keeps a suspended run's workflow and continues it
//! at the next wake-up, with full replay from the journal as the fallback. What it
//! writes must be exactly what a replay from the journal writes.

mod support;

use std::time::Duration;

use serde_json::json;
use siesta::*;
use siesta_testing::{TestEnv, default_engine_config};
use support::{create, output};

/// Steps, each followed by a timer: every timer suspends the run.
fn stepper() -> Registry {
    let mut reg = Registry::new();
    reg.register("stepper", |ctx: Context, n: u32| async move {
        let mut total = 0u32;
        for i in 0..n {
            total += ctx.step("step", move |_| async move { Ok(i) }).await?;
            ctx.sleep(Duration::from_millis(5)).await?;
        }
        Ok(total)
    });
    reg.register(
        "stepper_then_event",
        |ctx: Context, _: serde_json::Value| async move {
            let first = ctx.step("first", |_| async { Ok(1u32) }).await?;
            ctx.sleep(Duration::from_secs(10)).await?;
            let second: u32 = ctx
                .wait_for_event("more")
                .timeout(Duration::from_secs(60))
                .await?;
            ctx.sleep(Duration::from_secs(1)).await?;
            Ok(first + second)
        },
    );
    reg
}

fn world(config: EngineConfig) -> TestEnv {
    TestEnv::builder(stepper())
        .tenant("acme")
        .engine_config(config)
        .build()
}

/// The journal as positions and states, and the timeline as event types: what a
/// continuation and a replay must agree on.
async fn written(w: &TestEnv, id: &RunId) -> (Vec<String>, Vec<String>) {
    let mut journal: Vec<String> = w
        .journal(id)
        .await
        .iter()
        .map(|e| format!("{} {:?} {:?}", e.position, e.kind, e.state))
        .collect();
    journal.sort();
    let timeline = w
        .timeline(id)
        .await
        .iter()
        .map(|e| format!("{:?} {:?}", e.event_type, e.id))
        .collect();
    (journal, timeline)
}

#[tokio::test]
async fn a_sleeping_run_continues_where_it_stopped_and_writes_what_a_replay_writes() {
    let on = world(default_engine_config());
    let off = world(EngineConfig {
        replay_cache_entries: 0,
        ..default_engine_config()
    });
    let mut results = Vec::new();
    for w in [&on, &off] {
        let id = create(w, "stepper", json!(5)).await;
        let run = w.drive(&id).await;
        assert_eq!(output(&run), json!(10));
        results.push(written(w, &id).await);
    }
    assert_eq!(results[0], results[1]);
    let stats = on.engine().replay_cache_stats();
    if on.config().replay_cache_entries > 0 {
        assert_eq!((stats.continued, stats.misses), (5, 1), "{stats:?}");
    }
    let stats = off.engine().replay_cache_stats();
    assert_eq!((stats.hits, stats.continued, stats.misses), (0, 0, 6));
}

#[tokio::test]
async fn a_delivery_between_invocations_makes_the_continuation_stale_and_the_run_replays() {
    let w = world(default_engine_config());
    let id = create(&w, "stepper_then_event", json!(null)).await;
    w.run_until_idle().await;
    // The event arrives while the run sleeps: the run's version moves, so the claim that
    // follows the timer proves the kept workflow stale.
    w.deliver_event(&id, "more", json!(41)).await;
    let run = w.drive(&id).await;
    assert_eq!(output(&run), json!(42));
    let stats = w.engine().replay_cache_stats();
    if w.config().replay_cache_entries > 0 {
        // The start misses; so does the delivery's wake-up (the version moved), which
        // replays from the store and loads the event. The two timers' wake-ups then
        // continue, the event wait taking the loaded delivery.
        assert_eq!(
            (stats.hits, stats.continued, stats.misses),
            (2, 2, 2),
            "{stats:?}"
        );
    }
}

#[tokio::test]
async fn beyond_its_bound_the_oldest_continuation_keeps_only_its_journal() {
    let w = world(EngineConfig {
        max_continuations: 1,
        ..default_engine_config()
    });
    let a = create(&w, "stepper", json!(1)).await;
    let b = create(&w, "stepper", json!(1)).await;
    // Both runs suspend on their timer before either wakes.
    w.run_until_idle().await;
    w.advance(Duration::from_millis(5)).await;
    assert_eq!(output(&w.run(&a).await), json!(0));
    assert_eq!(output(&w.run(&b).await), json!(0));
    let stats = w.engine().replay_cache_stats();
    if w.config().replay_cache_entries > 0 {
        // One kept its workflow, the other only its journal: both replayed from memory.
        assert_eq!(
            (stats.hits, stats.continued, stats.misses),
            (2, 1, 2),
            "{stats:?}"
        );
    }
}

#[tokio::test]
async fn a_continued_run_is_cancelled_by_a_cancellation_written_while_it_slept() {
    let w = world(default_engine_config());
    let id = create(&w, "stepper", json!(3)).await;
    w.run_until_idle().await;
    w.cancel(&id).await;
    let run = w.drive(&id).await;
    assert_eq!(run.status, RunStatus::Cancelled);
    assert_eq!(w.engine().replay_cache_stats().continued, 0);
}
