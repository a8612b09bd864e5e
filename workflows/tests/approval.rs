//! The `approval` workflow end to end on the embedded backend, time moved by hand.

mod support;

use std::time::Duration;

use serde_json::json;
use siesta::*;
use siesta_testing::TestEnv;
use siesta_workflows::approval::APPROVAL_TIMEOUT;

async fn decide(w: &TestEnv, id: &RunId, decision: serde_json::Value) {
    let outcome = w
        .engine()
        .deliver_event(w.tenant(), id, "approval", decision, None)
        .await
        .unwrap();
    assert!(matches!(
        outcome,
        siesta::ports::DeliverOutcome::Accepted(_)
    ));
    w.run_until_idle().await;
}

#[tokio::test]
async fn an_approved_change_executes_its_plan_step_by_step() {
    let w = support::env();
    let id = w
        .start(
            "approval",
            json!({"change": "rotate the database password"}),
        )
        .await;
    assert_eq!(w.run(&id).await.status, RunStatus::Waiting);
    assert!(w.entry(&id, "execute#0").await.is_none());

    decide(
        &w,
        &id,
        json!({"approved": true, "by": "alice", "comment": "go"}),
    )
    .await;
    let out = w.output::<serde_json::Value>(&id).await;
    assert_eq!(out["approved_by"], "alice");
    assert_eq!(out["comment"], "go");
    let executed = out["executed"].as_array().unwrap();
    assert_eq!(executed.len(), 3);
    for (i, item) in executed.iter().enumerate() {
        assert_eq!(item["step"], i + 1);
        assert_eq!(item["attempt"], 1);
    }
    assert!(
        executed[1]["action"]
            .as_str()
            .unwrap()
            .contains("apply 'rotate the database password'")
    );
    // Each plan item is its own journaled step.
    for n in 0..3 {
        let entry = w.entry(&id, &format!("execute#{n}")).await.unwrap();
        assert!(matches!(entry.state, EntryState::Succeeded { .. }));
    }
}

#[tokio::test]
async fn a_rejected_change_parks_the_run_with_who_and_why() {
    let w = support::env();
    let id = w
        .start("approval", json!({"change": "drop the audit table"}))
        .await;
    decide(
        &w,
        &id,
        json!({"approved": false, "by": "bob", "comment": "we need the audit trail"}),
    )
    .await;
    let run = w.run(&id).await;
    assert_eq!(run.status, RunStatus::Parked);
    let error = run.error.unwrap();
    assert_eq!(error.kind, "RetriesExhausted");
    assert!(
        error.message.contains("rejected by bob"),
        "{}",
        error.message
    );
    assert!(error.message.contains("we need the audit trail"));
    assert!(
        w.entry(&id, "execute#0").await.is_none(),
        "nothing executed"
    );
    // A parked run stays parked: time passing does not move it.
    w.advance(APPROVAL_TIMEOUT * 2).await;
    assert_eq!(w.run(&id).await.status, RunStatus::Parked);
}

#[tokio::test]
async fn no_decision_within_three_days_fails_the_run() {
    let w = support::env();
    let id = w
        .start("approval", json!({"change": "rotate the keys"}))
        .await;
    w.advance(APPROVAL_TIMEOUT - Duration::from_secs(60)).await;
    assert_eq!(w.run(&id).await.status, RunStatus::Waiting);

    w.advance(Duration::from_secs(60)).await;
    let run = w.run(&id).await;
    assert_eq!(run.status, RunStatus::Failed);
    assert_eq!(run.error.unwrap().kind, "EventTimedOut");
    assert!(w.entry(&id, "execute#0").await.is_none());

    // A decision after the timeout changes nothing.
    let late = w
        .engine()
        .deliver_event(
            w.tenant(),
            &id,
            "approval",
            json!({"approved": true, "by": "carol"}),
            None,
        )
        .await;
    w.run_until_idle().await;
    assert!(matches!(late, Err(EngineError::Gone(_))), "{late:?}");
    assert_eq!(w.run(&id).await.status, RunStatus::Failed);
}

#[tokio::test]
async fn a_decision_delivered_before_the_wait_is_kept() {
    let w = support::env();
    // Created, not yet run: the run has not reached its wait.
    let id = w
        .create(
            "approval",
            json!({"change": "revert the last deploy"}),
            None,
        )
        .await
        .unwrap();
    decide(&w, &id, json!({"approved": true, "by": "dana"})).await;
    let out = w.output::<serde_json::Value>(&id).await;
    assert_eq!(out["approved_by"], "dana");
    assert_eq!(out["comment"], serde_json::Value::Null);
    // A rollback's plan has no snapshot step.
    assert_eq!(out["executed"].as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn invalid_input_is_refused_at_start() {
    let w = support::env();
    let err = w
        .engine()
        .start(w.tenant(), "approval", json!({"change": 5}), None)
        .await
        .unwrap_err();
    assert!(matches!(err, EngineError::InvalidInput(_)), "{err}");
}
