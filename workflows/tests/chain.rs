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
