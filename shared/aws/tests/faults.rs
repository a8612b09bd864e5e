//! Fault tests: at every write of an order run (DynamoDB writes and SQS sends) the
//! first attempt is throttled, or answered 500 after the service applied it, or times
//! out after the service applied it. Every run still completes exactly once, with no
//! lost wake-up and no duplicated side effect.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

mod support;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use aws_smithy_runtime_api::client::http::SharedHttpClient;
use serde_json::json;
use siesta::ports::DeliverOutcome;
use siesta::*;
use support::faults::{Fault, FaultyClient};

const ATTEMPT_TIMEOUT: Duration = Duration::from_millis(800);

/// An order's shape (the examples' `order`, kept here so this library's tests do not
/// depend on the examples): a step, a callback, a side-effecting tool call, the wait,
/// a last step.
fn order_registry() -> Registry {
    let mut registry = Registry::new();
    registry.register("order", |ctx: Context, input: serde_json::Value| async move {
        let order_id: String = ctx
            .step("create_order", |_| async { Ok("ord-1".to_owned()) })
            .await?;
        let payment = ctx
            .create_callback::<serde_json::Value>("payment")
            .timeout(Duration::from_secs(3600))
            .await?;
        let url = payment.url();
        ctx.tool_call("request_payment", &(&order_id, &input), move |_| async move {
            Ok(json!({"callback_url": url}))
        })
        .await?;
        let event = payment.wait().await?;
        let tracking: String = ctx
            .step("ship", |_| async { Ok("TRK-1".to_owned()) })
            .await?;
        Ok(json!({"order_id": order_id, "transaction_id": event["transaction_id"], "tracking": tracking}))
    });
    registry
}

async fn order_completes_exactly_once_under(fault: Fault) {
    let Some(env) = support::emulators().await else {
        return;
    };
    let base = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .timeout_config(
            aws_config::timeout::TimeoutConfig::builder()
                .operation_attempt_timeout(ATTEMPT_TIMEOUT)
                .build(),
        )
        .load()
        .await;
    let faulty = FaultyClient::new(
        // The emulators speak plain HTTP.
        aws_smithy_http_client::Builder::new().build_http(),
        fault,
        ATTEMPT_TIMEOUT * 2,
    );
    let counts = faulty.counts.clone();
    let sdk = base
        .into_builder()
        .http_client(SharedHttpClient::new(faulty))
        .build();
    let backend = env
        .backend_on(&sdk, 5, siesta_aws::AwsOptions::default())
        .await
        .backend();
    let engine = Engine::new(
        backend.clone(),
        Arc::new(SystemClock),
        order_registry(),
        EngineConfig {
            lease_ttl: Duration::from_secs(3),
            ..EngineConfig::default()
        },
    );
    let tenant = TenantId(format!("faults-{}", uuid::Uuid::new_v4().simple()));
    let run = engine
        .start(
            &tenant,
            "order",
            json!({"item": "Lamp", "amount": 20}),
            None,
        )
        .await
        .expect("start");

    let waiting = drive_until(&engine, &tenant, &run.id, |r| {
        r.status == RunStatus::Waiting
    })
    .await;
    let callback = support::waiting_callback(&*backend.store, &tenant, &run.id)
        .await
        .unwrap_or_else(|| panic!("waiting on a callback: {waiting:?}"));

    let payment = json!({"status": "COMPLETED", "transaction_id": "txn_1"});
    for attempt in 0..2 {
        let outcome = engine
            .complete_callback(
                &callback,
                Some(&tenant),
                Ok(payment.clone()),
                Some(DeliveryId("hook-1".into())),
            )
            .await
            .expect("the webhook is stored");
        assert_eq!(
            matches!(outcome, DeliverOutcome::Duplicate),
            attempt == 1,
            "the first delivery is accepted, the second a duplicate: {outcome:?}"
        );
    }

    let done = drive_until(&engine, &tenant, &run.id, |r| r.status.is_finished()).await;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    let output = match &done.output {
        Some(Payload::Inline(v)) => v.clone(),
        other => panic!("inline output: {other:?}"),
    };
    assert_eq!(output["transaction_id"], "txn_1");

    let timeline = backend
        .store
        .timeline(&tenant, &run.id, 0, 1000)
        .await
        .expect("timeline");
    let seqs: Vec<u64> = timeline.iter().map(|e| e.seq).collect();
    assert_eq!(
        seqs,
        (1..=timeline.len() as u64).collect::<Vec<_>>(),
        "gapless"
    );
    let count = |t: EventType, name: Option<&str>| {
        timeline
            .iter()
            .filter(|e| e.event_type == t && name.is_none_or(|n| e.name.as_deref() == Some(n)))
            .count()
    };
    assert_eq!(
        count(EventType::ExecutionSucceeded, None),
        1,
        "{timeline:#?}"
    );
    assert_eq!(
        count(EventType::CallbackDelivered, None),
        1,
        "{timeline:#?}"
    );
    for step in ["create_order", "request_payment", "ship"] {
        assert_eq!(
            count(EventType::StepSucceeded, Some(step)),
            1,
            "{step} succeeded once: {timeline:#?}"
        );
    }
    assert_eq!(
        count(EventType::StepStarted, Some("request_payment")),
        1,
        "the side effect ran once: {timeline:#?}"
    );
    let faulted = counts.faulted.load(Ordering::Relaxed);
    assert!(
        faulted >= 8,
        "every write was faulted once ({faulted} writes faulted)"
    );
    eprintln!(
        "{fault:?}: {faulted} writes faulted, {} requests in all",
        counts.requests.load(Ordering::Relaxed)
    );
}

/// Handle wake-ups and sweep until `done` holds for the run.
async fn drive_until(
    engine: &Engine,
    tenant: &TenantId,
    run_id: &RunId,
    done: impl Fn(&Run) -> bool,
) -> Run {
    for _ in 0..120 {
        if let Err(e) = engine.run_until_idle(20).await {
            eprintln!("worker: {e}");
        }
        let run = engine.get_run(tenant, run_id).await;
        match run {
            Ok(run) if done(&run) => return run,
            Ok(_) => {}
            Err(e) => eprintln!("read: {e}"),
        }
        // What a crashed or faulted invocation left due, the sweep wakes again.
        if let Err(e) = engine.sweep(100).await {
            eprintln!("sweep: {e}");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    panic!(
        "the run never got there: {:?}",
        engine.get_run(tenant, run_id).await
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throttling_at_every_write_still_completes_the_order_exactly_once() {
    order_completes_exactly_once_under(Fault::Throttle).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_500_after_every_applied_write_still_completes_the_order_exactly_once() {
    order_completes_exactly_once_under(Fault::ServerErrorAfterApplied).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_after_every_applied_write_still_completes_the_order_exactly_once() {
    order_completes_exactly_once_under(Fault::TimeoutAfterApplied).await;
}
