//! The `chain` workflow on the embedded backend: N sequential steps, the sum as output.

mod support;

use serde_json::json;
use siesta::*;
use support::World;

#[tokio::test]
async fn ten_steps_each_return_their_index_and_the_output_is_their_sum() {
    let w = World::new();
    let id = w.start("chain", json!(10)).await;
    assert_eq!(w.output(&id).await, json!(45));
    let journal = w.journal(&id).await;
    for i in 0..10 {
        let entry = w
            .entry(&id, &format!("step#{i}"))
            .await
            .unwrap_or_else(|| panic!("step#{i} in {journal:?}"));
        assert!(
            matches!(entry.state, EntryState::Succeeded { .. }),
            "{entry:?}"
        );
    }
    assert!(w.entry(&id, "step#10").await.is_none(), "exactly ten steps");
}

#[tokio::test]
async fn zero_steps_sum_to_zero() {
    let w = World::new();
    let id = w.start("chain", json!(0)).await;
    assert_eq!(w.output(&id).await, json!(0));
    assert!(w.journal(&id).await.is_empty(), "no step ran");
}

#[tokio::test]
async fn an_input_that_is_not_a_count_is_refused_at_the_start() {
    let w = World::new();
    for bad in [json!(-1), json!("ten"), json!({"n": 3})] {
        let refused = w.engine.start(&w.tenant, "chain", bad.clone(), None).await;
        assert!(refused.is_err(), "{bad} was accepted");
    }
}

#[tokio::test]
async fn more_steps_than_the_limit_fail_the_run_without_running_any() {
    let w = World::new();
    let id = w
        .start("chain", json!(siesta_workflows::chain::MAX_STEPS + 1))
        .await;
    let run = w.run(&id).await;
    assert_eq!(run.status, RunStatus::Failed);
    assert!(
        run.error.unwrap().message.contains("at most"),
        "the error names the limit"
    );
    assert!(w.journal(&id).await.is_empty());
}
