//! Concurrency limits per key on runs, through the engine: a start over a limit is
//! accepted and queued, costs nothing while it waits, takes deliveries meanwhile, and
//! runs the moment a holder of its key finishes; other keys are not held up.

mod support;

use serde_json::json;
use siesta::*;
use support::world;

/// `per_customer`: at most one unfinished run per customer; each waits for `done`.
fn registry() -> Registry {
    let mut reg = Registry::new();
    reg.register(
        "per_customer",
        |ctx: Context, input: serde_json::Value| async move {
            let done: serde_json::Value = ctx.wait_for_event("done").await?;
            Ok(json!({"customer": input["customer"], "done": done}))
        },
    )
    .limit(
        RunLimit::new("per-customer", 1)
            .key_from_input("/customer")
            .workflow("per_customer"),
    );
    reg
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_run_of_a_customer_waits_queued_and_runs_when_the_first_finishes() {
    let w = world(registry());
    let first = w.start("per_customer", json!({"customer": "acme"})).await;
    let second = w.start("per_customer", json!({"customer": "acme"})).await;
    let other = w.start("per_customer", json!({"customer": "globex"})).await;
    assert_eq!(w.status(&first).await, RunStatus::Waiting);
    assert_eq!(
        w.status(&other).await,
        RunStatus::Waiting,
        "another customer is not held up"
    );
    let queued = w.run(&second).await;
    assert_eq!(queued.status, RunStatus::Queued);
    let at = queued.queued.clone().expect("where it waits");
    assert_eq!(
        (at.limit.as_str(), at.key.as_str()),
        ("per-customer", "acme")
    );
    assert_eq!(w.engine().queue_position(&queued).await.unwrap(), Some(1));
    assert!(
        w.journal(&second).await.is_empty(),
        "a queued run has not begun"
    );

    // An event for the queued run is recorded now and taken once it runs.
    w.deliver_event(&second, "done", "early").await;
    assert_eq!(
        w.status(&second).await,
        RunStatus::Queued,
        "a delivery does not admit it"
    );

    w.deliver_event(&first, "done", "first").await;
    assert_eq!(w.status(&first).await, RunStatus::Completed);
    let admitted = w.run(&second).await;
    assert_eq!(
        admitted.status,
        RunStatus::Completed,
        "admitted, it ran with its early event"
    );
    assert_eq!(support::output(&admitted)["done"], json!("early"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_of_a_key_start_in_the_order_they_were_queued() {
    let w = world(registry());
    let holder = w.start("per_customer", json!({"customer": "acme"})).await;
    let mut line = Vec::new();
    for _ in 0..3 {
        line.push(w.start("per_customer", json!({"customer": "acme"})).await);
    }
    let mut previous = holder;
    for next in &line {
        assert_eq!(w.status(next).await, RunStatus::Queued);
        w.deliver_event(&previous, "done", "ok").await;
        assert_eq!(w.status(&previous).await, RunStatus::Completed);
        assert_eq!(w.status(next).await, RunStatus::Waiting, "{next} runs next");
        for later in line.iter().skip_while(|r| *r != next).skip(1) {
            assert_eq!(
                w.status(later).await,
                RunStatus::Queued,
                "{later} still waits"
            );
        }
        previous = next.clone();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_queued_run_never_runs_and_the_line_moves_past_it() {
    let w = world(registry());
    let holder = w.start("per_customer", json!({"customer": "acme"})).await;
    let cancelled = w.start("per_customer", json!({"customer": "acme"})).await;
    let last = w.start("per_customer", json!({"customer": "acme"})).await;
    let run = w.cancel(&cancelled).await;
    assert_eq!(run.status, RunStatus::Cancelled);
    assert_eq!(run.queued, None);
    let queued = w.run(&last).await;
    assert_eq!(
        w.engine().queue_position(&queued).await.unwrap(),
        Some(1),
        "next now"
    );

    w.deliver_event(&holder, "done", "ok").await;
    assert_eq!(w.status(&last).await, RunStatus::Waiting);
    assert!(
        w.journal(&cancelled).await.is_empty(),
        "the cancelled run never ran"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_the_holder_admits_the_next() {
    let w = world(registry());
    let holder = w.start("per_customer", json!({"customer": "acme"})).await;
    let next = w.start("per_customer", json!({"customer": "acme"})).await;
    w.cancel(&holder).await;
    w.run_until_idle().await;
    assert_eq!(w.status(&next).await, RunStatus::Waiting);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_without_the_key_its_limit_reads_is_refused_as_invalid_input() {
    let w = world(registry());
    let got = w
        .try_start("per_customer", json!({"name": "acme"}), None)
        .await;
    match got {
        Err(EngineError::InvalidInput(m)) => {
            assert!(m.contains("per-customer") && m.contains("/customer"), "{m}")
        }
        other => panic!("expected invalid input, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_limits_report_says_how_many_hold_and_wait_per_key() {
    let w = world(registry());
    for customer in ["acme", "acme", "acme", "globex"] {
        w.start("per_customer", json!({ "customer": customer }))
            .await;
    }
    let limits = w.engine().limits(w.tenant()).await.unwrap();
    assert_eq!(limits.len(), 1);
    let limit = &limits[0];
    assert_eq!((limit.name.as_str(), limit.max), ("per-customer", Some(1)));
    assert_eq!(limit.workflows, vec!["per_customer".to_owned()]);
    let keys: Vec<(&str, u64, u64)> = limit
        .keys
        .iter()
        .map(|k| (k.key.as_str(), k.holders, k.waiters))
        .collect();
    assert_eq!(keys, vec![("acme", 1, 2), ("globex", 1, 0)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployments_override_raises_the_max() {
    let config = EngineConfig {
        limits: LimitOverrides::parse(r#"{"per-customer": 2}"#).unwrap(),
        ..siesta_testing::default_engine_config()
    };
    let w = siesta_testing::TestEnv::builder(registry())
        .tenant("acme")
        .engine_config(config)
        .build();
    let a = w.start("per_customer", json!({"customer": "acme"})).await;
    let b = w.start("per_customer", json!({"customer": "acme"})).await;
    let c = w.start("per_customer", json!({"customer": "acme"})).await;
    assert_eq!(w.status(&a).await, RunStatus::Waiting);
    assert_eq!(w.status(&b).await, RunStatus::Waiting);
    assert_eq!(w.status(&c).await, RunStatus::Queued);
}

/// A child run would not count against its workflow's limit: `invoke` refuses such a
/// workflow with an error that says so, rather than let it through unseen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invoking_a_limited_workflow_is_refused_naming_its_limit() {
    let mut reg = registry();
    reg.register("parent", |ctx: Context, _: serde_json::Value| async move {
        match ctx
            .invoke::<serde_json::Value, _>("child", "per_customer", json!({"customer": "acme"}))
            .await
        {
            Ok(_) => Ok(json!("invoked")),
            Err(e) => Ok(json!({"kind": e.kind().as_str(), "message": e.to_string()})),
        }
    });
    let w = world(reg);
    let parent = w.execute("parent", json!(null)).await;
    let out = support::output(&parent);
    assert_eq!(out["kind"], json!("InvalidConfig"), "{out}");
    let message = out["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("the concurrency limit per-customer"),
        "{message}"
    );
}
