//! The fixtures, in the exact shapes AWS sends, parsed as the functions' runtimes parse
//! them and handed to a router as the functions hand them (`siesta_lambda::http::answer`,
//! what `lambda_http::run` does) — no emulators needed.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

use aws_lambda_events::event::sqs::SqsEvent;
use axum::Router;
use axum::response::IntoResponse;
use base64::Engine as _;
use lambda_http::{Body, Request};
use serde_json::{Value, json};
use siesta::TenantId;
use siesta::ports::WakeUp;
use siesta_api::Authenticate;
use siesta_lambda::http::{JwtClaim, answer};

mod support;
use support::{fixture, http_event};

/// The tenant the JWT claim `claim` names in `req`, if any.
fn tenant(req: &Request, claim: &str) -> Option<TenantId> {
    let mut parts = http::Request::new(());
    *parts.extensions_mut() = req.extensions().clone();
    *parts.headers_mut() = req.headers().clone();
    let (parts, ()) = parts.into_parts();
    JwtClaim::new(claim).authenticate(&parts).ok()
}

/// What a handler behind the router sees of a request: method, path, query, headers and
/// the body's exact bytes (base64).
async fn as_a_handler_sees_it(req: Request) -> Value {
    let probe = Router::new().fallback(
        |method: http::Method, uri: http::Uri, headers: http::HeaderMap, body: bytes::Bytes| async move {
            axum::Json(json!({
                "method": method.as_str(),
                "path": uri.path(),
                "query": uri.query().unwrap_or_default(),
                "headers": headers
                    .iter()
                    .map(|(k, v)| (k.as_str().to_owned(), json!(v.to_str().unwrap_or_default())))
                    .collect::<serde_json::Map<_, _>>(),
                "body": base64::engine::general_purpose::STANDARD.encode(&body),
            }))
        },
    );
    let response = answer(&probe, req).await;
    let Body::Text(text) = response.body() else {
        panic!("a JSON text body")
    };
    serde_json::from_str(text).unwrap()
}

fn body_bytes(seen: &Value) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD
        .decode(seen["body"].as_str().unwrap())
        .unwrap()
}

/// Bytes no UTF-8 decoder would pass through unchanged.
const BINARY: &[u8] = &[
    0x7b, 0x22, 0xff, 0xfe, 0x00, 0xc3, 0x28, 0x80, 0x22, 0x7d, 0x0a,
];

#[tokio::test]
async fn an_http_api_request_reaches_the_router_with_the_tenant_from_the_jwt_claim() {
    let req = http_event("http-api-v2-start-order.json", &[("TENANT", "acme")]);
    assert_eq!(
        tenant(&req, "tenant").map(|t| t.to_string()),
        Some("acme".into())
    );
    assert_eq!(
        tenant(&req, "sub").map(|t| t.to_string()),
        Some("user-1".into())
    );
    assert_eq!(
        tenant(&req, "org"),
        None,
        "a claim the token does not carry"
    );
    let seen = as_a_handler_sees_it(req).await;
    assert_eq!(
        (seen["method"].as_str(), seen["path"].as_str()),
        (Some("POST"), Some("/runs"))
    );
    assert_eq!(seen["headers"]["idempotency-key"], "order-42");
    let body: Value = serde_json::from_slice(&body_bytes(&seen)).unwrap();
    assert_eq!(body["workflow"], "order");
}

#[tokio::test]
async fn a_request_without_the_claim_has_no_tenant_and_is_answered_401_in_json() {
    let req = http_event("http-api-v2-no-tenant.json", &[]);
    assert_eq!(tenant(&req, "tenant"), None);
    let guarded = Router::new().fallback(|parts: http::request::Parts| async move {
        JwtClaim::new("tenant")
            .authenticate(&parts)
            .map(|t| t.to_string())
    });
    let response = answer(&guarded, req).await;
    assert_eq!(response.status(), 401);
    assert_eq!(response.headers()["content-type"], "application/json");
    let Body::Text(text) = response.body() else {
        panic!("a JSON text body")
    };
    let body: Value = serde_json::from_str(text).unwrap();
    assert_eq!(body["error"]["code"], "unauthorized");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("'tenant'"),
        "{body}"
    );
}

#[tokio::test]
async fn a_base64_body_from_api_gateway_reaches_the_handler_as_the_exact_bytes_sent() {
    let encoded = base64::engine::general_purpose::STANDARD.encode(BINARY);
    let req = http_event(
        "http-api-v2-webhook-source.json",
        &[
            ("WEBHOOK_ID", "msg_1"),
            ("WEBHOOK_TIMESTAMP", "1795395610"),
            ("WEBHOOK_SIGNATURE", "v1,c2ln"),
            ("BODY_BASE64", &encoded),
        ],
    );
    assert!(matches!(req.body(), Body::Binary(_)), "decoded to binary");
    let seen = as_a_handler_sees_it(req).await;
    assert_eq!(seen["path"], "/hooks/sources/psp");
    assert_eq!(body_bytes(&seen), BINARY);
    assert_eq!(seen["headers"]["webhook-id"], "msg_1");
}

#[tokio::test]
async fn a_function_url_request_is_read_like_an_http_api_one_with_its_query_and_raw_body() {
    let encoded = base64::engine::general_purpose::STANDARD.encode(BINARY);
    let req = http_event(
        "function-url-webhook-token.json",
        &[("TOKEN", "cb_tok123"), ("BODY_BASE64", &encoded)],
    );
    assert_eq!(tenant(&req, "tenant"), None, "no authorizer behind a URL");
    let seen = as_a_handler_sees_it(req).await;
    assert_eq!(
        (seen["method"].as_str(), seen["path"].as_str()),
        (Some("POST"), Some("/hooks/cb_tok123"))
    );
    assert_eq!(seen["query"], "attempt=2");
    assert_eq!(body_bytes(&seen), BINARY);
}

#[tokio::test]
async fn a_router_answer_becomes_a_json_response_with_its_status_and_headers() {
    let router = Router::new().fallback(|| async {
        (
            http::StatusCode::CREATED,
            [("idempotent-replayed", "true")],
            axum::Json(json!({"id": "run_1"})),
        )
            .into_response()
    });
    let req = http_event("http-api-v2-start-order.json", &[("TENANT", "acme")]);
    let response = answer(&router, req).await;
    assert_eq!(response.status(), 201);
    assert_eq!(response.headers()["content-type"], "application/json");
    assert_eq!(response.headers()["idempotent-replayed"], "true");
    let Body::Text(text) = response.body() else {
        panic!("a JSON text body")
    };
    assert_eq!(text, r#"{"id":"run_1"}"#);
}

#[test]
fn an_sqs_batch_parses_and_its_body_is_a_wake_up() {
    let body = r#"{"tenant":"acme","run_id":"run_1","reason":"started"}"#;
    let json = fixture("sqs-batch.json")
        .replace("MESSAGE_ID", "059f36b4-87a3-44ab-83d2-661975830a7d")
        .replace("\"BODY\"", &serde_json::to_string(body).unwrap());
    let event: SqsEvent = serde_json::from_str(&json).unwrap();
    let record = &event.records[0];
    assert_eq!(
        record.message_id.as_deref(),
        Some("059f36b4-87a3-44ab-83d2-661975830a7d")
    );
    assert_eq!(record.attributes["ApproximateReceiveCount"], "1");
    let wake: WakeUp = serde_json::from_str(record.body.as_deref().unwrap()).unwrap();
    assert_eq!(wake.run_id.as_str(), "run_1");
}

#[test]
fn an_eventbridge_scheduled_event_is_what_the_sweep_takes() {
    let event: Value = serde_json::from_str(&fixture("eventbridge-scheduled.json")).unwrap();
    assert_eq!(event["detail-type"], "Scheduled Event");
    assert_eq!(event["source"], "aws.events");
    assert!(event["id"].is_string() && event["time"].is_string());
}
