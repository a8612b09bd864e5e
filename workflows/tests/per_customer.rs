//! The `per_customer` workflow on the test harness: one unfinished run per customer,
//! the next one queued until it finishes.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

mod support;

use serde_json::json;
use siesta::*;

#[tokio::test]
async fn a_customers_second_run_is_queued_until_the_first_is_done() {
    let w = support::env();
    let first = w.start("per_customer", json!({"customer": "acme"})).await;
    let second = w.start("per_customer", json!({"customer": "acme"})).await;
    let other = w.start("per_customer", json!({"customer": "globex"})).await;
    assert_eq!(w.status(&first).await, RunStatus::Waiting);
    assert_eq!(w.status(&other).await, RunStatus::Waiting);
    let queued = w.run(&second).await;
    assert_eq!(queued.status, RunStatus::Queued);
    let at = queued.queued.expect("where it waits");
    assert_eq!(
        (at.limit.as_str(), at.key.as_str()),
        ("per-customer", "acme")
    );

    w.deliver_event(&first, "done", json!({"resolved": true}))
        .await;
    let out: serde_json::Value = w.output(&first).await;
    assert_eq!(out, json!({"customer": "acme", "done": {"resolved": true}}));
    assert_eq!(w.status(&second).await, RunStatus::Waiting, "its turn now");
}

#[tokio::test]
async fn a_start_without_a_customer_is_refused() {
    let w = support::env();
    let got = w.try_start("per_customer", json!({}), None).await;
    assert!(matches!(got, Err(EngineError::InvalidInput(_))), "{got:?}");
}
