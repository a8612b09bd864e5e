//! Typed callbacks and event waits: a delivery of the wrong shape is refused when it
//! arrives and changes nothing; one that got stored anyway (untyped wait, early event) is
//! set aside when consumed, and the wait goes on.

mod support;

use std::time::Duration;

use serde::Deserialize;
use serde_json::json;
use siesta::*;
use support::{output, world};

#[derive(Debug, Deserialize, JsonSchema)]
struct Payment {
    status: String,
    transaction_id: String,
}

fn registry() -> Registry {
    let mut reg = Registry::new();
    reg.register("typed", |ctx: Context, _: serde_json::Value| async move {
        let cb = ctx
            .create_callback::<Payment>("payment")
            .timeout(Duration::from_secs(3600))
            .await?;
        let p = cb.wait().await?;
        Ok(json!({"status": p.status, "txn": p.transaction_id}))
    });
    reg.register(
        "unchecked",
        |ctx: Context, _: serde_json::Value| async move {
            let cb = ctx.create_callback_unchecked::<Payment>("payment").await?;
            let p = cb.wait().await?;
            Ok(json!({"txn": p.transaction_id}))
        },
    );
    reg.register("event", |ctx: Context, _: serde_json::Value| async move {
        ctx.step("first", |_| async { Ok(()) }).await?;
        let p: Payment = ctx.wait_for_event("paid").await?;
        Ok(json!({"txn": p.transaction_id}))
    });
    reg.register(
        "paid_twice",
        |ctx: Context, _: serde_json::Value| async move {
            let p: Payment = ctx.wait_for_event("paid").await?;
            let r: Receipt = ctx.wait_for_event("paid").await?;
            Ok(json!({"txn": p.transaction_id, "receipt": r.receipt_id}))
        },
    );
    reg
}

#[derive(Debug, Deserialize, JsonSchema)]
struct Receipt {
    receipt_id: String,
}

fn types(timeline: &[TimelineEvent]) -> Vec<EventType> {
    timeline.iter().map(|e| e.event_type).collect()
}

#[tokio::test]
async fn a_callback_payload_of_the_wrong_shape_is_refused_and_the_callback_stays_open() {
    let w = world(registry());
    let id = w.start("typed", json!(null)).await;
    w.run_until_idle().await;
    let cb = w.open_callbacks(&id).await.pop().unwrap();
    let before = w.run(&id).await;
    let stored = w.engine().backend().store.get_callback(&cb).await.unwrap();
    assert!(stored.unwrap().accepts.is_some(), "the schema is recorded");

    for wrong in [
        json!({"unexpected": true}),
        json!({"status": "COMPLETED"}),
        json!({"status": 1, "transaction_id": "t"}),
    ] {
        let refused = w
            .engine()
            .complete_callback(&cb, None, Ok(wrong.clone()), Some("hook_bad".into()))
            .await;
        let Err(EngineError::DeliveryRejected(why)) = refused else {
            panic!("{wrong}: {refused:?}")
        };
        assert!(why.contains("payment"), "{why}");
    }
    let after = w.run(&id).await;
    assert_eq!(after.version, before.version, "nothing was recorded");
    assert_eq!(after.status, RunStatus::Waiting);
    assert!(w.replay_input(&id).await.deliveries.is_empty());
    // The right one, even under the id the wrong one was sent with, completes it.
    w.engine()
        .complete_callback(
            &cb,
            None,
            Ok(json!({"status": "COMPLETED", "transaction_id": "txn_1"})),
            Some("hook_bad".into()),
        )
        .await
        .unwrap();
    w.run_until_idle().await;
    let run = w.run(&id).await;
    assert_eq!(output(&run), json!({"status": "COMPLETED", "txn": "txn_1"}));
}

#[tokio::test]
async fn a_stored_payload_that_does_not_decode_is_set_aside_and_the_wait_goes_on() {
    let w = world(registry());
    let id = w.start("unchecked", json!(null)).await;
    w.run_until_idle().await;
    let cb = w.open_callbacks(&id).await.pop().unwrap();
    w.engine()
        .complete_callback(&cb, None, Ok(json!({"unexpected": true})), None)
        .await
        .expect("an unchecked callback takes any JSON");
    w.run_until_idle().await;
    let run = w.run(&id).await;
    assert_eq!(run.status, RunStatus::Waiting, "not failed by the sender");
    let timeline = w.timeline(&id).await;
    let rejected = timeline
        .iter()
        .find(|e| e.event_type == EventType::DeliveryRejected)
        .expect("the timeline says so");
    assert!(
        rejected.details["Reason"]
            .as_str()
            .unwrap()
            .contains("missing field"),
        "{}",
        rejected.details
    );
    let record = w.engine().backend().store.get_callback(&cb).await.unwrap();
    assert_eq!(
        record.map(|r| r.status),
        Some(CallbackStatus::Open),
        "the callback is open again"
    );

    w.engine()
        .complete_callback(
            &cb,
            None,
            Ok(json!({"status": "COMPLETED", "transaction_id": "txn_2"})),
            Some("hook_good".into()),
        )
        .await
        .unwrap();
    w.run_until_idle().await;
    let run = w.run(&id).await;
    assert_eq!(run.status, RunStatus::Completed, "{:?}", run.error);
    assert_eq!(output(&run), json!({"txn": "txn_2"}));
    let kinds = types(&w.timeline(&id).await);
    assert_eq!(
        kinds
            .iter()
            .filter(|k| **k == EventType::DeliveryRejected)
            .count(),
        1,
        "the set-aside delivery is not taken again on replay: {kinds:?}"
    );
}

#[tokio::test]
async fn an_event_is_checked_while_the_run_waits_for_it_and_set_aside_if_it_came_early() {
    let w = world(registry());
    let tenant = w.tenant().clone();
    let early = support::create(&w, "event", json!(null)).await;
    // Before the run waits for it, nothing says what it must be: kept, then set aside.
    w.engine()
        .deliver_event(&tenant, &early, "paid", json!({"wrong": 1}), None)
        .await
        .unwrap();
    w.run_until_idle().await;
    let run = w.run(&early).await;
    assert_eq!(run.status, RunStatus::Waiting);
    assert!(types(&w.timeline(&early).await).contains(&EventType::DeliveryRejected));

    // Now it waits: the wrong shape is refused on arrival, nothing recorded.
    let before = w.run(&early).await.version;
    let refused = w
        .engine()
        .deliver_event(&tenant, &early, "paid", json!({"status": "x"}), None)
        .await;
    assert!(
        matches!(&refused, Err(EngineError::DeliveryRejected(why)) if why.contains("transaction_id")),
        "{refused:?}"
    );
    assert_eq!(w.run(&early).await.version, before);
    // Another event name is not judged by this wait.
    w.engine()
        .deliver_event(&tenant, &early, "other", json!({"any": "thing"}), None)
        .await
        .unwrap();
    w.engine()
        .deliver_event(
            &tenant,
            &early,
            "paid",
            json!({"status": "COMPLETED", "transaction_id": "txn_3"}),
            None,
        )
        .await
        .unwrap();
    w.run_until_idle().await;
    let run = w.run(&early).await;
    assert_eq!(output(&run), json!({"txn": "txn_3"}));
}

#[tokio::test]
async fn an_event_delivery_checks_the_journal_and_never_loads_the_runs_deliveries() {
    let w = world(registry());
    let tenant = w.tenant().clone();
    let id = support::create(&w, "event", json!(null)).await;
    w.run_until_idle().await;
    // Deliveries the run keeps (messages it never drains) must not be read per event.
    for i in 0..5 {
        w.engine()
            .inject_message(&tenant, &id, json!({"n": i}), None)
            .await
            .unwrap();
    }
    w.run_until_idle().await;
    let probe = w.probe();
    let before = probe
        .replay_input_loads
        .load(std::sync::atomic::Ordering::SeqCst);
    let refused = w
        .engine()
        .deliver_event(&tenant, &id, "paid", json!({"status": "x"}), None)
        .await;
    assert!(
        matches!(refused, Err(EngineError::DeliveryRejected(_))),
        "the journal's typed wait judged it: {refused:?}"
    );
    w.engine()
        .deliver_event(
            &tenant,
            &id,
            "paid",
            json!({"status": "COMPLETED", "transaction_id": "txn_9"}),
            None,
        )
        .await
        .unwrap();
    assert_eq!(
        probe
            .replay_input_loads
            .load(std::sync::atomic::Ordering::SeqCst),
        before,
        "no event delivery loaded the run's history"
    );
    w.run_until_idle().await;
    assert_eq!(output(&w.run(&id).await), json!({"txn": "txn_9"}));
}

#[tokio::test]
async fn an_event_for_the_next_wait_is_kept_while_the_stored_wait_has_one_to_take() {
    let w = world(registry());
    let tenant = w.tenant().clone();
    let id = support::create(&w, "paid_twice", json!(null)).await;
    w.run_until_idle().await;
    let receipt = json!({"receipt_id": "r_1"});

    // Nothing pending: the stored wait judges the event, and a receipt is not a payment.
    let refused = w
        .engine()
        .deliver_event(&tenant, &id, "paid", receipt.clone(), None)
        .await;
    assert!(
        matches!(&refused, Err(EngineError::DeliveryRejected(why)) if why.contains("transaction_id")),
        "{refused:?}"
    );

    // The payment arrives; before the run takes it in, the receipt for its next wait
    // (the journal cannot show that wait's type yet) is kept, not refused.
    w.engine()
        .deliver_event(
            &tenant,
            &id,
            "paid",
            json!({"status": "COMPLETED", "transaction_id": "txn_1"}),
            None,
        )
        .await
        .unwrap();
    w.engine()
        .deliver_event(&tenant, &id, "paid", receipt, None)
        .await
        .expect("the stored wait already has the payment: the receipt is for the next one");
    w.run_until_idle().await;
    let run = w.run(&id).await;
    assert_eq!(output(&run), json!({"txn": "txn_1", "receipt": "r_1"}));
    assert!(
        !types(&w.timeline(&id).await).contains(&EventType::DeliveryRejected),
        "nothing was set aside"
    );
}
