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
use siesta_api::{ApiKeys, ControlApi, SourceConfig, WebhookReceiver, WebhookSource};
use siesta_client::{
    CallbackFailure, Client, Error, Resolution, ResolvedError, RunFilter, RunOutcome, StartOptions,
    StatusCode, StreamChunkView,
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
    reg.register("talker", |ctx: Context, _: serde_json::Value| async move {
        ctx.step("llm", |step| async move {
            let tokens = step.stream("tokens");
            for t in ["Hel", "lo"] {
                tokens.publish(t).await?;
            }
            Ok(())
        })
        .await?;
        ctx.wait_for_event::<serde_json::Value>("go").await?;
        ctx.stream("tokens").publish("!").await?;
        Ok(())
    });
    reg
}

/// The Standard Webhooks secret of the source `go` (tenant `t`, event `go`).
const SECRET: &str = "whsec_c2llc3RhLWNsaWVudC10ZXN0LXNlY3JldA==";

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
    let source = WebhookSource::from_config(SourceConfig {
        name: "go".into(),
        tenant: "t".into(),
        scheme: "standard-webhooks".into(),
        secrets: vec![SECRET.into()],
        correlation: "/run_id".into(),
        callback: None,
        event: Some("go".into()),
        tolerance_secs: None,
    })
    .unwrap();
    let router = ControlApi::new(engine.clone())
        .authenticate(keys)
        .webhooks(WebhookReceiver::new(siesta_api::DEFAULT_MAX_BODY).with_sources(vec![source]))
        .router();
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
                error: ResolvedError::Detailed {
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
        .fail_callback("no-such-callback", &CallbackFailure::default(), None)
        .await
        .unwrap_err();
    assert_eq!(err.status(), Some(StatusCode::NOT_FOUND), "{err}");

    let cancelled = c.cancel(&run.id, Some(version)).await.unwrap();
    assert!(cancelled.cancel_requested || cancelled.status == RunStatus::Cancelled);

    assert!(
        c.dead_lettered_runs(None, Some(200))
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

#[tokio::test]
async fn a_stream_is_read_by_pages_and_as_events_and_a_signed_webhook_wakes_the_run() {
    let s = server().await;
    let c = s.client();
    let run = c
        .start_run("talker", &json!(null), &StartOptions::default())
        .await
        .unwrap();
    s.settle().await;

    let page = c
        .stream_page(&run.id, "tokens", 0, None, Some(2))
        .await
        .unwrap();
    // A step's attempt opens with a discard of what an earlier attempt published.
    let kinds: Vec<&str> = page.chunks.iter().map(|c| c.kind.as_str()).collect();
    assert_eq!(kinds, ["discard", "data"], "the limit is sent");
    assert_eq!(page.chunks[1].data, json!("Hel"));
    let page = c
        .stream_page(&run.id, "tokens", page.next, Some(0), None)
        .await
        .unwrap();
    assert_eq!(page.chunks[0].data, json!("lo"));
    assert!(!page.closed, "the run has not finished");

    // Signed at the server's clock (a manual one), within the source's tolerance.
    let now = s.engine.clock().now().millis() / 1000;
    use siesta_api::signature::{Scheme, Secret, sign};
    let body = serde_json::to_vec(&json!({"run_id": run.id})).unwrap();
    let secret = Secret::parse(Scheme::StandardWebhooks, SECRET).unwrap();
    let headers = sign(Scheme::StandardWebhooks, &secret, "msg-1", now, &body);
    let received = c
        .source_webhook("go", &headers, body.clone())
        .await
        .unwrap();
    assert!(received.received && !received.duplicate);
    let again = c.source_webhook("go", &headers, body).await.unwrap();
    assert!(again.duplicate, "the same webhook-id is a duplicate");
    let err = c
        .source_webhook("go", &[], b"{}".to_vec())
        .await
        .unwrap_err();
    assert_eq!(err.status(), Some(StatusCode::UNAUTHORIZED), "{err}");
    s.settle().await;

    let rest = c
        .stream_page(&run.id, "tokens", page.next, Some(1), None)
        .await
        .unwrap();
    assert_eq!(rest.chunks[0].data, json!("!"), "{rest:?}");

    let events = c
        .stream_events(&run.id, "tokens", 2)
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let chunks: Vec<StreamChunkView> = events
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str(d.trim()).ok())
        .collect();
    assert_eq!(chunks[0].offset, 2, "read from the offset asked");
    assert_eq!(chunks[0].data, json!("lo"));
    assert!(events.contains("event: end"), "{events}");
    let err = c
        .stream_events("no-such-run", "tokens", 0)
        .await
        .unwrap_err();
    assert_eq!(err.status(), Some(StatusCode::NOT_FOUND), "{err}");
    let err = c
        .stream_page(&run.id, "not a name", 0, None, None)
        .await
        .unwrap_err();
    assert_eq!(err.status(), Some(StatusCode::BAD_REQUEST), "{err}");
}

#[tokio::test]
async fn a_run_is_exported_and_upgraded_alone_or_with_its_build() {
    let s = server().await;
    let c = s.client();
    let run = c
        .start_run("approve", &json!({"change": "y"}), &StartOptions::default())
        .await
        .unwrap();
    s.settle().await;

    let export = c.export_run(&run.id).await.unwrap();
    assert_eq!(export.format, RunExport::FORMAT);
    assert_eq!(export.run.id.to_string(), run.id);
    assert!(!export.journal.is_empty());

    let waiting = c.get_run(&run.id).await.unwrap();
    let err = c
        .upgrade_run(&run.id, Some(waiting.version + 1))
        .await
        .unwrap_err();
    assert_eq!(err.status(), Some(StatusCode::PRECONDITION_FAILED), "{err}");
    let same = c.upgrade_run(&run.id, Some(waiting.version)).await.unwrap();
    assert_eq!(same.id, run.id, "a run on the serving build stays as it is");
    assert_eq!(same.build_id, waiting.build_id);

    let build = waiting.build_id.clone().unwrap_or_else(|| "-".into());
    let report = c.upgrade_build(&build).await.unwrap();
    assert!(report.diverged.is_empty(), "{report:?}");
    let err = c.upgrade_run("no such/run", None).await.unwrap_err();
    assert_eq!(err.status(), Some(StatusCode::NOT_FOUND), "{err}");
}
