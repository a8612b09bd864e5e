//! Model calls as journaled operations, on the embedded backend with the clock moved
//! by hand: asked once, never again after the reply is journaled, retried after the
//! `Retry-After` the endpoint gave, and a journal that grows by each turn's new
//! messages only.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use siesta::*;
use siesta_ai::*;
use siesta_testing::TestEnv;

/// Two calls with an event between them, so the second wake-up replays the first.
fn two_turns(model: Arc<ScriptedModel>) -> Registry {
    let mut r = Registry::new();
    r.register("support", move |ctx: Context, input: Value| {
        let model: Arc<dyn Model> = model.clone();
        async move {
            let mut chat = Conversation::new("llm", "test-model").system("You help customers.");
            chat.push(Message::user(input["message"].as_str().unwrap_or_default()));
            let first = chat.ask(&ctx, &model).await?;
            let more: Value = ctx.wait_for_event("more").await?;
            chat.push(Message::user(more["message"].as_str().unwrap_or_default()));
            let second = chat.ask(&ctx, &model).await?;
            Ok(
                json!({"first": first.reply.content, "second": second.reply.content,
                      "tokens": chat.usage().total()}),
            )
        }
    });
    r
}

fn scripted() -> ScriptedModel {
    ScriptedModel::new(vec![
        text_reply("Your order A1 ships tomorrow."),
        text_reply("You are welcome."),
    ])
}

#[tokio::test]
async fn a_journaled_reply_is_never_asked_for_again() {
    let model = Arc::new(scripted());
    let w = TestEnv::new(two_turns(model.clone()));
    let id = w
        .start("support", json!({"message": "Where is my order?"}))
        .await;
    w.run_until_idle().await;
    assert_eq!(w.status(&id).await, RunStatus::Waiting);
    assert_eq!(model.calls(), 1);

    // The event wakes the run: its body replays the first call from the journal.
    w.engine()
        .deliver_event(w.tenant(), &id, "more", json!({"message": "Thanks!"}), None)
        .await
        .unwrap();
    w.run_until_idle().await;
    let out: Value = w.output(&id).await;
    assert_eq!(out["first"], "Your order A1 ships tomorrow.");
    assert_eq!(out["second"], "You are welcome.");
    assert_eq!(
        model.calls(),
        2,
        "the first call was replayed, not made again"
    );

    // Each call is its own kind in the timeline, with what a reader needs.
    let calls: Vec<TimelineEvent> = w
        .timeline(&id)
        .await
        .into_iter()
        .filter(|e| {
            e.sub_type == Some(SubType::ModelCall) && e.event_type == EventType::StepSucceeded
        })
        .collect();
    assert_eq!(calls.len(), 2);
    let record = &calls[1].details["Result"];
    assert_eq!(record["model"], "test-model");
    assert_eq!(record["finish_reason"], "stop");
    assert!(record["usage"]["input_tokens"].as_u64().unwrap() > 0);
    assert!(record["latency_ms"].is_u64());
    // The second call records only what is new: the user's follow-up.
    assert_eq!(record["asked"]["since"], 3);
    assert_eq!(
        record["asked"]["messages"],
        json!([{"role": "user", "content": "Thanks!"}])
    );
    assert_eq!(out["tokens"].as_u64(), Some(record_tokens(&calls)));
}

fn record_tokens(calls: &[TimelineEvent]) -> u64 {
    calls
        .iter()
        .map(|e| {
            let u = &e.details["Result"]["usage"];
            u["input_tokens"].as_u64().unwrap() + u["output_tokens"].as_u64().unwrap()
        })
        .sum()
}

#[tokio::test]
async fn a_crash_between_the_reply_and_its_journal_write_asks_once_more_and_never_after() {
    let model = Arc::new(scripted());
    let w = TestEnv::new(two_turns(model.clone()));
    let id = w
        .create("support", json!({"message": "Where is my order?"}), None)
        .await
        .unwrap();
    // The engine dies as it writes the first call's reply to the journal.
    w.crash_before_write(1);
    w.run_until_idle().await;
    assert!(w.has_crashed());
    assert_eq!(model.calls(), 1);
    assert!(
        w.entry(&id, "llm#0").await.is_none(),
        "the reply never reached the journal"
    );

    w.restart();
    let run = w.drive(&id).await;
    assert_eq!(run.status, RunStatus::Waiting);
    assert_eq!(model.calls(), 2, "the lost reply is asked for once more");
    assert!(w.entry(&id, "llm#0").await.is_some());

    // Once journaled, a crash and any number of replays ask nothing again.
    w.restart();
    w.engine()
        .deliver_event(w.tenant(), &id, "more", json!({"message": "Thanks!"}), None)
        .await
        .unwrap();
    w.run_until_idle().await;
    assert_eq!(w.status(&id).await, RunStatus::Completed);
    assert_eq!(model.calls(), 3);
}

#[tokio::test]
async fn a_rate_limited_call_waits_what_retry_after_says_then_succeeds() {
    let model = Arc::new(scripted().fail_call(
        1,
        ModelError::status(429, Some(Duration::from_secs(7)), "rate limited"),
    ));
    let w = TestEnv::new(two_turns(model.clone()));
    let id = w
        .start("support", json!({"message": "Where is my order?"}))
        .await;
    w.run_until_idle().await;
    assert_eq!(model.calls(), 1);
    let failed = w
        .timeline(&id)
        .await
        .into_iter()
        .find(|e| e.event_type == EventType::StepFailed)
        .expect("the 429 is in the timeline");
    assert_eq!(failed.sub_type, Some(SubType::ModelCall));
    assert_eq!(failed.details["Error"]["kind"], "http_429");
    assert_eq!(failed.details["NextAttemptDelayMs"], 7000);

    w.advance(Duration::from_secs(6)).await;
    assert_eq!(model.calls(), 1, "not before the endpoint said");
    w.advance(Duration::from_secs(1)).await;
    assert_eq!(model.calls(), 2);
    assert_eq!(
        w.status(&id).await,
        RunStatus::Waiting,
        "the call succeeded; the run waits for its event"
    );
}

#[tokio::test]
async fn a_refused_request_fails_the_call_without_retrying() {
    let model = Arc::new(scripted().fail_call(1, ModelError::status(400, None, "bad request")));
    let w = TestEnv::new(two_turns(model.clone()));
    let id = w.start("support", json!({"message": "hi"})).await;
    w.run_until_idle().await;
    assert_eq!(model.calls(), 1);
    assert_eq!(w.status(&id).await, RunStatus::Failed);
    assert!(w.error(&id).await.to_string().contains("http_400"));
}

/// 50 turns, each a user message of the same size: what the journal holds per turn.
#[tokio::test]
async fn the_journal_grows_by_each_turns_new_messages_not_the_whole_prompt() {
    const TURNS: usize = 50;
    let model = Arc::new(ScriptedModel::new(vec![text_reply(
        "Noted; anything else?",
    )]));
    let mut r = Registry::new();
    let m = model.clone();
    r.register("chatty", move |ctx: Context, _: Value| {
        let model: Arc<dyn Model> = m.clone();
        async move {
            let mut chat = Conversation::new("llm", "test-model").system("Be brief.");
            for turn in 0..TURNS {
                chat.push(Message::user(format!(
                    "{turn:03} {}",
                    "tell me more ".repeat(15)
                )));
                chat.ask(&ctx, &model).await?;
            }
            Ok(chat.calls())
        }
    });
    let w = TestEnv::new(r);
    let id = w.start("chatty", json!({})).await;
    w.run_until_idle().await;
    assert_eq!(w.status(&id).await, RunStatus::Completed);

    let mut records = Vec::new();
    let mut bytes = Vec::new();
    for n in 0..TURNS {
        let entry = w.entry(&id, &format!("llm#{n}")).await.unwrap();
        bytes.push(serde_json::to_vec(&entry).unwrap().len());
        if let EntryState::Succeeded { value, .. } = &entry.state {
            let call: ModelCall = serde_json::from_value(w.payload(value).await).unwrap();
            records.push(call);
        }
    }
    // Turn 2 onwards adds the same amount: one user message and one reply.
    let (second, last) = (bytes[1], bytes[TURNS - 1]);
    assert!(
        last <= second + 16,
        "turn 50 journals {last} bytes, turn 2 {second}: not constant"
    );
    // The whole prompts cost what the journal would hold if each call kept its prompt.
    let sent: usize = model
        .requests()
        .iter()
        .map(|r| serde_json::to_vec(&r.messages).unwrap().len())
        .sum();
    let journaled: usize = bytes.iter().sum();
    assert!(
        journaled * 10 < sent,
        "journal {journaled} bytes vs prompts {sent} bytes"
    );
    // And every prompt the model was sent is rebuilt from the journal alone.
    let rebuilt = prompts(&records);
    for (request, prompt) in model.requests().iter().zip(&rebuilt) {
        assert_eq!(&request.messages, prompt);
    }
    eprintln!(
        "model calls: {TURNS} turns, {} journal bytes per turn at turn {TURNS} ({journaled} in all) vs {} prompt bytes sent at turn {TURNS} ({sent} in all)",
        last,
        serde_json::to_vec(&model.requests()[TURNS - 1].messages)
            .unwrap()
            .len()
    );
}

/// A model that streams its text, then fails its first call after the text went out.
struct FailsAfterStreaming {
    inner: ScriptedModel,
    failed: std::sync::atomic::AtomicBool,
}

#[async_trait::async_trait]
impl Model for FailsAfterStreaming {
    async fn complete(
        &self,
        request: &ModelRequest,
        tokens: Option<TokenSink>,
    ) -> Result<ModelReply, ModelError> {
        let reply = self.inner.complete(request, tokens).await?;
        if !self.failed.swap(true, std::sync::atomic::Ordering::SeqCst) {
            return Err(ModelError::status(
                503,
                Some(Duration::from_secs(1)),
                "dropped mid-stream",
            ));
        }
        Ok(reply)
    }
}

fn streaming(model: Arc<dyn Model>) -> Registry {
    let mut r = Registry::new();
    r.register("streamer", move |ctx: Context, _: Value| {
        let model = model.clone();
        async move {
            let mut chat = Conversation::new("llm", "test-model").stream_to("tokens");
            chat.push(Message::user("Say hello"));
            let call = chat.ask(&ctx, &model).await?;
            let _: Value = ctx.wait_for_event("done").await?;
            Ok(call.reply.content)
        }
    });
    r
}

#[tokio::test]
async fn a_calls_text_is_streamed_once_and_a_failed_attempts_text_is_voided() {
    let model = Arc::new(FailsAfterStreaming {
        inner: ScriptedModel::new(vec![text_reply("Hello there, Ada.")]),
        failed: Default::default(),
    });
    let w = TestEnv::new(streaming(model.clone()));
    let id = w.start("streamer", json!({})).await;
    // Attempt 1 streamed its text, then failed: its chunks are still there, voided.
    let raw = w.stream(&id, "tokens").await;
    assert!(
        raw.iter()
            .any(|c| c.chunk.attempt == Some(1) && c.chunk.data == json!("Hello "))
    );
    assert!(
        w.stream_data(&id, "tokens").await.is_empty(),
        "attempt 1's text is void"
    );

    w.advance(Duration::from_secs(1)).await;
    assert_eq!(w.status(&id).await, RunStatus::Waiting);
    assert_eq!(
        w.stream_data(&id, "tokens").await,
        [json!("Hello "), json!("there, "), json!("Ada.")],
        "the text of the attempt that succeeded, once"
    );
    let before = w.stream(&id, "tokens").await.len();
    // A replay of the call publishes nothing more.
    w.engine()
        .deliver_event(w.tenant(), &id, "done", json!({}), None)
        .await
        .unwrap();
    w.run_until_idle().await;
    assert_eq!(w.status(&id).await, RunStatus::Completed);
    assert_eq!(
        w.stream(&id, "tokens").await.len(),
        before,
        "the replay published nothing"
    );
}
