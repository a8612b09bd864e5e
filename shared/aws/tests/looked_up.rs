//! A callback record a webhook's lookup read stands in for the delivery's own read of
//! it (one read fewer) only while it lets the delivery through: another process may
//! have changed the record since (a heartbeat moving its deadline), and a delivery the
//! stale record would refuse is decided again on a fresh read.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

mod support;

use std::time::Duration;

use serde_json::json;
use siesta::ports::DeliverOutcome;
use siesta::*;
use support::waiting::{delivery, waiting_on_a_callback};

#[tokio::test]
async fn an_outcome_a_stale_looked_up_record_would_refuse_is_decided_on_a_fresh_read() {
    let Some(env) = support::emulators().await else {
        return;
    };
    let names = env.names(3).await;
    // Two processes on one deployment: the webhook's, and another that takes a heartbeat.
    let webhook = siesta_aws::AwsBackend::new(&env.sdk, names.clone()).backend();
    let other = siesta_aws::AwsBackend::new(&env.sdk, names).backend();
    let at = Timestamp(1_700_000_000_000);
    let every = Duration::from_secs(10);
    let (_, record) =
        waiting_on_a_callback(&*webhook.store, "looked-up", at, false, Some(every)).await;
    // The webhook's lookup reads the record: its heartbeat deadline is at + 10 s.
    let read = webhook
        .store
        .get_callback(&record.callback_id)
        .await
        .unwrap();
    assert_eq!(read.as_ref(), Some(&record));
    // A heartbeat through the other process moves it to at + 18 s.
    let heartbeat = delivery(
        &record,
        DeliveryBody::CallbackHeartbeat {
            callback_id: record.callback_id.clone(),
        },
        at.plus(Duration::from_secs(8)),
    );
    let got = other.store.deliver(&heartbeat).await.unwrap();
    assert!(matches!(got, DeliverOutcome::Accepted(_)), "{got:?}");
    // The outcome, at + 12 s: past the deadline the lookup read, before the one
    // stored. Accepted, and the callback closed.
    let outcome = delivery(
        &record,
        DeliveryBody::CallbackSucceeded {
            callback_id: record.callback_id.clone(),
            value: Payload::Inline(json!({"approved": true})),
        },
        at.plus(Duration::from_secs(12)),
    );
    let got = webhook.store.deliver(&outcome).await;
    assert!(
        matches!(got, Ok(DeliverOutcome::Accepted(_))),
        "an outcome within the heartbeat deadline stored: {got:?}"
    );
    let closed = other
        .store
        .get_callback(&record.callback_id)
        .await
        .unwrap()
        .expect("the record");
    assert_ne!(closed.status, CallbackStatus::Open);
}
