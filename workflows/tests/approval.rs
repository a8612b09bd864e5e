//! The `approval` workflow end to end on the embedded backend, time moved by hand.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

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

/// The `approval` workflow as it was before the `notify_approvers` step was added
/// behind `patched`: plan, wait for the decision, execute.
fn approval_before_the_patch() -> Registry {
    let mut reg = Registry::new();
    reg.register(
        "approval",
        |ctx: Context, input: serde_json::Value| async move {
            let change = input["change"].as_str().unwrap_or_default().to_owned();
            let subject = change.clone();
            let plan: Vec<String> = ctx
                .step("plan", move |_| async move {
                    Ok(vec![
                        format!("snapshot what '{subject}' touches"),
                        format!("apply '{subject}'"),
                        format!("verify '{subject}' and close the change"),
                    ])
                })
                .await?;
            let decision: serde_json::Value = ctx
                .wait_for_event("approval")
                .timeout(APPROVAL_TIMEOUT)
                .await?;
            let mut executed = Vec::new();
            for (i, action) in plan.into_iter().enumerate() {
                let n = i as u32 + 1;
                let done: serde_json::Value = ctx
                    .step("execute", move |call| async move {
                        Ok(json!({"step": n, "action": action, "attempt": call.attempt()}))
                    })
                    .await?;
                executed.push(done);
            }
            Ok(json!({"change": change, "approved_by": decision["by"], "comment": null, "executed": executed}))
        },
    );
    reg
}

#[tokio::test]
async fn a_run_waiting_before_the_notify_patch_finishes_without_it_and_a_new_one_runs_it() {
    // A run started on the code before the patch, waiting for its approval.
    let w = TestEnv::new(approval_before_the_patch());
    let before = w
        .start(
            "approval",
            json!({"change": "rotate the database password"}),
        )
        .await;
    assert_eq!(w.status(&before).await, RunStatus::Waiting);

    // The patched code is deployed; a run started now takes the new path.
    w.deploy(siesta_workflows::registry());
    let after = w
        .start("approval", json!({"change": "rotate the api keys"}))
        .await;
    assert_eq!(w.status(&after).await, RunStatus::Waiting);
    let marker = w.entry(&after, "patch:notify-approvers#0").await.unwrap();
    assert_eq!(marker.kind, OperationKind::Patch);
    assert!(w.entry(&after, "notify_approvers#0").await.is_some());
    assert!(
        w.timeline(&after)
            .await
            .iter()
            .any(|e| e.event_type == EventType::MarkerRecorded)
    );
    assert!(w.entry(&before, "notify_approvers#0").await.is_none());

    // Both complete on the patched code: the old one down the old path.
    for id in [&before, &after] {
        decide(&w, id, json!({"approved": true, "by": "alice"})).await;
        assert_eq!(
            w.status(id).await,
            RunStatus::Completed,
            "{:?}",
            w.run(id).await.error
        );
        assert_eq!(
            w.output::<serde_json::Value>(id).await["executed"]
                .as_array()
                .unwrap()
                .len(),
            3
        );
    }
    assert!(w.entry(&before, "notify_approvers#0").await.is_none());
    assert!(w.entry(&before, "patch:notify-approvers#0").await.is_none());

    // The replay check agrees: both runs replay on the patched code.
    for id in [&before, &after] {
        assert!(
            w.engine()
                .check_replay(w.tenant(), id)
                .await
                .unwrap()
                .is_clean()
        );
    }
}
