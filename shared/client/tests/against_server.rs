//! The client against the real router served on a socket (the dev transport on port 0,
//! an embedded store): every method, a status filter that needs encoding, and the
//! API's refusals as typed errors.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::json;
use siesta::*;
use siesta_api::server::{Limits, serve};
use siesta_api::{ApiKeys, ControlApi};
use siesta_client::{
    Client, Error, Failure, Resolution, RunFilter, RunOutcome, StartOptions, StatusCode,
};

struct Server {
    _dir: tempfile::TempDir,
    engine: Engine,
    url: String,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn registry() -> Registry {
    let mut reg = Registry::new();
    reg.register(
        "approve",
        |ctx: Context, input: serde_json::Value| async move {
            let cb = ctx.create_callback::<String>("sign_off").await?;
            let by = cb.wait().await?;
            let ok: bool = ctx.wait_for_event("approval").await?;
            Ok(json!({"input": input, "by": by, "ok": ok}))
        },
    );
    reg.register("quick", |_ctx: Context, n: u32| async move { Ok(n + 1) });
    reg
}

/// The router with one API key (`secret`, tenant `t`), served on 127.0.0.1:0.
async fn server() -> Server {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::default());
    let embedded =
        siesta_embedded::EmbeddedBackend::open(dir.path().join("db"), clock.clone()).unwrap();
    let engine = Engine::new(
        embedded.backend(),
        clock,
        registry(),
        EngineConfig::default(),
    );
    let keys = ApiKeys::new(HashMap::from([("secret".to_string(), TenantId::from("t"))]));
    let router = ControlApi::new(engine.clone()).authenticate(keys).router();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        serve(listener, router, Limits::default()).await.unwrap();
    });
    Server {
        _dir: dir,
        engine,
        url,
        task,
    }
}

impl Server {
    fn client(&self) -> Client {
        Client::new(&self.url).api_key(Some("secret".into()))
    }

    async fn settle(&self) {
        self.engine.run_until_idle(100).await.unwrap();
    }
}

#[tokio::test]
async fn a_run_is_started_read_delivered_to_and_finished_through_the_typed_client() {
    let s = server().await;
    let c = s.client();
    assert_eq!(c.health().await.unwrap().status, "ok");
    assert!(c.openapi().await.unwrap()["paths"]["/runs"].is_object());

    let options = StartOptions {
        idempotency_key: Some("k/1 ?&".into()),
        ..StartOptions::default()
    };
    let run = c
        .start_run("approve", &json!({"change": "x"}), &options)
        .await
        .unwrap();
    let again = c
        .start_run("approve", &json!({"change": "x"}), &options)
        .await
        .unwrap();
    assert_eq!(again.id, run.id, "the same Idempotency-Key is the same run");
    s.settle().await;

    let waiting = c.get_run(&run.id).await.unwrap();
    assert_eq!(waiting.status, RunStatus::Waiting);
    assert_eq!(waiting.waits[0].kind, "callback");
    let callback = waiting.waits[0].callback_id.clone().unwrap();
    assert!(matches!(
        c.run_result(&run.id, None).await.unwrap(),
        RunOutcome::Pending(v) if v.id == run.id
    ));

    assert!(!c.heartbeat_callback(&callback).await.unwrap().duplicate);
    let done = c
        .complete_callback(&callback, &json!("ana"), Some("d1"))
        .await
        .unwrap();
    assert!(done.accepted && !done.duplicate);
    let repeat = c
        .complete_callback(&callback, &json!("ana"), Some("d1"))
        .await
        .unwrap();
    assert!(repeat.duplicate, "the same delivery id is a duplicate");
    s.settle().await;
    c.send_event(&run.id, "approval", &json!(true), None)
        .await
        .unwrap();
    s.settle().await;

    let RunOutcome::Finished(result) = c.run_result(&run.id, Some(1)).await.unwrap() else {
        panic!("the run finished");
    };
    assert_eq!(result.status, RunStatus::Completed);
    assert_eq!(
        result.output.unwrap(),
        json!({"input": {"change": "x"}, "by": "ana", "ok": true})
    );

    let first = c.timeline(&run.id, 0, Some(2)).await.unwrap();
    assert_eq!(first.events.len(), 2);
    let rest = c.timeline(&run.id, first.next_after, None).await.unwrap();
    assert_eq!(rest.events[0].seq, first.next_after + 1);
    let all = c.full_timeline(&run.id).await.unwrap();
    assert_eq!(all.len(), first.events.len() + rest.events.len());
    assert_eq!(all[0].event_type, EventType::ExecutionStarted);

    let builds = c.builds().await.unwrap();
    assert!(builds.builds.iter().any(|b| b.serving));
}

#[tokio::test]
async fn runs_are_listed_by_status_and_workflow_page_by_page_with_the_query_encoded() {
    let s = server().await;
    let c = s.client();
    for n in 0..3 {
        c.start_run("quick", &json!(n), &StartOptions::default())
            .await
            .unwrap();
    }
    c.start_run("approve", &json!({}), &StartOptions::default())
        .await
        .unwrap();
    s.settle().await;

    let mut seen = Vec::new();
    let mut filter = RunFilter {
        status: Some("completed".into()),
        workflow: Some("quick".into()),
        limit: Some(2),
        ..RunFilter::default()
    };
    loop {
        let page = c.list_runs(&filter).await.unwrap();
        seen.extend(page.runs.into_iter().map(|r| (r.workflow, r.status)));
        match page.next_cursor {
            Some(cursor) => filter.cursor = Some(cursor),
            None => break,
        }
    }
    assert_eq!(seen.len(), 3);
    assert!(
        seen.iter()
            .all(|(w, s)| w == "quick" && *s == RunStatus::Completed)
    );

    // `&` and `=` would otherwise start another query pair: encoded, the whole
    // string is the status the API refuses.
    let err = c
        .list_runs(&RunFilter {
            status: Some("completed&workflow=approve".into()),
            ..RunFilter::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.status(), Some(StatusCode::BAD_REQUEST));
    assert!(
        err.to_string().contains("completed&workflow=approve"),
        "{err}"
    );
    // A workflow name with a space, a slash and a '#' reaches the API whole.
    let none = c
        .list_runs(&RunFilter {
            workflow: Some("quick /#x".into()),
            ..RunFilter::default()
        })
        .await
        .unwrap();
    assert!(none.runs.is_empty());
}

#[tokio::test]
async fn refusals_are_typed_errors_with_the_apis_status_code_and_message() {
    let s = server().await;
    let c = s.client();

    let err = c.get_run("no such/run").await.unwrap_err();
    assert!(
        matches!(&err, Error::Api { status, code, .. } if *status == StatusCode::NOT_FOUND && code == "not_found"),
        "{err:?}"
    );

    let err = Client::new(&s.url).get_run("x").await.unwrap_err();
    assert_eq!(err.status(), Some(StatusCode::UNAUTHORIZED));

    let run = c
        .start_run("approve", &json!({}), &StartOptions::default())
        .await
        .unwrap();
    s.settle().await;
    let version = c.get_run(&run.id).await.unwrap().version;
    let err = c.cancel(&run.id, Some(version + 7)).await.unwrap_err();
    assert_eq!(err.status(), Some(StatusCode::PRECONDITION_FAILED));
    let err = c.resume(&run.id, None).await.unwrap_err();
    assert_eq!(err.status(), Some(StatusCode::CONFLICT), "{err}");
    let err = c
        .resolve_operation(
            &run.id,
            "0#1/2",
            &Resolution::Failed {
                error: Failure {
                    code: None,
                    message: "gone".into(),
                },
            },
            None,
        )
        .await
        .unwrap_err();
    assert!(err.status().is_some(), "the API refused it: {err}");
    let err = c
        .fail_callback("no-such-callback", &Failure::default(), None)
        .await
        .unwrap_err();
    assert_eq!(err.status(), Some(StatusCode::NOT_FOUND), "{err}");

    let cancelled = c.cancel(&run.id, Some(version)).await.unwrap();
    assert!(cancelled.cancel_requested || cancelled.status == RunStatus::Cancelled);

    assert!(
        c.dead_letters(None, Some(200))
            .await
            .unwrap()
            .dead_letters
            .is_empty()
    );
    assert_eq!(c.redrive_all().await.unwrap().redriven, 0);
    let err = c.redrive("nothing-parked", None).await.unwrap_err();
    assert!(err.code().is_some(), "{err}");

    // Nothing listens here: a transport error, not an API one.
    let err = Client::new("http://127.0.0.1:1")
        .health()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Transport { .. }), "{err:?}");
}
