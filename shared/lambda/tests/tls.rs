//! An `https://` collector endpoint is reached over TLS, by both protocols the app
//! binaries export with: the first bytes a collector at such an endpoint receives are a
//! TLS handshake record, not a plaintext HTTP/1 request or HTTP/2 preface (without TLS
//! in the build, the gRPC exporter refuses to build and the HTTP one never connects).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

use std::time::Duration;

use opentelemetry::trace::{Tracer, TracerProvider};
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::trace::SdkTracerProvider;

/// A TLS record carrying a handshake message (the ClientHello) starts with 0x16 and a
/// 3.x protocol version.
fn is_tls_handshake(first: &[u8]) -> bool {
    first.len() >= 2 && first[0] == 0x16 && first[1] == 0x03
}

/// Ends one span through `provider`, whose simple processor exports it at once.
fn export_one_span(provider: &SdkTracerProvider) {
    let tracer = provider.tracer("tls-test");
    tracer.in_span("one", |_| {});
    let _ = provider.force_flush();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_endpoint_is_exported_to_over_tls_with_http_protobuf() {
    let (port, received) = first_bytes_received().await;
    // The blocking HTTP client is built and used off the runtime's workers.
    tokio::task::spawn_blocking(move || {
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_endpoint(format!("https://127.0.0.1:{port}/v1/traces"))
            .with_timeout(Duration::from_secs(3))
            .build()
            .expect("an HTTPS endpoint is accepted");
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(exporter)
            .build();
        export_one_span(&provider);
    })
    .await
    .unwrap();
    let first = received.await.unwrap();
    assert!(
        is_tls_handshake(&first),
        "a TLS handshake, not plaintext: {first:?}"
    );
}

/// A collector's port, and the first three bytes a client writes to it, or a failure
/// when none connects and writes within 10 s.
async fn first_bytes_received() -> (u16, tokio::task::JoinHandle<[u8; 3]>) {
    use tokio::io::AsyncReadExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let received = tokio::spawn(async move {
        tokio::time::timeout(Duration::from_secs(10), async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut first = [0u8; 3];
            socket.read_exact(&mut first).await.unwrap();
            first
        })
        .await
        .expect("the exporter connected and wrote within 10 s")
    });
    (port, received)
}

#[cfg(feature = "grpc")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_endpoint_is_exported_to_over_tls_with_grpc() {
    let (port, received) = first_bytes_received().await;
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(format!("https://127.0.0.1:{port}"))
        .with_timeout(Duration::from_secs(3))
        .build()
        .expect("an HTTPS endpoint is accepted: TLS is in the build");
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter)
        .build();
    // The simple processor blocks on the export: off the runtime's workers.
    tokio::task::spawn_blocking(move || export_one_span(&provider))
        .await
        .unwrap();
    let first = received.await.unwrap();
    assert!(
        is_tls_handshake(&first),
        "a TLS handshake, not an HTTP/2 preface: {first:?}"
    );
}
