//! The `report` workflow reading `SIESTA_NOTIFY_URL` from the environment. Environment
//! variables are process-global (and setting one needs `unsafe`, which the workspace
//! forbids), so the test runs its half that needs the variable in a child process: this
//! same test binary, running only the ignored `child` test, with the variable set or
//! removed.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

mod support;

use std::process::Command;

use serde_json::json;
use support::Receiver;

/// Set in the child so that `child` runs only when started by `parent`.
const CHILD_MARKER: &str = "SIESTA_WORKFLOWS_ENV_CHILD";

/// Run `child` in a fresh process with `SIESTA_NOTIFY_URL` set to `url` (or removed);
/// returns whether it passed and its output.
async fn run_child(url: Option<String>, expect_notified: bool) -> (bool, String) {
    tokio::task::spawn_blocking(move || {
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.args([
            "child",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(
            CHILD_MARKER,
            if expect_notified {
                "notified"
            } else {
                "skipped"
            },
        );
        match url {
            Some(url) => cmd.env("SIESTA_NOTIFY_URL", url),
            None => cmd.env_remove("SIESTA_NOTIFY_URL"),
        };
        let out = cmd.output().unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success() && text.contains("1 passed"), text)
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_notify_url_comes_from_the_environment() {
    let rx = Receiver::start().await;
    let (passed, output) = run_child(Some(rx.url.clone()), true).await;
    assert!(passed, "{output}");
    let posts = rx.posts();
    assert_eq!(posts.len(), 1, "{posts:?}");
    assert!(posts[0].key.as_deref().unwrap().starts_with("idem_"));

    let (passed, output) = run_child(None, false).await;
    assert!(passed, "{output}");
    assert_eq!(rx.posts().len(), 1, "nothing posted without the variable");
}

#[tokio::test]
#[ignore = "run by the_notify_url_comes_from_the_environment in a child process"]
async fn child() {
    let Ok(expect) = std::env::var(CHILD_MARKER) else {
        return;
    };
    let w = support::env();
    let id = w.start("report", json!({"issue": "SIESTA-314"})).await;
    let out = w.output::<serde_json::Value>(&id).await;
    assert_eq!(out["notified"], expect == "notified", "{out}");
}
