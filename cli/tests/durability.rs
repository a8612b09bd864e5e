//! Nothing acknowledged is lost: `siesta dev` (embedded, default durability) is killed
//! with SIGKILL right after it acknowledged run starts and completed runs; restarted on
//! the same data dir, every acknowledged start is there and completes, and every run
//! acknowledged as completed is still completed with its output.
//!
//! A process kill is what a test can do; that an OS crash or a power loss loses nothing
//! acknowledged follows from the fsync before every acknowledgement (WAL with
//! `synchronous=FULL`, group commit), which `siesta bench` counts per step.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

use serde_json::json;
use siesta::RunStatus;
use siesta_client::{Client, RunOutcome, RunView, StartOptions};

mod common;
use common::spawn_dev;

/// Runs completed (acknowledged with their outputs) before the kill.
const COMPLETED: u64 = 20;
/// Runs whose start was acknowledged just before the kill.
const STARTED: u64 = 30;

async fn start(api: &Client, n: u64, wait: bool) -> RunView {
    let options = StartOptions {
        wait_secs: wait.then_some(60),
        ..StartOptions::default()
    };
    api.start_run("chain", &json!(n), &options).await.unwrap()
}

fn sum_below(n: u64) -> u64 {
    n * n.saturating_sub(1) / 2
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_after_acknowledgements_loses_nothing_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let (mut first, base) = spawn_dev(dir.path(), |_| {});
    let api = Client::new(&base);

    let mut completed = Vec::new();
    for i in 0..COMPLETED {
        let run = start(&api, 5 + i, true).await;
        assert_eq!(run.status, RunStatus::Completed, "{run:?}");
        completed.push((run.id, 5 + i));
    }
    let mut started = Vec::new();
    for i in 0..STARTED {
        let run = start(&api, 10 + i, false).await;
        started.push((run.id, 10 + i));
    }
    first.kill().unwrap(); // SIGKILL, right after the last acknowledgement
    first.wait().unwrap();

    let (mut second, base) = spawn_dev(dir.path(), |_| {});
    let api = Client::new(&base);
    for (id, n) in &completed {
        let run = api.get_run(id).await.unwrap();
        assert_eq!(run.status, RunStatus::Completed, "{run:?}");
        assert_eq!(run.output, Some(json!(sum_below(*n))), "{run:?}");
    }
    for (id, n) in &started {
        let RunOutcome::Finished(run) = api.run_result(id, Some(60)).await.unwrap() else {
            panic!("an acknowledged start did not finish within 60 s: {id}");
        };
        assert_eq!(
            run.status,
            RunStatus::Completed,
            "an acknowledged start: {run:?}"
        );
        assert_eq!(run.output, Some(json!(sum_below(*n))), "{run:?}");
    }
    second.kill().unwrap();
    second.wait().unwrap();
}
