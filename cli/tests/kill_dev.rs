//! `siesta dev` killed with SIGKILL while a `report` run is mid-way through its
//! notification; restarted on the same data dir, the run completes and the team's
//! endpoint received exactly one POST.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

use std::collections::HashMap;
use std::process::Child;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use serde_json::json;

mod common;

/// The team's endpoint: counts POSTs by idempotency key; the first one never answers,
/// so the run is caught mid-call when the server is killed.
#[derive(Clone, Default)]
struct Receiver {
    posts: Arc<Mutex<HashMap<String, u32>>>,
    first_seen: Arc<tokio::sync::Notify>,
}

async fn notify(State(r): State<Receiver>, headers: HeaderMap) -> StatusCode {
    let key = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let first = {
        let mut posts = r.posts.lock().unwrap();
        let n = posts.entry(key).or_insert(0);
        *n += 1;
        posts.values().sum::<u32>() == 1
    };
    if first {
        r.first_seen.notify_one();
        tokio::time::sleep(Duration::from_secs(3600)).await;
    }
    StatusCode::OK
}

async fn seen(State(r): State<Receiver>, Path(key): Path<String>) -> StatusCode {
    if r.posts.lock().unwrap().contains_key(&key) {
        StatusCode::OK
    } else {
        StatusCode::NOT_FOUND
    }
}

/// `siesta dev` on `data_dir`, its `report` notifying `notify_url` (configuration, as
/// a deployment sets it: the run's input cannot name a URL).
fn spawn_dev(data_dir: &std::path::Path, notify_url: &str) -> (Child, String) {
    common::spawn_dev(data_dir, |command| {
        command
            .env("SIESTA_NOTIFY_URL", notify_url)
            .env_remove("SIESTA_NOTIFY_TARGETS");
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_report_then_restart_completes_with_exactly_one_post() {
    let receiver = Receiver::default();
    let app = Router::new()
        .route("/notify", post(notify))
        .route("/notify/{key}", get(seen))
        .with_state(receiver.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let notify_url = format!("http://{}/notify", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let dir = tempfile::tempdir().unwrap();
    let (mut first, base) = spawn_dev(dir.path(), &notify_url);
    let run = siesta_client::Client::new(&base)
        .start_run(
            "report",
            &json!({"issue": "ENG-7"}),
            &siesta_client::StartOptions::default(),
        )
        .await
        .unwrap();
    let id = run.id;
    tokio::time::timeout(Duration::from_secs(30), receiver.first_seen.notified())
        .await
        .expect("the report reached its POST");
    first.kill().unwrap(); // SIGKILL
    first.wait().unwrap();

    let (mut second, base) = spawn_dev(dir.path(), &notify_url);
    let api = siesta_client::Client::new(&base);
    let mut done = None;
    for _ in 0..60 {
        if let siesta_client::RunOutcome::Finished(result) =
            api.run_result(&id, Some(1)).await.unwrap()
        {
            done = Some(result);
            break;
        }
    }
    second.kill().unwrap();
    second.wait().unwrap();
    let done = done.expect("the run finished within 60 s");
    assert_eq!(done.status, siesta::RunStatus::Completed, "{done:?}");
    assert_eq!(done.output.unwrap()["notified"], true);
    let posts = receiver.posts.lock().unwrap().clone();
    assert_eq!(posts.len(), 1, "one idempotency key: {posts:?}");
    assert_eq!(
        posts.values().sum::<u32>(),
        1,
        "exactly one POST: {posts:?}"
    );
}
