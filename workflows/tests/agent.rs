//! The `agent` example end to end on the embedded backend with its built-in fake
//! model: it looks the order up, waits for a person to approve the refund, and
//! answers; a refusal is told to the customer; a question without a refund needs no
//! approval.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

use std::sync::Arc;

use serde_json::json;
use siesta::*;
use siesta_ai::{APPROVAL_EVENT, AgentAnswer};
use siesta_testing::TestEnv;
use siesta_workflows::{SupportDemoModel, agent_with};

fn env() -> TestEnv {
    let mut registry = Registry::new();
    registry.register("agent", agent_with(Arc::new(SupportDemoModel)));
    TestEnv::new(registry)
}

async fn decide(w: &TestEnv, id: &RunId, decision: serde_json::Value) {
    w.engine()
        .deliver_event(w.tenant(), id, APPROVAL_EVENT, decision, None)
        .await
        .unwrap();
    w.run_until_idle().await;
}

#[tokio::test]
async fn a_refund_waits_for_its_approval_then_the_agent_answers() {
    let w = env();
    let id = w
        .start("agent", json!({"customer": "Ada", "message": "My espresso machine arrived broken, I want a refund."}))
        .await;
    assert_eq!(w.status(&id).await, RunStatus::Waiting);
    assert!(w.entry(&id, "lookup_order#0").await.is_some());
    assert!(
        w.entry(&id, "refund#0").await.is_none(),
        "not before a person approves"
    );

    decide(&w, &id, json!({"approved": true, "by": "alice"})).await;
    let answer: AgentAnswer = w.output(&id).await;
    assert!(
        answer
            .answer
            .starts_with("Your refund of $249 for order A-"),
        "{}",
        answer.answer
    );
    assert_eq!(answer.turns, 3);
    assert_eq!(answer.tool_calls.len(), 2);
    assert_eq!(answer.tool_calls[1].tool, "refund");
    assert_eq!(answer.tool_calls[1].result["refunded"], 249);
    // Every model call is its own operation in the timeline.
    let calls = w
        .timeline(&id)
        .await
        .into_iter()
        .filter(|e| {
            e.sub_type == Some(SubType::ModelCall) && e.event_type == EventType::StepSucceeded
        })
        .count();
    assert_eq!(calls, 3);
}

#[tokio::test]
async fn a_refused_refund_is_told_to_the_customer() {
    let w = env();
    let id = w
        .start(
            "agent",
            json!({"customer": "Bo", "message": "Broken on arrival. Refund please."}),
        )
        .await;
    decide(
        &w,
        &id,
        json!({"approved": false, "by": "carol", "comment": "needs photos"}),
    )
    .await;
    let answer: AgentAnswer = w.output(&id).await;
    assert!(
        answer.answer.contains("was not approved by carol"),
        "{}",
        answer.answer
    );
    assert!(
        w.entry(&id, "refund#0").await.is_none(),
        "the refund was never made"
    );
}

#[tokio::test]
async fn a_question_without_a_refund_needs_no_approval() {
    let w = env();
    let id = w
        .start(
            "agent",
            json!({"customer": "Cy", "message": "Where is my order?"}),
        )
        .await;
    let answer: AgentAnswer = w.output(&id).await;
    assert!(
        answer.answer.contains("delivered 3 days ago"),
        "{}",
        answer.answer
    );
    assert_eq!(answer.turns, 2);
}
