//! Export to an OTLP collector: a run of two wake-ups is one trace, whose id is the one
//! derived from the run, with a `durable_operation` span per step attempt that ran and
//! none for the replayed step. Its own test binary: the subscriber is the process's.

mod common;

use std::time::Duration;

use common::{attribute, receiver};
use opentelemetry_proto::tonic::trace::v1::Span;
use serde_json::json;
use siesta::telemetry::{root_span_id_for, trace_id_for};
use siesta::*;
use siesta_testing::TestEnv;
use tracing_subscriber::Layer;
use tracing_subscriber::layer::SubscriberExt;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_of_two_wake_ups_is_one_trace_with_a_span_per_attempt_that_ran() {
    let (url, received) = receiver().await;
    let subscriber = tracing_subscriber::registry().with(
        siesta_lambda::otel::layer_to(&url, "siesta-test")
            .with_filter(tracing_subscriber::filter::LevelFilter::INFO),
    );
    tracing::subscriber::set_global_default(subscriber).unwrap();

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

    let spans = received.lock().unwrap().clone();
    let trace_id = trace_id_for(w.tenant(), &id).to_vec();
    let executions: Vec<&Span> = spans
        .iter()
        .filter(|s| s.name == "durable_execution")
        .collect();
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
    let operations: Vec<&Span> = spans
        .iter()
        .filter(|s| s.name == "durable_operation")
        .collect();
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
}
