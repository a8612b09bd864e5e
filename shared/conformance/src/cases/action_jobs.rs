//! Bulk actions' jobs: a job's record written only on the version read, read back as
//! written, listed newest first per tenant; the deployment's active jobs listed while
//! they run and no longer once finished.
//!
//! A backend without bulk actions answers [`StoreError::Unsupported`]; its cases are
//! skipped, saying so.

use siesta::ports::*;
use siesta::*;

use crate::Harness;
use crate::support::*;

/// A running job of `tenant` with a fresh, time-ordered id.
fn job(h: &Harness, tenant: &TenantId) -> ActionJob {
    ActionJob {
        tenant: tenant.clone(),
        id: format!("job-{}", uuid::Uuid::now_v7()),
        action: BulkAction::Cancel,
        restart: RestartOptions::default(),
        filter: ActionFilter {
            workflow: Some("order".into()),
            status: Some(RunStatus::Failed),
            ..ActionFilter::default()
        },
        rate: 50,
        by: "conformance".into(),
        status: ActionJobStatus::Running,
        matched: 0,
        done: 0,
        skipped: 0,
        failed: 0,
        skipped_sample: Vec::new(),
        failures: Vec::new(),
        cursor: None,
        created_at: h.now(),
        updated_at: h.now(),
        next_at: h.now(),
        lease: None,
        errors_in_a_row: 0,
        error: None,
        cancelled_by: None,
        build: None,
        version: 0,
    }
}

/// Whether `store` lists `job` among the deployment's active jobs.
async fn is_active(store: &dyn RunStore, job: &ActionJob) -> bool {
    store
        .active_action_jobs(100_000)
        .await
        .unwrap()
        .iter()
        .any(|a| a.tenant == job.tenant && a.id == job.id)
}

/// A job not stored yet is `None`; one written on version 0 is stored at 1 and reads
/// back whole; a write on any version but the stored one is a conflict and changes
/// nothing; another tenant's job of the same id is another job.
pub async fn action_job_round_trips_and_is_written_on_its_version(h: Harness) {
    let store = &h.backend.store;
    let (tenant, other) = (tenant(), tenant());
    let mut first = job(&h, &tenant);
    match store.get_action_job(&tenant, &first.id).await {
        Ok(None) => {}
        Err(StoreError::Unsupported(why)) => {
            eprintln!("skipped: this backend has no bulk actions ({why})");
            return;
        }
        other => panic!("a new job: {other:?}"),
    }
    assert_eq!(store.put_action_job(&first, 0).await.unwrap(), 1);
    first.version = 1;
    assert_eq!(
        store.get_action_job(&tenant, &first.id).await.unwrap(),
        Some(first.clone())
    );
    assert!(
        matches!(
            store.put_action_job(&first, 0).await,
            Err(StoreError::Conflict(_))
        ),
        "a second first write conflicts"
    );
    let mut progressed = first.clone();
    progressed.matched = 10;
    progressed.done = 7;
    progressed.skipped = 3;
    progressed.cursor = Some("page-2".into());
    progressed.skipped_sample = vec![ActionNote {
        run_id: RunId::from("r-1"),
        why: "already cancelled".into(),
    }];
    progressed.lease = Some(ActionJobLease {
        owner: "engine#1".into(),
        until: h.now(),
    });
    assert_eq!(store.put_action_job(&progressed, 1).await.unwrap(), 2);
    assert!(
        matches!(
            store.put_action_job(&first, 1).await,
            Err(StoreError::Conflict(_))
        ),
        "a write on a stale version conflicts"
    );
    progressed.version = 2;
    assert_eq!(
        store.get_action_job(&tenant, &first.id).await.unwrap(),
        Some(progressed),
        "the stale write changed nothing"
    );
    assert_eq!(
        store.get_action_job(&other, &first.id).await.unwrap(),
        None,
        "another tenant"
    );
    let mut others = first.clone();
    others.tenant = other.clone();
    assert_eq!(store.put_action_job(&others, 0).await.unwrap(), 1);
}

/// A running job is among the deployment's active jobs from its first write, through
/// its progress, until the write that finishes it; a tenant's jobs list newest first,
/// another tenant's never.
pub async fn active_action_jobs_are_the_running_ones_and_jobs_list_newest_first(h: Harness) {
    let store = &h.backend.store;
    let (tenant, other) = (tenant(), tenant());
    let older = job(&h, &tenant);
    if let Err(StoreError::Unsupported(why)) = store.put_action_job(&older, 0).await {
        eprintln!("skipped: this backend has no bulk actions ({why})");
        return;
    }
    let newer = job(&h, &tenant);
    store.put_action_job(&newer, 0).await.unwrap();
    store.put_action_job(&job(&h, &other), 0).await.unwrap();
    assert!(is_active(store.as_ref(), &older).await);
    assert!(is_active(store.as_ref(), &newer).await);

    let mut progressed = older.clone();
    progressed.done = 5;
    progressed.matched = 5;
    store.put_action_job(&progressed, 1).await.unwrap();
    assert!(is_active(store.as_ref(), &older).await, "still running");

    let mut finished = progressed.clone();
    finished.status = ActionJobStatus::Done;
    store.put_action_job(&finished, 2).await.unwrap();
    assert!(!is_active(store.as_ref(), &older).await, "done: not active");
    let mut cancelled = newer.clone();
    cancelled.status = ActionJobStatus::Cancelled;
    store.put_action_job(&cancelled, 1).await.unwrap();
    assert!(
        !is_active(store.as_ref(), &newer).await,
        "cancelled: not active"
    );

    let listed: Vec<(String, ActionJobStatus, u64)> = store
        .list_action_jobs(&tenant, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|j| (j.id, j.status, j.version))
        .collect();
    assert_eq!(
        listed,
        vec![
            (newer.id.clone(), ActionJobStatus::Cancelled, 2),
            (older.id.clone(), ActionJobStatus::Done, 3),
        ],
        "newest first, this tenant's only"
    );
    assert_eq!(store.list_action_jobs(&tenant, 1).await.unwrap().len(), 1);
}

/// Of eight writes of one job on the same version at once, exactly one wins: two
/// invocations never both take a slice.
pub async fn concurrent_action_job_writes_exactly_one_wins(h: Harness) {
    let store = &h.backend.store;
    let first = job(&h, &tenant());
    if let Err(StoreError::Unsupported(why)) = store.put_action_job(&first, 0).await {
        eprintln!("skipped: this backend has no bulk actions ({why})");
        return;
    }
    let writes = (0..8).map(|i| {
        let mut claimed = first.clone();
        claimed.lease = Some(ActionJobLease {
            owner: format!("engine#{i}"),
            until: h.now(),
        });
        async move { (i, store.put_action_job(&claimed, 1).await) }
    });
    let results = futures::future::join_all(writes).await;
    let won: Vec<usize> = results
        .iter()
        .filter(|(_, r)| r.is_ok())
        .map(|(i, _)| *i)
        .collect();
    assert_eq!(won.len(), 1, "{results:?}");
    for (_, r) in &results {
        assert!(
            matches!(r, Ok(2) | Err(StoreError::Conflict(_))),
            "a loser conflicts: {r:?}"
        );
    }
    let stored = store
        .get_action_job(&first.tenant, &first.id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        stored.lease.map(|l| l.owner),
        Some(format!("engine#{}", won[0]))
    );
}

/// `waiter` and `bystander`: each waits for the event `go`.
fn waiting() -> Registry {
    let mut reg = Registry::new();
    for name in ["waiter", "bystander"] {
        reg.register(name, |ctx: Context, _: serde_json::Value| async move {
            let go: serde_json::Value = ctx.wait_for_event("go").await?;
            Ok(go)
        });
    }
    reg
}

/// The engine on the backend: a bulk cancel by workflow, its job woken through the
/// backend's queue and its runs listed by the backend's index, cancels each run its
/// filter matches once, leaves the others alone, and counts what it did.
pub async fn a_bulk_cancel_on_the_backend_acts_on_each_matched_run_once(h: Harness) {
    let tenant = tenant();
    let config = EngineConfig {
        owner: unique("conformance"),
        ..EngineConfig::default()
    };
    let engine = Engine::new(h.backend.clone(), h.clock.clone(), waiting(), config);
    let mut targets = Vec::new();
    for _ in 0..5 {
        let run = engine
            .start(&tenant, "waiter", serde_json::Value::Null, None)
            .await
            .expect("start");
        targets.push(run.id);
    }
    let other = engine
        .start(&tenant, "bystander", serde_json::Value::Null, None)
        .await
        .expect("start")
        .id;
    engine.run_until_idle(50).await.expect("work the queue");
    let request = ActionRequest {
        action: BulkAction::Cancel,
        filter: ActionFilter {
            workflow: Some("waiter".into()),
            ..ActionFilter::default()
        },
        restart: RestartOptions::default(),
        rate: Some(MAX_ACTION_RATE),
    };
    let started = match engine
        .start_action_job(&tenant, request, "conformance")
        .await
    {
        Ok(job) => job,
        Err(EngineError::Store(StoreError::Unsupported(why))) => {
            eprintln!("skipped: this backend has no bulk actions ({why})");
            return;
        }
        Err(e) => panic!("start the job: {e}"),
    };
    let mut job = started.clone();
    // A next slice waits its pacing (a second on SQS): a few rounds at most.
    for _ in 0..5 {
        engine.run_until_idle(50).await.expect("work the queue");
        job = engine.action_job(&tenant, &started.id).await.expect("read");
        if job.status.is_finished() {
            break;
        }
        h.advance(std::time::Duration::from_secs(1)).await;
    }
    assert_eq!(job.status, ActionJobStatus::Done, "{job:?}");
    assert_eq!(
        (job.matched, job.done, job.skipped, job.failed),
        (5, 5, 0, 0),
        "{job:?}"
    );
    for run in &targets {
        let run = h
            .backend
            .store
            .get_run(&tenant, run)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(run.status, RunStatus::Cancelled);
    }
    let other = h
        .backend
        .store
        .get_run(&tenant, &other)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(other.status, RunStatus::Waiting, "not matched: left alone");
}
