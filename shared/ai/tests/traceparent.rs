//! A model call carries its attempt's trace context: the OpenAI-compatible client sends
//! the `traceparent` of the step it runs in, so an endpoint that traces joins the run's
//! trace. Its own test binary: the exporter and the subscriber are the process's.

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::http::HeaderMap;
use axum::routing::post;
use serde_json::{Value, json};
use siesta::telemetry::{Exporter, RunSpan, TraceParent, WaitSpan};
use siesta::*;
use siesta_ai::*;
use siesta_testing::TestEnv;

const ATTEMPT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

/// An exporter that knows one span's context: any `durable_operation` span's is
/// [`ATTEMPT`], every other span has none.
struct Fixed;

impl Exporter for Fixed {
    fn set_parent(&self, _: &tracing::Span, _: TraceParent) {}
    fn add_link(&self, _: &tracing::Span, _: TraceParent) {}
    fn context(&self, span: &tracing::Span) -> Option<TraceParent> {
        span.metadata()
            .filter(|m| m.name() == siesta::telemetry::OPERATION_SPAN)
            .and_then(|_| TraceParent::parse(ATTEMPT))
    }
    fn wait_ended(&self, _: &tracing::Span, _: &WaitSpan) {}
    fn run_finished(&self, _: &RunSpan) {}
}

#[tokio::test]
async fn a_model_call_sends_its_attempts_traceparent() {
    tracing::subscriber::set_global_default(tracing_subscriber::registry()).unwrap();
    assert!(siesta::telemetry::set_exporter(Fixed));

    let seen: Arc<Mutex<Vec<Option<String>>>> = Arc::default();
    let kept = seen.clone();
    let app = Router::new().route(
        "/v1/chat/completions",
        post(move |headers: HeaderMap| {
            let kept = kept.clone();
            async move {
                kept.lock().unwrap().push(
                    headers
                        .get("traceparent")
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_owned),
                );
                axum::Json(json!({
                    "id": "c", "object": "chat.completion", "model": "small",
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi."},
                                 "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
                }))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}/v1", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let model: Arc<dyn Model> = Arc::new(OpenAiCompatible::new(base.clone(), None));
    let mut reg = Registry::new();
    reg.register("chat", move |ctx: Context, _: Value| {
        let model = model.clone();
        async move {
            let mut chat = Conversation::new("llm", "small");
            chat.push(Message::user("Hello"));
            Ok(chat.ask(&ctx, &model).await?.reply.content)
        }
    });
    let w = TestEnv::new(reg);
    let id = w.start("chat", json!(null)).await;
    w.run_until_idle().await;
    assert_eq!(w.status(&id).await, RunStatus::Completed);
    assert_eq!(*seen.lock().unwrap(), [Some(ATTEMPT.to_owned())]);

    // Outside a step there is no attempt to name: nothing is sent.
    let direct = OpenAiCompatible::new(base, None);
    let request = ModelRequest {
        model: "small".into(),
        messages: vec![Message::user("Hello")],
        tools: Vec::new(),
        max_tokens: None,
        temperature: None,
    };
    direct.complete(&request, None).await.unwrap();
    assert_eq!(seen.lock().unwrap().last(), Some(&None));
}
