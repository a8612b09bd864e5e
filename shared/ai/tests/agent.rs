//! The agent loop on the embedded backend, time moved by hand: tools run as journaled
//! tool calls, a tool behind an approval waits for a person (granted, refused, timed
//! out), and the turn and token budgets fail the run with a clear error.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use siesta::*;
use siesta_ai::*;
use siesta_testing::TestEnv;

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
struct LookupOrder {
    order: String,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
struct Refund {
    order: String,
    amount: u32,
}

#[derive(Default)]
struct Effects {
    refunds: AtomicU32,
}

fn support_script() -> ScriptedModel {
    ScriptedModel::new(vec![
        tool_reply(
            "Let me look that order up.",
            "c1",
            "lookup_order",
            json!({"order": "A1"}),
        ),
        tool_reply(
            "I will ask for a refund.",
            "c2",
            "refund",
            json!({"order": "A1", "amount": 30}),
        ),
        text_reply("Done: see above."),
    ])
}

fn registry(
    model: Arc<ScriptedModel>,
    fx: Arc<Effects>,
    configure: fn(Agent) -> Agent,
) -> Registry {
    let mut r = Registry::new();
    r.register("agent", move |ctx: Context, input: Value| {
        let model: Arc<dyn Model> = model.clone();
        let fx = fx.clone();
        async move {
            let mut chat =
                Conversation::new("llm", "test-model").system("You are a support agent.");
            chat.push(Message::user(input["message"].as_str().unwrap_or_default()));
            let agent = Agent::new(chat)
                .tool(Tool::new(
                    "lookup_order",
                    "Look an order up",
                    |a: LookupOrder, _| async move {
                        Ok(json!({"order": a.order, "total": 30, "status": "delivered"}))
                    },
                ))
                .tool(
                    Tool::new("refund", "Refund an order", move |a: Refund, _| {
                        let fx = fx.clone();
                        async move {
                            fx.refunds.fetch_add(1, Ordering::SeqCst);
                            Ok(json!({"refunded": a.amount, "order": a.order}))
                        }
                    })
                    .needs_approval(),
                );
            let answer = configure(agent).run(&ctx, &model).await?;
            Ok(answer)
        }
    });
    r
}

fn plain(agent: Agent) -> Agent {
    agent
}

async fn approve(w: &TestEnv, id: &RunId, decision: Value) {
    w.engine()
        .deliver_event(w.tenant(), id, APPROVAL_EVENT, decision, None)
        .await
        .unwrap();
    w.run_until_idle().await;
}

/// What the model was last told about the refund.
fn refund_result(model: &ScriptedModel) -> Value {
    let last = model.requests().pop().unwrap();
    let told = last
        .messages
        .iter()
        .rev()
        .find(|m| m.role == Role::Tool && m.tool_call_id.as_deref() == Some("c2"))
        .expect("the refund's result was given to the model");
    serde_json::from_str(&told.content).unwrap()
}

#[tokio::test]
async fn an_approved_refund_runs_once_and_the_agent_answers() {
    let (model, fx) = (Arc::new(support_script()), Arc::new(Effects::default()));
    let w = TestEnv::new(registry(model.clone(), fx.clone(), plain));
    let id = w
        .start("agent", json!({"message": "Refund my order A1"}))
        .await;
    assert_eq!(
        w.status(&id).await,
        RunStatus::Waiting,
        "waits for the approval"
    );
    assert_eq!(fx.refunds.load(Ordering::SeqCst), 0);
    // The lookup ran as a journaled tool call before the wait.
    assert!(w.entry(&id, "lookup_order#0").await.is_some());

    approve(&w, &id, json!({"approved": true, "by": "alice"})).await;
    let answer: AgentAnswer = w.output(&id).await;
    assert_eq!(answer.answer, "Done: see above.");
    assert_eq!(answer.turns, 3);
    assert_eq!(fx.refunds.load(Ordering::SeqCst), 1);
    assert_eq!(
        answer.tool_calls[1].result,
        json!({"refunded": 30, "order": "A1"})
    );
    assert_eq!(
        model.calls(),
        3,
        "each model call made once, replays included"
    );
    assert!(answer.usage.total() > 0);
}

#[tokio::test]
async fn a_refused_refund_is_not_made_and_the_model_is_told_who_refused() {
    let (model, fx) = (Arc::new(support_script()), Arc::new(Effects::default()));
    let w = TestEnv::new(registry(model.clone(), fx.clone(), plain));
    let id = w
        .start("agent", json!({"message": "Refund my order A1"}))
        .await;
    approve(
        &w,
        &id,
        json!({"approved": false, "by": "bob", "comment": "outside policy"}),
    )
    .await;
    assert_eq!(w.status(&id).await, RunStatus::Completed);
    assert_eq!(fx.refunds.load(Ordering::SeqCst), 0);
    let told = refund_result(&model);
    assert_eq!(told["refused"], true);
    assert_eq!(told["by"], "bob");
    assert_eq!(told["comment"], "outside policy");
}

#[tokio::test]
async fn a_refund_nobody_approves_in_time_is_not_made() {
    let (model, fx) = (Arc::new(support_script()), Arc::new(Effects::default()));
    let w = TestEnv::new(registry(model.clone(), fx.clone(), |a| {
        a.approvals(APPROVAL_EVENT, Duration::from_secs(3600))
    }));
    let id = w
        .start("agent", json!({"message": "Refund my order A1"}))
        .await;
    w.advance(Duration::from_secs(3599)).await;
    assert_eq!(w.status(&id).await, RunStatus::Waiting);
    w.advance(Duration::from_secs(1)).await;
    assert_eq!(w.status(&id).await, RunStatus::Completed);
    assert_eq!(fx.refunds.load(Ordering::SeqCst), 0);
    assert_eq!(refund_result(&model)["refused"], true);
}

#[tokio::test]
async fn an_agent_that_never_answers_fails_the_run_when_its_turns_are_spent() {
    let model = Arc::new(ScriptedModel::new(vec![tool_reply(
        "Let me look again.",
        "c",
        "lookup_order",
        json!({"order": "A1"}),
    )]));
    let w = TestEnv::new(registry(model.clone(), Arc::default(), |a| a.max_turns(3)));
    let id = w.start("agent", json!({"message": "?"})).await;
    assert_eq!(w.status(&id).await, RunStatus::Failed);
    let error = w.error(&id).await;
    assert!(
        error.message.contains("turn budget (3 model calls)"),
        "{error}"
    );
    assert_eq!(error.cause.as_ref().unwrap().kind, BUDGET_SPENT);
    assert_eq!(model.calls(), 3);
}

#[tokio::test]
async fn an_agent_over_its_token_budget_fails_before_its_next_call() {
    let model = Arc::new(support_script());
    let w = TestEnv::new(registry(model.clone(), Arc::default(), |a| {
        a.token_budget(10)
    }));
    let id = w
        .start(
            "agent",
            json!({"message": "Refund my order A1, it arrived broken and late"}),
        )
        .await;
    assert_eq!(w.status(&id).await, RunStatus::Failed);
    assert!(w.error(&id).await.message.contains("token budget (10)"));
    assert_eq!(model.calls(), 1);
}

#[tokio::test]
async fn arguments_that_do_not_fit_the_tool_go_back_to_the_model_as_an_error() {
    let model = Arc::new(ScriptedModel::new(vec![
        tool_reply("Looking.", "c1", "lookup_order", json!({"number": 7})),
        tool_reply("Trying something else.", "c2", "fly_to_the_moon", json!({})),
        text_reply("Sorry, I cannot."),
    ]));
    let w = TestEnv::new(registry(model.clone(), Arc::default(), plain));
    let id = w.start("agent", json!({"message": "?"})).await;
    let answer: AgentAnswer = w.output(&id).await;
    assert_eq!(answer.answer, "Sorry, I cannot.");
    assert!(
        answer.tool_calls[0].result["error"]
            .as_str()
            .unwrap()
            .contains("invalid arguments")
    );
    assert!(
        answer.tool_calls[1].result["error"]
            .as_str()
            .unwrap()
            .contains("no tool named")
    );
    assert!(
        w.entry(&id, "lookup_order#0").await.is_none(),
        "a call that cannot be made is not journaled"
    );
}

#[test]
fn a_tool_shows_the_model_its_arguments_schema() {
    let tool = Tool::new("refund", "Refund an order", |a: Refund, _| async move {
        Ok(a.amount)
    });
    let schema = &tool.spec().parameters;
    assert_eq!(schema["properties"]["amount"]["type"], "integer");
    assert_eq!(schema["required"], json!(["order", "amount"]));
}
