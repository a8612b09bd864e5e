//! Export to an OTLP collector: a run of two wake-ups is one trace, whose id is the one
//! derived from the run, with a `durable_operation` span per step attempt that ran,
//! none for the replayed step, and one for the wait between the wake-ups; a finished
//! run's trace has exactly one root, the run's own span, and every span's parent is in
//! it; a waiting run's root is emitted when it is cancelled; a run started
//! with a `traceparent` joins the caller's trace under its start request, and the
//! webhook that woke it links to it. Its own test binary: the subscriber is the
//! process's.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::{attribute, global_receiver, in_trace};
use opentelemetry_proto::tonic::trace::v1::Span;
use serde_json::json;
use siesta::telemetry::{TraceParent, root_span_id_for, trace_id_for};
use siesta::*;
use siesta_testing::TestEnv;
use tower::ServiceExt;

fn named<'a>(spans: &'a [Span], name: &str) -> Vec<&'a Span> {
    spans.iter().filter(|s| s.name == name).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_of_two_wake_ups_is_one_trace_with_a_span_per_attempt_that_ran() {
    let received = global_receiver();
    let mut reg = Registry::new();
    reg.register(
        "two_wakes",
        |ctx: Context, _: serde_json::Value| async move {
            let a: u32 = ctx.step("first", |_| async { Ok(1) }).await?;
            let b: u32 = ctx
                .wait_for_event("go")
                .timeout(Duration::from_secs(86400))
                .await?;
            let c: u32 = ctx.step("second", |_| async { Ok(3) }).await?;
            Ok(a + b + c)
        },
    );
    let w = TestEnv::builder(reg).tenant("acme").build();
    let id = w.create("two_wakes", json!(null), None).await.unwrap();
    w.run_until_idle().await;
    w.engine()
        .deliver_event(w.tenant(), &id, "go", json!(2), None)
        .await
        .unwrap();
    w.run_until_idle().await;
    assert_eq!(w.run(&id).await.status, RunStatus::Completed);
    siesta_lambda::otel::flush().await;

    let trace_id = trace_id_for(w.tenant(), &id).to_vec();
    let spans = in_trace(&received, &trace_id);
    let executions = named(&spans, "durable_execution");
    assert!(executions.len() >= 2, "a span per wake-up: {spans:#?}");
    for e in &executions {
        assert_eq!(e.trace_id, trace_id, "the run's trace: {e:?}");
        assert_eq!(
            e.parent_span_id,
            root_span_id_for(w.tenant(), &id).to_vec(),
            "under the run's root: {e:?}"
        );
        assert_eq!(attribute(e, "run_id").as_deref(), Some(id.as_str()));
    }
    let (operations, waits): (Vec<&Span>, Vec<&Span>) = named(&spans, "durable_operation")
        .into_iter()
        .partition(|o| attribute(o, "kind").as_deref() == Some("step"));
    let positions: Vec<String> = operations
        .iter()
        .map(|o| attribute(o, "operationId").unwrap_or_default())
        .collect();
    assert_eq!(
        positions,
        ["first#0", "second#0"],
        "one span per attempt that ran, none for the replayed `first`: {operations:#?}"
    );
    for o in &operations {
        assert_eq!(o.trace_id, trace_id, "{o:?}");
        assert!(
            executions.iter().any(|e| e.span_id == o.parent_span_id),
            "an attempt's parent is its wake-up: {o:?}"
        );
        assert_eq!(attribute(o, "outcome").as_deref(), Some("succeeded"));
        assert_eq!(attribute(o, "attempt").as_deref(), Some("1"));
        assert_eq!(attribute(o, "isReplay").as_deref(), Some("false"));
    }
    assert_eq!(waits.len(), 1, "the wait for `go`, once: {waits:#?}");
    let wait = waits[0];
    assert_eq!(attribute(wait, "operationId").as_deref(), Some("go#0"));
    assert_eq!(attribute(wait, "kind").as_deref(), Some("event"));
    assert_eq!(attribute(wait, "subType").as_deref(), Some("WaitForEvent"));
    assert_eq!(attribute(wait, "outcome").as_deref(), Some("succeeded"));
    assert!(
        executions.iter().any(|e| e.span_id == wait.parent_span_id),
        "a wait's parent is the wake-up that saw it end: {wait:?}"
    );
}

/// The spans of `spans` with no parent, and those whose parent is not among them.
fn roots_and_orphans<'a>(spans: &[&'a Span]) -> (Vec<&'a Span>, Vec<&'a Span>) {
    let roots = spans
        .iter()
        .copied()
        .filter(|s| s.parent_span_id.is_empty())
        .collect();
    let orphans = spans
        .iter()
        .copied()
        .filter(|s| {
            !s.parent_span_id.is_empty() && !spans.iter().any(|p| p.span_id == s.parent_span_id)
        })
        .collect();
    (roots, orphans)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_runs_trace_has_one_root_its_own_span_and_every_parent_in_it() {
    let received = global_receiver();
    let mut reg = Registry::new();
    reg.register("retried", |ctx: Context, _: serde_json::Value| async move {
        let a: u32 = ctx
            .step("flaky", |s| async move {
                if s.attempt() == 1 {
                    Err(StepError::new("Flaky", "not yet", true))
                } else {
                    Ok(1)
                }
            })
            .retry(RetryStrategy::fixed(2, Duration::from_secs(1)))
            .await?;
        let b: u32 = ctx.step("after", |_| async { Ok(2) }).await?;
        Ok(a + b)
    });
    let w = TestEnv::builder(reg).tenant("acme").build();
    let id = w.create("retried", json!(null), None).await.unwrap();
    w.run_until_idle().await;
    assert_eq!(
        w.run(&id).await.status,
        RunStatus::Waiting,
        "the retry's timer"
    );
    w.advance(Duration::from_secs(1)).await;
    let run = w.run(&id).await;
    assert_eq!(run.status, RunStatus::Completed, "{run:?}");
    siesta_lambda::otel::flush().await;

    let trace_id = trace_id_for(w.tenant(), &id).to_vec();
    let spans = in_trace(&received, &trace_id);
    let executions = named(&spans, "durable_execution");
    assert!(executions.len() >= 2, "a span per wake-up: {spans:#?}");
    let attempts: Vec<(String, String)> = named(&spans, "durable_operation")
        .iter()
        .filter(|o| attribute(o, "operationId").as_deref() == Some("flaky#0"))
        .map(|o| {
            (
                attribute(o, "attempt").unwrap_or_default(),
                attribute(o, "outcome").unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        attempts,
        [
            ("1".into(), "failed".into()),
            ("2".into(), "succeeded".into())
        ],
        "the retried step, an attempt in each wake-up"
    );

    let all: Vec<&Span> = spans.iter().collect();
    let (roots, orphans) = roots_and_orphans(&all);
    assert!(
        orphans.is_empty(),
        "every parent is in the trace: {orphans:#?}"
    );
    assert_eq!(roots.len(), 1, "exactly one root: {roots:#?}");
    let root = roots[0];
    assert_eq!(root.name, "durable_run");
    assert_eq!(root.span_id, root_span_id_for(w.tenant(), &id).to_vec());
    assert_eq!(attribute(root, "run_id").as_deref(), Some(id.as_str()));
    assert_eq!(attribute(root, "workflow").as_deref(), Some("retried"));
    assert_eq!(attribute(root, "status").as_deref(), Some("completed"));
    assert_eq!(attribute(root, "build_id"), run.build_id);
    let ms = |ns: u64| (ns / 1_000_000) as i64;
    assert_eq!(
        ms(root.start_time_unix_nano),
        run.created_at.0,
        "the run's real start"
    );
    assert!(root.end_time_unix_nano >= root.start_time_unix_nano);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_run_has_no_root_until_it_ends_and_a_cancel_emits_it() {
    let received = global_receiver();
    let mut reg = Registry::new();
    reg.register("waits", |ctx: Context, _: serde_json::Value| async move {
        ctx.wait_for_event::<u32>("never").await
    });
    let w = TestEnv::builder(reg).tenant("acme").build();
    let id = w.create("waits", json!(null), None).await.unwrap();
    w.run_until_idle().await;
    assert_eq!(w.run(&id).await.status, RunStatus::Waiting);
    siesta_lambda::otel::flush().await;
    let trace_id = trace_id_for(w.tenant(), &id).to_vec();
    assert!(
        named(&in_trace(&received, &trace_id), "durable_run").is_empty(),
        "a root is emitted once, whole: not before the run's end is known"
    );

    // Cancelled while no one holds it: the run ends outside a wake-up.
    w.engine().cancel(w.tenant(), &id, None).await.unwrap();
    assert_eq!(w.run(&id).await.status, RunStatus::Cancelled);
    siesta_lambda::otel::flush().await;
    let spans = in_trace(&received, &trace_id);
    let all: Vec<&Span> = spans.iter().collect();
    let (roots, orphans) = roots_and_orphans(&all);
    assert!(orphans.is_empty(), "{orphans:#?}");
    assert_eq!(roots.len(), 1, "{roots:#?}");
    assert_eq!(roots[0].name, "durable_run");
    assert_eq!(attribute(roots[0], "status").as_deref(), Some("cancelled"));
}

async fn send(
    router: &axum::Router,
    uri: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (http::StatusCode, serde_json::Value) {
    let mut builder = http::Request::builder().method("POST").uri(uri);
    for (k, v) in headers {
        builder = builder.header(*k, *v);
    }
    let request = builder
        .body(axum::body::Body::from(body.to_owned()))
        .unwrap();
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_traceparent_sent_with_the_start_puts_the_run_under_the_start_request() {
    let received = global_receiver();
    let mut reg = Registry::new();
    reg.register("paid", |ctx: Context, _: serde_json::Value| async move {
        let paid = ctx.create_callback::<serde_json::Value>("payment").await?;
        paid.wait().await
    });
    let w = TestEnv::builder(reg).tenant("default").build();
    let router = siesta_api::ControlApi::new(w.engine())
        .authenticate(siesta_api::ApiKeys::new(HashMap::new()))
        .router();
    let caller = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let (status, body) = send(
        &router,
        "/runs",
        &[("traceparent", caller)],
        r#"{"workflow":"paid"}"#,
    )
    .await;
    assert_eq!(status, http::StatusCode::CREATED, "{body}");
    let id = RunId::from(body["id"].as_str().unwrap());
    let stored = w
        .run(&id)
        .await
        .trace_parent
        .expect("the run keeps its trace");
    let caller = TraceParent::parse(caller).unwrap();
    assert_eq!(stored.trace_id, caller.trace_id, "the caller's trace");
    w.run_until_idle().await;
    let token = w.callback(&id, "payment").await;
    let (status, body) = send(&router, &format!("/hooks/{token}"), &[], "{}").await;
    assert_eq!(status, http::StatusCode::OK, "{body}");
    w.run_until_idle().await;
    assert_eq!(w.run(&id).await.status, RunStatus::Completed);
    siesta_lambda::otel::flush().await;

    let spans = in_trace(&received, &caller.trace_id);
    let starts = named(&spans, "POST /runs");
    assert_eq!(starts.len(), 1, "{spans:#?}");
    let start = starts[0];
    assert_eq!(start.parent_span_id, caller.span_id, "the caller's child");
    assert_eq!(
        stored.span_id.to_vec(),
        start.span_id,
        "the run hangs under its start request"
    );
    assert_eq!(
        attribute(start, "http.request.method").as_deref(),
        Some("POST")
    );
    assert_eq!(attribute(start, "http.route").as_deref(), Some("/runs"));
    assert_eq!(
        attribute(start, "http.response.status_code").as_deref(),
        Some("201")
    );
    let executions = named(&spans, "durable_execution");
    assert!(executions.len() >= 2, "{spans:#?}");
    for e in &executions {
        assert_eq!(e.parent_span_id, start.span_id, "{e:?}");
    }
    let waits = named(&spans, "durable_operation");
    assert_eq!(waits.len(), 1, "{waits:#?}");
    assert_eq!(attribute(waits[0], "kind").as_deref(), Some("callback"));
    assert!(
        named(&spans, "durable_run").is_empty(),
        "the caller's trace has its own root: the run emits none"
    );

    // The webhook's request learned which run it woke only once it ran: it links to it.
    let all = received.lock().unwrap().clone();
    let hooks = named(&all, "POST /hooks/{token}");
    assert!(
        hooks.iter().any(|h| h
            .links
            .iter()
            .any(|l| l.trace_id == caller.trace_id && l.span_id == start.span_id)),
        "the delivery links to the run it woke: {hooks:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_run_joins_its_parents_trace_under_the_invoke() {
    let received = global_receiver();
    let mut reg = Registry::new();
    reg.register("parent", |ctx: Context, _: serde_json::Value| async move {
        let before: u32 = ctx.step("before", |_| async { Ok(1) }).await?;
        let child: u32 = ctx.invoke("sub", "child", json!(null)).await?;
        Ok(before + child)
    });
    reg.register("child", |ctx: Context, _: serde_json::Value| async move {
        ctx.step("inside", |_| async { Ok(2u32) }).await
    });
    let w = TestEnv::builder(reg).tenant("acme").build();
    let id = w.create("parent", json!(null), None).await.unwrap();
    w.run_until_idle().await;
    assert_eq!(w.run(&id).await.status, RunStatus::Completed);
    siesta_lambda::otel::flush().await;

    let trace_id = trace_id_for(w.tenant(), &id).to_vec();
    let spans = in_trace(&received, &trace_id);
    let executions = named(&spans, "durable_execution");
    let (children, parents): (Vec<&Span>, Vec<&Span>) = executions
        .into_iter()
        .partition(|e| attribute(e, "workflow").as_deref() == Some("child"));
    assert!(
        !children.is_empty(),
        "the child's wake-ups are in the parent's trace: {spans:#?}"
    );
    let invokes: Vec<&Span> = named(&spans, "durable_operation")
        .into_iter()
        .filter(|o| attribute(o, "kind").as_deref() == Some("invoke"))
        .collect();
    assert_eq!(invokes.len(), 1, "the invoke's wait, once: {spans:#?}");
    let invoke = invokes[0];
    assert_eq!(attribute(invoke, "operationId").as_deref(), Some("sub#0"));
    assert!(
        parents.iter().any(|p| p.span_id == invoke.parent_span_id),
        "the invoke is under a wake-up of the parent: {invoke:?}"
    );
    let child_id = attribute(children[0], "run_id").unwrap();
    let child = w.run(&RunId::from(child_id.as_str())).await;
    assert_eq!(
        child.trace_parent.map(|p| p.trace_id.to_vec()),
        Some(trace_id.clone()),
        "the child keeps its parent's trace"
    );
    for c in &children {
        assert_eq!(
            c.parent_span_id, invoke.span_id,
            "every wake-up of the child under the invoke: {c:?}"
        );
    }
    let inside: Vec<&Span> = named(&spans, "durable_operation")
        .into_iter()
        .filter(|o| attribute(o, "operationId").as_deref() == Some("inside#0"))
        .collect();
    assert_eq!(inside.len(), 1, "{spans:#?}");
    assert!(
        children
            .iter()
            .any(|c| c.span_id == inside[0].parent_span_id),
        "the child's step under the child's wake-up: {inside:?}"
    );
}
