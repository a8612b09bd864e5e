//! The `timer` workflow on the test harness: one durable timer, until an instant or
//! for a duration.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

mod support;

use std::time::Duration;

use serde_json::json;
use siesta::*;

/// `t` as RFC 3339.
fn rfc3339(t: Timestamp) -> String {
    chrono::DateTime::from_timestamp_millis(t.0)
        .expect("a representable instant")
        .to_rfc3339()
}

#[tokio::test]
async fn a_timer_until_an_instant_sleeps_until_it_and_fires_then() {
    let w = support::env();
    let at = w.now().plus(Duration::from_secs(90));
    let id = w.start("timer", json!({"until": rfc3339(at)})).await;
    assert_eq!(w.status(&id).await, RunStatus::Waiting);
    assert_eq!(w.next_due().await, Some(at), "due at the instant asked for");
    w.advance(Duration::from_secs(89)).await;
    assert_eq!(w.status(&id).await, RunStatus::Waiting, "not before it");
    w.advance(Duration::from_secs(1)).await;
    let out: serde_json::Value = w.output(&id).await;
    assert_eq!(out, json!({"late_ms": 0}));
}

#[tokio::test]
async fn a_timer_for_a_duration_and_one_already_passed_both_fire() {
    let w = support::env();
    let sleeper = w.start("timer", json!({"sleep_ms": 5000})).await;
    let past = w
        .start(
            "timer",
            json!({"until": rfc3339(w.now().plus(Duration::ZERO))}),
        )
        .await;
    assert_eq!(w.status(&past).await, RunStatus::Completed);
    assert_eq!(w.status(&sleeper).await, RunStatus::Waiting);
    w.advance(Duration::from_secs(5)).await;
    assert_eq!(w.status(&sleeper).await, RunStatus::Completed);
}

#[tokio::test]
async fn an_instant_that_is_not_rfc_3339_fails_the_run_with_a_clear_error() {
    let w = support::env();
    let id = w.start("timer", json!({"until": "tomorrow"})).await;
    assert_eq!(w.status(&id).await, RunStatus::Failed);
    assert!(
        w.error(&id)
            .await
            .message
            .contains("not an RFC 3339 instant"),
        "{:?}",
        w.error(&id).await
    );
}
