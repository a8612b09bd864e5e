//! The `order` workflow end to end on the test harness, time moved by hand.

use std::time::Duration;

use serde_json::json;
use siesta::*;
use siesta_testing::TestEnv;

async fn start(env: &TestEnv) -> RunId {
    env.start("order", json!({"item": "Lamp", "amount": 12.5}))
        .await
}

async fn pay(env: &TestEnv, id: &RunId, status: &str) -> Run {
    let callback = env.callback(id, "payment").await;
    env.complete_callback(
        &callback,
        json!({"status": status, "transaction_id": "txn_1"}),
    )
    .await;
    env.run(id).await
}

#[tokio::test]
async fn completed_payment_ships_the_order() {
    let env = TestEnv::new(siesta_workflows::registry());
    let id = start(&env).await;
    assert_eq!(env.status(&id).await, RunStatus::Waiting);
    let run = pay(&env, &id, "COMPLETED").await;
    assert_eq!(run.status, RunStatus::Completed);
    let out: serde_json::Value = env.output(&id).await;
    assert_eq!(out["transaction_id"], "txn_1");
    assert!(out["tracking"].as_str().unwrap().starts_with("TRK-"));
}

#[tokio::test]
async fn failed_payment_fails_the_order() {
    let env = TestEnv::new(siesta_workflows::registry());
    let id = start(&env).await;
    let run = pay(&env, &id, "FAILED").await;
    assert_eq!(run.status, RunStatus::Failed);
    assert!(run.error.unwrap().message.contains("failed"));
}

#[tokio::test]
async fn payment_timeout_fails_the_order() {
    let env = TestEnv::new(siesta_workflows::registry());
    let id = start(&env).await;
    env.advance(Duration::from_secs(3600)).await;
    let run = env.run(&id).await;
    assert_eq!(run.status, RunStatus::Failed);
    assert_eq!(run.error.unwrap().kind, "CallbackTimedOut");
}

#[tokio::test]
async fn invalid_input_is_refused_at_start() {
    let env = TestEnv::new(siesta_workflows::registry());
    let err = env
        .try_start("order", json!({"item": 3}), None)
        .await
        .unwrap_err();
    assert!(matches!(err, EngineError::InvalidInput(_)), "{err}");
}
