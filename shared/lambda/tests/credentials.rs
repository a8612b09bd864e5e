//! No telemetry carries a credential: a run driven through every route that takes one
//! (a start and a read with an API key, an event, a callback completed by its token's
//! URL, one by the control API, one by a signed webhook from a configured source)
//! leaves neither the callback tokens, nor the API key, nor the signature or its secret
//! in the log lines (text and JSON, at every level) or in the exported spans. Its own
//! test binary: the subscriber is the process's.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

mod common;

use std::collections::HashMap;
use std::io::Write;
use std::sync::{Arc, Mutex};

use axum::Router;
use http::{Method, StatusCode};
use serde_json::json;
use siesta::*;
use siesta_api::signature::{Scheme, Secret, sign};
use siesta_api::{ApiKeys, ControlApi, SourceConfig, WebhookReceiver, WebhookSource};
use siesta_testing::TestEnv;
use tower::ServiceExt;
use tracing_subscriber::Layer;
use tracing_subscriber::layer::SubscriberExt;

const API_KEY: &str = "sk_live_9e1b77c0d4aa";
const SECRET: &str = "carrier-shared-secret-51f2";

/// Everything the log layers write, as text.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

async fn send(
    router: &Router,
    method: Method,
    uri: &str,
    headers: &[(String, String)],
    body: &str,
) -> (StatusCode, serde_json::Value) {
    let mut builder = http::Request::builder().method(method).uri(uri);
    for (k, v) in headers {
        builder = builder.header(k, v);
    }
    let request = builder
        .body(axum::body::Body::from(body.to_owned()))
        .unwrap();
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_log_line_or_exported_span_carries_a_token_key_or_signature() {
    let (url, received) = common::receiver().await;
    let log = Captured::default();
    let (text, json_lines) = (log.clone(), log.clone());
    let subscriber = tracing_subscriber::registry()
        .with(
            siesta_lambda::otel::layer_to(&url, "siesta-test")
                .with_filter(tracing_subscriber::filter::LevelFilter::INFO),
        )
        .with(
            tracing_subscriber::fmt::layer()
                .with_ansi(false)
                .with_writer(move || text.clone())
                .with_filter(tracing_subscriber::filter::LevelFilter::TRACE),
        )
        .with(
            tracing_subscriber::fmt::layer()
                .json()
                .with_current_span(true)
                .with_span_list(true)
                .with_writer(move || json_lines.clone())
                .with_filter(tracing_subscriber::filter::LevelFilter::TRACE),
        );
    tracing::subscriber::set_global_default(subscriber).unwrap();

    let mut reg = Registry::new();
    reg.register("ship", |ctx: Context, _: serde_json::Value| async move {
        let charged: u32 = ctx.step("charge", |_| async { Ok(42) }).await?;
        let paid = ctx.create_callback::<serde_json::Value>("payment").await?;
        let paid = paid.wait().await?;
        let go: serde_json::Value = ctx.wait_for_event("go").await?;
        let shipped = ctx.create_callback::<serde_json::Value>("shipment").await?;
        let shipped = shipped.wait().await?;
        let receipt = ctx.create_callback::<serde_json::Value>("receipt").await?;
        let receipt = receipt.wait().await?;
        Ok(json!({"charged": charged, "paid": paid, "go": go, "shipped": shipped, "receipt": receipt}))
    });
    let w = TestEnv::builder(reg).tenant("acme").build();
    let engine = w.engine();
    let source = WebhookSource::from_config(SourceConfig {
        name: "carrier".into(),
        tenant: "acme".into(),
        scheme: "github".into(),
        secrets: vec![SECRET.into()],
        correlation: String::new(),
        callback: Some("/callback_id".into()),
        event: None,
        tolerance_secs: None,
    })
    .unwrap();
    let router = ControlApi::new(engine.clone())
        .authenticate(ApiKeys::new(HashMap::from([(
            API_KEY.to_owned(),
            w.tenant().clone(),
        )])))
        .webhooks(WebhookReceiver::new(siesta_api::DEFAULT_MAX_BODY).with_sources(vec![source]))
        .router();
    let bearer = vec![("authorization".to_owned(), format!("Bearer {API_KEY}"))];

    let (status, body) = send(
        &router,
        Method::POST,
        "/runs",
        &bearer,
        r#"{"workflow":"ship","input":null}"#,
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let run = RunId::from(body["id"].as_str().unwrap());
    let (status, _) = send(&router, Method::GET, &format!("/runs/{run}"), &bearer, "").await;
    assert_eq!(status, StatusCode::OK);
    w.run_until_idle().await;

    // The payment arrives at its callback's URL: the token is the credential.
    let payment = w.callback(&run, "payment").await;
    let (status, body) = send(
        &router,
        Method::POST,
        &format!("/hooks/{payment}"),
        &[],
        r#"{"amount":42}"#,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    w.run_until_idle().await;

    let (status, body) = send(
        &router,
        Method::POST,
        &format!("/runs/{run}/events/go"),
        &bearer,
        r#"{"by":"ops"}"#,
    )
    .await;
    assert!(status.is_success(), "{status} {body}");
    w.run_until_idle().await;

    // The shipment arrives signed, from a configured source, naming its callback.
    let shipment = w.callback(&run, "shipment").await;
    let payload = json!({"callback_id": shipment.as_str(), "status": "delivered"}).to_string();
    let secret = Secret::parse(Scheme::GitHub, SECRET).unwrap();
    let signed = sign(Scheme::GitHub, &secret, "delivery-1", 0, payload.as_bytes());
    let signature = signed
        .iter()
        .find(|(name, _)| name == "x-hub-signature-256")
        .map(|(_, value)| value.clone())
        .unwrap();
    let (status, body) = send(
        &router,
        Method::POST,
        "/hooks/sources/carrier",
        &signed,
        &payload,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    w.run_until_idle().await;

    // The receipt is completed through the control API, by the callback's id.
    let receipt = w.callback(&run, "receipt").await;
    let (status, body) = send(
        &router,
        Method::POST,
        &format!("/callbacks/{receipt}/succeed"),
        &bearer,
        r#"{"ok":true}"#,
    )
    .await;
    assert!(status.is_success(), "{status} {body}");
    w.run_until_idle().await;
    assert_eq!(w.run(&run).await.status, RunStatus::Completed);

    // Credentials sent where no route takes them are not recorded either.
    let (status, _) = send(
        &router,
        Method::POST,
        &format!("/hooks/{payment}/extra?api_key={API_KEY}"),
        &bearer,
        "{}",
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = send(&router, Method::GET, &format!("/hooks/{payment}"), &[], "").await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    siesta_lambda::otel::flush().await;

    let logs = log.text();
    let spans = format!("{:?}", received.lock().unwrap());
    assert!(
        spans.contains("durable_operation") && spans.contains("/hooks/{token}"),
        "the spans were exported: {spans}"
    );
    assert!(logs.contains("/hooks/sources/{source}"), "logs: {logs}");
    for (what, secret) in [
        ("the payment's token", payment.as_str()),
        ("the shipment's token", shipment.as_str()),
        ("the receipt's token", receipt.as_str()),
        ("the API key", API_KEY),
        ("the source's secret", SECRET),
        ("the signature", signature.as_str()),
        (
            "the signature's digest",
            signature.trim_start_matches("sha256="),
        ),
    ] {
        assert!(!logs.contains(secret), "a log line carries {what}:\n{logs}");
        assert!(
            !spans.contains(secret),
            "an exported span carries {what}:\n{spans}"
        );
    }
}
