//! Export to an OTLP collector: a run of two wake-ups is one trace, whose id is the one
//! derived from the run, with a `durable_operation` span per step attempt that ran,
//! none for the replayed step, and one for the wait between the wake-ups; a run started
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
