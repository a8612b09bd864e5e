//! `hello` end to end on the test harness: an in-process engine on an in-memory store.

use serde_json::json;
use siesta::{EventType, RunStatus};
use siesta_testing::TestEnv;

#[tokio::test]
async fn hello_greets_by_name_through_one_step() {
    let env = TestEnv::new({{crate}}::workflows());
    let run = env.execute("hello", json!({"name": "Ada"})).await;
    assert_eq!(run.status, RunStatus::Completed, "{:?}", run.error);
    assert_eq!(env.output::<String>(&run.id).await, "Hello, Ada!");
    let greeted = env
        .timeline(&run.id)
        .await
        .iter()
        .filter(|e| e.event_type == EventType::StepSucceeded && e.name.as_deref() == Some("greet"))
        .count();
    assert_eq!(greeted, 1, "the greeting is made in one step");
}

#[tokio::test]
async fn a_start_without_a_name_is_refused() {
    let env = TestEnv::new({{crate}}::workflows());
    let refused = env.try_start("hello", json!({"nom": "Ada"}), None).await;
    assert!(refused.is_err(), "{refused:?}");
}
