//! The fixtures, in the exact shapes AWS sends, parsed as the functions' runtimes parse
//! them and translated as the functions translate them — no emulators needed.

use aws_lambda_events::event::sqs::SqsEvent;
use base64::Engine as _;
use lambda_http::{Body, Request};
use serde_json::Value;
use siesta::ports::WakeUp;
use siesta_lambda::http::{from_api_response, no_tenant, tenant, to_api_request};

fn fixture(name: &str) -> String {
    let path = format!("{}/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn http_event(name: &str, replacements: &[(&str, &str)]) -> Request {
    let mut json = fixture(name);
    for (from, to) in replacements {
        json = json.replace(from, to);
    }
    lambda_http::request::from_str(&json).expect("an HTTP API v2 / function URL event")
}

/// Bytes no UTF-8 decoder would pass through unchanged.
const BINARY: &[u8] = &[
    0x7b, 0x22, 0xff, 0xfe, 0x00, 0xc3, 0x28, 0x80, 0x22, 0x7d, 0x0a,
];

#[test]
fn an_http_api_request_becomes_an_api_request_with_the_tenant_from_the_jwt_claim() {
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
    let api = to_api_request(req);
    assert_eq!((api.method.as_str(), api.path.as_str()), ("POST", "/runs"));
    assert_eq!(api.headers["idempotency-key"], "order-42");
    let body: Value = serde_json::from_slice(&api.body).unwrap();
    assert_eq!(body["workflow"], "order");
}

#[test]
fn a_request_without_the_claim_has_no_tenant_and_is_answered_401_in_json() {
    let req = http_event("http-api-v2-no-tenant.json", &[]);
    assert_eq!(tenant(&req, "tenant"), None);
    let response = no_tenant("tenant");
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

#[test]
fn a_base64_body_from_api_gateway_reaches_the_handler_as_the_exact_bytes_sent() {
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
    let api = to_api_request(req);
    assert_eq!(api.path, "/hooks/sources/psp");
    assert_eq!(&api.body[..], BINARY);
    assert_eq!(api.headers["webhook-id"], "msg_1");
}

#[test]
fn a_function_url_request_is_read_like_an_http_api_one_with_its_query_and_raw_body() {
    let encoded = base64::engine::general_purpose::STANDARD.encode(BINARY);
    let req = http_event(
        "function-url-webhook-token.json",
        &[("TOKEN", "cb_tok123"), ("BODY_BASE64", &encoded)],
    );
    assert_eq!(tenant(&req, "tenant"), None, "no authorizer behind a URL");
    let api = to_api_request(req);
    assert_eq!(
        (api.method.as_str(), api.path.as_str()),
        ("POST", "/hooks/cb_tok123")
    );
    assert_eq!(api.query, "attempt=2");
    assert_eq!(&api.body[..], BINARY);
}

#[test]
fn an_api_response_becomes_a_json_response_with_its_status_and_headers() {
    let mut answer = siesta_api::ApiResponse {
        status: http::StatusCode::CREATED,
        headers: http::HeaderMap::new(),
        body: serde_json::json!({"id": "run_1"}),
    };
    answer.headers.insert(
        "idempotent-replayed",
        http::HeaderValue::from_static("true"),
    );
    let response = from_api_response(answer);
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
