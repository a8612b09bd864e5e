//! What the request log says: each request's span names its route template, never a
//! credential carried by the request — a callback's token in a webhook's URL, an API
//! key, a webhook's signature, a query string.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

use std::collections::HashMap;
use std::io::Write;
use std::sync::{Arc, Mutex};

use axum::Router;
use http::{Method, StatusCode};
use serde_json::json;
use siesta::*;
use siesta_api::signature::{Scheme, Secret, sign};
use siesta_api::{ApiKeys, ControlApi, SourceConfig, WebhookReceiver, WebhookSource};
use tower::ServiceExt;

const API_KEY: &str = "sk_live_4f9a0c1e7b2d";
const SECRET: &str = "github-shared-secret-8c1d";

/// Everything the subscriber writes, as text.
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
    (status, serde_json::from_slice(&bytes).unwrap())
}

/// The tokens of the run's open callbacks, in the order they were created.
async fn callback_tokens(engine: &Engine, tenant: &TenantId, run: &RunId) -> Vec<String> {
    engine
        .backend()
        .store
        .timeline(tenant, run, 0, 100)
        .await
        .unwrap()
        .iter()
        .filter(|e| e.event_type == EventType::CallbackStarted)
        .map(|e| e.details["CallbackId"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn the_request_log_names_route_templates_and_never_a_token_key_or_signature() {
    let log = Captured::default();
    let writer = log.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    // The test's runtime is single-threaded: every task it drives logs here.
    let _guard = tracing::subscriber::set_default(subscriber);

    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::default());
    let embedded =
        siesta_embedded::EmbeddedBackend::open(dir.path().join("db"), clock.clone()).unwrap();
    let mut reg = Registry::new();
    reg.register("pay", |ctx: Context, _: serde_json::Value| async move {
        let paid = ctx.create_callback::<serde_json::Value>("payment").await?;
        let paid = paid.wait().await?;
        let shipped = ctx.create_callback::<serde_json::Value>("shipment").await?;
        let shipped = shipped.wait().await?;
        Ok(json!({"paid": paid, "shipped": shipped}))
    });
    let engine = Engine::new(
        embedded.backend(),
        clock.clone(),
        reg,
        EngineConfig::default(),
    );
    let tenant = TenantId::from("acme");
    let source = WebhookSource::from_config(SourceConfig {
        name: "carrier".into(),
        tenant: tenant.to_string(),
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
            tenant.clone(),
        )])))
        .webhooks(WebhookReceiver::new(siesta_api::DEFAULT_MAX_BODY).with_sources(vec![source]))
        .router();
    let bearer = vec![("authorization".to_owned(), format!("Bearer {API_KEY}"))];

    // Start with the API key; ask for the run with the key in a query string too.
    let (status, body) = send(
        &router,
        Method::POST,
        "/runs",
        &bearer,
        r#"{"workflow":"pay","input":null}"#,
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let run = RunId::from(body["id"].as_str().unwrap());
    let (status, _) = send(
        &router,
        Method::GET,
        &format!("/runs/{run}?api_key={API_KEY}"),
        &bearer,
        "",
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    engine.run_until_idle(10).await.unwrap();

    // The payment arrives at the callback's URL: the token is the credential.
    let payment = callback_tokens(&engine, &tenant, &run).await[0].clone();
    let (status, body) = send(
        &router,
        Method::POST,
        &format!("/hooks/{payment}"),
        &[],
        r#"{"amount":42}"#,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    engine.run_until_idle(10).await.unwrap();

    // The shipment arrives signed, from a configured source, naming its callback.
    let shipment = callback_tokens(&engine, &tenant, &run).await[1].clone();
    let payload = json!({"callback_id": shipment, "status": "delivered"}).to_string();
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
    engine.run_until_idle(10).await.unwrap();
    assert_eq!(
        engine.get_run(&tenant, &run).await.unwrap().status,
        RunStatus::Completed
    );

    // A token sent to no route at all is not logged either.
    let (status, _) = send(
        &router,
        Method::POST,
        &format!("/hooks/{payment}/extra"),
        &[],
        "{}",
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // Nor one sent with a method its route does not take.
    let (status, _) = send(&router, Method::GET, &format!("/hooks/{payment}"), &[], "").await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);

    let text = log.text();
    for secret in [
        payment.as_str(),
        shipment.as_str(),
        API_KEY,
        SECRET,
        signature.as_str(),
        signature.trim_start_matches("sha256="),
    ] {
        assert!(
            !text.contains(secret),
            "the log carries a credential ({secret}):\n{text}"
        );
    }
    for route in [
        "/runs",
        "/runs/{id}",
        "/hooks/{token}",
        "/hooks/sources/{source}",
        "unmatched",
    ] {
        let field = format!("route={route}");
        assert!(
            text.contains(&format!("{field} ")) || text.contains(&format!("{field}}}")),
            "the log names no {field}:\n{text}"
        );
    }
    assert!(
        !text.contains("path="),
        "the log names a request's path:\n{text}"
    );
}
