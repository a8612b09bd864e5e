//! The `chain` workflow on the test harness: N sequential steps, the sum as output.

mod support;

use serde_json::json;
use siesta::*;

#[tokio::test]
async fn ten_steps_each_return_their_index_and_the_output_is_their_sum() {
    let w = support::env();
    let id = w.start("chain", json!(10)).await;
    assert_eq!(w.output::<u64>(&id).await, 45);
    for i in 0..10 {
        let entry = w
            .entry(&id, &format!("step#{i}"))
            .await
            .unwrap_or_else(|| panic!("step#{i} is journaled"));
        assert!(
            matches!(entry.state, EntryState::Succeeded { .. }),
            "{entry:?}"
        );
    }
    assert!(w.entry(&id, "step#10").await.is_none(), "exactly ten steps");
}

#[tokio::test]
async fn zero_steps_sum_to_zero() {
    let w = support::env();
    let id = w.start("chain", json!(0)).await;
    assert_eq!(w.output::<u64>(&id).await, 0);
    assert!(w.journal(&id).await.is_empty(), "no step ran");
}

#[tokio::test]
async fn an_input_that_is_not_a_count_is_refused_at_the_start() {
    let w = support::env();
    for bad in [json!(-1), json!("ten"), json!({"n": 3})] {
        let refused = w.try_start("chain", bad.clone(), None).await;
        assert!(
            matches!(refused, Err(EngineError::InvalidInput(_))),
            "{bad}: {refused:?}"
        );
    }
}

#[tokio::test]
async fn more_steps_than_the_limit_fail_the_run_without_running_any() {
    let w = support::env();
    let id = w
        .start("chain", json!(siesta_workflows::chain::MAX_STEPS + 1))
        .await;
    assert_eq!(w.status(&id).await, RunStatus::Failed);
    assert!(
        w.error(&id).await.message.contains("at most"),
        "the error names the limit"
    );
    assert!(w.journal(&id).await.is_empty());
}

#[tokio::test]
async fn steps_with_a_sleep_after_each_wake_per_timer_and_sum_the_same() {
    let w = support::env();
    let id = w.start("chain", json!({"steps": 3, "sleep_ms": 1})).await;
    let run = w.drive(&id).await;
    assert_eq!(run.status, RunStatus::Completed);
    assert_eq!(w.output::<u64>(&id).await, 3);
    for i in 0..3 {
        let sleep = w
            .entry(&id, &format!("sleep#{i}"))
            .await
            .unwrap_or_else(|| panic!("sleep#{i} is journaled"));
        assert!(
            matches!(sleep.state, EntryState::Succeeded { .. }),
            "{sleep:?}"
        );
    }
    // Each of the three timers suspended the run; each wake-up after the first continued
    // the suspended workflow from the replay cache, unless the test support turned it off.
    let stats = w.engine().replay_cache_stats();
    let hits = if w.config().replay_cache_entries > 0 {
        3
    } else {
        0
    };
    assert_eq!(
        (stats.hits, stats.continued, stats.misses),
        (hits, hits, 4 - hits),
        "{stats:?}"
    );
}

#[tokio::test]
async fn the_object_input_without_a_sleep_is_the_plain_chain() {
    let w = support::env();
    let id = w.start("chain", json!({"steps": 4})).await;
    assert_eq!(w.output::<u64>(&id).await, 6);
    assert!(w.entry(&id, "sleep#0").await.is_none());
}
