//! Deliveries: dedup, counters, due times, callbacks, deliveries to parents, history.

use std::collections::BTreeSet;
use std::time::Duration;

use siesta::ports::*;
use siesta::*;

use crate::Harness;
use crate::support::*;

/// What `deliver` must make of `before` for `d`; `updated_at` is the writer's.
fn delivered_to(before: &Run, d: &NewDelivery, updated_at: Timestamp) -> Run {
    let mut expected = before.clone();
    expected.inbox_seq += 1;
    expected.timeline_seq += 1;
    expected.version += 1;
    if before.status == RunStatus::Waiting {
        expected.due_at = Some(d.received_at);
    }
    expected.updated_at = updated_at;
    expected
}

/// The delivery as `load_replay_input` must return it, with its `seq`.
fn stored(d: &NewDelivery, seq: u64) -> Delivery {
    Delivery {
        id: d.id.clone(),
        tenant: d.tenant.clone(),
        run_id: d.run_id.clone(),
        seq,
        body: d.body.clone(),
        received_at: d.received_at,
    }
}

/// The event as the timeline must hold it, numbered `seq`.
fn numbered(d: &NewDelivery, seq: u64) -> TimelineEvent {
    TimelineEvent {
        seq,
        ..d.event.clone()
    }
}

/// A delivery to a waiting run is stored with the next inbox seq, its event is appended
/// with the next timeline seq, and the run's `inbox_seq`, `timeline_seq` and `version`
/// go up by one and it is due at once (`due_at` = `received_at`).
pub async fn deliver_appends_delivery_and_event(h: Harness) {
    let tenant = tenant();
    let run = waiting_run(&h, &tenant).await;
    let mut current = run.clone();
    let mut sent = Vec::new();
    for (i, d) in [
        event_delivery(&h, &run, "approval"),
        delivery(
            &h,
            &tenant,
            &run.id,
            DeliveryBody::Message {
                value: json(serde_json::json!({"text": "hurry"})),
            },
            EventType::MessageInjected,
        ),
    ]
    .into_iter()
    .enumerate()
    {
        h.advance(Duration::from_secs(1)).await;
        let d = NewDelivery {
            received_at: h.now(),
            resend_after: None,
            ..d
        };
        let after = deliver(&h, &d).await;
        assert_eq!(
            after,
            delivered_to(&current, &d, after.updated_at),
            "delivery {i}: the run after it"
        );
        assert_eq!(
            after.due_at,
            Some(d.received_at),
            "a waiting run is due at once"
        );
        assert_eq!(
            get(&h, &tenant, &run.id).await,
            after,
            "deliver returns the run as stored"
        );
        let events = timeline(&h, &tenant, &run.id).await;
        assert_eq!(
            events.last(),
            Some(&numbered(&d, after.timeline_seq)),
            "delivery {i}: its event is the last, numbered by the store"
        );
        assert_eq!(
            events.len() as u64,
            after.timeline_seq,
            "the timeline stays gapless"
        );
        sent.push(stored(&d, after.inbox_seq));
        current = after;
    }
    let history = h
        .backend
        .store
        .load_replay_input(&tenant, &run.id)
        .await
        .expect("load_replay_input");
    assert_eq!(history.deliveries, sent, "the stored deliveries");
    assert_eq!(
        sent.iter().map(|d| d.seq).collect::<Vec<_>>(),
        vec![1, 2],
        "inbox seqs count from 1"
    );
}

/// A delivery to a leased (running) run is stored and counted, but leaves the lease and
/// its due time (the lease expiry) alone.
pub async fn deliver_to_a_leased_run_keeps_its_due_at(h: Harness) {
    let tenant = tenant();
    let run = create(&h, &tenant).await;
    let held = claim(&h, &run, "engine-a", LEASE).await;
    let d = event_delivery(&h, &held, "approval");
    let after = deliver(&h, &d).await;
    assert_eq!(after, delivered_to(&held, &d, after.updated_at));
    assert_eq!(
        after.due_at, held.due_at,
        "due_at stays at the lease expiry"
    );
    assert_eq!(after.lease, held.lease, "the lease is untouched");
    assert_eq!(after.status, RunStatus::Running);
    assert_eq!(get(&h, &tenant, &run.id).await, after);
}

/// A second delivery with a known id is `Duplicate` and changes nothing, even with
/// another body, and even once the run has finished.
pub async fn deliver_duplicate_changes_nothing(h: Harness) {
    let tenant = tenant();
    let run = waiting_run(&h, &tenant).await;
    let d = event_delivery(&h, &run, "approval");
    deliver(&h, &d).await;
    let before = snapshot(&h, &tenant, &run.id).await;
    h.advance(Duration::from_secs(1)).await;
    let mut again = event_delivery(&h, &run, "rejection");
    again.id = d.id.clone();
    for attempt in [&d, &again] {
        let got = h.backend.store.deliver(attempt).await;
        assert!(
            matches!(got, Ok(DeliverOutcome::Duplicate)),
            "a delivery with a known id: expected Duplicate, got {got:?}"
        );
    }
    assert_eq!(
        snapshot(&h, &tenant, &run.id).await,
        before,
        "a duplicate changes nothing"
    );
    // Once the run has finished, the same delivery (a webhook retried late) is still
    // acknowledged as a duplicate, not refused as gone.
    let current = get(&h, &tenant, &run.id).await;
    finish(&h, &current, RunStatus::Completed).await;
    let got = h.backend.store.deliver(&d).await;
    assert!(
        matches!(got, Ok(DeliverOutcome::Duplicate)),
        "a known id after the run finished: expected Duplicate, got {got:?}"
    );
}

/// Deliveries to a missing run are `NotFound`; to a finished one `Gone`, changing
/// nothing.
pub async fn deliver_to_missing_or_finished_run(h: Harness) {
    let tenant = tenant();
    let ghost = new_run(&h, &tenant, "ghost");
    let got = h
        .backend
        .store
        .deliver(&event_delivery(&h, &ghost, "approval"))
        .await;
    assert!(
        matches!(got, Err(StoreError::NotFound)),
        "a delivery to a missing run: expected NotFound, got {got:?}"
    );
    assert_eq!(
        h.backend
            .store
            .get_run(&tenant, &ghost.id)
            .await
            .expect("get_run"),
        None,
        "a refused delivery creates no run"
    );
    for status in [
        RunStatus::Completed,
        RunStatus::Failed,
        RunStatus::Cancelled,
    ] {
        let run = waiting_run(&h, &tenant).await;
        let done = finish(&h, &run, status).await;
        let before = snapshot(&h, &tenant, &run.id).await;
        let got = h
            .backend
            .store
            .deliver(&event_delivery(&h, &done, "approval"))
            .await;
        assert!(
            matches!(got, Err(StoreError::Gone(_))),
            "a delivery to a {status} run: expected Gone, got {got:?}"
        );
        assert_eq!(
            snapshot(&h, &tenant, &run.id).await,
            before,
            "{status}: a refused delivery changes nothing"
        );
    }
}

/// Deliveries racing to one run all land (a caller retries a `Conflict`), with gapless
/// inbox and timeline seqs: no counter update is lost.
pub async fn concurrent_deliveries_get_gapless_seqs(h: Harness) {
    const N: usize = 8;
    let tenant = tenant();
    let run = waiting_run(&h, &tenant).await;
    let deliveries: Vec<NewDelivery> = (0..N)
        .map(|i| event_delivery(&h, &run, &format!("signal-{i}")))
        .collect();
    let tasks: Vec<_> = deliveries
        .iter()
        .cloned()
        .map(|d| {
            let store = h.backend.store.clone();
            tokio::spawn(async move {
                for attempt in 0.. {
                    match store.deliver(&d).await {
                        Ok(DeliverOutcome::Accepted(_)) => return,
                        // An earlier attempt whose outcome was unknown did land.
                        Ok(DeliverOutcome::Duplicate) if attempt > 0 => return,
                        Err(StoreError::Conflict(_) | StoreError::Unavailable(_))
                            if attempt < 50 =>
                        {
                            tokio::task::yield_now().await
                        }
                        other => panic!("delivery {} (attempt {attempt}): {other:?}", d.id),
                    }
                }
            })
        })
        .collect();
    for task in futures::future::join_all(tasks).await {
        task.expect("delivery task");
    }
    let after = get(&h, &tenant, &run.id).await;
    assert_eq!(
        after.inbox_seq,
        run.inbox_seq + N as u64,
        "every delivery counted"
    );
    assert_eq!(
        after.timeline_seq,
        run.timeline_seq + N as u64,
        "every event counted"
    );
    assert_eq!(
        after.version,
        run.version + N as u64,
        "every delivery bumped the version"
    );
    let history = h
        .backend
        .store
        .load_replay_input(&tenant, &run.id)
        .await
        .expect("load_replay_input");
    assert_eq!(
        history.deliveries.iter().map(|d| d.seq).collect::<Vec<_>>(),
        (1..=N as u64).collect::<Vec<_>>(),
        "inbox seqs are gapless"
    );
    assert_eq!(
        history
            .deliveries
            .iter()
            .map(|d| &d.id)
            .collect::<BTreeSet<_>>(),
        deliveries.iter().map(|d| &d.id).collect::<BTreeSet<_>>(),
        "every delivery stored once"
    );
    let events = timeline(&h, &tenant, &run.id).await;
    assert_eq!(
        events.iter().map(|e| e.seq).collect::<Vec<_>>(),
        (1..=after.timeline_seq).collect::<Vec<_>>(),
        "timeline seqs are gapless"
    );
}

/// Callback deliveries need the callback's record to be open: closed, timed-out and
/// answered callbacks are `Gone`, and nothing changes. (An unknown callback id is
/// accepted as `Gone` or `NotFound`.)
pub async fn callback_delivery_needs_an_open_record(h: Harness) {
    let tenant = tenant();
    let run = waiting_run(&h, &tenant).await;
    let closed: Vec<CallbackRecord> = [
        CallbackStatus::Closed,
        CallbackStatus::TimedOut,
        CallbackStatus::Completed,
    ]
    .into_iter()
    .map(|status| CallbackRecord {
        status,
        ..open_callback(&h, &run, &format!("cb-{status:?}#0"))
    })
    .collect();
    let mut cp = checkpoint_over(&h, &run, None, |_| {});
    cp.callbacks = closed.clone();
    write(&h, &cp).await;
    let before = snapshot(&h, &tenant, &run.id).await;

    for record in &closed {
        let id = record.callback_id.clone();
        for body in [
            DeliveryBody::CallbackSucceeded {
                callback_id: id.clone(),
                value: json(serde_json::json!("late")),
            },
            DeliveryBody::CallbackFailed {
                callback_id: id.clone(),
                error: ErrorInfo::new("late", "too late", false),
            },
            DeliveryBody::CallbackHeartbeat {
                callback_id: id.clone(),
            },
        ] {
            let got = h
                .backend
                .store
                .deliver(&callback_delivery(&h, record, body))
                .await;
            assert!(
                matches!(got, Err(StoreError::Gone(_))),
                "a delivery to a {:?} callback: expected Gone, got {got:?}",
                record.status
            );
        }
    }
    let unknown = CallbackRecord {
        callback_id: CallbackId::generate(),
        ..closed[0].clone()
    };
    let got = h
        .backend
        .store
        .deliver(&callback_delivery(
            &h,
            &unknown,
            DeliveryBody::CallbackSucceeded {
                callback_id: unknown.callback_id.clone(),
                value: json(serde_json::json!("?")),
            },
        ))
        .await;
    assert!(
        matches!(got, Err(StoreError::Gone(_) | StoreError::NotFound)),
        "a delivery to an unknown callback: expected Gone or NotFound, got {got:?}"
    );
    assert_eq!(
        snapshot(&h, &tenant, &run.id).await,
        before,
        "refused callback deliveries change nothing"
    );
    for record in &closed {
        assert_eq!(
            h.backend
                .store
                .get_callback(&record.callback_id)
                .await
                .expect("get_callback")
                .as_ref(),
            Some(record),
            "a refused delivery leaves the record as it was"
        );
    }
}

/// A heartbeat is stored and keeps the callback open; a success is stored and closes
/// it; the same success again is a `Duplicate`, another outcome or heartbeat is `Gone`.
pub async fn callback_heartbeat_keeps_it_open_and_success_closes_it(h: Harness) {
    let tenant = tenant();
    let run = waiting_run(&h, &tenant).await;
    let (record, run) = with_open_callback(&h, &run).await;
    let id = record.callback_id.clone();
    let store = &h.backend.store;

    let beat = callback_delivery(
        &h,
        &record,
        DeliveryBody::CallbackHeartbeat {
            callback_id: id.clone(),
        },
    );
    let after_beat = deliver(&h, &beat).await;
    assert_eq!(
        after_beat.inbox_seq,
        run.inbox_seq + 1,
        "a heartbeat is a delivery"
    );
    assert_eq!(
        store
            .get_callback(&id)
            .await
            .expect("get_callback")
            .map(|r| r.status),
        Some(CallbackStatus::Open),
        "a heartbeat keeps the callback open"
    );

    h.advance(Duration::from_secs(1)).await;
    let success = callback_delivery(
        &h,
        &record,
        DeliveryBody::CallbackSucceeded {
            callback_id: id.clone(),
            value: json(serde_json::json!({"status": "paid", "transaction_id": "tx-1"})),
        },
    );
    let after_success = deliver(&h, &success).await;
    assert_eq!(after_success.inbox_seq, run.inbox_seq + 2);
    assert_eq!(
        after_success.due_at,
        Some(success.received_at),
        "the waiting run is due"
    );
    let closed = store
        .get_callback(&id)
        .await
        .expect("get_callback")
        .expect("record");
    assert_eq!(
        closed.status,
        CallbackStatus::Completed,
        "a success closes the callback"
    );
    assert_eq!(
        CallbackRecord {
            status: CallbackStatus::Open,
            ..closed
        },
        record,
        "closing changes only the status"
    );
    let before = snapshot(&h, &tenant, &run.id).await;

    let got = store.deliver(&success).await;
    assert!(
        matches!(got, Ok(DeliverOutcome::Duplicate)),
        "the same success again (a retried webhook): expected Duplicate, got {got:?}"
    );
    let second = callback_delivery(
        &h,
        &record,
        DeliveryBody::CallbackSucceeded {
            callback_id: id.clone(),
            value: json(serde_json::json!("again")),
        },
    );
    let got = store.deliver(&second).await;
    assert!(
        matches!(got, Err(StoreError::Gone(_))),
        "a second success with another id: expected Gone, got {got:?}"
    );
    let late_beat = callback_delivery(
        &h,
        &record,
        DeliveryBody::CallbackHeartbeat {
            callback_id: id.clone(),
        },
    );
    let got = store.deliver(&late_beat).await;
    assert!(
        matches!(got, Err(StoreError::Gone(_))),
        "a heartbeat after the outcome: expected Gone, got {got:?}"
    );
    assert_eq!(
        snapshot(&h, &tenant, &run.id).await,
        before,
        "nothing changed"
    );
    assert_eq!(
        before.deliveries,
        vec![
            stored(&beat, run.inbox_seq + 1),
            stored(&success, run.inbox_seq + 2)
        ],
        "the heartbeat and the success are stored"
    );
}

/// A failure is stored and closes the callback too.
pub async fn callback_failure_closes_it(h: Harness) {
    let tenant = tenant();
    let run = waiting_run(&h, &tenant).await;
    let (record, _) = with_open_callback(&h, &run).await;
    let id = record.callback_id.clone();
    let failure = callback_delivery(
        &h,
        &record,
        DeliveryBody::CallbackFailed {
            callback_id: id.clone(),
            error: ErrorInfo::new("declined", "card declined", false),
        },
    );
    deliver(&h, &failure).await;
    let status = h
        .backend
        .store
        .get_callback(&id)
        .await
        .expect("get_callback")
        .map(|r| r.status);
    assert!(
        status.is_some_and(|s| s != CallbackStatus::Open),
        "a failure closes the callback, got {status:?}"
    );
    let before = snapshot(&h, &tenant, &run.id).await;
    let success = callback_delivery(
        &h,
        &record,
        DeliveryBody::CallbackSucceeded {
            callback_id: id.clone(),
            value: json(serde_json::json!("too late")),
        },
    );
    let got = h.backend.store.deliver(&success).await;
    assert!(
        matches!(got, Err(StoreError::Gone(_))),
        "a success after a failure: expected Gone, got {got:?}"
    );
    assert_eq!(
        snapshot(&h, &tenant, &run.id).await,
        before,
        "nothing changed"
    );
}

/// A child run that finishes and its delivery to the parent (`ChildFinished`).
fn child_of(h: &Harness, parent: &Run) -> (Run, NewDelivery) {
    let mut child = new_run(h, &parent.tenant, "child");
    let position = Position::from("invoke#0");
    child.parent = Some(ParentLink {
        run_id: parent.id.clone(),
        position: position.clone(),
        created_at: Some(parent.created_at),
    });
    let mut d = delivery(
        h,
        &parent.tenant,
        &parent.id,
        DeliveryBody::ChildFinished {
            position,
            outcome: Ok(json(serde_json::json!({"child": "result"}))),
            parent_created_at: Some(parent.created_at),
        },
        EventType::ChainedInvokeSucceeded,
    );
    d.id = child_finished_id(&child.id);
    d.event.sub_type = Some(SubType::ChainedInvoke);
    d.event.id = Some("invoke#0".into());
    d.event.name = Some("child".into());
    (child, d)
}

/// The checkpoint that completes `child` (claimed as `held`) and tells its parent.
fn completing(h: &Harness, held: &Run, to_parent: &NewDelivery) -> Checkpoint {
    let mut cp = checkpoint_over(h, held, Some(held.epoch), |r| {
        r.status = RunStatus::Completed;
        r.lease = None;
        r.due_at = None;
        r.output = Some(json(serde_json::json!({"child": "result"})));
    });
    push_event(&mut cp, event(0, h.now(), EventType::ExecutionSucceeded));
    cp.parent_delivery = Some(to_parent.clone());
    cp
}

/// Claim `child`, write the checkpoint that completes it and tells its parent
/// (`to_parent`), and check that the child is completed.
async fn complete_child(h: &Harness, child: &Run, to_parent: &NewDelivery) {
    let held = claim(h, child, "engine-child", LEASE).await;
    let cp = completing(h, &held, to_parent);
    write(h, &cp).await;
    assert_eq!(
        get(h, &child.tenant, &child.id).await,
        cp.run,
        "the child is completed"
    );
}

/// A checkpoint's `parent_delivery` is applied with it, as `deliver` would apply it;
/// A callback with a heartbeat timeout: each heartbeat the store accepts moves the
/// heartbeat deadline (the last heartbeat plus the timeout); an outcome or heartbeat
/// received at or after it is refused as gone and records nothing, the record still
/// open (the run has not recorded the timeout yet): the heartbeat deadline is part of
/// the write's condition, as the deadline is.
pub async fn callback_delivery_after_its_heartbeat_deadline_is_gone(h: Harness) {
    let tenant = tenant();
    let run = waiting_run(&h, &tenant).await;
    let start = h.now();
    let timeout = Duration::from_secs(10);
    let record = CallbackRecord {
        heartbeat: Some(CallbackHeartbeat::new(timeout, start)),
        ..open_callback(&h, &run, "approval#0")
    };
    let mut cp = checkpoint_over(&h, &run, None, |_| {});
    cp.callbacks = vec![record.clone()];
    write(&h, &cp).await;
    let id = record.callback_id.clone();
    let at = |secs: u64, body: DeliveryBody| {
        let mut d = callback_delivery(&h, &record, body);
        d.received_at = start.plus(Duration::from_secs(secs));
        d
    };
    let beat = || DeliveryBody::CallbackHeartbeat {
        callback_id: id.clone(),
    };
    let heartbeat_deadline = |h: &Harness| {
        let id = id.clone();
        let store = h.backend.store.clone();
        async move {
            store
                .get_callback(&id)
                .await
                .expect("get_callback")
                .and_then(|r| r.heartbeat)
                .map(|hb| hb.deadline)
        }
    };
    // At 5 s and at 14 s: each in time only because the one before moved the deadline.
    deliver(&h, &at(5, beat())).await;
    assert_eq!(
        heartbeat_deadline(&h).await,
        Some(start.plus(Duration::from_secs(15))),
        "a heartbeat moves the heartbeat deadline"
    );
    deliver(&h, &at(14, beat())).await;
    assert_eq!(
        heartbeat_deadline(&h).await,
        Some(start.plus(Duration::from_secs(24)))
    );
    let before = snapshot(&h, &tenant, &run.id).await;
    for late in [
        at(24, beat()),
        at(
            24,
            DeliveryBody::CallbackSucceeded {
                callback_id: id.clone(),
                value: json(serde_json::json!("late")),
            },
        ),
        at(
            40,
            DeliveryBody::CallbackFailed {
                callback_id: id.clone(),
                error: ErrorInfo::new("late", "too late", false),
            },
        ),
    ] {
        let got = h.backend.store.deliver(&late).await;
        assert!(
            matches!(got, Err(StoreError::Gone(_))),
            "a delivery at or after the heartbeat deadline: expected Gone, got {got:?}"
        );
    }
    assert_eq!(
        snapshot(&h, &tenant, &run.id).await,
        before,
        "nothing is recorded"
    );
    let still = h
        .backend
        .store
        .get_callback(&id)
        .await
        .expect("get_callback")
        .expect("record");
    assert_eq!(
        (still.status, still.heartbeat.map(|hb| hb.deadline)),
        (
            CallbackStatus::Open,
            Some(start.plus(Duration::from_secs(24)))
        ),
        "the record is left for the run to time out"
    );
    deliver(
        &h,
        &at(
            23,
            DeliveryBody::CallbackSucceeded {
                callback_id: id.clone(),
                value: json(serde_json::json!("in time")),
            },
        ),
    )
    .await;
}

/// when the checkpoint is refused, the parent gets nothing.
pub async fn parent_delivery_is_applied_inside_the_checkpoint(h: Harness) {
    let tenant = tenant();
    let parent = waiting_run(&h, &tenant).await;
    let (child, to_parent) = child_of(&h, &parent);
    create_run(&h, &child).await;
    let held = claim(&h, &child, "engine-child", LEASE).await;
    let parent_before = snapshot(&h, &tenant, &parent.id).await;

    let mut stale = completing(&h, &held, &to_parent);
    stale.expected_version -= 1;
    conflict(
        h.backend.store.checkpoint(&stale).await,
        "a stale child checkpoint",
    );
    assert_eq!(
        snapshot(&h, &tenant, &parent.id).await,
        parent_before,
        "a refused checkpoint delivers nothing to the parent"
    );

    h.advance(Duration::from_secs(1)).await;
    let to_parent = NewDelivery {
        received_at: h.now(),
        resend_after: None,
        ..to_parent
    };
    let cp = completing(&h, &held, &to_parent);
    write(&h, &cp).await;
    assert_eq!(
        get(&h, &tenant, &child.id).await,
        cp.run,
        "the child is completed"
    );
    let after = get(&h, &tenant, &parent.id).await;
    assert_eq!(
        after,
        delivered_to(&parent, &to_parent, after.updated_at),
        "the parent after the delivery"
    );
    let events = timeline(&h, &tenant, &parent.id).await;
    assert_eq!(
        events.last(),
        Some(&numbered(&to_parent, after.timeline_seq))
    );
    let history = h
        .backend
        .store
        .load_replay_input(&tenant, &parent.id)
        .await
        .expect("load_replay_input");
    assert_eq!(history.deliveries, vec![stored(&to_parent, 1)]);
}

/// A `parent_delivery` that is a duplicate, or whose parent has finished, does not exist
/// or is a later run under its id (created at another time than the delivery's
/// `parent_created_at`), is skipped: the child's checkpoint succeeds and the parent is
/// left as it was.
pub async fn parent_delivery_is_skipped_when_duplicate_or_parent_gone(h: Harness) {
    let tenant = tenant();

    // The parent already has this delivery.
    let parent = waiting_run(&h, &tenant).await;
    let (child, to_parent) = child_of(&h, &parent);
    create_run(&h, &child).await;
    deliver(&h, &to_parent).await;
    let parent_before = snapshot(&h, &tenant, &parent.id).await;
    complete_child(&h, &child, &to_parent).await;
    assert_eq!(
        snapshot(&h, &tenant, &parent.id).await,
        parent_before,
        "a duplicate parent delivery changes nothing"
    );

    // The parent has finished.
    let parent = waiting_run(&h, &tenant).await;
    let (child, to_parent) = child_of(&h, &parent);
    create_run(&h, &child).await;
    finish(&h, &parent, RunStatus::Cancelled).await;
    let parent_before = snapshot(&h, &tenant, &parent.id).await;
    complete_child(&h, &child, &to_parent).await;
    assert_eq!(
        snapshot(&h, &tenant, &parent.id).await,
        parent_before,
        "a finished parent gets nothing"
    );

    // The parent does not exist (a child whose parent was never written, or removed).
    let ghost = new_run(&h, &tenant, "ghost-parent");
    let (child, to_parent) = child_of(&h, &ghost);
    create_run(&h, &child).await;
    complete_child(&h, &child, &to_parent).await;
    assert_eq!(
        h.backend
            .store
            .get_run(&tenant, &ghost.id)
            .await
            .expect("get_run"),
        None,
        "a missing parent is not created by the delivery"
    );

    // A later run under the parent's id (the parent removed and its `Idempotency-Key`
    // replayed): not the parent, so gone.
    let later = waiting_run(&h, &tenant).await;
    let removed = Run {
        created_at: Timestamp(later.created_at.0 - 60_000),
        ..later.clone()
    };
    let (child, to_parent) = child_of(&h, &removed);
    create_run(&h, &child).await;
    let later_before = snapshot(&h, &tenant, &later.id).await;
    let got = h.backend.store.deliver(&to_parent).await;
    assert!(
        matches!(got, Err(StoreError::Gone(_))),
        "a child's outcome for a later run under its parent's id: expected Gone, got {got:?}"
    );
    complete_child(&h, &child, &to_parent).await;
    assert_eq!(
        snapshot(&h, &tenant, &later.id).await,
        later_before,
        "a later run under the parent's id gets nothing"
    );
}

/// `load_replay_input` returns every journal entry and every delivery, in `seq` order;
/// `load_journal` the same journal alone.
pub async fn load_history_returns_journal_and_deliveries_in_order(h: Harness) {
    let tenant = tenant();
    let run = create(&h, &tenant).await;
    let held = claim(&h, &run, "engine-a", LEASE).await;
    let mut cp = checkpoint_over(&h, &held, Some(held.epoch), |_| {});
    cp.journal = (0..12)
        .map(|i| {
            entry(
                &h,
                &format!("outer#0/step#{i}"),
                i,
                succeeded(serde_json::json!(i)),
            )
        })
        .collect();
    write(&h, &cp).await;

    let mut expected = Vec::new();
    for i in 0..7u64 {
        h.advance(Duration::from_millis(10)).await;
        let body = match i % 3 {
            0 => DeliveryBody::Message {
                value: json(serde_json::json!({"n": i})),
            },
            1 => DeliveryBody::Event {
                name: format!("e{i}"),
                value: json(serde_json::Value::Null),
            },
            _ => DeliveryBody::ChildFinished {
                position: Position::from("invoke#0"),
                outcome: Err(ErrorInfo::new("Failed", "child failed", false)),
                parent_created_at: None,
            },
        };
        let d = delivery(&h, &tenant, &run.id, body, EventType::MessageInjected);
        deliver(&h, &d).await;
        expected.push(stored(&d, i + 1));
    }
    let history = h
        .backend
        .store
        .load_replay_input(&tenant, &run.id)
        .await
        .expect("load_replay_input");
    assert_eq!(history.deliveries, expected, "every delivery, in seq order");
    let mut journal = history.journal;
    journal.sort_by(|a, b| a.position.cmp(&b.position));
    let mut written = cp.journal;
    written.sort_by(|a, b| a.position.cmp(&b.position));
    assert_eq!(journal, written, "every journal entry");
    let mut alone = h
        .backend
        .store
        .load_journal(&tenant, &run.id)
        .await
        .expect("load_journal");
    alone.sort_by(|a, b| a.position.cmp(&b.position));
    assert_eq!(
        alone, written,
        "load_journal: every journal entry, no delivery"
    );
}

/// `load_claimed_replay_input` of a run as its claim returned it is `load_replay_input`'s
/// history: every entry (those of the run item's history tail among them, where an
/// adapter keeps one), and every delivery, one that arrived after the claim too. Of a
/// run at another version than the claim's, it reads the run as `load_replay_input` does.
pub async fn load_claimed_history_is_the_history_of_the_claimed_run(h: Harness) {
    let tenant = tenant();
    let run = create(&h, &tenant).await;
    let held = claim(&h, &run, "engine-a", Duration::from_secs(1)).await;
    let mut many = checkpoint_over(&h, &held, Some(held.epoch), |_| {});
    many.journal = (0..12)
        .map(|i| entry(&h, &format!("step#{i}"), i, succeeded(serde_json::json!(i))))
        .collect();
    write(&h, &many).await;
    // One step more: on DynamoDB, kept in the run item.
    let mut one = checkpoint_over(&h, &many.run, Some(held.epoch), |_| {});
    one.journal = vec![entry(&h, "step#12", 12, succeeded(serde_json::json!(12)))];
    write(&h, &one).await;
    let message = |n: u64| DeliveryBody::Message {
        value: json(serde_json::json!({ "n": n })),
    };
    let before = delivery(&h, &tenant, &run.id, message(1), EventType::MessageInjected);
    deliver(&h, &before).await;
    h.advance(Duration::from_secs(2)).await;
    let claimed = claim(&h, &run, "engine-b", LEASE).await;
    let after = delivery(&h, &tenant, &run.id, message(2), EventType::MessageInjected);
    deliver(&h, &after).await;

    let store = &h.backend.store;
    let history = store
        .load_claimed_replay_input(&claimed)
        .await
        .expect("load_claimed_replay_input");
    assert_eq!(
        history.deliveries,
        vec![stored(&before, 1), stored(&after, 2)],
        "the deliveries before the claim and after it"
    );
    let mut journal = history.journal;
    journal.sort_by(|a, b| a.position.cmp(&b.position));
    let mut written: Vec<_> = many.journal.iter().chain(&one.journal).cloned().collect();
    written.sort_by(|a, b| a.position.cmp(&b.position));
    assert_eq!(journal, written, "every entry");
    let mut read = store
        .load_replay_input(&tenant, &run.id)
        .await
        .expect("load_replay_input");
    read.journal.sort_by(|a, b| a.position.cmp(&b.position));
    assert_eq!(read.journal, written, "as load_replay_input reads it");
    assert_eq!(read.deliveries, history.deliveries);
    // Not the claimed version: read as load_replay_input does.
    let again = store
        .load_claimed_replay_input(&held)
        .await
        .expect("load_claimed_replay_input of an older version");
    assert_eq!(again.deliveries, history.deliveries);
    assert_eq!(again.journal.len(), written.len());
}

/// A callback outcome or heartbeat received at or after the callback's deadline is
/// refused as gone and records nothing, even while the record still reads open (the
/// run has not yet recorded the timeout): the deadline is part of the write's
/// condition. Before the deadline the same delivery is accepted.
pub async fn callback_delivery_after_its_deadline_is_gone(h: Harness) {
    let tenant = tenant();
    let run = waiting_run(&h, &tenant).await;
    let passed = CallbackRecord {
        deadline: Some(h.now()),
        ..open_callback(&h, &run, "approval#0")
    };
    let open = CallbackRecord {
        deadline: Some(h.now().plus(Duration::from_secs(3600))),
        ..open_callback(&h, &run, "approval#1")
    };
    let mut cp = checkpoint_over(&h, &run, None, |_| {});
    cp.callbacks = vec![passed.clone(), open.clone()];
    write(&h, &cp).await;
    let before = snapshot(&h, &tenant, &run.id).await;
    for body in [
        DeliveryBody::CallbackSucceeded {
            callback_id: passed.callback_id.clone(),
            value: json(serde_json::json!("late")),
        },
        DeliveryBody::CallbackFailed {
            callback_id: passed.callback_id.clone(),
            error: ErrorInfo::new("late", "too late", false),
        },
        DeliveryBody::CallbackHeartbeat {
            callback_id: passed.callback_id.clone(),
        },
    ] {
        let got = h
            .backend
            .store
            .deliver(&callback_delivery(&h, &passed, body))
            .await;
        assert!(
            matches!(got, Err(StoreError::Gone(_))),
            "a delivery at the deadline: expected Gone, got {got:?}"
        );
    }
    assert_eq!(
        snapshot(&h, &tenant, &run.id).await,
        before,
        "nothing is recorded"
    );
    assert_eq!(
        h.backend
            .store
            .get_callback(&passed.callback_id)
            .await
            .expect("get_callback")
            .map(|r| r.status),
        Some(CallbackStatus::Open),
        "the record is left for the run to time out"
    );
    deliver(
        &h,
        &callback_delivery(
            &h,
            &open,
            DeliveryBody::CallbackSucceeded {
                callback_id: open.callback_id.clone(),
                value: json(serde_json::json!("in time")),
            },
        ),
    )
    .await;
}
