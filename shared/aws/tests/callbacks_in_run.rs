//! A callback's state kept in its run's item: the callback record is the index its
//! token finds the run by, written once; whether the callback is open, and its
//! heartbeat deadline, are the run item's, so a delivery writes the delivery record and
//! the run item and nothing else. A run item holds at most four callbacks' states; the
//! others keep theirs in their records.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

mod support;

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use serde_json::json;
use siesta::ports::{Checkpoint, Claim, DeliverOutcome, NewDelivery, StoreError};
use siesta::*;
use support::waiting::{callback, claimed_run, delivery, waiting_on_a_callback};

type Item = HashMap<String, AttributeValue>;

fn success(record: &CallbackRecord, at: Timestamp) -> NewDelivery {
    let body = DeliveryBody::CallbackSucceeded {
        callback_id: record.callback_id.clone(),
        value: Payload::Inline(json!({"approved": true})),
    };
    delivery(record, body, at)
}

async fn get(env: &support::Emulators, pk: String, sk: &str) -> Option<Item> {
    aws_sdk_dynamodb::Client::new(&env.sdk)
        .get_item()
        .table_name(&env.table)
        .key("pk", AttributeValue::S(pk))
        .key("sk", AttributeValue::S(sk.into()))
        .consistent_read(true)
        .send()
        .await
        .unwrap()
        .item
}

async fn record_item(env: &support::Emulators, record: &CallbackRecord) -> Item {
    let pk = format!("C#{}", record.callback_id.as_str());
    get(env, pk, "REC").await.expect("the callback record")
}

async fn run_item(env: &support::Emulators, record: &CallbackRecord) -> Item {
    let pk = siesta_aws::keys::run_pk(&record.tenant, &record.run_id);
    get(env, pk, "RUN").await.expect("the run item")
}

/// The callback's state in the run item: its heartbeat deadline (0 for none), while
/// open.
fn state(run: &Item, record: &CallbackRecord) -> Option<i64> {
    run.get(&format!("c#{}", record.callback_id.as_str()))
        .map(|v| v.as_n().unwrap().parse().unwrap())
}

fn status(record: &Item) -> String {
    record["callback_status"].as_s().unwrap().clone()
}

#[tokio::test]
async fn an_outcome_closes_the_callback_in_the_run_item_and_leaves_its_record_as_opened() {
    let Some(env) = support::emulators().await else {
        return;
    };
    let aws = env.backend(3).await;
    let store = aws.backend().store;
    let at = Timestamp(1_700_000_000_000);
    let (_, record) = waiting_on_a_callback(&*store, "in-run", at, true, None).await;
    let opened = record_item(&env, &record).await;
    assert_eq!(status(&opened), "in_run");
    assert_eq!(state(&run_item(&env, &record).await, &record), Some(0));
    assert_eq!(
        store.get_callback(&record.callback_id).await.unwrap(),
        Some(record.clone())
    );

    let first = success(&record, at.plus(Duration::from_secs(5)));
    let before = aws.written_items();
    let got = store.deliver(&first).await.unwrap();
    assert!(matches!(got, DeliverOutcome::Accepted(_)), "{got:?}");
    let written: Vec<String> = aws
        .written_items()
        .into_iter()
        .filter(|(what, items)| before.get(what).is_none_or(|b| b.items < items.items))
        .map(|(what, _)| what)
        .collect();
    assert_eq!(
        written,
        vec![
            "deliver: DeliveryRecord (transactional)",
            "deliver: DeliveryRun (transactional)",
            // The run item's wake-up mark moves its entry in the due index.
            "deliver: due index",
        ],
        "the delivery writes its record and the run item, no callback record"
    );
    assert_eq!(
        record_item(&env, &record).await,
        opened,
        "the record as opened"
    );
    assert_eq!(state(&run_item(&env, &record).await, &record), None);
    let closed = store.get_callback(&record.callback_id).await.unwrap();
    assert_eq!(closed.map(|r| r.status), Some(CallbackStatus::Completed));

    // The same delivery again is a duplicate; another outcome finds it closed.
    let again = store.deliver(&first).await.unwrap();
    assert!(matches!(again, DeliverOutcome::Duplicate), "{again:?}");
    let second = success(&record, at.plus(Duration::from_secs(6)));
    let refused = store.deliver(&second).await;
    assert!(matches!(refused, Err(StoreError::Gone(_))), "{refused:?}");
}

#[tokio::test]
async fn a_heartbeat_moves_the_deadline_the_run_item_holds() {
    let Some(env) = support::emulators().await else {
        return;
    };
    let store = env.backend(3).await.backend().store;
    let at = Timestamp(1_700_000_000_000);
    let every = Duration::from_secs(10);
    let (_, record) = waiting_on_a_callback(&*store, "in-run", at, true, Some(every)).await;
    assert_eq!(
        state(&run_item(&env, &record).await, &record),
        Some(at.plus(every).millis())
    );
    let beat = DeliveryBody::CallbackHeartbeat {
        callback_id: record.callback_id.clone(),
    };
    let beat_at = at.plus(Duration::from_secs(8));
    store
        .deliver(&delivery(&record, beat, beat_at))
        .await
        .unwrap();
    assert_eq!(
        state(&run_item(&env, &record).await, &record),
        Some(beat_at.plus(every).millis())
    );
    // In time only for the moved deadline.
    let late_for_the_first = success(&record, at.plus(Duration::from_secs(12)));
    let got = store.deliver(&late_for_the_first).await.unwrap();
    assert!(matches!(got, DeliverOutcome::Accepted(_)), "{got:?}");
    // Past the moved one, another callback's heartbeat deadline is still the record's.
    let (_, watched) = waiting_on_a_callback(&*store, "in-run", at, true, Some(every)).await;
    let late = success(&watched, at.plus(Duration::from_secs(11)));
    let refused = store.deliver(&late).await;
    assert!(matches!(refused, Err(StoreError::Gone(_))), "{refused:?}");
}

#[tokio::test]
async fn a_checkpoint_that_times_a_callback_out_writes_its_record_and_removes_its_state() {
    let Some(env) = support::emulators().await else {
        return;
    };
    let store = env.backend(3).await.backend().store;
    let at = Timestamp(1_700_000_000_000);
    let (waiting, record) = waiting_on_a_callback(&*store, "in-run", at, true, None).await;
    let later = at.plus(Duration::from_secs(3600));
    let claim = Claim {
        owner: "engine".into(),
        now: later,
        expires_at: later.plus(Duration::from_secs(60)),
    };
    let held = store
        .claim(&waiting.tenant, &waiting.id, &claim)
        .await
        .unwrap();
    let mut next = held.clone();
    next.version += 1;
    let mut cp = Checkpoint::new(next, held.version, Some(held.epoch));
    cp.by_own_build = true;
    let timed_out = CallbackRecord {
        status: CallbackStatus::TimedOut,
        ..record.clone()
    };
    cp.callbacks.push(timed_out.clone());
    store.checkpoint(&cp).await.unwrap();
    assert_eq!(state(&run_item(&env, &record).await, &record), None);
    assert_eq!(status(&record_item(&env, &record).await), "timed_out");
    assert_eq!(
        store.get_callback(&record.callback_id).await.unwrap(),
        Some(timed_out)
    );
    let late = store.deliver(&success(&record, later)).await;
    assert!(matches!(late, Err(StoreError::Gone(_))), "{late:?}");
}

/// A run claimed at `at` (lease for a minute) that opens the callbacks `ids` and keeps
/// running: the run after that checkpoint, and the callbacks' records.
async fn running_with_callbacks(
    store: &dyn siesta::ports::RunStore,
    at: Timestamp,
    ids: usize,
) -> (Run, Vec<CallbackRecord>) {
    let held = claimed_run(store, "in-run", at).await;
    // As the engine does, the replay after the claim reads the run's history first.
    store.load_claimed_replay_input(&held).await.unwrap();
    let mut next = held.clone();
    next.version += 1;
    let mut cp = Checkpoint::new(next, held.version, Some(held.epoch));
    cp.by_own_build = true;
    let records: Vec<CallbackRecord> = (0..ids)
        .map(|i| callback(&held, &format!("approval#{i}"), at, false, None))
        .collect();
    cp.callbacks = records.clone();
    store.checkpoint(&cp).await.unwrap();
    (cp.run, records)
}

#[tokio::test]
async fn a_delivery_decided_before_a_lease_renewal_does_not_undo_it() {
    let Some(env) = support::emulators().await else {
        return;
    };
    let names = env.names(3).await;
    let webhook = siesta_aws::AwsBackend::new(&env.sdk, names.clone()).backend();
    let engine = siesta_aws::AwsBackend::new(&env.sdk, names).backend();
    let at = Timestamp(1_700_000_000_000);
    let (running, records) = running_with_callbacks(&*engine.store, at, 1).await;
    let record = &records[0];
    // The webhook's lookup reads the record and the run item, lease until at + 60 s...
    let looked_up = webhook.store.get_callback(&record.callback_id).await;
    assert_eq!(
        looked_up.unwrap().map(|r| r.status),
        Some(CallbackStatus::Open)
    );
    // ...the run's holder renews its lease (a renewal writes no new version)...
    let renewed_until = at.plus(Duration::from_secs(120));
    let epoch = running.lease.as_ref().unwrap().epoch;
    engine
        .store
        .renew_lease(&running.tenant, &running.id, epoch, renewed_until)
        .await
        .unwrap();
    // ...then the outcome arrives: stored, with the renewed lease kept.
    let got = webhook
        .store
        .deliver(&success(record, at.plus(Duration::from_secs(30))))
        .await
        .unwrap();
    assert!(matches!(got, DeliverOutcome::Accepted(_)), "{got:?}");
    let after = engine
        .store
        .get_run(&running.tenant, &running.id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(after.lease.map(|l| l.expires_at), Some(renewed_until));
}

#[tokio::test]
async fn a_run_item_holds_at_most_four_callbacks_state_and_the_rest_keep_theirs_in_their_records() {
    let Some(env) = support::emulators().await else {
        return;
    };
    let store = env.backend(3).await.backend().store;
    let at = Timestamp(1_700_000_000_000);
    let (_, records) = running_with_callbacks(&*store, at, 6).await;
    let mut statuses = Vec::new();
    for record in &records {
        statuses.push(status(&record_item(&env, record).await));
    }
    assert_eq!(
        statuses,
        ["in_run", "in_run", "in_run", "in_run", "open", "open"]
    );
    let run = run_item(&env, &records[0]).await;
    let held: Vec<bool> = records.iter().map(|r| state(&run, r).is_some()).collect();
    assert_eq!(held, [true, true, true, true, false, false]);
    // Each is delivered, wherever its state is.
    for (i, record) in records.iter().enumerate() {
        let outcome = success(record, at.plus(Duration::from_secs(1 + i as u64)));
        let got = store.deliver(&outcome).await.unwrap();
        assert!(matches!(got, DeliverOutcome::Accepted(_)), "{got:?}");
        let read = store.get_callback(&record.callback_id).await.unwrap();
        assert_eq!(read.map(|r| r.status), Some(CallbackStatus::Completed));
    }
    assert!(state_attrs_left(&run_item(&env, &records[0]).await).is_empty());
}

fn state_attrs_left(run: &Item) -> Vec<&String> {
    run.keys().filter(|k| k.starts_with("c#")).collect()
}

#[tokio::test]
async fn a_record_an_attempt_before_put_decides_where_the_callbacks_state_goes() {
    let Some(env) = support::emulators().await else {
        return;
    };
    // An attempt that knew the run item had room put the record as `in_run`, then was
    // refused, and its record was not withdrawn. The next attempt, by a store that
    // does not know what the run item holds (which would otherwise keep the state in
    // the record), finds it.
    let store = env.backend(3).await.backend().store;
    let at = Timestamp(1_700_000_000_000);
    let held = claimed_run(&*store, "in-run", at).await;
    let record = callback(&held, "approval#0", at, false, None);
    aws_sdk_dynamodb::Client::new(&env.sdk)
        .put_item()
        .table_name(&env.table)
        .item(
            "pk",
            AttributeValue::S(format!("C#{}", record.callback_id.as_str())),
        )
        .item("sk", AttributeValue::S("REC".into()))
        .item("callback_status", AttributeValue::S("in_run".into()))
        .item(
            "body",
            AttributeValue::S(serde_json::to_string(&record).unwrap()),
        )
        .send()
        .await
        .unwrap();
    let mut waiting = held.clone();
    waiting.version += 1;
    waiting.status = RunStatus::Waiting;
    waiting.lease = None;
    let mut cp = Checkpoint::new(waiting, held.version, Some(held.epoch));
    cp.by_own_build = true;
    cp.callbacks.push(record.clone());
    store.checkpoint(&cp).await.unwrap();
    assert_eq!(state(&run_item(&env, &record).await, &record), Some(0));
    assert_eq!(
        store.get_callback(&record.callback_id).await.unwrap(),
        Some(record.clone())
    );
    let got = store
        .deliver(&success(&record, at.plus(Duration::from_secs(1))))
        .await
        .unwrap();
    assert!(matches!(got, DeliverOutcome::Accepted(_)), "{got:?}");
}
