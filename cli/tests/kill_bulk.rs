//! A bulk restart survives SIGKILLs of the process running it: `report` runs fail for
//! good (their receiver answers 400), the receiver is fixed, one bulk restart by
//! workflow is started, and `siesta dev` is killed twice while the job is under way
//! (once a slice is recorded, then while restarted runs are being worked) and started
//! again on the same data dir. The job finishes; every run is restarted
//! exactly once (one `RunRestarted` each) and completes, its notice accepted exactly
//! once; the job counts each run once, as done.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

use std::collections::HashMap;
use std::process::Child;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use serde_json::json;
use siesta_client::{
    Client, RunOutcome, RunsActionFilter, RunsActionKind, RunsActionView, StartRunsAction,
};

mod common;

const RUNS: usize = 30;

/// The team's endpoint: refuses every notice (400) until fixed, then accepts each and
/// counts them by idempotency key.
#[derive(Clone, Default)]
struct Receiver {
    fixed: Arc<AtomicBool>,
    accepted: Arc<Mutex<HashMap<String, u32>>>,
}

async fn notify(State(r): State<Receiver>, headers: HeaderMap) -> StatusCode {
    if !r.fixed.load(Ordering::SeqCst) {
        return StatusCode::BAD_REQUEST;
    }
    let key = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    *r.accepted.lock().unwrap().entry(key).or_insert(0) += 1;
    StatusCode::OK
}

async fn seen(State(r): State<Receiver>, Path(key): Path<String>) -> StatusCode {
    if r.accepted.lock().unwrap().contains_key(&key) {
        StatusCode::OK
    } else {
        StatusCode::NOT_FOUND
    }
}

fn spawn_dev(data_dir: &std::path::Path, notify_url: &str) -> (Child, String) {
    common::spawn_dev(data_dir, |command| {
        command
            .env("SIESTA_NOTIFY_URL", notify_url)
            .env_remove("SIESTA_NOTIFY_TARGETS");
    })
}

/// SIGKILL `server`, then `siesta dev` again on the same data dir.
fn killed_and_started_again(
    mut server: Child,
    data_dir: &std::path::Path,
    notify_url: &str,
) -> (Child, Client) {
    server.kill().unwrap(); // SIGKILL
    server.wait().unwrap();
    let (server, base) = spawn_dev(data_dir, notify_url);
    (server, Client::new(&base))
}

/// The run's outcome once it finished (within a minute).
async fn finished(api: &Client, id: &str) -> siesta_client::RunResult {
    for _ in 0..60 {
        if let RunOutcome::Finished(result) = api.run_result(id, Some(1)).await.unwrap() {
            return result;
        }
    }
    panic!("run {id} did not finish within a minute");
}

/// Read the job until `done` holds of it (within a minute of real time: the server
/// works on its own clock; this only watches).
async fn job_until(
    api: &Client,
    id: &str,
    done: impl Fn(&RunsActionView) -> bool,
) -> RunsActionView {
    for _ in 0..600 {
        let job = api.runs_action(id).await.unwrap();
        if done(&job) {
            return job;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the job did not get there within a minute");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_restart_killed_twice_restarts_each_run_exactly_once() {
    let receiver = Receiver::default();
    let app = Router::new()
        .route("/notify", post(notify))
        .route("/notify/{key}", get(seen))
        .with_state(receiver.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let notify_url = format!("http://{}/notify", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let dir = tempfile::tempdir().unwrap();
    let (mut server, base) = spawn_dev(dir.path(), &notify_url);
    let mut api = Client::new(&base);
    let mut runs = Vec::new();
    for i in 0..RUNS {
        let run = api
            .start_run(
                "report",
                &json!({"issue": format!("ENG-{i}")}),
                &siesta_client::StartOptions::default(),
            )
            .await
            .unwrap();
        runs.push(run.id);
    }
    for id in &runs {
        let result = finished(&api, id).await;
        assert_eq!(result.status, siesta::RunStatus::Failed, "{result:?}");
    }

    // The fix, then one bulk restart at 10 runs a second: three slices, a second apart.
    receiver.fixed.store(true, Ordering::SeqCst);
    let job = api
        .start_runs_action(&StartRunsAction {
            action: RunsActionKind::Restart,
            // By workflow alone: the runs restarted before a kill are listed again, and
            // the job's token must answer them as done.
            filter: RunsActionFilter {
                workflow: Some("report".into()),
                ..RunsActionFilter::default()
            },
            from: None,
            as_new: false,
            repeat_tool_calls: false,
            rate: Some(10),
        })
        .await
        .unwrap();

    // The first kill once a slice is recorded; the second once runs of the next one are
    // being worked (whether the job is then within a slice or between two is up to the
    // timing: either way nothing may happen twice; tests/bulk_actions.rs in the core
    // kills one within a slice for certain).
    job_until(&api, &job.id, |j| j.done >= 1).await;
    (server, api) = killed_and_started_again(server, dir.path(), &notify_url);
    let watching = receiver.clone();
    job_until(&api, &job.id, move |_| {
        watching.accepted.lock().unwrap().len() >= RUNS / 2
    })
    .await;
    (server, api) = killed_and_started_again(server, dir.path(), &notify_url);
    let done = job_until(&api, &job.id, |j| j.status.is_finished()).await;
    for id in &runs {
        let result = finished(&api, id).await;
        assert_eq!(result.status, siesta::RunStatus::Completed, "{result:?}");
        let restarts = api
            .full_timeline(id)
            .await
            .unwrap()
            .iter()
            .filter(|e| e.event_type == siesta::EventType::RunRestarted)
            .count();
        assert_eq!(restarts, 1, "run {id} restarted once");
    }
    server.kill().unwrap();
    server.wait().unwrap();
    assert_eq!(
        (done.matched, done.done, done.skipped, done.failed),
        (RUNS as u64, RUNS as u64, 0, 0),
        "{done:?}"
    );
    let accepted = receiver.accepted.lock().unwrap().clone();
    assert_eq!(accepted.len(), RUNS, "a notice per run: {accepted:?}");
    assert!(
        accepted.values().all(|n| *n == 1),
        "each accepted once: {accepted:?}"
    );
}
