//! `GET /metrics` of the dev server's router, through `oneshot`: a run driven through a
//! step and a webhook shows in the series with the values expected, read by parsing
//! the text the route serves.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use axum::Router;
use http::{Method, StatusCode};
use serde_json::json;
use siesta::*;
use siesta_api::{ApiKeys, ControlApi, WebhookReceiver};
use siesta_app::metrics::Metrics;
use tower::ServiceExt;
use tracing_subscriber::layer::SubscriberExt;

const API_KEY: &str = "sk_test_metrics";

async fn send(
    router: &Router,
    method: Method,
    uri: &str,
    bearer: bool,
    body: &str,
) -> (StatusCode, String) {
    send_with(router, method, uri, bearer, &[], body).await
}

async fn send_with(
    router: &Router,
    method: Method,
    uri: &str,
    bearer: bool,
    headers: &[(&str, &str)],
    body: &str,
) -> (StatusCode, String) {
    let mut builder = http::Request::builder().method(method).uri(uri);
    if bearer {
        builder = builder.header("authorization", format!("Bearer {API_KEY}"));
    }
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    let request = builder
        .body(axum::body::Body::from(body.to_owned()))
        .unwrap();
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    (status, String::from_utf8(bytes.to_vec()).unwrap())
}

/// A series: its name and its labels, sorted.
type Series = (String, BTreeMap<String, String>);

/// Every sample of a Prometheus / OpenMetrics text exposition, by series.
fn parse(text: &str) -> HashMap<Series, f64> {
    let mut samples = HashMap::new();
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let (series, value) = line.rsplit_once(' ').expect("a sample: series and value");
        let (name, labels) = match series.split_once('{') {
            Some((name, rest)) => (name, rest.strip_suffix('}').expect("labels end in }")),
            None => (series, ""),
        };
        let labels = labels
            .split(',')
            .filter(|l| !l.is_empty())
            .map(|l| {
                let (k, v) = l.split_once('=').expect("label=value");
                (k.to_owned(), v.trim_matches('"').to_owned())
            })
            .collect();
        let value: f64 = value.parse().expect("a number");
        assert!(
            samples.insert((name.to_owned(), labels), value).is_none(),
            "one sample per series: {line}"
        );
    }
    samples
}

fn value(samples: &HashMap<Series, f64>, name: &str, labels: &[(&str, &str)]) -> f64 {
    let key = (
        name.to_owned(),
        labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    );
    *samples
        .get(&key)
        .unwrap_or_else(|| panic!("no series {key:?} in {samples:?}"))
}

#[tokio::test]
async fn metrics_count_a_runs_wakeups_its_step_its_webhook_verdicts_and_its_status() {
    let metrics = Metrics::new();
    // The test's runtime is single-threaded: every span the engine opens reaches this.
    let _guard =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(metrics.layer()));

    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::default());
    let embedded =
        siesta_embedded::EmbeddedBackend::open(dir.path().join("db"), clock.clone()).unwrap();
    let mut reg = Registry::new();
    reg.register("pay", |ctx: Context, _: serde_json::Value| async move {
        let charged: u32 = ctx.step("charge", |_| async { Ok(42) }).await?;
        let paid = ctx.create_callback::<serde_json::Value>("payment").await?;
        let paid = paid.wait().await?;
        Ok(json!({"charged": charged, "paid": paid}))
    });
    let engine = Engine::new(embedded.backend(), clock, reg, EngineConfig::default());
    let tenant = TenantId::from("acme");
    let api = ControlApi::new(engine.clone())
        .authenticate(ApiKeys::new(HashMap::from([(
            API_KEY.to_owned(),
            tenant.clone(),
        )])))
        .webhooks(WebhookReceiver::new(siesta_api::DEFAULT_MAX_BODY))
        .router();
    let router = metrics.serve(
        api,
        engine.clone(),
        vec![tenant.clone()],
        Some(embedded.clone()),
    );

    // Started twice with one Idempotency-Key: the second is answered from the first.
    let start = async || {
        send_with(
            &router,
            Method::POST,
            "/runs",
            true,
            &[("idempotency-key", "order-1")],
            r#"{"workflow":"pay","input":null}"#,
        )
        .await
    };
    let (status, body) = start().await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, again) = start().await;
    assert!(status.is_success(), "{status} {again}");
    let run = serde_json::from_str::<serde_json::Value>(&body).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let run = RunId::from(run.as_str());
    engine.run_until_idle(10).await.unwrap();

    let token = engine
        .backend()
        .store
        .timeline(&tenant, &run, 0, 100)
        .await
        .unwrap()
        .iter()
        .find(|e| e.event_type == EventType::CallbackStarted)
        .map(|e| e.details["CallbackId"].as_str().unwrap().to_owned())
        .unwrap();
    // The provider delivers twice: the second is acknowledged as a duplicate.
    for _ in 0..2 {
        let (status, body) = send_with(
            &router,
            Method::POST,
            &format!("/hooks/{token}"),
            false,
            &[("webhook-id", "delivery-1")],
            r#"{"amount":42}"#,
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    let (status, _) = send(
        &router,
        Method::POST,
        "/hooks/cb_no_such_callback",
        false,
        "{}",
    )
    .await;
    assert!(!status.is_success(), "{status}");
    engine.run_until_idle(10).await.unwrap();
    assert_eq!(
        engine.get_run(&tenant, &run).await.unwrap().status,
        RunStatus::Completed
    );
    metrics.sweep(&engine.sweep(100).await.unwrap());

    // No API key, as for /healthz.
    let (status, text) = send(&router, Method::GET, "/metrics", false, "").await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert!(!text.contains(&token), "no metric names a callback's token");
    let samples = parse(&text);
    let runs = |status: &str| {
        value(
            &samples,
            "siesta_runs",
            &[("status", status), ("tenant", "acme")],
        )
    };
    assert_eq!(runs("completed"), 1.0);
    assert_eq!(runs("waiting"), 0.0);
    assert_eq!(runs("pending"), 0.0);
    assert_eq!(
        value(
            &samples,
            "siesta_operation_duration_seconds_count",
            &[("kind", "step"), ("outcome", "succeeded")],
        ),
        1.0,
        "the step ran once; its replay opened no span"
    );
    for outcome in ["waiting", "completed"] {
        assert_eq!(
            value(
                &samples,
                "siesta_wakeup_duration_seconds_count",
                &[("outcome", outcome)],
            ),
            1.0,
            "{outcome}"
        );
    }
    assert_eq!(
        value(
            &samples,
            "siesta_webhooks_total",
            &[("verdict", "accepted")]
        ),
        1.0
    );
    assert_eq!(
        value(
            &samples,
            "siesta_webhooks_total",
            &[("verdict", "duplicate")]
        ),
        1.0
    );
    assert_eq!(
        value(&samples, "siesta_webhooks_total", &[("verdict", "refused")]),
        1.0
    );
    assert_eq!(
        value(
            &samples,
            "siesta_sweep_actions_total",
            &[("action", "woken")]
        ),
        0.0
    );
    assert_eq!(value(&samples, "siesta_idempotent_replays_total", &[]), 1.0);
    assert_eq!(value(&samples, "siesta_runs_due", &[]), 0.0);
    for state in ["visible", "in_flight", "delayed"] {
        assert_eq!(
            value(&samples, "siesta_queue_depth", &[("state", state)]),
            0.0,
            "{state}: every wake-up handled and acknowledged"
        );
    }
    assert_eq!(value(&samples, "siesta_queue_lag_milliseconds", &[]), 0.0);
    assert_eq!(value(&samples, "siesta_wakeup_lag_milliseconds", &[]), 0.0);
}

#[tokio::test]
async fn metrics_count_each_limits_holders_and_waiters_per_key() {
    let metrics = Metrics::new();
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::default());
    let embedded =
        siesta_embedded::EmbeddedBackend::open(dir.path().join("db"), clock.clone()).unwrap();
    let mut reg = Registry::new();
    reg.register("chat", |ctx: Context, _: serde_json::Value| async move {
        let done: serde_json::Value = ctx.wait_for_event("done").await?;
        Ok(done)
    })
    .limit(
        RunLimit::new("per-customer", 1)
            .key_from_input("/customer")
            .workflow("chat"),
    );
    let engine = Engine::new(embedded.backend(), clock, reg, EngineConfig::default());
    let tenant = TenantId::from("acme");
    for customer in ["c-1", "c-1", "c-1", "c-2"] {
        engine
            .start(&tenant, "chat", json!({ "customer": customer }), None)
            .await
            .unwrap();
    }
    let router = metrics.serve(
        axum::Router::new(),
        engine.clone(),
        vec![tenant.clone()],
        Some(embedded.clone()),
    );
    let (status, text) = send(&router, Method::GET, "/metrics", false, "").await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let samples = parse(&text);
    let of = |name: &str, key: &str| {
        value(
            &samples,
            name,
            &[("key", key), ("limit", "per-customer"), ("tenant", "acme")],
        )
    };
    assert_eq!(of("siesta_limit_holders", "c-1"), 1.0);
    assert_eq!(of("siesta_limit_waiters", "c-1"), 2.0);
    assert_eq!(of("siesta_limit_holders", "c-2"), 1.0);
    assert_eq!(of("siesta_limit_waiters", "c-2"), 0.0);
}
