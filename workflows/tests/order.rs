//! The `order` workflow end to end on the embedded backend, time moved by hand.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use siesta::*;

struct World {
    _dir: tempfile::TempDir,
    clock: Arc<ManualClock>,
    engine: Engine,
    tenant: TenantId,
}

impl World {
    fn new() -> World {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::default());
        let embedded =
            siesta_embedded::EmbeddedBackend::open(dir.path().join("db"), clock.clone()).unwrap();
        let engine = Engine::new(
            embedded.backend(),
            clock.clone(),
            siesta_workflows::registry(),
            EngineConfig::default(),
        );
        World {
            _dir: dir,
            clock,
            engine,
            tenant: TenantId::from("t"),
        }
    }

    async fn start(&self) -> RunId {
        let id = self
            .engine
            .start(
                &self.tenant,
                "order",
                json!({"item": "Lamp", "amount": 12.5}),
                None,
            )
            .await
            .unwrap()
            .id;
        self.engine.run_until_idle(100).await.unwrap();
        id
    }

    async fn callback(&self, id: &RunId) -> CallbackId {
        let timeline = self
            .engine
            .backend()
            .store
            .timeline(&self.tenant, id, 0, 100)
            .await
            .unwrap();
        let started = timeline
            .iter()
            .find(|e| e.event_type == EventType::CallbackStarted)
            .unwrap();
        CallbackId(started.details["CallbackId"].as_str().unwrap().to_owned())
    }

    async fn pay(&self, id: &RunId, status: &str) -> Run {
        let cb = self.callback(id).await;
        self.engine
            .complete_callback(
                &cb,
                None,
                Ok(json!({"status": status, "transaction_id": "txn_1"})),
                None,
            )
            .await
            .unwrap();
        self.engine.run_until_idle(100).await.unwrap();
        self.engine.get_run(&self.tenant, id).await.unwrap()
    }
}

#[tokio::test]
async fn completed_payment_ships_the_order() {
    let w = World::new();
    let id = w.start().await;
    assert_eq!(
        w.engine.get_run(&w.tenant, &id).await.unwrap().status,
        RunStatus::Waiting
    );
    let run = w.pay(&id, "COMPLETED").await;
    assert_eq!(run.status, RunStatus::Completed);
    let Some(Payload::Inline(out)) = run.output else {
        panic!("no output")
    };
    assert_eq!(out["transaction_id"], "txn_1");
    assert!(out["tracking"].as_str().unwrap().starts_with("TRK-"));
}

#[tokio::test]
async fn failed_payment_fails_the_order() {
    let w = World::new();
    let id = w.start().await;
    let run = w.pay(&id, "FAILED").await;
    assert_eq!(run.status, RunStatus::Failed);
    assert!(run.error.unwrap().message.contains("failed"));
}

#[tokio::test]
async fn payment_timeout_fails_the_order() {
    let w = World::new();
    let id = w.start().await;
    w.clock.advance(Duration::from_secs(3600));
    w.engine.sweep(10).await.unwrap();
    w.engine.run_until_idle(100).await.unwrap();
    let run = w.engine.get_run(&w.tenant, &id).await.unwrap();
    assert_eq!(run.status, RunStatus::Failed);
    assert_eq!(run.error.unwrap().kind, "CallbackTimedOut");
}

#[tokio::test]
async fn invalid_input_is_refused_at_start() {
    let w = World::new();
    let err = w
        .engine
        .start(&w.tenant, "order", json!({"item": 3}), None)
        .await
        .unwrap_err();
    assert!(matches!(err, EngineError::InvalidInput(_)), "{err}");
}
