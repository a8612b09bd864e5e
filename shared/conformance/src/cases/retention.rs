//! Removing finished runs past their retention ([`RunStore::reap_due`]).
//!
//! A backend that does not remove runs this way answers [`StoreError::Unsupported`];
//! the cases then say so on stderr and pass (the AWS backend has its own reaper, run
//! by the sweep function, with its own tests). Every call's rules keep every workflow
//! but the case's own for ever, so a backend shared with other cases removes nothing
//! of theirs.

use std::time::Duration;

use bytes::Bytes;
use siesta::ports::*;
use siesta::*;

use siesta::retention::ReapReport;

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

/// Rules that keep every run for ever but `workflow`'s, kept for `retention`.
fn only(workflow: &str, retention: Duration) -> RetentionRules {
    RetentionRules::new(RetentionPolicy::keep_for(None).with_workflow(workflow, Some(retention)))
}

/// Whether the backend removes runs; says why not on stderr when it does not. Asked
/// before a case lets time pass: on a harness with the system clock (the AWS backend's)
/// `advance` sleeps, and a case that would be skipped must not sleep first.
async fn supported(h: &Harness, workflow: &str) -> bool {
    // At 1970 nothing is due, so this looks at nothing.
    let got = h
        .backend
        .store
        .reap_due(&only(workflow, Duration::ZERO), Timestamp(0), 1)
        .await;
    match got {
        Err(StoreError::Unsupported(why)) => {
            eprintln!("skipped: this backend does not remove finished runs this way ({why})");
            false
        }
        Err(e) => panic!("reap_due: {e}"),
        Ok(report) => {
            assert_eq!(report, ReapReport::default(), "nothing is due in 1970");
            true
        }
    }
}

/// A finished run past its retention goes with everything it owns — its run, journal,
/// timeline, deliveries, callback and tool-call records, stream chunks and artifacts
/// — and its id is free again (an `Idempotency-Key` replay is a new start). A waiting
/// run and a parked run of the same age, and a finished run younger than its
/// retention, are left exactly as they were; the young one is not looked at again
/// until its retention ends, and goes then.
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

    let rules = only(&workflow, Duration::from_secs(1800));
    let report = h
        .backend
        .store
        .reap_due(&rules, h.now(), 100)
        .await
        .expect("reap_due");
    assert_eq!(
        report.removed,
        vec![ReapedRun {
            tenant: tenant.clone(),
            run_id: done_run.id.clone(),
            workflow: workflow.clone(),
        }],
        "only the finished run past its retention"
    );
    assert_eq!(report.put_back, 1, "the young finished run, until its end");
    assert!(!report.more);
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
    // Nothing else is due: the young run is not even read before its retention ends.
    let again = store
        .reap_due(&rules, h.now(), 100)
        .await
        .expect("reap_due");
    assert_eq!(
        again,
        ReapReport::default(),
        "nothing is due before the young run's end"
    );
    h.advance(Duration::from_secs(1800)).await;
    let at_end = store
        .reap_due(&rules, h.now(), 100)
        .await
        .expect("reap_due");
    assert_eq!(
        at_end.removed.iter().map(|r| &r.run_id).collect::<Vec<_>>(),
        vec![&young.run.id],
        "the young run goes at the end of its retention"
    );
    // The removed run's id is free again.
    let mut reborn = new_run(&h, &tenant, &workflow);
    reborn.id = done.run.id.clone();
    create_run(&h, &reborn).await;
}

/// Runs go oldest first, at most `limit` a call, the report saying whether the page
/// was full, and a call after a short page finds nothing: a caller that stops after any
/// page goes on where it stopped.
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
    let rules = only(&workflow, Duration::from_secs(1));
    let page = |limit| store.reap_due(&rules, h.now(), limit);
    let ids = |report: &ReapReport| {
        report
            .removed
            .iter()
            .map(|r| r.run_id.clone())
            .collect::<Vec<_>>()
    };
    let first = page(2).await.expect("first page");
    assert_eq!((ids(&first), first.more), (finished[..2].to_vec(), true));
    let second = page(2).await.expect("second page");
    assert_eq!((ids(&second), second.more), (finished[2..4].to_vec(), true));
    let third = page(2).await.expect("third page");
    assert_eq!((ids(&third), third.more), (finished[4..].to_vec(), false));
    assert_eq!(page(2).await.expect("past the end"), ReapReport::default());
}

/// A tenant's own retention (`retention_days` in its quota) replaces the deployment's
/// for its runs, and a workflow's own replaces the tenant's; a tenant kept for ever
/// (`0`) keeps its runs.
pub async fn reaping_honours_the_tenants_retention_under_the_workflows(h: Harness) {
    let workflow = unique("reap-tenant");
    let own = unique("reap-own");
    if !supported(&h, &workflow).await {
        return;
    }
    let (short, long, forever) = (tenant(), tenant(), tenant());
    let quota = |days| Quota {
        retention_days: Some(days),
        ..Quota::default()
    };
    let mut rules = only(&workflow, Duration::from_secs(0));
    rules.policy.workflows.clear();
    rules.policy.default = Some(Duration::from_secs(30 * 86_400));
    rules.policy = rules
        .policy
        .with_workflow(own.clone(), Some(Duration::from_secs(3600)));
    rules.quotas.tenants.insert(short.0.clone(), quota(1));
    rules.quotas.tenants.insert(forever.0.clone(), quota(0));
    let mut runs = Vec::new();
    for tenant in [&short, &long, &forever] {
        for wf in [&workflow, &own] {
            let run = new_run(&h, tenant, wf);
            create_run(&h, &run).await;
            runs.push(finish(&h, &run, RunStatus::Completed).await);
        }
    }
    let store = &h.backend.store;
    let removed_after = |d: Duration| {
        let rules = rules.clone();
        let h = &h;
        async move {
            h.advance(d).await;
            let report = store
                .reap_due(&rules, h.now(), 100)
                .await
                .expect("reap_due");
            let mut ids: Vec<RunId> = report.removed.into_iter().map(|r| r.run_id).collect();
            ids.sort_by(|a, b| a.0.cmp(&b.0));
            ids
        }
    };
    let sorted = |mut ids: Vec<RunId>| {
        ids.sort_by(|a, b| a.0.cmp(&b.0));
        ids
    };
    // After an hour: the workflow kept an hour, in every tenant, even one kept for ever.
    assert_eq!(
        removed_after(Duration::from_secs(3600)).await,
        sorted(vec![
            runs[1].id.clone(),
            runs[3].id.clone(),
            runs[5].id.clone()
        ])
    );
    // After a day: the tenant kept a day.
    assert_eq!(
        removed_after(Duration::from_secs(86_400)).await,
        vec![runs[0].id.clone()]
    );
    // After thirty days: the tenant with the deployment's retention; never the one kept
    // for ever.
    assert_eq!(
        removed_after(Duration::from_secs(30 * 86_400)).await,
        vec![runs[2].id.clone()]
    );
    assert!(
        removed_after(Duration::from_secs(3650 * 86_400))
            .await
            .is_empty()
    );
    assert!(
        store
            .get_run(&forever, &runs[4].id)
            .await
            .expect("get_run")
            .is_some()
    );
}

/// A run put back under a long retention (or due at its end from its finish, in a
/// store that was rearmed with it) is looked at again when the rules are rearmed with
/// a shorter one (a server restarted with a new `--retention`), and goes at the end of
/// the shorter one; rearming with the same rules again looks at nothing.
pub async fn reaping_applies_a_shortened_retention_once_rearmed(h: Harness) {
    let tenant = tenant();
    let workflow = unique("reap-rearm");
    if !supported(&h, &workflow).await {
        return;
    }
    let store = &h.backend.store;
    let long = only(&workflow, Duration::from_secs(30 * 86_400));
    let short = only(&workflow, Duration::from_secs(3600));
    // Rearm with `armed` (a server starting with those rules), then reap by `short`.
    let start_then_reap = |armed: RetentionRules| {
        let (h, short) = (&h, short.clone());
        async move {
            store
                .rearm_reaping(&armed, h.now())
                .await
                .expect("rearm_reaping");
            store
                .reap_due(&short, h.now(), 100)
                .await
                .expect("reap_due")
        }
    };
    store
        .rearm_reaping(&long, h.now())
        .await
        .expect("rearm_reaping");
    let run = new_run(&h, &tenant, &workflow);
    create_run(&h, &run).await;
    let done = finish(&h, &run, RunStatus::Failed).await;
    // Read and put back at its finish, or (a store that schedules a finishing run by
    // the rules it was rearmed with) not read at all: either way, not removed.
    let report = store.reap_due(&long, h.now(), 100).await.expect("reap_due");
    assert!(
        report.removed.is_empty() && report.put_back <= 1,
        "{report:?}"
    );
    h.advance(Duration::from_secs(3600)).await;
    assert_eq!(
        store
            .reap_due(&short, h.now(), 100)
            .await
            .expect("reap_due"),
        ReapReport::default(),
        "put back for thirty days, it is not looked at before rearming"
    );
    assert_eq!(
        start_then_reap(long.clone()).await,
        ReapReport::default(),
        "rearming with the same rules looks at nothing again"
    );
    let report = start_then_reap(short.clone()).await;
    assert_eq!(
        report.removed.iter().map(|r| &r.run_id).collect::<Vec<_>>(),
        vec![&done.id]
    );
}
