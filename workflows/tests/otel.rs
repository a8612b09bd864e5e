//! The `order` example's trace, as an OTLP collector receives it: started through the
//! API, a crash in the middle of its `request_payment` tool call (the run parks: the
//! call's outcome is unknown), the operator's retry of the call through the API, and
//! the payment through its callback's webhook. One
//! trace, derived from the run; a `durable_execution` span per wake-up under the run's
//! root, the one root of the trace once the run ended; a `durable_operation` span per attempt that ran and per wait that ended, each
//! under a wake-up; none again for an operation replayed after the crash. Its own test
//! binary: the subscriber is the process's.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

#[path = "../../shared/lambda/tests/common/mod.rs"]
mod common;

use std::collections::HashMap;

use common::attribute;
use opentelemetry_proto::tonic::trace::v1::Span;
use serde_json::json;
use siesta::telemetry::{root_span_id_for, trace_id_for};
use siesta::*;
use siesta_client::{Client, Resolution, StartOptions};
use siesta_testing::TestEnv;

/// The API over the environment's current engine (a restart replaces it), served on an
/// ephemeral port; a client of it.
async fn serve(w: &TestEnv) -> Client {
    let router = siesta_api::ControlApi::new(w.engine())
        .authenticate(siesta_api::ApiKeys::new(HashMap::new()))
        .router();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(siesta_api::server::serve(
        listener,
        router,
        Default::default(),
    ));
    Client::new(base)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_order_example_through_a_callback_a_crash_and_a_retry_is_one_trace() {
    let received = common::global_receiver();

    let w = TestEnv::builder(siesta_workflows::registry())
        .tenant("default")
        .build();
    let api = serve(&w).await;
    // The engine dies with its second journal write: create_order's outcome, then
    // the payment callback's creation together with request_payment's start (a tool
    // call records its attempt before running it; the callback's opening, held, goes
    // with that write). The write is kept, the process is gone before the call runs:
    // the journal cannot tell, so the run parks for an operator.
    w.crash_after_writes(2);
    let started = api
        .start_run(
            "order",
            &json!({"item": "Lamp", "amount": 12.5}),
            &StartOptions::default(),
        )
        .await
        .unwrap();
    let id = RunId::from(started.id.as_str());
    w.run_until_idle().await;
    assert!(w.has_crashed(), "the engine died mid-run");
    w.restart();
    let api = serve(&w).await;
    let parked = w.drive(&id).await;
    assert_eq!(parked.status, RunStatus::Parked, "{parked:?}");
    api.resolve_operation(id.as_str(), "request_payment#0", &Resolution::Retry, None)
        .await
        .unwrap();
    let waiting = w.drive(&id).await;
    assert_eq!(waiting.status, RunStatus::Waiting, "{waiting:?}");

    let token = w.callback(&id, "payment").await;
    api.callback_webhook(
        &token.to_string(),
        &json!({"status": "COMPLETED", "transaction_id": "txn_1"}),
        None,
    )
    .await
    .unwrap();
    let done = w.drive(&id).await;
    assert_eq!(done.status, RunStatus::Completed, "{done:?}");
    siesta_lambda::otel::flush().await;

    let all = received.lock().unwrap().clone();
    let trace_id = trace_id_for(w.tenant(), &id).to_vec();
    let root = root_span_id_for(w.tenant(), &id).to_vec();
    let spans: Vec<&Span> = all.iter().filter(|s| s.trace_id == trace_id).collect();
    let executions: Vec<&Span> = spans
        .iter()
        .copied()
        .filter(|s| s.name == "durable_execution")
        .collect();
    assert!(
        executions.len() >= 4,
        "before the crash, after it, after the retry, after the payment"
    );
    for e in &executions {
        assert_eq!(
            e.parent_span_id, root,
            "every wake-up under the run's root: {e:?}"
        );
    }
    // The run's root is emitted once it ended: one tree, every parent in the trace.
    let roots: Vec<_> = spans
        .iter()
        .filter(|s| s.parent_span_id.is_empty())
        .collect();
    assert_eq!(roots.len(), 1, "exactly one root: {roots:#?}");
    assert_eq!(roots[0].name, "durable_run");
    assert_eq!(roots[0].span_id, root);
    for s in spans.iter().filter(|s| !s.parent_span_id.is_empty()) {
        assert!(
            spans.iter().any(|p| p.span_id == s.parent_span_id),
            "its parent is in the trace: {s:?}"
        );
    }
    let mut operations: Vec<(String, Option<String>, String, String)> = Vec::new();
    for o in spans.iter().filter(|s| s.name == "durable_operation") {
        assert!(
            executions.iter().any(|e| e.span_id == o.parent_span_id),
            "an operation's parent is a wake-up of the run: {o:?}"
        );
        assert_eq!(attribute(o, "isReplay").as_deref(), Some("false"));
        operations.push((
            attribute(o, "operationId").unwrap_or_default(),
            attribute(o, "attempt"),
            attribute(o, "kind").unwrap_or_default(),
            attribute(o, "outcome").unwrap_or_default(),
        ));
    }
    operations.sort();
    let expected: Vec<(String, Option<String>, String, String)> = [
        ("create_order#0", Some("1"), "step", "succeeded"),
        ("payment#0", None, "callback", "succeeded"),
        // Attempt 1 was recorded but never ran (the crash); the retry is attempt 2.
        ("request_payment#0", Some("2"), "tool_call", "succeeded"),
        ("ship#0", Some("1"), "step", "succeeded"),
    ]
    .into_iter()
    .map(|(p, a, k, o)| (p.into(), a.map(Into::into), k.into(), o.into()))
    .collect();
    assert_eq!(
        operations, expected,
        "one span per attempt that ran and per wait, none for a replayed operation"
    );

    // The start request and the webhook learned their run while they ran: both link
    // to its trace.
    for name in ["POST /runs", "POST /hooks/{token}"] {
        let request = all
            .iter()
            .find(|s| s.name == name)
            .unwrap_or_else(|| panic!("no {name} span"));
        assert!(
            request.links.iter().any(|l| l.trace_id == trace_id),
            "{name} links to the run's trace: {request:?}"
        );
    }
}
