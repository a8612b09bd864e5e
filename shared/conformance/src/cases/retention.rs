//! Removing finished runs past their retention ([`RunStore::reap_finished`]).
//!
//! A backend that does not remove runs yet answers [`StoreError::Unsupported`]; the
//! cases then say so on stderr and pass (the AWS backend expires items by TTL
//! instead, which DynamoDB Local does not do: it has its own tests). Every call names
//! the case's own workflow, so a backend shared with other cases removes nothing of
//! theirs.

use std::time::Duration;

use bytes::Bytes;
use siesta::ports::*;
use siesta::*;

use crate::Harness;
use crate::support::*;

/// A run with a row in every table a run owns: a journal entry, timeline events, a
/// callback and a tool-call record, a delivery, a stream chunk and an artifact; left
/// waiting.
struct Populated {
    run: Run,
    callback: CallbackRecord,
    tool_call: ToolCallRecord,
    artifact: ArtifactRef,
}

async fn populated(h: &Harness, tenant: &TenantId, workflow: &str) -> Populated {
    let run = new_run(h, tenant, workflow);
    create_run(h, &run).await;
    let claimed = claim(h, &run, "reaper-case", LEASE).await;
    let callback = open_callback(h, &claimed, "payment#0");
    let tool_call = running_tool_call(h, &claimed, "charge#0");
    let mut cp = checkpoint_over(h, &claimed, Some(claimed.epoch), |r| {
        r.status = RunStatus::Waiting;
        r.lease = None;
        r.due_at = Some(h.now().plus(Duration::from_secs(3600)));
    });
    cp.journal
        .push(entry(h, "plan#0", 0, succeeded(serde_json::json!([1, 2]))));
    cp.callbacks.push(callback.clone());
    cp.tool_calls.push(tool_call.clone());
    push_event(
        &mut cp,
        op_event(
            h.now(),
            EventType::WaitStarted,
            SubType::Wait,
            "nap#0",
            serde_json::Value::Null,
        ),
    );
    write(h, &cp).await;
    let run = deliver(h, &event_delivery(h, &cp.run, "approval")).await;
    let chunk = NewChunk {
        kind: ChunkKind::Data,
        data: serde_json::json!("thinking"),
        step: None,
        attempt: None,
        key: Some("body-1".to_owned()),
        at: h.now(),
    };
    h.backend
        .streams
        .append(tenant, &run.id, "tokens", &[chunk])
        .await
        .expect("append");
    let artifact = h
        .backend
        .artifacts
        .put(
            tenant,
            &run.id,
            "application/json",
            Bytes::from_static(b"[\"big\"]"),
        )
        .await
        .expect("put");
    Populated {
        run,
        callback,
        tool_call,
        artifact,
    }
}

/// Whether the backend removes runs; says why not on stderr when it does not. Asked
/// before a case lets time pass: on a harness with the system clock (the AWS backend's)
/// `advance` sleeps, and a case that would be skipped must not sleep first.
async fn supported(h: &Harness, workflow: &str) -> bool {
    // A cutoff before every run: nothing is due, so this removes nothing.
    let got = h
        .backend
        .store
        .reap_finished(Some(workflow), Timestamp(0), 1)
        .await;
    match got {
        Err(StoreError::Unsupported(why)) => {
            eprintln!("skipped: this backend does not remove finished runs yet ({why})");
            false
        }
        Err(e) => panic!("reap_finished: {e}"),
        Ok(removed) => {
            assert!(
                removed.is_empty(),
                "nothing is older than 1970: {removed:?}"
            );
            true
        }
    }
}

fn ago(h: &Harness, d: Duration) -> Timestamp {
    Timestamp(h.now().0 - d.as_millis() as i64)
}

/// A finished run past the cutoff goes with everything it owns — its run, journal,
/// timeline, deliveries, callback and tool-call records, stream chunks and artifacts
/// — and its id is free again (an `Idempotency-Key` replay is a new start). A waiting
/// run and a parked run of the same age, and a finished run younger than the cutoff,
/// are left exactly as they were.
pub async fn reaping_removes_a_finished_run_past_its_retention_and_nothing_else(h: Harness) {
    let tenant = tenant();
    let workflow = unique("reap");
    if !supported(&h, &workflow).await {
        return;
    }
    let done = populated(&h, &tenant, &workflow).await;
    let done_run = finish(&h, &done.run, RunStatus::Completed).await;
    let waiting = populated(&h, &tenant, &workflow).await;
    let parked = populated(&h, &tenant, &workflow).await;
    finish(&h, &parked.run, RunStatus::Parked).await;
    h.advance(Duration::from_secs(3600)).await;
    let young = populated(&h, &tenant, &workflow).await;
    finish(&h, &young.run, RunStatus::Failed).await;
    let kept = [&waiting, &parked, &young];
    let mut before = Vec::new();
    for p in kept {
        before.push(snapshot(&h, &tenant, &p.run.id).await);
    }

    let removed = h
        .backend
        .store
        .reap_finished(Some(&workflow), ago(&h, Duration::from_secs(1800)), 100)
        .await
        .expect("reap_finished");
    assert_eq!(
        removed,
        vec![ReapedRun {
            tenant: tenant.clone(),
            run_id: done_run.id.clone(),
            workflow: workflow.clone(),
        }],
        "only the finished run past the cutoff"
    );
    let store = &h.backend.store;
    let gone = snapshot(&h, &tenant, &done.run.id).await;
    assert_eq!(gone.run, None, "the run");
    assert!(gone.journal.is_empty(), "its journal: {:?}", gone.journal);
    assert!(gone.deliveries.is_empty(), "its deliveries");
    assert!(gone.timeline.is_empty(), "its timeline");
    assert_eq!(
        store
            .get_callback(&done.callback.callback_id)
            .await
            .expect("get_callback"),
        None,
        "its callback record"
    );
    assert_eq!(
        store
            .get_tool_call(&tenant, &done.tool_call.key)
            .await
            .expect("get_tool_call"),
        None,
        "its tool-call record"
    );
    let chunks = h
        .backend
        .streams
        .read(&tenant, &done.run.id, "tokens", 0, 10)
        .await
        .expect("read");
    assert!(chunks.is_empty(), "its stream: {chunks:?}");
    let artifact = h.backend.artifacts.get(&done.artifact).await;
    assert!(
        matches!(artifact, Err(StoreError::NotFound)),
        "its artifact: {artifact:?}"
    );

    for (p, before) in kept.into_iter().zip(before) {
        assert_eq!(
            snapshot(&h, &tenant, &p.run.id).await,
            before,
            "{}",
            p.run.id
        );
        assert!(
            store
                .get_callback(&p.callback.callback_id)
                .await
                .expect("get_callback")
                .is_some()
        );
        assert!(
            store
                .get_tool_call(&tenant, &p.tool_call.key)
                .await
                .expect("get_tool_call")
                .is_some()
        );
        h.backend
            .artifacts
            .get(&p.artifact)
            .await
            .expect("a kept run's artifact");
    }
    // Nothing else is due; the removed run's id is free again.
    let again = store
        .reap_finished(Some(&workflow), h.now(), 100)
        .await
        .expect("reap_finished");
    assert!(
        again.iter().all(|r| r.run_id == young.run.id),
        "only the young failed run is due at now: {again:?}"
    );
    let mut reborn = new_run(&h, &tenant, &workflow);
    reborn.id = done.run.id.clone();
    create_run(&h, &reborn).await;
}

/// Runs go oldest first, at most `limit` a call, and a call after a short page finds
/// nothing: a caller that stops after any page goes on where it stopped.
pub async fn reaping_pages_oldest_first(h: Harness) {
    let tenant = tenant();
    let workflow = unique("reap-pages");
    if !supported(&h, &workflow).await {
        return;
    }
    let mut finished = Vec::new();
    for _ in 0..5 {
        let run = new_run(&h, &tenant, &workflow);
        create_run(&h, &run).await;
        finished.push(finish(&h, &run, RunStatus::Cancelled).await.id);
        h.advance(Duration::from_secs(60)).await;
    }
    let store = &h.backend.store;
    let page = |limit| store.reap_finished(Some(&workflow), h.now(), limit);
    let ids = |runs: Vec<ReapedRun>| runs.into_iter().map(|r| r.run_id).collect::<Vec<_>>();
    assert_eq!(ids(page(2).await.expect("first page")), finished[..2]);
    assert_eq!(ids(page(2).await.expect("second page")), finished[2..4]);
    assert_eq!(ids(page(2).await.expect("third page")), finished[4..]);
    assert!(page(2).await.expect("past the end").is_empty());
}
