//! `hello` end to end on an in-process engine over a temporary embedded store.

use std::sync::Arc;

use serde_json::json;
use siesta::{Engine, EngineConfig, EventType, ManualClock, Payload, RunStatus, TenantId};

#[tokio::test]
async fn hello_greets_by_name_through_one_step() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::default());
    let store = siesta_embedded::EmbeddedBackend::open(dir.path().join("db"), clock.clone())
        .unwrap()
        .backend();
    let engine = Engine::new(
        store,
        clock,
        {{crate}}::workflows(),
        EngineConfig::default(),
    );
    let tenant = TenantId::from("default");

    let run = engine
        .start(&tenant, "hello", json!({"name": "Ada"}), None)
        .await
        .unwrap();
    engine.run_until_idle(100).await.unwrap();

    let run = engine.get_run(&tenant, &run.id).await.unwrap();
    assert_eq!(run.status, RunStatus::Completed, "{:?}", run.error);
    assert_eq!(run.output, Some(Payload::Inline(json!("Hello, Ada!"))));
    let timeline = engine
        .backend()
        .store
        .timeline(&tenant, &run.id, 0, 100)
        .await
        .unwrap();
    let greeted = timeline
        .iter()
        .filter(|e| e.event_type == EventType::StepSucceeded && e.name.as_deref() == Some("greet"))
        .count();
    assert_eq!(greeted, 1, "the greeting is made in one step");
}

#[tokio::test]
async fn a_start_without_a_name_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::default());
    let store = siesta_embedded::EmbeddedBackend::open(dir.path().join("db"), clock.clone())
        .unwrap()
        .backend();
    let engine = Engine::new(store, clock, {{crate}}::workflows(), EngineConfig::default());
    let refused = engine
        .start(&TenantId::from("default"), "hello", json!({"nom": "Ada"}), None)
        .await;
    assert!(refused.is_err(), "{refused:?}");
}
