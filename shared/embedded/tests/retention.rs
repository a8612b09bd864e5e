//! Retention on the file: a finished run past its retention leaves no row in any
//! table, a waiting run of the same age keeps every one, a reaper stopped mid-page
//! goes on where it was, and the file gives the freed pages back.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::FutureExt;
use rusqlite::Connection;
use siesta::ports::*;
use siesta::*;
use siesta_embedded::{Durability, EmbeddedBackend, EmbeddedOptions};

const HOUR: Duration = Duration::from_secs(3600);

/// The file, without an fsync per write (these tests write thousands of rows and
/// crash no OS).
fn open(path: &Path, clock: &Arc<ManualClock>) -> Backend {
    let options = EmbeddedOptions {
        durability: Durability::Relaxed,
        ..EmbeddedOptions::default()
    };
    EmbeddedBackend::open_with_options(path, clock.clone(), options)
        .expect("open the embedded backend")
        .backend()
}

fn event(at: Timestamp, event_type: EventType) -> TimelineEvent {
    TimelineEvent {
        seq: 0,
        at,
        event_type,
        sub_type: None,
        id: None,
        parent_id: None,
        name: None,
        details: serde_json::Value::Null,
    }
}

/// A run with a row in every table a run owns — journal (a step's result of `big`
/// bytes), timeline, a delivery, a callback and a tool-call record, a keyed stream
/// chunk, an artifact of `big` bytes and a queued wake-up — left waiting, or finished
/// (completed) when `finish`.
async fn full_run(ports: &Backend, clock: &ManualClock, finish: bool, big: usize) -> Run {
    full_run_of(ports, clock, "approval", finish, big).await
}

/// [`full_run`] of `workflow`.
async fn full_run_of(
    ports: &Backend,
    clock: &ManualClock,
    workflow: &str,
    finish: bool,
    big: usize,
) -> Run {
    full_run_in(ports, clock, "acme", workflow, finish, big).await
}

/// [`full_run`] of `tenant`'s `workflow`.
async fn full_run_in(
    ports: &Backend,
    clock: &ManualClock,
    tenant: &str,
    workflow: &str,
    finish: bool,
    big: usize,
) -> Run {
    let now = clock.now();
    let tenant = TenantId::from(tenant);
    let mut run = Run::new(
        tenant.clone(),
        RunId::generate(),
        workflow,
        Payload::Inline(serde_json::json!({"order": 1})),
        now,
    );
    run.timeline_seq = 1;
    let started = TimelineEvent::execution_started(now, workflow, serde_json::Value::Null);
    ports
        .store
        .create_run(&run, &started)
        .await
        .expect("create");
    let claim = Claim {
        owner: "retention".into(),
        now,
        expires_at: now.plus(Duration::from_secs(60)),
    };
    let claimed = ports
        .store
        .claim(&tenant, &run.id, &claim)
        .await
        .expect("claim");
    let mut next = claimed.clone();
    next.version += 1;
    next.status = RunStatus::Waiting;
    next.lease = None;
    next.due_at = Some(now.plus(HOUR));
    next.timeline_seq += 1;
    let mut cp = Checkpoint::new(next, claimed.version, Some(claimed.epoch));
    cp.journal.push(JournalEntry {
        position: Position::from("plan#0"),
        index: 0,
        kind: OperationKind::Step,
        name: "plan".into(),
        state: EntryState::Succeeded {
            value: Payload::Inline(serde_json::json!("x".repeat(big))),
            attempt: 1,
        },
        consumed: Vec::new(),
        handle: None,
        minted: Vec::new(),
        within: None,
        superseded: None,
        updated_at: now,
    });
    let mut waited = event(now, EventType::WaitStarted);
    waited.seq = cp.run.timeline_seq;
    cp.timeline.push(waited);
    cp.callbacks.push(CallbackRecord {
        callback_id: CallbackId::generate(),
        tenant: tenant.clone(),
        run_id: run.id.clone(),
        position: Position::from("payment#0"),
        status: CallbackStatus::Open,
        deadline: Some(now.plus(HOUR)),
        created_at: now,
        accepts: None,
        heartbeat: None,
    });
    cp.tool_calls.push(ToolCallRecord {
        key: IdempotencyKey(format!("idem-{}", run.id)),
        tenant: tenant.clone(),
        run_id: run.id.clone(),
        position: Position::from("charge#0"),
        status: ToolCallStatus::Succeeded,
        outcome: Some(Ok(Payload::Inline(serde_json::json!("charged")))),
        updated_at: now,
    });
    ports.store.checkpoint(&cp).await.expect("checkpoint");
    let delivery = NewDelivery {
        id: DeliveryId(format!("dlv-{}", run.id)),
        tenant: tenant.clone(),
        run_id: run.id.clone(),
        body: DeliveryBody::Event {
            name: "approval".into(),
            value: Payload::Inline(serde_json::json!(true)),
        },
        received_at: now,
        resend_after: None,
        event: event(now, EventType::EventDelivered),
    };
    let run = match ports.store.deliver(&delivery).await.expect("deliver") {
        DeliverOutcome::Accepted(run) => *run,
        other => panic!("{other:?}"),
    };
    let chunk = NewChunk {
        kind: ChunkKind::Data,
        data: serde_json::json!("thinking"),
        step: None,
        attempt: None,
        key: Some("body-1".into()),
        at: now,
    };
    ports
        .streams
        .append(&tenant, &run.id, "tokens", &[chunk])
        .await
        .expect("append");
    ports
        .artifacts
        .put(
            &tenant,
            &run.id,
            "application/octet-stream",
            Bytes::from(vec![b'a'; big]),
        )
        .await
        .expect("put");
    ports
        .queue
        .send(
            &WakeUp::new(tenant.clone(), run.id.clone(), WakeReason::Delivery),
            Duration::ZERO,
        )
        .await
        .expect("send");
    if !finish {
        return run;
    }
    let mut done = run.clone();
    done.version += 1;
    done.updated_at = now;
    done.status = RunStatus::Completed;
    done.due_at = None;
    done.output = Some(Payload::Inline(serde_json::json!("done")));
    done.timeline_seq += 1;
    let mut cp = Checkpoint::new(done, run.version, None);
    let mut succeeded = event(now, EventType::ExecutionSucceeded);
    succeeded.seq = cp.run.timeline_seq;
    cp.timeline.push(succeeded);
    ports.store.checkpoint(&cp).await.expect("finish");
    cp.run
}

/// The run's rows, table by table.
fn rows_of(conn: &Connection, run: &Run) -> Vec<(&'static str, i64)> {
    let key: Option<i64> = conn
        .query_row(
            "SELECT key FROM runs WHERE tenant = ?1 AND run_id = ?2",
            [run.tenant.as_str(), run.id.as_str()],
            |r| r.get(0),
        )
        .ok();
    let by_key = |table: &'static str| {
        let n = key.map_or(0, |key| {
            conn.query_row(
                &format!("SELECT count(*) FROM {table} WHERE run = ?1"),
                [key],
                |r| r.get(0),
            )
            .unwrap()
        });
        (table, n)
    };
    let prefix = artifact_location(&run.tenant, &run.id, "");
    vec![
        ("runs", i64::from(key.is_some())),
        by_key("journal"),
        by_key("timeline"),
        by_key("deliveries"),
        by_key("callbacks"),
        by_key("tool_calls"),
        by_key("stream_chunks"),
        by_key("stream_keys"),
        (
            "artifacts",
            conn.query_row(
                "SELECT count(*) FROM artifacts WHERE substr(location, 1, length(?1)) = ?1",
                [&prefix],
                |r| r.get(0),
            )
            .unwrap(),
        ),
        (
            "wake_queue",
            conn.query_row(
                "SELECT count(*) FROM wake_queue WHERE tenant = ?1 AND run_id = ?2",
                [run.tenant.as_str(), run.id.as_str()],
                |r| r.get(0),
            )
            .unwrap(),
        ),
    ]
}

/// Rows of every table of the file.
fn all_rows(conn: &Connection) -> Vec<(String, i64)> {
    let tables: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    tables
        .into_iter()
        .map(|t| {
            let n = conn
                .query_row(&format!("SELECT count(*) FROM {t}"), [], |r| r.get(0))
                .unwrap();
            (t, n)
        })
        .collect()
}

/// Reap at now with every run kept for `retention`, page after page, until none is
/// left; how many were removed.
async fn reap_all(ports: &Backend, clock: &ManualClock, retention: Duration) -> usize {
    let rules = RetentionRules::new(RetentionPolicy::keep_for(Some(retention)));
    let mut removed = 0;
    loop {
        let page = reap_page(ports, &rules, clock).await;
        removed += page.removed.len();
        if !page.more {
            return removed;
        }
    }
}

#[tokio::test]
async fn a_finished_run_past_its_retention_leaves_no_row_and_a_waiting_run_of_its_age_keeps_all() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("siesta.db");
    let clock = Arc::new(ManualClock::default());
    let ports = open(&path, &clock);
    let finished = full_run(&ports, &clock, true, 2_000).await;
    let waiting = full_run(&ports, &clock, false, 2_000).await;
    clock.advance(HOUR * 24 * 40);
    let young = full_run(&ports, &clock, true, 2_000).await;
    let conn = Connection::open(&path).unwrap();
    let (finished_before, waiting_before, young_before) = (
        rows_of(&conn, &finished),
        rows_of(&conn, &waiting),
        rows_of(&conn, &young),
    );
    let total_before = all_rows(&conn);
    for (table, n) in &finished_before {
        assert!(
            *n > 0,
            "the finished run has rows in {table}: {finished_before:?}"
        );
    }
    for (table, n) in &waiting_before {
        assert!(
            *n > 0,
            "the waiting run has rows in {table}: {waiting_before:?}"
        );
    }

    let removed = reap_all(&ports, &clock, HOUR * 24 * 30).await;

    let (finished_after, waiting_after, young_after) = (
        rows_of(&conn, &finished),
        rows_of(&conn, &waiting),
        rows_of(&conn, &young),
    );
    let total_after = all_rows(&conn);
    println!("rows of the finished run, before → after reaping:");
    for ((table, before), (_, after)) in finished_before.iter().zip(&finished_after) {
        println!("  {table:<14} {before} → {after}");
    }
    assert_eq!(removed, 1);
    assert!(
        finished_after.iter().all(|(_, n)| *n == 0),
        "{finished_after:?}"
    );
    assert_eq!(
        waiting_after, waiting_before,
        "the waiting run is untouched"
    );
    assert_eq!(
        young_after, young_before,
        "the young finished run is untouched"
    );
    // Nothing but the run's own rows left the file.
    for ((table, before), (_, after)) in total_before.iter().zip(&total_after) {
        let own = finished_before
            .iter()
            .find(|(t, _)| t == table)
            .map_or(0, |(_, n)| *n);
        assert_eq!(before - after, own, "rows gone from {table}");
    }
    // An Idempotency-Key replay after the retention is a new start: the id is free.
    let mut again = Run::new(
        finished.tenant.clone(),
        finished.id.clone(),
        "approval",
        Payload::Inline(serde_json::json!({"order": 1})),
        clock.now(),
    );
    again.timeline_seq = 1;
    let started =
        TimelineEvent::execution_started(clock.now(), "approval", serde_json::Value::Null);
    ports
        .store
        .create_run(&again, &started)
        .await
        .expect("the id is free again");
}

/// Each run and its rows are in the file whole, or not at all.
fn assert_whole(conn: &Connection) {
    for table in [
        "journal",
        "timeline",
        "deliveries",
        "callbacks",
        "tool_calls",
        "stream_chunks",
        "stream_keys",
    ] {
        let orphans: i64 = conn
            .query_row(
                &format!("SELECT count(*) FROM {table} WHERE run NOT IN (SELECT key FROM runs)"),
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(orphans, 0, "rows of removed runs left in {table}");
    }
    let bare: i64 = conn
        .query_row(
            "SELECT count(*) FROM runs WHERE NOT EXISTS (SELECT 1 FROM journal WHERE journal.run = runs.key)",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(bare, 0, "runs that lost their journal");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reaper_dropped_mid_page_goes_on_where_it_was_and_never_touches_a_live_run() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("siesta.db");
    let clock = Arc::new(ManualClock::default());
    let mut waiting = Vec::new();
    {
        let ports = open(&path, &clock);
        for i in 0..250 {
            full_run(&ports, &clock, true, 100).await;
            if i % 10 == 0 {
                waiting.push(full_run(&ports, &clock, false, 100).await);
            }
            clock.advance(Duration::from_secs(1));
        }
        clock.advance(HOUR * 24);
        let rules = RetentionRules::new(RetentionPolicy::keep_for(Some(HOUR)));
        // The reaper's page is handed to the writer, and the reaper goes away (a
        // dropped task), then the process with it.
        let dropped = ports
            .store
            .reap_due(&rules, clock.now(), 100)
            .now_or_never();
        assert!(dropped.is_none(), "the page was still being written");
    }
    let conn = Connection::open(&path).unwrap();
    let finished = |conn: &Connection| -> i64 {
        conn.query_row(
            "SELECT count(*) FROM runs WHERE status = 'completed'",
            [],
            |r| r.get(0),
        )
        .unwrap()
    };
    // Whatever the moment the process went, no run is half-removed.
    assert_whole(&conn);
    let left = finished(&conn);
    assert!(
        left == 250 || left == 150,
        "a page goes whole or not at all: {left} finished runs left"
    );

    let ports = open(&path, &clock);
    let removed = reap_all(&ports, &clock, HOUR).await;
    assert!(
        removed == 250 || removed == 150,
        "the next reaper removes the rest, whole pages: {removed}"
    );
    assert_eq!(finished(&conn), 0, "every finished run is gone");
    assert_whole(&conn);
    for run in &waiting {
        assert_eq!(
            ports
                .store
                .get_run(&run.tenant, &run.id)
                .await
                .unwrap()
                .as_ref(),
            Some(run),
            "a waiting run is left as it was"
        );
    }
}

fn file_size(conn: &Connection, path: &Path) -> u64 {
    // Everything in the WAL copied into the file, and the WAL emptied: the file alone
    // holds the data.
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .unwrap();
    std::fs::metadata(path).unwrap().len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_file_shrinks_back_after_many_runs_are_reaped() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("siesta.db");
    let clock = Arc::new(ManualClock::default());
    let ports = open(&path, &clock);
    let conn = Connection::open(&path).unwrap();
    conn.busy_timeout(Duration::from_secs(5)).unwrap();
    let auto_vacuum: i64 = conn
        .query_row("PRAGMA auto_vacuum", [], |r| r.get(0))
        .unwrap();
    assert_eq!(auto_vacuum, 2, "a new file is incremental");
    let empty = file_size(&conn, &path);
    let kept = full_run(&ports, &clock, false, 4_000).await;
    for _ in 0..600 {
        full_run(&ports, &clock, true, 4_000).await;
    }
    clock.advance(HOUR * 2);
    let full = file_size(&conn, &path);
    let removed = reap_all(&ports, &clock, HOUR).await;
    // As an idle server's file is: the reaper's own checkpoint gave the pages back.
    let reaped = std::fs::metadata(&path).unwrap().len();
    println!(
        "file size: empty {empty} B, 600 finished runs + 1 waiting {full} B, after reaping {removed} runs {reaped} B ({:.1}% of before)",
        100.0 * reaped as f64 / full as f64
    );
    assert_eq!(removed, 600);
    assert!(
        reaped * 5 < full,
        "the file gave back what the runs took: {full} → {reaped} bytes"
    );
    assert!(
        ports
            .store
            .get_run(&kept.tenant, &kept.id)
            .await
            .unwrap()
            .is_some()
    );
}

#[tokio::test]
async fn a_file_made_before_incremental_vacuum_is_switched_once_and_keeps_its_runs() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("siesta.db");
    let clock = Arc::new(ManualClock::default());
    let run = {
        let ports = open(&path, &clock);
        full_run(&ports, &clock, false, 100).await
    };
    // As an earlier release left it: no auto-vacuum.
    let conn = Connection::open(&path).unwrap();
    conn.busy_timeout(Duration::from_secs(5)).unwrap();
    conn.execute_batch("PRAGMA auto_vacuum = NONE; VACUUM")
        .unwrap();
    let mode = |conn: &Connection| -> i64 {
        conn.query_row("PRAGMA auto_vacuum", [], |r| r.get(0))
            .unwrap()
    };
    assert_eq!(mode(&conn), 0);
    drop(conn);

    let ports = open(&path, &clock);
    let conn = Connection::open(&path).unwrap();
    assert_eq!(mode(&conn), 2, "incremental once opened");
    assert_eq!(
        ports.store.get_run(&run.tenant, &run.id).await.unwrap(),
        Some(run)
    );
}

#[tokio::test]
async fn each_workflow_is_kept_for_its_own_retention_and_a_run_still_waiting_for_ever() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("siesta.db");
    let clock = Arc::new(ManualClock::default());
    let ports = open(&path, &clock);
    let mut registry = Registry::new();
    for name in ["approval", "ping"] {
        registry.register(name, |_: Context, _: serde_json::Value| async move {
            Ok(serde_json::json!(null))
        });
    }
    let engine = Engine::new(
        ports.clone(),
        clock.clone(),
        registry,
        EngineConfig::default(),
    );
    let policy = RetentionRules::new(RetentionPolicy::default().with_workflow("ping", Some(HOUR)));
    let approval = full_run_of(&ports, &clock, "approval", true, 100).await;
    let ping = full_run_of(&ports, &clock, "ping", true, 100).await;
    let waiting = full_run_of(&ports, &clock, "ping", false, 100).await;
    let exists = |run: &Run| {
        let (store, run) = (ports.store.clone(), run.clone());
        async move { store.get_run(&run.tenant, &run.id).await.unwrap().is_some() }
    };

    clock.advance(HOUR * 2);
    let report = engine.reap(&policy, 100).await.expect("reap");
    assert_eq!(
        report.removed.iter().map(|r| &r.run_id).collect::<Vec<_>>(),
        [&ping.id],
        "after two hours, the ping run alone"
    );
    assert!(exists(&approval).await && exists(&waiting).await);

    clock.advance(HOUR * 24 * 30);
    let report = engine.reap(&policy, 100).await.expect("reap");
    assert_eq!(
        report.removed.iter().map(|r| &r.run_id).collect::<Vec<_>>(),
        [&approval.id],
        "after thirty days, the approval run"
    );
    assert!(exists(&waiting).await, "a waiting run is never removed");
    assert!(!report.more);
}

/// When the reaper next looks at `run` (its `reap_at` column).
fn reap_at(conn: &Connection, run: &Run) -> Option<i64> {
    conn.query_row(
        "SELECT reap_at FROM runs WHERE tenant = ?1 AND run_id = ?2",
        [run.tenant.as_str(), run.id.as_str()],
        |r| r.get(0),
    )
    .unwrap()
}

/// One reaper pass by `rules` at the clock's time: a page of at most 100 runs.
async fn reap_page(
    ports: &Backend,
    rules: &RetentionRules,
    clock: &ManualClock,
) -> siesta::retention::ReapReport {
    ports
        .store
        .reap_due(rules, clock.now(), 100)
        .await
        .expect("reap")
}

/// The ids of the runs a report says were removed.
fn removed_ids(report: &siesta::retention::ReapReport) -> Vec<&RunId> {
    report.removed.iter().map(|r| &r.run_id).collect()
}

#[tokio::test]
async fn a_run_finished_after_rearming_is_not_read_before_its_retention_ends_and_goes_then() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("siesta.db");
    let clock = Arc::new(ManualClock::default());
    let ports = open(&path, &clock);
    let rules = RetentionRules::new(RetentionPolicy::default());
    ports
        .store
        .rearm_reaping(&rules, clock.now())
        .await
        .expect("rearm");
    let run = full_run(&ports, &clock, true, 100).await;
    let conn = Connection::open(&path).unwrap();
    let end = run.updated_at.plus(HOUR * 24 * 30);
    assert_eq!(reap_at(&conn, &run), Some(end.0), "due at its own end");

    // Passes at its finish and a minute before its end read nothing.
    let at_finish = reap_page(&ports, &rules, &clock).await;
    assert_eq!(at_finish, siesta::retention::ReapReport::default());
    clock.advance(HOUR * 24 * 30 - Duration::from_secs(60));
    let before_end = reap_page(&ports, &rules, &clock).await;
    assert_eq!(before_end, siesta::retention::ReapReport::default());
    assert_eq!(reap_at(&conn, &run), Some(end.0), "never put back");

    clock.advance(Duration::from_secs(60));
    let at_end = reap_page(&ports, &rules, &clock).await;
    assert_eq!(removed_ids(&at_end), [&run.id]);
    assert_eq!(at_end.put_back, 0, "read once, when it goes: {at_end:?}");
}

#[tokio::test]
async fn a_workflow_kept_an_hour_goes_an_hour_after_its_finish_and_a_tenant_kept_for_ever_is_never_due()
 {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("siesta.db");
    let clock = Arc::new(ManualClock::default());
    let ports = open(&path, &clock);
    let rules = RetentionRules {
        policy: RetentionPolicy::default().with_workflow("ping", Some(HOUR)),
        quotas: Quotas::parse(r#"{"tenants": {"vault": {"retention_days": 0}}}"#).unwrap(),
    };
    ports
        .store
        .rearm_reaping(&rules, clock.now())
        .await
        .expect("rearm");
    let ping = full_run_of(&ports, &clock, "ping", true, 100).await;
    let vault = full_run_in(&ports, &clock, "vault", "approval", true, 100).await;
    let conn = Connection::open(&path).unwrap();
    assert_eq!(reap_at(&conn, &ping), Some(ping.updated_at.plus(HOUR).0));
    assert_eq!(reap_at(&conn, &vault), Some(i64::MAX), "never due");

    clock.advance(HOUR - Duration::from_secs(1));
    let before = reap_page(&ports, &rules, &clock).await;
    assert_eq!(before, siesta::retention::ReapReport::default());
    clock.advance(Duration::from_secs(1));
    let after = reap_page(&ports, &rules, &clock).await;
    assert_eq!(removed_ids(&after), [&ping.id]);
    assert_eq!(after.put_back, 0, "{after:?}");

    clock.advance(HOUR * 24 * 3650);
    let decade = reap_page(&ports, &rules, &clock).await;
    assert_eq!(
        decade,
        siesta::retention::ReapReport::default(),
        "the tenant kept for ever is not read"
    );
    assert!(
        ports
            .store
            .get_run(&vault.tenant, &vault.id)
            .await
            .unwrap()
            .is_some()
    );
}

#[tokio::test]
async fn before_any_rearm_a_finished_run_is_due_at_its_finish_and_put_back_to_its_end() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("siesta.db");
    let clock = Arc::new(ManualClock::default());
    let ports = open(&path, &clock);
    let rules = RetentionRules::new(RetentionPolicy::default());
    let run = full_run(&ports, &clock, true, 100).await;
    let conn = Connection::open(&path).unwrap();
    assert_eq!(
        reap_at(&conn, &run),
        Some(run.updated_at.0),
        "due at its finish"
    );

    let first = reap_page(&ports, &rules, &clock).await;
    assert_eq!(first.put_back, 1, "{first:?}");
    assert!(first.removed.is_empty());
    assert_eq!(
        reap_at(&conn, &run),
        Some(run.updated_at.plus(HOUR * 24 * 30).0),
        "put back to its end"
    );
    clock.advance(HOUR * 24 * 30);
    let last = reap_page(&ports, &rules, &clock).await;
    assert_eq!(removed_ids(&last), [&run.id]);
}
