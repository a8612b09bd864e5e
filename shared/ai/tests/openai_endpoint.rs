//! The OpenAI-compatible client against a stub endpoint on loopback: what it sends,
//! how it reads a reply, a streamed reply and a refusal with `Retry-After`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};
use siesta_ai::*;

/// A request as the stub saw it: its `Authorization` header and its body.
type Request = (Option<String>, Value);

#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<Request>>>);

async fn serve(app: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}/v1")
}

fn stub(seen: Seen, answer: fn(&Value) -> Response) -> Router {
    Router::new().route(
        "/v1/chat/completions",
        post(move |headers: HeaderMap, body: axum::Json<Value>| {
            let seen = seen.clone();
            async move {
                let auth = headers
                    .get(header::AUTHORIZATION)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned);
                seen.0.lock().unwrap().push((auth, body.0.clone()));
                answer(&body.0)
            }
        }),
    )
}

fn request() -> ModelRequest {
    ModelRequest {
        model: "small".into(),
        messages: vec![Message::system("Be brief."), Message::user("Where is A1?")],
        tools: vec![ToolSpec {
            name: "lookup_order".into(),
            description: "Find an order".into(),
            parameters: json!({"type": "object", "properties": {"order": {"type": "string"}}}),
        }],
        max_tokens: Some(64),
        temperature: None,
    }
}

#[tokio::test]
async fn a_reply_is_read_with_its_usage_and_the_key_is_sent_as_a_bearer_token() {
    let seen = Seen::default();
    let base = serve(stub(seen.clone(), |_| {
        axum::Json(json!({
            "id": "c", "object": "chat.completion", "model": "small-2026",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "It ships today."},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 21, "completion_tokens": 4, "total_tokens": 25}
        }))
        .into_response()
    }))
    .await;
    let model = OpenAiCompatible::new(base, Some("sk-test".into()));
    let reply = model.complete(&request(), None).await.unwrap();
    assert_eq!(reply.message.content, "It ships today.");
    assert_eq!(
        reply.usage,
        Usage {
            input_tokens: 21,
            output_tokens: 4
        }
    );
    assert_eq!(reply.finish_reason, "stop");
    assert_eq!(reply.model, "small-2026");
    let (auth, body) = seen.0.lock().unwrap()[0].clone();
    assert_eq!(auth.as_deref(), Some("Bearer sk-test"));
    assert_eq!(body["model"], "small");
    assert_eq!(body["max_tokens"], 64);
    assert_eq!(
        body["messages"][1],
        json!({"role": "user", "content": "Where is A1?"})
    );
    assert_eq!(body["tools"][0]["function"]["name"], "lookup_order");
    assert!(body.get("stream").is_none());
}

#[tokio::test]
async fn a_rate_limit_says_when_to_come_back() {
    let base = serve(stub(Seen::default(), |_| {
        (
            StatusCode::TOO_MANY_REQUESTS,
            [(header::RETRY_AFTER, "3")],
            "slow down",
        )
            .into_response()
    }))
    .await;
    let error = OpenAiCompatible::new(base, None)
        .complete(&request(), None)
        .await
        .unwrap_err();
    assert_eq!(error.status, Some(429));
    assert!(error.retryable);
    assert_eq!(error.retry_after, Some(Duration::from_secs(3)));
    assert!(error.message.contains("slow down"));
}

#[tokio::test]
async fn a_streamed_reply_hands_each_piece_of_text_on_as_it_comes() {
    let seen = Seen::default();
    let base = serve(stub(seen.clone(), |_| {
        let chunks = [
            json!({"model": "small", "choices": [{"delta": {"role": "assistant", "content": "Let me "}, "finish_reason": null}]}),
            json!({"choices": [{"delta": {"content": "check."}, "finish_reason": null}]}),
            json!({"choices": [{"delta": {"tool_calls": [{"index": 0, "id": "c1", "type": "function",
                    "function": {"name": "lookup_order", "arguments": "{\"order\":\"A1\"}"}}]},
                    "finish_reason": "tool_calls"}]}),
            json!({"choices": [], "usage": {"prompt_tokens": 30, "completion_tokens": 9}}),
        ];
        let mut body = String::new();
        for c in chunks {
            body.push_str(&format!("data: {c}\n\n"));
        }
        body.push_str("data: [DONE]\n\n");
        ([(header::CONTENT_TYPE, "text/event-stream")], body).into_response()
    }))
    .await;
    let pieces = Arc::new(Mutex::new(Vec::<String>::new()));
    let sink_pieces = pieces.clone();
    let sink: TokenSink = Arc::new(move |t: &str| sink_pieces.lock().unwrap().push(t.to_owned()));
    let reply = OpenAiCompatible::new(base, None)
        .complete(&request(), Some(sink))
        .await
        .unwrap();
    assert_eq!(*pieces.lock().unwrap(), ["Let me ", "check."]);
    assert_eq!(reply.message.content, "Let me check.");
    assert_eq!(reply.message.tool_calls[0].name, "lookup_order");
    assert_eq!(
        reply.message.tool_calls[0].arguments,
        json!({"order": "A1"})
    );
    assert_eq!(reply.usage.output_tokens, 9);
    let body = seen.0.lock().unwrap()[0].1.clone();
    assert_eq!(body["stream"], true);
    assert_eq!(body["stream_options"]["include_usage"], true);
}

#[tokio::test]
async fn an_endpoint_that_is_not_there_is_a_retryable_transport_error() {
    let error = OpenAiCompatible::new("http://127.0.0.1:9/v1", None)
        .complete(&request(), None)
        .await
        .unwrap_err();
    assert_eq!(error.status, None);
    assert!(error.retryable);
}
