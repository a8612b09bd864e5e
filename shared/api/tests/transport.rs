//! The dev transport (`siesta_api::server::serve`) on a real socket, with its timeouts
//! made small: slow bodies, silent and idle connections are closed within their limits
//! while `/healthz` keeps answering, and the connection cap holds extra connections
//! back until a slot frees. Every wait is bounded by a guard far above the limits.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use siesta::*;
use siesta_api::server::{Limits, serve};
use siesta_api::{ApiKeys, ControlApi};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const GUARD: Duration = Duration::from_secs(10);

async fn server(limits: Limits) -> (SocketAddr, tempfile::TempDir, tokio::task::JoinHandle<()>) {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::default());
    let embedded =
        siesta_embedded::EmbeddedBackend::open(dir.path().join("db"), clock.clone()).unwrap();
    let engine = Engine::new(
        embedded.backend(),
        clock,
        Registry::new(),
        EngineConfig::default(),
    );
    let router = ControlApi::new(engine)
        .authenticate(ApiKeys::default())
        .router();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        serve(listener, router, limits).await.unwrap();
    });
    (addr, dir, task)
}

/// Read until the server closes the connection; what it sent.
async fn until_closed(stream: &mut TcpStream) -> String {
    let mut out = Vec::new();
    tokio::time::timeout(GUARD, stream.read_to_end(&mut out))
        .await
        .expect("the server closes the connection")
        .ok();
    String::from_utf8_lossy(&out).into_owned()
}

async fn healthz(addr: SocketAddr) -> String {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    until_closed(&mut stream).await
}

#[tokio::test]
async fn slow_bodies_silent_and_idle_connections_are_closed_while_healthz_stays_200() {
    let limits = Limits {
        header_read: Duration::from_millis(300),
        body: Duration::from_millis(300),
        idle: Duration::from_millis(300),
        max_connections: 64,
    };
    let (addr, _dir, task) = server(limits).await;
    let mut silent = Vec::new();
    let mut slow_head = Vec::new();
    let mut slow_body = Vec::new();
    for _ in 0..5 {
        silent.push(TcpStream::connect(addr).await.unwrap());
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n")
            .await
            .unwrap();
        slow_head.push(s);
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(
            b"POST /runs HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{\"work",
        )
        .await
        .unwrap();
        slow_body.push(s);
    }
    // The server answers others while those hang.
    assert!(healthz(addr).await.starts_with("HTTP/1.1 200"));

    for s in &mut slow_body {
        let answer = until_closed(s).await;
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
        assert!(answer.contains(r#""code":"request_timeout""#), "{answer}");
    }
    for s in silent.iter_mut().chain(&mut slow_head) {
        let answer = until_closed(s).await;
        assert!(!answer.contains("200 OK"), "{answer}");
    }
    assert!(healthz(addr).await.starts_with("HTTP/1.1 200"));
    task.abort();
}

#[tokio::test]
async fn a_kept_alive_connection_left_idle_is_closed_after_the_idle_timeout() {
    let limits = Limits {
        // Longer than the guard: only the idle timeout can close the connection.
        header_read: Duration::from_secs(60),
        idle: Duration::from_millis(300),
        ..Limits::default()
    };
    let (addr, _dir, task) = server(limits).await;
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let answer = until_closed(&mut stream).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains(r#"{"status":"ok"}"#), "{answer}");
    task.abort();
}

#[tokio::test]
async fn over_the_connection_cap_a_connection_waits_until_an_idle_one_is_closed() {
    let limits = Limits {
        header_read: Duration::from_secs(60),
        idle: Duration::from_millis(300),
        max_connections: 2,
        ..Limits::default()
    };
    let (addr, _dir, task) = server(limits).await;
    let holders = [
        TcpStream::connect(addr).await.unwrap(),
        TcpStream::connect(addr).await.unwrap(),
    ];
    let answer = healthz(addr).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    // The third was served only after the server had closed an idle holder: its close is
    // already there to read, with no wait (without the cap both would still be open).
    let closed = holders
        .iter()
        .filter(|h| matches!(h.try_read(&mut [0u8; 64]), Ok(0)))
        .count();
    assert!(
        closed >= 1,
        "the third connection was served while both slots were held"
    );
    task.abort();
}
