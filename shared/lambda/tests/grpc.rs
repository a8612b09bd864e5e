//! `OTEL_EXPORTER_OTLP_PROTOCOL=grpc` exports over gRPC: a run in a process whose
//! environment asks for it sends its spans to an OTLP/gRPC collector (opentelemetry-
//! proto's `TraceService`, served in-process by tonic), and the flush a Lambda role
//! makes before its invocation returns has sent them when it returns, from a
//! single-threaded runtime like a Lambda function's. The environment is the
//! process's, so the run is in a child process: this test binary again, with the
//! settings; it prints its run's trace id and exits right after the flush.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

use std::sync::{Arc, Mutex};

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::trace::v1::Span;
use serde_json::json;
use siesta::telemetry::trace_id_hex;
use siesta::*;
use siesta_testing::TestEnv;
use tracing_subscriber::Layer;
use tracing_subscriber::layer::SubscriberExt;

const CHILD: &str = "SIESTA_GRPC_TEST_CHILD";
const TEST: &str = "a_run_exports_its_spans_over_grpc_when_the_environment_asks_for_it";

/// An in-process OTLP/gRPC collector: every span exported to it.
#[derive(Clone, Default)]
struct Collector(Arc<Mutex<Vec<Span>>>);

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut kept = self.0.lock().unwrap();
        for resource in request.into_inner().resource_spans {
            for scope in resource.scope_spans {
                kept.extend(scope.spans);
            }
        }
        // No partial_success: all of it was taken.
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

#[tokio::test]
async fn a_run_exports_its_spans_over_grpc_when_the_environment_asks_for_it() {
    if std::env::var_os(CHILD).is_some() {
        return child().await;
    }
    let collector = Collector::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let server = tonic::transport::Server::builder()
        .add_service(TraceServiceServer::new(collector.clone()))
        .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener));
    let server = tokio::spawn(server);
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", TEST, "--nocapture"])
            .env(CHILD, "1")
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)
            .env("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
            .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            .env_remove("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    server.abort();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let trace_id = stdout
        .lines()
        .find_map(|l| l.strip_prefix("trace_id="))
        .unwrap_or_else(|| panic!("the child names its run's trace: {stdout}"));

    let spans = collector.0.lock().unwrap().clone();
    let in_run: Vec<&Span> = spans
        .iter()
        .filter(|s| hex(&s.trace_id) == trace_id)
        .collect();
    let names: Vec<&str> = in_run.iter().map(|s| s.name.as_str()).collect();
    assert!(
        names.contains(&"durable_execution"),
        "the wake-up's span came over gRPC: {names:?}"
    );
    assert_eq!(
        names.iter().filter(|n| **n == "durable_operation").count(),
        2,
        "a span per step attempt: {names:?}"
    );
}

/// The run, in the child process: its subscriber is built from the environment as the
/// app binaries build theirs, and it flushes as a Lambda role does, then returns.
async fn child() {
    // Built on a thread with no Tokio runtime, as a binary may before it starts its
    // own: the exporter does not borrow its caller's.
    let layer = std::thread::spawn(|| {
        siesta_lambda::otel::layer_from_env::<tracing_subscriber::Registry>("siesta-test")
    })
    .join()
    .unwrap()
    .expect("the environment asks for export");
    let subscriber = tracing_subscriber::registry()
        .with(layer.with_filter(tracing_subscriber::filter::LevelFilter::INFO));
    tracing::subscriber::set_global_default(subscriber).unwrap();
    let mut reg = Registry::new();
    reg.register("two", |ctx: Context, _: serde_json::Value| async move {
        let a: u32 = ctx.step("a", |_| async { Ok(1) }).await?;
        let b: u32 = ctx.step("b", |_| async { Ok(2) }).await?;
        Ok(a + b)
    });
    let w = TestEnv::new(reg);
    let id = w.start("two", json!(null)).await;
    w.run_until_idle().await;
    assert_eq!(w.status(&id).await, RunStatus::Completed);
    siesta_lambda::otel::flush().await;
    println!("trace_id={}", trace_id_hex(w.tenant(), &id));
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
