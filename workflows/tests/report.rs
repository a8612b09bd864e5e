//! The `report` workflow end to end on the embedded backend, with a local notify
//! receiver: one POST per report, the tool call's idempotency key on it, retries on the
//! durable timer, and no second POST after a crash.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

mod support;

use std::time::Duration;

use serde_json::json;
use siesta::context::idempotency_key;
use siesta::*;
use siesta_testing::TestEnv;
use siesta_workflows::Notice;
use support::{Receiver, Reply};

/// The key the engine derives for the run's `notify_team` call.
fn expected_key(w: &TestEnv, id: &RunId, issue: &str, sha256: &str) -> IdempotencyKey {
    let notice = Notice {
        run_id: id.to_string(),
        issue: issue.to_owned(),
        artifact_sha256: sha256.to_owned(),
    };
    idempotency_key(
        w.tenant(),
        id,
        &Position::from("notify_team#0"),
        &serde_json::to_vec(&notice).unwrap(),
    )
}

/// The key recorded with the `notify_team` call while it is `running`.
async fn running_key(w: &TestEnv, id: &RunId) -> IdempotencyKey {
    match w.entry(id, "notify_team#0").await.map(|e| e.state) {
        Some(EntryState::Started { key: Some(key), .. }) => key,
        other => panic!("notify_team is not running: {other:?}"),
    }
}

async fn tool_call(w: &TestEnv, key: &IdempotencyKey) -> ToolCallRecord {
    w.engine()
        .backend()
        .store
        .get_tool_call(w.tenant(), key)
        .await
        .unwrap()
        .expect("no tool-call record")
}

#[tokio::test]
async fn a_report_is_stored_and_posted_once_with_the_tool_calls_key() {
    let rx = Receiver::start().await;
    let w = support::reporting_to(&rx.url);
    let id = w
        .start("report", json!({"issue": "login page times out"}))
        .await;
    let out = w.output::<serde_json::Value>(&id).await;
    assert_eq!(out["issue"], "login page times out");
    assert_eq!(out["notified"], true);
    assert_eq!(out["artifact"]["media_type"], "text/markdown");
    let sha = out["artifact"]["sha256"].as_str().unwrap().to_owned();

    let artifact: ArtifactRef = serde_json::from_value(out["artifact"].clone()).unwrap();
    let bytes = w.engine().backend().artifacts.get(&artifact).await.unwrap();
    assert_eq!(bytes.len() as u64, artifact.size);
    let markdown = String::from_utf8(bytes.to_vec()).unwrap();
    assert!(markdown.starts_with("# ISSUE-"), "{markdown}");
    assert!(markdown.contains("login page times out"));
    assert!(markdown.contains("## Related knowledge"));

    let posts = rx.posts();
    assert_eq!(posts.len(), 1, "{posts:?}");
    let key = expected_key(&w, &id, "login page times out", &sha);
    assert_eq!(posts[0].key.as_deref(), Some(key.as_str()));
    assert_eq!(
        posts[0].body,
        json!({"run_id": id.as_str(), "issue": "login page times out", "artifact_sha256": sha})
    );
    assert!(
        rx.lookups().is_empty(),
        "a first attempt posts without asking"
    );
    let record = tool_call(&w, &key).await;
    assert_eq!(record.status, ToolCallStatus::Succeeded);
    assert_eq!(record.position.as_str(), "notify_team#0");

    // Replaying the finished run's journal changes nothing: no second POST.
    w.advance(Duration::from_secs(3600)).await;
    assert_eq!(rx.posts().len(), 1);
}

#[tokio::test]
async fn a_503_is_retried_on_the_durable_timer_until_the_post_succeeds() {
    let rx = Receiver::start().await;
    let w = support::reporting_to(&rx.url);
    rx.script([Reply::Status(503), Reply::Status(503), Reply::Status(200)]);
    let id = w.start("report", json!({"issue": "SIESTA-42"})).await;
    assert_eq!(w.run(&id).await.status, RunStatus::Waiting);
    assert_eq!(rx.posts().len(), 1);
    assert!(matches!(
        w.entry(&id, "notify_team#0").await.map(|e| e.state),
        Some(EntryState::Retrying { attempt: 1, .. })
    ));

    // Nothing happens until the timer is due.
    w.run_until_idle().await;
    assert_eq!(rx.posts().len(), 1);

    w.advance(Duration::from_secs(60)).await;
    assert_eq!(w.run(&id).await.status, RunStatus::Waiting);
    assert_eq!(rx.posts().len(), 2);
    w.advance(Duration::from_secs(60)).await;
    let out = w.output::<serde_json::Value>(&id).await;
    assert_eq!(out["notified"], true);

    let posts = rx.posts();
    assert_eq!(posts.len(), 3, "two 503s, then the accepted POST");
    let key = expected_key(
        &w,
        &id,
        "SIESTA-42",
        out["artifact"]["sha256"].as_str().unwrap(),
    );
    assert!(posts.iter().all(|p| p.key.as_deref() == Some(key.as_str())));
    // Each retry first asked whether the previous attempt got through.
    assert_eq!(rx.lookups(), vec![key.to_string(), key.to_string()]);
    let retries = w
        .timeline(&id)
        .await
        .into_iter()
        .filter(|e| e.event_type == EventType::StepFailed && e.details["Retrying"] == true)
        .count();
    assert_eq!(retries, 2);
}

#[tokio::test]
async fn a_4xx_fails_the_run_without_a_retry() {
    let rx = Receiver::start().await;
    let w = support::reporting_to(&rx.url);
    rx.script([Reply::Status(422)]);
    let id = w.start("report", json!({"issue": "SIESTA-7"})).await;
    let run = w.run(&id).await;
    assert_eq!(run.status, RunStatus::Failed);
    let error = run.error.unwrap();
    assert_eq!(error.kind, "StepFailed");
    let cause = error.cause.clone().unwrap();
    assert_eq!(cause.kind, "http_422");
    assert_eq!(
        cause.message, "POST to notify target 'default': HTTP 422 from the receiver",
        "status and a fixed phrase only"
    );
    let visible = serde_json::to_string(&error).unwrap();
    assert!(
        !visible.contains(support::REFUSAL_SECRET),
        "the receiver's body never reaches the run's error: {visible}"
    );
    w.advance(Duration::from_secs(3600)).await;
    assert_eq!(rx.posts().len(), 1);
}

#[tokio::test]
async fn an_unreachable_receiver_is_retried_not_failed() {
    // A port nobody listens on: bind, note it, close.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let w = support::reporting_to(&format!("http://127.0.0.1:{port}/notify"));
    let id = w.start("report", json!({"issue": "SIESTA-8"})).await;
    assert_eq!(w.run(&id).await.status, RunStatus::Waiting);
    match w.entry(&id, "notify_team#0").await.map(|e| e.state) {
        Some(EntryState::Retrying { error, .. }) => {
            assert_eq!(error.kind, "http_connection");
            assert!(error.retryable);
            assert_eq!(
                error.message, "POST to notify target 'default': could not connect",
                "no address or transport detail"
            );
        }
        other => panic!("not retrying: {other:?}"),
    }
}

#[tokio::test]
async fn an_empty_notify_name_skips_the_post() {
    let rx = Receiver::start().await;
    let w = support::reporting_to(&rx.url);
    let id = w
        .start("report", json!({"issue": "SIESTA-9", "notify": ""}))
        .await;
    let out = w.output::<serde_json::Value>(&id).await;
    assert_eq!(out["notified"], false);
    assert_eq!(out["artifact"]["media_type"], "text/markdown");
    assert!(rx.posts().is_empty());
}

#[tokio::test]
async fn the_input_cannot_choose_where_the_notice_goes() {
    let rx = Receiver::start().await;
    let w = support::reporting_to(&rx.url);
    let elsewhere = Receiver::start().await;
    let refused = w
        .try_start(
            "report",
            json!({"issue": "SIESTA-10", "notify_url": elsewhere.url}),
            None,
        )
        .await;
    let failed = match refused {
        // Refused at the start (the input does not fit), or the run fails at once.
        Err(e) => e.to_string(),
        Ok(id) => {
            let run = w.run(&id).await;
            assert_eq!(run.status, RunStatus::Failed);
            run.error.unwrap().message
        }
    };
    assert!(failed.contains("notify_url"), "{failed}");
    let id = w
        .start("report", json!({"issue": "SIESTA-11", "notify": "admin"}))
        .await;
    let run = w.run(&id).await;
    assert_eq!(run.status, RunStatus::Failed);
    assert!(
        run.error
            .unwrap()
            .message
            .contains("no notify target 'admin' is configured"),
    );
    assert!(rx.posts().is_empty() && elsewhere.posts().is_empty());
}

#[tokio::test]
async fn an_empty_issue_fails_the_run() {
    let w = support::env();
    let id = w.start("report", json!({"issue": "  "})).await;
    assert_eq!(w.run(&id).await.status, RunStatus::Failed);
}

/// Run the first invocation in a task and kill it once the receiver has the POST (or
/// holds its connection): the run is left `running` with the tool call `running`.
async fn crash_during_the_post(w: &TestEnv, rx: &Receiver, issue: &str) -> RunId {
    let id = w
        .create("report", json!({"issue": issue}), None)
        .await
        .unwrap();
    let engine = w.engine();
    let worker = tokio::spawn(async move { engine.run_until_idle(100).await });
    tokio::time::timeout(Duration::from_secs(10), rx.arrived.notified())
        .await
        .expect("the POST never reached the receiver");
    worker.abort();
    assert!(worker.await.unwrap_err().is_cancelled());
    assert_eq!(w.run(&id).await.status, RunStatus::Running);
    let key = running_key(w, &id).await;
    assert_eq!(tool_call(w, &key).await.status, ToolCallStatus::Running);
    id
}

#[tokio::test]
async fn after_a_crash_a_post_the_receiver_took_is_not_made_again() {
    let rx = Receiver::start().await;
    let w = support::reporting_to(&rx.url);
    rx.script([Reply::RecordThenHang]);
    let id = crash_during_the_post(&w, &rx, "SIESTA-100").await;
    let key = running_key(&w, &id).await;
    assert_eq!(rx.posts().len(), 1);

    // The lease runs out; the sweep re-wakes the run; replay finds the call running and
    // asks the receiver, which has it.
    w.advance(w.config().lease_ttl + Duration::from_secs(1))
        .await;
    let out = w.output::<serde_json::Value>(&id).await;
    assert_eq!(out["notified"], true);
    assert_eq!(rx.posts().len(), 1, "no second POST");
    assert_eq!(rx.lookups(), vec![key.to_string()]);
    assert_eq!(tool_call(&w, &key).await.status, ToolCallStatus::Succeeded);
}

#[tokio::test]
async fn after_a_crash_a_post_the_receiver_never_saw_is_made_once() {
    let rx = Receiver::start().await;
    let w = support::reporting_to(&rx.url);
    rx.hang_next_connection();
    let id = crash_during_the_post(&w, &rx, "SIESTA-101").await;
    let key = running_key(&w, &id).await;
    assert!(rx.posts().is_empty());

    w.advance(w.config().lease_ttl + Duration::from_secs(1))
        .await;
    let out = w.output::<serde_json::Value>(&id).await;
    assert_eq!(out["notified"], true);
    let posts = rx.posts();
    assert_eq!(posts.len(), 1, "{posts:?}");
    assert_eq!(posts[0].key.as_deref(), Some(key.as_str()));
    assert_eq!(rx.lookups(), vec![key.to_string()]);
}
