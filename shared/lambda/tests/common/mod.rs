//! What the OTLP tests share: an in-process collector and a span's attributes. The
//! other crates' trace tests include this file too (`#[path]`), so there is one copy.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]
// Each test binary uses what it needs of this module.
#![allow(dead_code)]

use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;

/// An in-process collector: every span POSTed to `/v1/traces`, as protobuf.
pub(crate) async fn receiver() -> (String, Arc<Mutex<Vec<Span>>>) {
    let spans = Arc::new(Mutex::new(Vec::new()));
    let kept = spans.clone();
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |body: Bytes| {
            let kept = kept.clone();
            async move {
                let request = ExportTraceServiceRequest::decode(body).expect("an OTLP request");
                let mut kept = kept.lock().unwrap();
                for resource in request.resource_spans {
                    for scope in resource.scope_spans {
                        kept.extend(scope.spans);
                    }
                }
                // An empty ExportTraceServiceResponse: full success.
                (
                    [("content-type", "application/x-protobuf")],
                    Vec::<u8>::new(),
                )
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1/traces", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, spans)
}

pub(crate) fn attribute(span: &Span, key: &str) -> Option<String> {
    let value = span
        .attributes
        .iter()
        .find(|a| a.key == key)?
        .value
        .as_ref()?;
    Some(match value.value.as_ref()? {
        Value::StringValue(s) => s.clone(),
        Value::IntValue(i) => i.to_string(),
        Value::BoolValue(b) => b.to_string(),
        other => format!("{other:?}"),
    })
}

/// The process's collector, on a thread and runtime of its own (so it outlives each
/// test's runtime), with the global subscriber exporting to it; set up by the first
/// caller. Tests tell their spans apart by their run's trace id.
pub(crate) fn global_receiver() -> Arc<Mutex<Vec<Span>>> {
    use tracing_subscriber::Layer;
    use tracing_subscriber::layer::SubscriberExt;
    static RECEIVED: std::sync::OnceLock<Arc<Mutex<Vec<Span>>>> = std::sync::OnceLock::new();
    RECEIVED
        .get_or_init(|| {
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                runtime.block_on(async move {
                    tx.send(receiver().await).unwrap();
                    std::future::pending::<()>().await
                })
            });
            let (url, spans) = rx.recv().unwrap();
            let subscriber = tracing_subscriber::registry().with(
                siesta_lambda::otel::layer_to(&url, "siesta-test")
                    .with_filter(tracing_subscriber::filter::LevelFilter::INFO),
            );
            tracing::subscriber::set_global_default(subscriber).unwrap();
            spans
        })
        .clone()
}

/// The spans received so far in the trace `trace_id`.
pub(crate) fn in_trace(received: &Arc<Mutex<Vec<Span>>>, trace_id: &[u8]) -> Vec<Span> {
    received
        .lock()
        .unwrap()
        .iter()
        .filter(|s| s.trace_id == trace_id)
        .cloned()
        .collect()
}
