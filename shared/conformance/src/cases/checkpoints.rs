//! Checkpoints: the version and epoch conditions, atomicity, and the records they carry.

use std::time::Duration;

use siesta::ports::*;
use siesta::*;

use crate::Harness;
use crate::support::*;

/// A checkpoint over `current` that touches every kind of item: the run (waiting), two
/// journal entries, two timeline events, a callback record, a tool-call record and a
/// child run.
fn full_checkpoint(h: &Harness, current: &Run, epoch: Option<FencingEpoch>) -> Checkpoint {
    let now = h.now();
    let mut cp = checkpoint_over(h, current, epoch, |r| {
        r.status = RunStatus::Waiting;
        r.lease = None;
        r.due_at = Some(now.plus(Duration::from_secs(3600)));
        r.inbox_seen = r.inbox_seq;
    });
    let callback = open_callback(h, current, "payment#0");
    cp.journal.push(entry(
        h,
        "create_order#0",
        0,
        succeeded(serde_json::json!({"id": "ord-1"})),
    ));
    let mut waiting = entry(
        h,
        "payment#0",
        1,
        EntryState::Waiting(Wait {
            kind: WaitKind::Callback {
                callback_id: callback.callback_id.clone(),
                heartbeat_timeout_ms: Some(60_000),
            },
            deadline: callback.deadline,
            started_at: now,
        }),
    );
    waiting.kind = OperationKind::Callback;
    waiting.handle = Some(callback.callback_id.0.clone());
    waiting.consumed = vec![DeliveryId::from("d-1")];
    cp.journal.push(waiting);
    push_event(
        &mut cp,
        op_event(
            now,
            EventType::StepSucceeded,
            SubType::Step,
            "create_order#0",
            serde_json::json!({"Result": {"id": "ord-1"}, "Attempt": 1}),
        ),
    );
    push_event(
        &mut cp,
        op_event(
            now,
            EventType::CallbackStarted,
            SubType::Callback,
            "payment#0",
            serde_json::json!({"CallbackId": callback.callback_id}),
        ),
    );
    cp.callbacks.push(callback);
    let mut tool_call = running_tool_call(h, current, "charge#0");
    tool_call.status = ToolCallStatus::Succeeded;
    tool_call.outcome = Some(Ok(json(serde_json::json!({"charge": "ch_1"}))));
    cp.tool_calls.push(tool_call);
    let mut child = new_run(h, &current.tenant, "child");
    child.parent = Some(ParentLink {
        run_id: current.id.clone(),
        position: Position::from("invoke#0"),
        created_at: Some(current.created_at),
    });
    let child_started = started(&child);
    cp.child_runs.push((child, child_started));
    cp
}

/// Renumber `cp`'s events to follow `last`, as if the writer knew the timeline: no event
/// collides, so only the version or epoch condition can refuse the write.
fn events_after(cp: &mut Checkpoint, last: u64) {
    cp.run.timeline_seq = last;
    for e in &mut cp.timeline {
        cp.run.timeline_seq += 1;
        e.seq = cp.run.timeline_seq;
    }
}

/// Assert that none of `cp`'s side items (callbacks, tool calls, child runs) exist.
async fn assert_side_items_absent(h: &Harness, cp: &Checkpoint, what: &str) {
    for record in &cp.callbacks {
        let got = h
            .backend
            .store
            .get_callback(&record.callback_id)
            .await
            .expect("get_callback");
        assert_eq!(got, None, "{what}: the callback record was not written");
    }
    for record in &cp.tool_calls {
        let got = h
            .backend
            .store
            .get_tool_call(&record.tenant, &record.key)
            .await
            .expect("get_tool_call");
        assert_eq!(got, None, "{what}: the tool-call record was not written");
    }
    for (child, _) in &cp.child_runs {
        let got = h
            .backend
            .store
            .get_run(&child.tenant, &child.id)
            .await
            .expect("get_run");
        assert_eq!(got, None, "{what}: the child run was not created");
        assert_eq!(
            h.backend
                .store
                .timeline(&child.tenant, &child.id, 0, 100)
                .await
                .expect("timeline"),
            vec![],
            "{what}: the child's first event was not written"
        );
    }
}

/// One checkpoint writes the run, journal entries, timeline events, callback and
/// tool-call records and child runs (with their first events), all of them.
pub async fn checkpoint_writes_everything_atomically(h: Harness) {
    let tenant = tenant();
    let run = create(&h, &tenant).await;
    let held = claim(&h, &run, "engine-a", LEASE).await;
    let cp = full_checkpoint(&h, &held, Some(held.epoch));
    assert!(cp.item_count() <= 100);
    write(&h, &cp).await;

    assert_eq!(
        get(&h, &tenant, &run.id).await,
        cp.run,
        "the run as written"
    );
    let after = snapshot(&h, &tenant, &run.id).await;
    let mut journal = cp.journal.clone();
    journal.sort_by(|a, b| a.position.cmp(&b.position));
    assert_eq!(after.journal, journal, "the journal entries");
    let mut expected_timeline = vec![started(&run)];
    expected_timeline.extend(cp.timeline.iter().cloned());
    assert_eq!(after.timeline, expected_timeline, "the timeline");
    assert_eq!(
        after.timeline.last().map(|e| e.seq),
        Some(cp.run.timeline_seq),
        "the run's timeline_seq is its last event"
    );
    for record in &cp.callbacks {
        let got = h
            .backend
            .store
            .get_callback(&record.callback_id)
            .await
            .expect("get_callback");
        assert_eq!(got.as_ref(), Some(record), "the callback record");
    }
    for record in &cp.tool_calls {
        let got = h
            .backend
            .store
            .get_tool_call(&tenant, &record.key)
            .await
            .expect("get_tool_call");
        assert_eq!(got.as_ref(), Some(record), "the tool-call record");
    }
    for (child, child_started) in &cp.child_runs {
        assert_eq!(&get(&h, &tenant, &child.id).await, child, "the child run");
        assert_eq!(
            timeline(&h, &tenant, &child.id).await,
            vec![child_started.clone()],
            "the child's first event"
        );
    }
}

/// A checkpoint built on a version that is no longer current is a `Conflict` carrying
/// the current run, and writes nothing of what it carries.
pub async fn checkpoint_with_a_stale_version_writes_nothing(h: Harness) {
    let tenant = tenant();
    let run = create(&h, &tenant).await;
    let held = claim(&h, &run, "engine-a", LEASE).await;
    // No timeline event: the stale write's events collide with nothing, so only the
    // version condition can refuse it.
    let mut first = checkpoint_over(&h, &held, Some(held.epoch), |_| {});
    first
        .journal
        .push(entry(&h, "first#0", 0, succeeded(serde_json::json!(1))));
    write(&h, &first).await;
    let before = snapshot(&h, &tenant, &run.id).await;

    // The same writer writes again from the view it had before its first write.
    let stale = full_checkpoint(&h, &held, Some(held.epoch));
    let got = h.backend.store.checkpoint(&stale).await;
    let current = conflict(got, "checkpoint with a stale version");
    assert_eq!(current, first.run, "the conflict carries the current run");
    assert_eq!(
        snapshot(&h, &tenant, &run.id).await,
        before,
        "a refused checkpoint changes nothing"
    );
    assert_side_items_absent(&h, &stale, "stale version").await;
}

/// A zombie whose lease was taken over (its epoch superseded) gets a `Conflict` even
/// with the current version, and writes nothing; the new holder writes fine.
pub async fn checkpoint_with_a_stale_epoch_writes_nothing(h: Harness) {
    let tenant = tenant();
    let run = create(&h, &tenant).await;
    let zombie = claim(&h, &run, "engine-a", Duration::from_secs(1)).await;
    h.advance(Duration::from_secs(2)).await;
    let holder = claim(&h, &run, "engine-b", LEASE).await;
    let before = snapshot(&h, &tenant, &run.id).await;

    // The zombie even knows the current version: the epoch alone must stop it.
    let cp = full_checkpoint(&h, &holder, Some(zombie.epoch));
    let got = h.backend.store.checkpoint(&cp).await;
    let current = conflict(got, "checkpoint with a superseded epoch");
    assert_eq!(current, holder, "the conflict carries the current run");
    assert!(
        current
            .lease
            .as_ref()
            .is_some_and(|l| l.epoch > zombie.epoch),
        "the caller can see its lease was lost"
    );
    assert_eq!(
        snapshot(&h, &tenant, &run.id).await,
        before,
        "the zombie's checkpoint changes nothing"
    );
    assert_side_items_absent(&h, &cp, "stale epoch").await;

    let cp = full_checkpoint(&h, &holder, Some(holder.epoch));
    write(&h, &cp).await;
    assert_eq!(
        get(&h, &tenant, &run.id).await,
        cp.run,
        "the holder's checkpoint"
    );
}

/// A delivery between the holder's read and its checkpoint moves only the version: the
/// checkpoint conflicts, the conflict shows the lease still held, and a checkpoint over
/// the re-read run succeeds.
pub async fn checkpoint_after_a_delivery_conflicts_on_version_only(h: Harness) {
    let tenant = tenant();
    let run = create(&h, &tenant).await;
    let held = claim(&h, &run, "engine-a", LEASE).await;
    let delivered = deliver(&h, &event_delivery(&h, &held, "nudge")).await;
    let before = snapshot(&h, &tenant, &run.id).await;

    let mut cp = full_checkpoint(&h, &held, Some(held.epoch));
    events_after(&mut cp, delivered.timeline_seq);
    let current = conflict(
        h.backend.store.checkpoint(&cp).await,
        "checkpoint after a delivery",
    );
    assert_eq!(
        current, delivered,
        "the conflict carries the run after the delivery"
    );
    assert_eq!(
        current.lease.as_ref().map(|l| l.epoch),
        Some(held.epoch),
        "the lease is still the writer's"
    );
    assert_eq!(
        snapshot(&h, &tenant, &run.id).await,
        before,
        "nothing written"
    );
    assert_side_items_absent(&h, &cp, "after a delivery").await;

    let cp = full_checkpoint(&h, &current, Some(held.epoch));
    write(&h, &cp).await;
    assert_eq!(get(&h, &tenant, &run.id).await, cp.run);
}

/// A checkpoint without an epoch (cancelling) is guarded by the version alone: it
/// succeeds on a leased run with the right version, and conflicts with a stale one.
pub async fn checkpoint_without_epoch_is_guarded_by_version(h: Harness) {
    let tenant = tenant();

    // A waiting run, no lease: cancelled at once.
    let waiting = waiting_run(&h, &tenant).await;
    let cancelled = finish(&h, &waiting, RunStatus::Cancelled).await;
    assert_eq!(get(&h, &tenant, &waiting.id).await, cancelled);

    // A running run: cancellation requested, whatever the lease.
    let run = create(&h, &tenant).await;
    let held = claim(&h, &run, "engine-a", LEASE).await;
    let mut cp = checkpoint_over(&h, &held, None, |r| r.cancel_requested = true);
    push_event(&mut cp, event(0, h.now(), EventType::CancelRequested));
    write(&h, &cp).await;
    assert_eq!(
        get(&h, &tenant, &run.id).await,
        cp.run,
        "the unfenced write landed"
    );
    let before = snapshot(&h, &tenant, &run.id).await;

    let mut stale = checkpoint_over(&h, &held, None, |r| {
        r.status = RunStatus::Cancelled;
        r.lease = None;
        r.due_at = None;
    });
    push_event(&mut stale, event(0, h.now(), EventType::ExecutionCancelled));
    events_after(&mut stale, cp.run.timeline_seq);
    let current = conflict(
        h.backend.store.checkpoint(&stale).await,
        "an unfenced checkpoint with a stale version",
    );
    assert_eq!(current, cp.run);
    assert_eq!(
        snapshot(&h, &tenant, &run.id).await,
        before,
        "nothing written"
    );
}

/// A checkpoint without an epoch writes the run's lease back as it read it (a cancel
/// requested of a running run): a renewal since, which moves the lease without a new
/// version, is not undone — the write conflicts, writes nothing, and one over the run
/// as renewed lands with the renewed lease.
pub async fn checkpoint_without_epoch_keeps_a_lease_renewed_since_its_read(h: Harness) {
    let tenant = tenant();
    let run = create(&h, &tenant).await;
    let held = claim(&h, &run, "engine-a", LEASE).await;
    let later = h.now().plus(LEASE * 3);
    let renewed = renew(&h, &held, later).await;
    let before = snapshot(&h, &tenant, &run.id).await;

    let mut stale = checkpoint_over(&h, &held, None, |r| r.cancel_requested = true);
    push_event(&mut stale, event(0, h.now(), EventType::CancelRequested));
    let current = conflict(
        h.backend.store.checkpoint(&stale).await,
        "an unfenced checkpoint writing back the lease from before a renewal",
    );
    assert_eq!(current, renewed);
    assert_eq!(
        snapshot(&h, &tenant, &run.id).await,
        before,
        "nothing written"
    );

    let mut cp = checkpoint_over(&h, &renewed, None, |r| r.cancel_requested = true);
    push_event(&mut cp, event(0, h.now(), EventType::CancelRequested));
    write(&h, &cp).await;
    let after = get(&h, &tenant, &run.id).await;
    assert_eq!(after, cp.run);
    assert_eq!(after.lease.map(|l| l.expires_at), Some(later));
}

/// A checkpoint whose timeline event is already there fails as a whole: the run, the
/// journal, the records and the child run are not written either.
pub async fn checkpoint_rolls_back_when_a_timeline_seq_exists(h: Harness) {
    let tenant = tenant();
    let run = create(&h, &tenant).await;
    let held = claim(&h, &run, "engine-a", LEASE).await;
    let before = snapshot(&h, &tenant, &run.id).await;

    let mut cp = full_checkpoint(&h, &held, Some(held.epoch));
    // Renumber the events from 1: seq 1 is the run's first event, already stored.
    for (i, e) in cp.timeline.iter_mut().enumerate() {
        e.seq = i as u64 + 1;
    }
    cp.run.timeline_seq = cp.timeline.len() as u64;
    let got = h.backend.store.checkpoint(&cp).await;
    assert!(
        got.is_err(),
        "a checkpoint over an existing timeline seq must fail, got {got:?}"
    );
    assert_eq!(
        snapshot(&h, &tenant, &run.id).await,
        before,
        "a failed checkpoint writes nothing"
    );
    assert_side_items_absent(&h, &cp, "existing timeline seq").await;
}

/// A checkpoint whose child run already exists fails as a whole, and leaves the
/// existing run alone.
pub async fn checkpoint_rolls_back_when_a_child_run_exists(h: Harness) {
    let tenant = tenant();
    let run = create(&h, &tenant).await;
    let held = claim(&h, &run, "engine-a", LEASE).await;
    let existing = create(&h, &tenant).await;
    let before = snapshot(&h, &tenant, &run.id).await;
    let existing_before = snapshot(&h, &tenant, &existing.id).await;

    let mut cp = full_checkpoint(&h, &held, Some(held.epoch));
    for (child, first) in &mut cp.child_runs {
        child.id = existing.id.clone();
        *first = started(child);
    }
    let got = h.backend.store.checkpoint(&cp).await;
    assert!(
        got.is_err(),
        "a checkpoint creating an existing child run must fail, got {got:?}"
    );
    assert_eq!(
        snapshot(&h, &tenant, &run.id).await,
        before,
        "a failed checkpoint writes nothing"
    );
    assert_eq!(
        snapshot(&h, &tenant, &existing.id).await,
        existing_before,
        "the existing run is untouched"
    );
    cp.child_runs.clear();
    assert_side_items_absent(&h, &cp, "existing child run").await;
}

/// Journal entries are keyed by position: writing one again replaces it.
pub async fn journal_entry_upsert_replaces(h: Harness) {
    let tenant = tenant();
    let run = create(&h, &tenant).await;
    let held = claim(&h, &run, "engine-a", LEASE).await;
    let key = IdempotencyKey(unique("idem"));

    let mut cp1 = checkpoint_over(&h, &held, Some(held.epoch), |_| {});
    cp1.journal.push(entry(
        &h,
        "charge#0",
        0,
        EntryState::Started {
            attempt: 1,
            key: Some(key.clone()),
        },
    ));
    write(&h, &cp1).await;

    let mut cp2 = checkpoint_over(&h, &cp1.run, Some(held.epoch), |_| {});
    cp2.journal.push(entry(
        &h,
        "charge#0",
        0,
        succeeded(serde_json::json!({"ok": true})),
    ));
    cp2.journal.push(entry(
        &h,
        "notify#0",
        1,
        EntryState::Retrying {
            attempt: 1,
            error: ErrorInfo::new("timeout", "took too long", true),
            retry_at: h.now().plus(Duration::from_secs(5)),
        },
    ));
    write(&h, &cp2).await;

    let mut cp3 = checkpoint_over(&h, &cp2.run, Some(held.epoch), |_| {});
    let mut failed = ErrorInfo::new("validation", "bad address", false);
    failed.cause = Some(Box::new(ErrorInfo::new("http", "422", false)));
    cp3.journal.push(entry(
        &h,
        "notify#0",
        1,
        EntryState::Failed {
            error: failed,
            attempt: 2,
        },
    ));
    write(&h, &cp3).await;

    let journal = snapshot(&h, &tenant, &run.id).await.journal;
    assert_eq!(
        journal,
        vec![cp2.journal[0].clone(), cp3.journal[0].clone()],
        "one entry per position, the last written"
    );
}

/// Callback and tool-call records are keyed by their ids: writing one again replaces it.
pub async fn checkpoint_replaces_callback_and_tool_call_records(h: Harness) {
    let tenant = tenant();
    let run = create(&h, &tenant).await;
    let held = claim(&h, &run, "engine-a", LEASE).await;
    let callback = open_callback(&h, &held, "payment#0");
    let tool_call = running_tool_call(&h, &held, "charge#0");
    let mut cp1 = checkpoint_over(&h, &held, Some(held.epoch), |_| {});
    cp1.callbacks.push(callback.clone());
    cp1.tool_calls.push(tool_call.clone());
    write(&h, &cp1).await;

    let mut timed_out = callback.clone();
    timed_out.status = CallbackStatus::TimedOut;
    let mut done = tool_call.clone();
    done.status = ToolCallStatus::Failed;
    done.outcome = Some(Err(ErrorInfo::new("declined", "card declined", false)));
    done.updated_at = h.now().plus(Duration::from_millis(5));
    let mut cp2 = checkpoint_over(&h, &cp1.run, Some(held.epoch), |_| {});
    cp2.callbacks.push(timed_out.clone());
    cp2.tool_calls.push(done.clone());
    write(&h, &cp2).await;

    let store = &h.backend.store;
    assert_eq!(
        store
            .get_callback(&callback.callback_id)
            .await
            .expect("get_callback"),
        Some(timed_out),
        "the callback record was replaced"
    );
    assert_eq!(
        store
            .get_tool_call(&tenant, &tool_call.key)
            .await
            .expect("get_tool_call"),
        Some(done),
        "the tool-call record was replaced"
    );
}

/// A checkpoint that closes callbacks (a timed-out wait, a finishing run) replaces
/// their records, and a closed callback refuses any later outcome or heartbeat as
/// `Gone`, while the run itself still accepts other deliveries.
pub async fn checkpoint_closing_callbacks_refuse_later_outcomes(h: Harness) {
    let tenant = tenant();
    let run = waiting_run(&h, &tenant).await;
    let timed_out = open_callback(&h, &run, "payment#0");
    let closed = open_callback(&h, &run, "shipping#0");
    let mut cp = checkpoint_over(&h, &run, None, |_| {});
    cp.callbacks = vec![timed_out.clone(), closed.clone()];
    write(&h, &cp).await;

    let held = claim(&h, &cp.run, "engine-a", LEASE).await;
    let closing = [
        CallbackRecord {
            status: CallbackStatus::TimedOut,
            ..timed_out.clone()
        },
        CallbackRecord {
            status: CallbackStatus::Closed,
            ..closed.clone()
        },
    ];
    let mut cp = checkpoint_over(&h, &held, Some(held.epoch), |r| {
        r.status = RunStatus::Waiting;
        r.lease = None;
    });
    cp.callbacks = closing.to_vec();
    push_event(
        &mut cp,
        op_event(
            h.now(),
            EventType::CallbackTimedOut,
            SubType::Callback,
            "payment#0",
            serde_json::json!({"CallbackId": timed_out.callback_id}),
        ),
    );
    write(&h, &cp).await;
    for record in &closing {
        assert_eq!(
            h.backend
                .store
                .get_callback(&record.callback_id)
                .await
                .expect("get_callback")
                .as_ref(),
            Some(record),
            "the closing record replaced the open one"
        );
    }

    let before = snapshot(&h, &tenant, &run.id).await;
    for record in &closing {
        let id = record.callback_id.clone();
        for body in [
            DeliveryBody::CallbackSucceeded {
                callback_id: id.clone(),
                value: json(serde_json::json!("late")),
            },
            DeliveryBody::CallbackHeartbeat { callback_id: id },
        ] {
            let got = h
                .backend
                .store
                .deliver(&callback_delivery(&h, record, body))
                .await;
            assert!(
                matches!(got, Err(StoreError::Gone(_))),
                "an outcome for a {:?} callback: expected Gone, got {got:?}",
                record.status
            );
        }
    }
    assert_eq!(
        snapshot(&h, &tenant, &run.id).await,
        before,
        "refused outcomes change nothing"
    );
    deliver(&h, &event_delivery(&h, &cp.run, "still-listening")).await;
}

/// `get_callback` and `get_tool_call` return records exactly as written, every field
/// set (a typed callback's JSON Schema included, and an event wait's in the journal:
/// deliveries are checked against them); unknown ids are `None`.
pub async fn callback_and_tool_call_records_round_trip(h: Harness) {
    let tenant = tenant();
    let run = create(&h, &tenant).await;
    let held = claim(&h, &run, "engine-a", LEASE).await;
    let callback = CallbackRecord {
        deadline: None,
        ..open_callback(&h, &held, "outer#0/approve#2")
    };
    let schema = siesta::accepts::schema_of::<Vec<Option<(String, u64)>>>();
    let with_deadline = CallbackRecord {
        accepts: Some(schema.clone()),
        ..open_callback(&h, &held, "payment#0")
    };
    let event_wait = JournalEntry {
        position: Position::from("approval#0"),
        index: 0,
        kind: OperationKind::Event,
        name: "approval".into(),
        state: EntryState::Waiting(Wait {
            kind: WaitKind::Event {
                name: "approval".into(),
                accepts: Some(schema),
            },
            deadline: None,
            started_at: h.now(),
        }),
        consumed: Vec::new(),
        handle: None,
        minted: Vec::new(),
        within: None,
        superseded: None,
        updated_at: h.now(),
    };
    let mut cause = ErrorInfo::new("http", "503 from the tool", true);
    cause.cause = Some(Box::new(ErrorInfo::new("io", "reset", true)));
    let mut failed = ErrorInfo::new("retries_exhausted", "gave up", false);
    failed.cause = Some(Box::new(cause));
    let tool_failed = ToolCallRecord {
        status: ToolCallStatus::Failed,
        outcome: Some(Err(failed)),
        ..running_tool_call(&h, &held, "charge#0")
    };
    let tool_large = ToolCallRecord {
        status: ToolCallStatus::Succeeded,
        outcome: Some(Ok(Payload::Artifact(ArtifactRef {
            sha256: "ab".repeat(32),
            size: 1_000_000,
            media_type: "application/json".into(),
            location: format!("{}/{}/{}", tenant, run.id, "ab".repeat(32)),
        }))),
        ..running_tool_call(&h, &held, "fetch#0")
    };
    let tool_unknown = ToolCallRecord {
        status: ToolCallStatus::Unknown,
        ..running_tool_call(&h, &held, "refund#0")
    };
    let mut cp = checkpoint_over(&h, &held, Some(held.epoch), |_| {});
    cp.callbacks = vec![callback.clone(), with_deadline.clone()];
    cp.journal.push(event_wait.clone());
    cp.tool_calls = vec![
        tool_failed.clone(),
        tool_large.clone(),
        tool_unknown.clone(),
    ];
    write(&h, &cp).await;

    let store = &h.backend.store;
    let replay_input = store
        .load_replay_input(&tenant, &run.id)
        .await
        .expect("replay input");
    let stored = replay_input
        .journal
        .iter()
        .find(|e| e.position == event_wait.position)
        .expect("the event wait");
    assert_eq!(stored.state, event_wait.state, "the wait with its schema");
    for record in [&callback, &with_deadline] {
        assert_eq!(
            store
                .get_callback(&record.callback_id)
                .await
                .expect("get_callback")
                .as_ref(),
            Some(record)
        );
    }
    for record in [&tool_failed, &tool_large, &tool_unknown] {
        assert_eq!(
            store
                .get_tool_call(&tenant, &record.key)
                .await
                .expect("get_tool_call")
                .as_ref(),
            Some(record)
        );
    }
    assert_eq!(
        store
            .get_callback(&CallbackId::generate())
            .await
            .expect("get_callback"),
        None,
        "an unknown callback"
    );
    assert_eq!(
        store
            .get_tool_call(&tenant, &IdempotencyKey(unique("idem")))
            .await
            .expect("get_tool_call"),
        None,
        "an unknown tool call"
    );
}

/// A checkpoint of more than [`MAX_TRANSACTION_ITEMS`] items (DynamoDB's
/// `TransactWriteItems` limit) is refused as invalid and writes nothing; one of exactly
/// that many is written.
pub async fn checkpoint_over_the_transaction_item_limit_writes_nothing(h: Harness) {
    let tenant = tenant();
    let run = create(&h, &tenant).await;
    let held = claim(&h, &run, "engine-a", LEASE).await;
    let over = |n: usize| {
        let mut cp = checkpoint_over(&h, &held, Some(held.epoch), |_| {});
        cp.callbacks = (0..n)
            .map(|i| open_callback(&h, &held, &format!("approval#{i}")))
            .collect();
        cp
    };
    let too_many = over(MAX_TRANSACTION_ITEMS);
    assert_eq!(too_many.item_count(), MAX_TRANSACTION_ITEMS + 1);
    let before = snapshot(&h, &tenant, &run.id).await;
    let got = h.backend.store.checkpoint(&too_many).await;
    assert!(
        matches!(got, Err(StoreError::Invalid(_))),
        "{} items: expected Invalid, got {got:?}",
        too_many.item_count()
    );
    assert_eq!(
        snapshot(&h, &tenant, &run.id).await,
        before,
        "a refused checkpoint writes nothing"
    );
    assert_side_items_absent(&h, &too_many, "over the item limit").await;

    let at_limit = over(MAX_TRANSACTION_ITEMS - 1);
    assert_eq!(at_limit.item_count(), MAX_TRANSACTION_ITEMS);
    write(&h, &at_limit).await;
    assert_eq!(get(&h, &tenant, &run.id).await, at_limit.run);
    for record in &at_limit.callbacks {
        assert_eq!(
            h.backend
                .store
                .get_callback(&record.callback_id)
                .await
                .expect("get_callback")
                .as_ref(),
            Some(record)
        );
    }
}
