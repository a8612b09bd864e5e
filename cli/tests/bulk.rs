//! `siesta runs cancel --filter …` end to end: the API served on a socket over the
//! harness, its worker running; the CLI starts the job and follows it to its end, the
//! runs the filter matches are cancelled and the others are not; `--no-wait` starts one
//! and `runs action ID` shows it and `--cancel` stops it.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

use serde_json::{Value, json};
use siesta::*;
use siesta_api::{ApiKeys, ControlApi};
use siesta_cli::bulk::Bulk;
use siesta_cli::runs::Remote;
use siesta_client::RunsActionKind;
use siesta_testing::TestEnv;

fn registry() -> Registry {
    let mut reg = Registry::new();
    for name in ["waiter", "bystander"] {
        reg.register(name, |ctx: Context, _: Value| async move {
            let go: Value = ctx.wait_for_event("go").await?;
            Ok(go)
        });
    }
    reg
}

/// The harness (dev tenant), the URL of its API (no keys), its worker running.
async fn served() -> (TestEnv, String) {
    let w = TestEnv::builder(registry()).tenant("default").build();
    let router = ControlApi::new(w.engine())
        .authenticate(ApiKeys::default())
        .router();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(siesta_api::server::serve(
        listener,
        router,
        Default::default(),
    ));
    let engine = w.engine();
    tokio::spawn(async move { engine.work(WorkerConfig::default()).await });
    (w, url)
}

fn bulk(action: RunsActionKind, filter: &str, no_wait: bool) -> Bulk {
    Bulk {
        action,
        filter: filter.to_owned(),
        rate: Some(1000),
        no_wait,
        restart: (None, false, false),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_cancel_with_a_filter_follows_the_job_to_its_end() {
    let (w, url) = served().await;
    let mut targets = Vec::new();
    for _ in 0..3 {
        targets.push(w.start("waiter", json!(null)).await);
    }
    let other = w.start("bystander", json!(null)).await;
    let remote = Remote {
        url,
        api_key: None,
        json: true,
    };
    remote
        .bulk(bulk(
            RunsActionKind::Cancel,
            "workflow=waiter,status=waiting",
            false,
        ))
        .await
        .unwrap();
    for run in &targets {
        assert_eq!(w.status(run).await, RunStatus::Cancelled);
    }
    assert_eq!(w.status(&other).await, RunStatus::Waiting);
    let jobs = w.engine().action_jobs(w.tenant(), 10).await.unwrap();
    assert_eq!(jobs.len(), 1);
    assert_eq!(
        (jobs[0].status, jobs[0].done),
        (ActionJobStatus::Done, 3),
        "followed to its end"
    );

    // Started without waiting, shown, then cancelled (finished already: as it is).
    remote
        .bulk(bulk(RunsActionKind::Pause, "workflow=bystander", true))
        .await
        .unwrap();
    let id = w.engine().action_jobs(w.tenant(), 10).await.unwrap()[0]
        .id
        .clone();
    remote.action(Some(&id), false).await.unwrap();
    remote.action(Some(&id), true).await.unwrap();
    remote.action(None, false).await.unwrap();
    assert!(
        remote
            .bulk(bulk(RunsActionKind::Cancel, "colour=red", false))
            .await
            .is_err(),
        "an unknown filter field is refused before anything is sent"
    );
}
