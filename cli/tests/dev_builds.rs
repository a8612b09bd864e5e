//! `siesta dev` on a new build over a data dir with runs of an older one: at start-up
//! the runs that replay cleanly move to the new build (their workflow's policy
//! allowing), the others wait for their build — shown in the run view and counted by
//! `GET /builds`, deliveries to them recorded — and finish when their build serves
//! again.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

use std::time::Duration;

use serde_json::{Value, json};
use siesta::{Context, Registry, RunStatus, UpgradePolicy};
use siesta_app::dev::{DevOptions, DevServer, start};

use siesta_client::{Client, RunView, StartOptions};

const OLD: &str = "shop@0.1.0+old";
const NEW: &str = "shop@0.1.1+new";

/// The older build: three workflows that wait for an approval after a first step.
fn old_build() -> Registry {
    let mut reg = Registry::new();
    for name in ["agent", "note", "refund"] {
        reg.register(name, move |ctx: Context, _: Value| async move {
            ctx.step("first", |_| async { Ok(1) }).await?;
            let ok: bool = ctx.wait_for_event("approval").await?;
            Ok(json!({"build": "old", "approved": ok}))
        });
    }
    reg
}

/// The newer build: `agent` gets a step inserted before its first (its runs in flight
/// no longer replay); `note` and `refund` a step appended after the wait (they
/// replay), `refund` pinned to the build its runs start on.
fn new_build() -> Registry {
    let mut reg = Registry::new();
    reg.register("agent", |ctx: Context, _: Value| async move {
        ctx.step("triage", |_| async { Ok(0) }).await?;
        ctx.step("first", |_| async { Ok(1) }).await?;
        let ok: bool = ctx.wait_for_event("approval").await?;
        Ok(json!({"build": "new", "approved": ok}))
    });
    for name in ["note", "refund"] {
        reg.register(name, move |ctx: Context, _: Value| async move {
            ctx.step("first", |_| async { Ok(1) }).await?;
            let ok: bool = ctx.wait_for_event("approval").await?;
            ctx.step("after", |_| async { Ok(2) }).await?;
            Ok(json!({"build": "new", "approved": ok}))
        });
    }
    reg.upgrade_policy("refund", UpgradePolicy::Pinned);
    reg
}

async fn serve(dir: &std::path::Path, build: &str, registry: Registry) -> (DevServer, String) {
    let mut options = DevOptions::new(dir.to_owned());
    options.sweep_every = Duration::from_millis(100);
    options.build_id = build.to_owned();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = start(listener, options, registry).await.unwrap();
    let base = format!("http://{}", server.addr);
    (server, base)
}

async fn wait_for(api: &Client, id: &str, status: RunStatus) -> RunView {
    for _ in 0..400 {
        let view = api.get_run(id).await.unwrap();
        if view.status == status {
            return view;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!(
        "run {id} never reached {status}: {:?}",
        api.get_run(id).await.unwrap()
    )
}

async fn start_run(api: &Client, workflow: &str) -> String {
    let created = api
        .start_run(workflow, &Value::Null, &StartOptions::default())
        .await
        .unwrap();
    wait_for(api, &created.id, RunStatus::Waiting).await;
    created.id
}

async fn approve(api: &Client, id: &str) {
    api.send_event(id, "approval", &json!(true), None)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_build_moves_the_runs_that_replay_and_the_others_wait_for_their_build() {
    let dir = tempfile::tempdir().unwrap();
    let (old, base) = serve(dir.path(), OLD, old_build()).await;
    let api = Client::new(&base);
    assert!(old.other_builds.is_empty());
    let agent = start_run(&api, "agent").await;
    let note = start_run(&api, "note").await;
    let refund = start_run(&api, "refund").await;
    old.stop();

    // The new build: what it found at start-up, and did.
    let (new, base) = serve(dir.path(), NEW, new_build()).await;
    let api = Client::new(&base);
    assert_eq!(new.other_builds.len(), 1, "{:?}", new.other_builds);
    let found = &new.other_builds[0];
    assert_eq!(found.build_id, OLD);
    assert_eq!(found.unfinished, [(RunStatus::Waiting, 3)].into());
    let ids = |v: &[siesta::RunId]| v.iter().map(|r| r.to_string()).collect::<Vec<_>>();
    assert_eq!(ids(&found.upgraded), [note.as_str()]);
    assert_eq!(ids(&found.pinned), [refund.as_str()]);
    assert_eq!(found.diverged.len(), 1, "{found:?}");
    assert_eq!(found.diverged[0].run_id.to_string(), agent);
    assert!(
        found.diverged[0]
            .divergence
            .position
            .to_string()
            .contains("#0"),
        "{found:?}"
    );

    // The run view says which runs wait for their build; GET /builds counts them.
    let view = api.get_run(&agent).await.unwrap();
    assert_eq!(view.status, RunStatus::Waiting);
    assert_eq!(view.awaiting_build.as_deref(), Some(OLD));
    let moved = api.get_run(&note).await.unwrap();
    assert_eq!(moved.build_id.as_deref(), Some(NEW));
    assert!(moved.awaiting_build.is_none(), "{moved:?}");
    let builds = api.builds().await.unwrap();
    assert_eq!(builds.serving, NEW);
    let old_build_entry = builds
        .builds
        .iter()
        .find(|b| b.build_id == OLD)
        .unwrap_or_else(|| panic!("{builds:?}"));
    assert_eq!(old_build_entry.unfinished, [(RunStatus::Waiting, 2)].into());
    assert!(!old_build_entry.serving);

    // Approvals: the moved run finishes on the new build; the waiting ones record
    // theirs and stay as they were.
    for id in [&agent, &note, &refund] {
        approve(&api, id).await;
    }
    let done = wait_for(&api, &note, RunStatus::Completed).await;
    assert_eq!(done.output.unwrap()["build"], "new");
    for id in [&agent, &refund] {
        let view = api.get_run(id).await.unwrap();
        assert_eq!(view.status, RunStatus::Waiting, "{view:?}");
        assert_eq!(view.awaiting_build.as_deref(), Some(OLD));
    }
    new.stop();

    // The old build serves again: its runs finish on its code with their approvals.
    let (old, base) = serve(dir.path(), OLD, old_build()).await;
    let api = Client::new(&base);
    for id in [&agent, &refund] {
        let done = wait_for(&api, id, RunStatus::Completed).await;
        assert_eq!(done.output, Some(json!({"build": "old", "approved": true})));
    }
    old.stop();
}
