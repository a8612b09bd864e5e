//! Every statement on the runs table, the queue and the sweep uses an index.
//!
//! Each connection of a test build records the text of every statement it runs
//! (SQLite's statement trace). The test below runs a workload through every port
//! operation over a file of a few thousand runs and queued wake-ups, then asks SQLite
//! for the plan of each statement it saw: a full scan of a table (`SCAN t`, with or
//! without an index) or a sort of the result (`USE TEMP B-TREE`) would make the
//! operation's cost grow with what is stored or queued, and fails the test. The list
//! of statements is what the code ran, not a copy of it, so a new statement is checked
//! the day it is written — and every statement written in the source must be among
//! them, so one the workload does not reach fails the test too.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rusqlite::Connection;
use rusqlite::trace::{TraceEvent, TraceEventCodes};
use siesta::ports::*;
use siesta::*;

/// Every statement text any connection of this test build has run.
static STATEMENTS: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());

fn note(event: TraceEvent<'_>) {
    if let TraceEvent::Stmt(_, sql) = event {
        let sql = sql.trim();
        if !sql.starts_with("--") {
            STATEMENTS
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(sql.to_owned());
        }
    }
}

/// Record every statement `conn` runs.
pub(crate) fn record(conn: &Connection) {
    conn.trace_v2(TraceEventCodes::SQLITE_TRACE_STMT, Some(note));
}

/// The statements each port operation is known by (a fragment of each), so that the
/// test fails if a connection stops being recorded rather than passing on fewer.
const EXPECTED: &[&str] = &[
    "FROM runs WHERE tenant = ?1 AND run_id = ?2",
    "INDEXED BY runs_by_tenant",
    "INDEXED BY runs_by_status\n",
    "INDEXED BY runs_by_workflow",
    "INDEXED BY runs_by_status_workflow",
    "FROM runs WHERE sweep_at IS NOT NULL",
    "FROM runs INDEXED BY runs_promised",
    "JOIN journal ON journal.run = runs.key",
    "LEFT JOIN schemas ON schemas.id",
    "FROM schemas WHERE sha256",
    "INSERT INTO schemas",
    "FROM deliveries WHERE run = ?1",
    "JOIN deliveries ON deliveries.run = runs.key",
    "JOIN timeline ON timeline.run = runs.key",
    "FROM callbacks WHERE",
    "FROM tool_calls WHERE",
    "FROM artifacts WHERE",
    "INSERT INTO wake_queue",
    "FROM wake_queue WHERE lane = ?1 AND tenant > ?2",
    "FROM wake_queue\n          WHERE lane = ?1 AND tenant = ?2",
    "DELETE FROM wake_queue WHERE receipt",
    "UPDATE wake_queue SET visible_at",
    "SELECT EXISTS (SELECT 1 FROM wake_queue",
    "FROM dead_letter_queue WHERE visible_at",
    "DELETE FROM dead_letter_queue WHERE receipt",
    "DELETE FROM dead_letter_queue WHERE id",
    "UPDATE runs SET body = ?3, status = ?4, finished_at = ?5, reap_at = ?6 WHERE",
    "INDEXED BY runs_reap",
    "UPDATE runs SET reap_at = ?2 WHERE key",
    "UPDATE runs SET reap_at = ?1 WHERE reap_at > ?1",
    "FROM reap_rules WHERE id = 0",
    "DELETE FROM journal WHERE run",
    "DELETE FROM callbacks WHERE run",
    "DELETE FROM artifacts WHERE location",
    "DELETE FROM runs WHERE key",
    "SELECT runs FROM tenant_unfinished WHERE tenant",
    "INSERT OR REPLACE INTO tool_calls",
    "FROM tenant_builds WHERE tenant",
    "INDEXED BY runs_unfinished_by_build",
    "UPDATE runs SET build = ?3",
];

/// Statements of the source that the workload need not run: the schema's one-time
/// migrations, run once when an old file is opened (the counter of unfinished runs:
/// when a file gets it).
const NOT_RUN: &[&str] = &[
    "INSERT INTO dead_letter_queue (body, moved_at, visible_at) SELECT",
    "INSERT INTO wake_queue (tenant, run_id, lane, body, visible_at, receive_count, receipt) SELECT",
    "DELETE FROM tenant_unfinished; INSERT INTO tenant_unfinished (tenant, runs) SELECT",
    "UPDATE runs SET build = json_extract(body, '$.build_id')",
    "UPDATE runs SET finished_at = json_extract(body, '$.updated_at')",
    "UPDATE runs SET reap_at = finished_at WHERE finished_at IS NOT NULL",
    // A bulk action's finished jobs kept as long as new ones (schema step 14): once.
    "UPDATE action_jobs SET keep_until = json_extract(body, '$.updated_at')",
];

/// The SQL statements written in the embedded backend's source (string literals that
/// begin with a statement keyword, whitespace collapsed, cut at the first `{` of a
/// `format!`; a module's unit tests excluded), so that a statement added to the source and never run by the workload
/// fails the test instead of going unplanned.
fn statements_in_source() -> Vec<String> {
    let mut out = Vec::new();
    for source in [
        include_str!("lib.rs"),
        include_str!("store/mod.rs"),
        include_str!("store/rows.rs"),
        include_str!("store/checkpoint.rs"),
        include_str!("store/journal.rs"),
        include_str!("deliveries.rs"),
        include_str!("queue.rs"),
        include_str!("artifacts.rs"),
        include_str!("cursors.rs"),
        include_str!("layout.rs"),
        include_str!("recovery.rs"),
        include_str!("writer.rs"),
        include_str!("unfinished.rs"),
        include_str!("builds.rs"),
        include_str!("retention.rs"),
        include_str!("action_jobs.rs"),
    ] {
        // A module's unit tests build their own fixtures; they are not the backend's.
        let source = source
            .split("\n#[cfg(test)]\nmod tests")
            .next()
            .unwrap_or(source);
        let bytes = source.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'/' if bytes.get(i + 1) == Some(&b'/') => {
                    while i < bytes.len() && bytes[i] != b'\n' {
                        i += 1;
                    }
                }
                b'\'' if bytes.get(i + 2) == Some(&b'\'') => i += 3,
                b'"' => {
                    let start = i + 1;
                    i = start;
                    while i < bytes.len() && bytes[i] != b'"' {
                        i += if bytes[i] == b'\\' { 2 } else { 1 };
                    }
                    let literal = source[start..i.min(source.len())].replace("\\\n", " ");
                    let text = literal.split_whitespace().collect::<Vec<_>>().join(" ");
                    let text = text.split('{').next().unwrap_or_default().trim().to_owned();
                    let head = text.split(' ').next().unwrap_or_default();
                    if ["SELECT", "INSERT", "UPDATE", "DELETE", "WITH"].contains(&head) {
                        out.push(text);
                    }
                    i += 1;
                }
                _ => i += 1,
            }
        }
    }
    out
}

/// Statements allowed to sort, because what they sort is one run's own rows (found by
/// a seek on the run's key), whose number does not grow with what else is stored.
const SORTS_ONE_RUN: &[&str] =
    &["WHERE runs.tenant = ?1 AND runs.run_id = ?2 ORDER BY deliveries.seq"];

fn registry() -> Registry {
    let mut reg = Registry::new();
    reg.register(
        "approval",
        |ctx: Context, _: serde_json::Value| async move {
            ctx.step("plan", |_| async { Ok(vec![1, 2]) }).await?;
            let payment = ctx
                .create_callback::<serde_json::Value>("payment")
                .timeout(Duration::from_secs(3600))
                .await?;
            let decision: serde_json::Value = ctx
                .wait_for_event("approval")
                .timeout(Duration::from_secs(3600))
                .await?;
            let paid = payment.wait().await?;
            ctx.sleep(Duration::from_secs(60)).await?;
            Ok(serde_json::json!([decision, paid]))
        },
    );
    reg.register("other", |ctx: Context, _: serde_json::Value| async move {
        ctx.sleep(Duration::from_secs(7 * 24 * 3600)).await
    });
    reg
}

/// Runs of three tenants, two workflows, in several states; wake-ups queued, received,
/// acknowledged and dead-lettered; every read the API and the sweep make.
async fn workload(backend: &crate::EmbeddedBackend, clock: &Arc<ManualClock>) {
    let ports = backend.backend();
    let engine = Engine::new(
        ports.clone(),
        clock.clone(),
        registry(),
        EngineConfig::default(),
    );
    let tenants: Vec<TenantId> = ["acme", "globex", "initech"].map(TenantId::from).into();
    // A few thousand runs, started (each with its queued wake-up) and left pending.
    let starts = (0..3000).map(|i| {
        let (engine, tenant) = (&engine, &tenants[i % 3]);
        let workflow = if i % 2 == 0 { "approval" } else { "other" };
        async move {
            engine
                .start(tenant, workflow, serde_json::json!({"i": i}), None)
                .await
                .unwrap()
        }
    });
    let runs = futures::future::join_all(starts).await;
    clock.advance(Duration::from_millis(10));

    // Some handled all the way to their waits, one at a time off the queue.
    for _ in 0..30 {
        engine.work_queue_once(10).await.unwrap();
    }
    for run in runs.iter().take(40) {
        let _ = engine
            .deliver_event(
                &run.tenant,
                &run.id,
                "approval",
                serde_json::json!(true),
                None,
            )
            .await;
    }
    // One that waits on its callback (and its event) by now.
    let waiting = ports
        .store
        .list_runs(
            &tenants[0],
            &RunFilter {
                status: Some(RunStatus::Waiting),
                workflow: Some("approval".to_owned()),
            },
            None,
            1,
        )
        .await
        .unwrap()
        .runs;
    let waiting = waiting.first().expect("a run waits on its callback");
    let replay_input = ports
        .store
        .load_replay_input(&waiting.tenant, &waiting.id)
        .await
        .unwrap();
    let callback_id = replay_input
        .journal
        .iter()
        .find_map(|e| match &e.state {
            EntryState::Waiting(Wait {
                kind: WaitKind::Callback { callback_id, .. },
                ..
            }) => Some(callback_id.clone()),
            _ => None,
        })
        .expect("its callback");
    engine
        .complete_callback(&callback_id, None, Ok(serde_json::json!("paid")), None)
        .await
        .unwrap();
    engine
        .cancel(&runs[2].tenant, &runs[2].id, None)
        .await
        .unwrap();
    for _ in 0..10 {
        engine.work_queue_once(10).await.unwrap();
    }

    // Reads: every listing filter, a second page, a timeline, the odd records.
    for tenant in &tenants {
        for (status, workflow) in [
            (None, None),
            (Some(RunStatus::Waiting), None),
            (None, Some("approval".to_owned())),
            (Some(RunStatus::Pending), Some("other".to_owned())),
        ] {
            let filter = RunFilter { status, workflow };
            let page = ports
                .store
                .list_runs(tenant, &filter, None, 50)
                .await
                .unwrap();
            if let Some(cursor) = page.next_cursor {
                ports
                    .store
                    .list_runs(tenant, &filter, Some(&cursor), 50)
                    .await
                    .unwrap();
            }
        }
    }
    ports
        .store
        .timeline(&runs[0].tenant, &runs[0].id, 0, 100)
        .await
        .unwrap();
    ports
        .store
        .get_tool_call(&tenants[0], &IdempotencyKey("none".into()))
        .await
        .unwrap();
    let artifact = ports
        .artifacts
        .put(
            &tenants[0],
            &runs[0].id,
            "text/plain",
            bytes::Bytes::from_static(b"x"),
        )
        .await
        .unwrap();
    ports.artifacts.get(&artifact).await.unwrap();

    // The queue: visibility extended, messages dead-lettered, dead letters handled.
    let received = ports
        .queue
        .receive(10, Duration::from_secs(1))
        .await
        .unwrap();
    for m in &received {
        ports
            .queue
            .extend_visibility(&m.receipt, Duration::from_secs(1))
            .await
            .unwrap();
    }
    for _ in 0..crate::DEFAULT_MAX_RECEIVES + 1 {
        clock.advance(Duration::from_secs(2));
        ports
            .queue
            .receive(10, Duration::from_secs(1))
            .await
            .unwrap();
    }
    // A tenant's unfinished runs, as a start under a quota counts them.
    ports.store.unfinished_runs(&tenants[0]).await.unwrap();
    // A checkpoint that changes a run's status and nothing the due index holds, with a
    // tool-call record (an operator's park of a run someone holds, in effect).
    let held = &runs[1];
    let now = clock.now();
    let claimed = ports
        .store
        .claim(
            &held.tenant,
            &held.id,
            &Claim {
                owner: "plans".into(),
                now,
                expires_at: now.plus(Duration::from_secs(60)),
            },
        )
        .await
        .unwrap();
    let mut next = claimed.clone();
    next.status = RunStatus::Parked;
    next.version += 1;
    // Moved to another build (an upgrade).
    next.build_id = Some("plans@2".into());
    let mut checkpoint = Checkpoint::new(next, claimed.version, Some(claimed.epoch));
    checkpoint.tool_calls.push(ToolCallRecord {
        key: IdempotencyKey("plans-tool-call".into()),
        tenant: held.tenant.clone(),
        run_id: held.id.clone(),
        position: Position("1".into()),
        status: ToolCallStatus::Running,
        outcome: None,
        updated_at: now,
    });
    ports.store.checkpoint(&checkpoint).await.unwrap();

    // The builds the operator's view lists.
    let builds = ports.store.builds(&held.tenant).await.unwrap();
    assert!(builds.iter().any(|b| b.build_id == "plans@2"), "{builds:?}");

    // The sweep: dead letters, due runs, what the queue holds (asked for runs due past
    // their re-send margin).
    clock.advance(Duration::from_secs(120) + siesta::EngineConfig::default().resend_margin);
    engine.sweep(500).await.unwrap();

    // Retention: the finished runs (the cancelled one) looked at and put back under a
    // long retention, brought forward by a shorter one, then removed.
    let now = clock.now();
    let long = RetentionRules::new(RetentionPolicy::keep_for(Some(Duration::from_secs(86_400))));
    let report = ports.store.reap_due(&long, now, 10).await.unwrap();
    assert!(report.put_back > 0, "{report:?}");
    let short = RetentionRules::new(RetentionPolicy::keep_for(Some(Duration::from_millis(1))));
    ports.store.rearm_reaping(&short, now).await.unwrap();
    let removed = ports.store.reap_due(&short, now, 10).await.unwrap().removed;
    assert!(
        removed.iter().any(|r| r.run_id == runs[2].id),
        "{removed:?}"
    );
    // A metrics scrape's read of the queue.
    backend.queue_depth(clock.now()).await.unwrap();

    // A bulk action: started, a slice of it (its lease, its page, its progress), read
    // and listed; the sweep's look at the active jobs.
    let job = engine
        .start_action_job(
            &held.tenant,
            siesta::ActionRequest {
                action: siesta::BulkAction::Pause,
                filter: siesta::ActionFilter {
                    workflow: Some("approval".into()),
                    ..siesta::ActionFilter::default()
                },
                restart: siesta::RestartOptions::default(),
                rate: None,
            },
            "plans",
        )
        .await
        .unwrap();
    // Its wake-up handled at once (the queue holds thousands before it).
    let wake = WakeUp::new(
        held.tenant.clone(),
        RunId(job.id.clone()),
        WakeReason::Action,
    );
    engine.handle_wakeup(&wake).await.unwrap();
    engine.action_job(&held.tenant, &job.id).await.unwrap();
    engine.action_jobs(&held.tenant, 10).await.unwrap();
    ports.store.active_action_jobs(10).await.unwrap();
}

/// A wake-up dead-lettered and handled, on a file of its own (its statements are
/// planned on the big one).
async fn dead_letter(dir: &std::path::Path, clock: &Arc<ManualClock>) {
    let ports = crate::EmbeddedBackend::open(dir.join("dead.db"), clock.clone())
        .unwrap()
        .backend();
    let engine = Engine::new(
        ports.clone(),
        clock.clone(),
        registry(),
        EngineConfig::default(),
    );
    engine
        .start(
            &TenantId::from("acme"),
            "other",
            serde_json::json!(null),
            None,
        )
        .await
        .unwrap();
    for _ in 0..=crate::DEFAULT_MAX_RECEIVES {
        ports
            .queue
            .receive(10, Duration::from_secs(1))
            .await
            .unwrap();
        clock.advance(Duration::from_secs(2));
    }
    let report = engine.handle_dead_letters(10).await.unwrap();
    assert_eq!(report.handled, 1, "{report:?}");
    // A dead letter that is no wake-up is dropped when read.
    Connection::open(dir.join("dead.db"))
        .unwrap()
        .execute(
            "INSERT INTO dead_letter_queue (body, moved_at, visible_at) VALUES ('not a wake-up', 0, 0)",
            [],
        )
        .unwrap();
    let letters = ports.queue.dead_letters(10, Duration::ZERO).await.unwrap();
    assert!(letters.is_empty(), "{letters:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_statement_on_runs_queue_and_sweep_uses_an_index() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("plans.db");
    let clock = Arc::new(ManualClock::default());
    let backend = crate::EmbeddedBackend::open(&path, clock.clone()).unwrap();
    workload(&backend, &clock).await;
    dead_letter(dir.path(), &clock).await;

    let statements = STATEMENTS.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let missing: Vec<&&str> = EXPECTED
        .iter()
        .filter(|f| !statements.iter().any(|s| s.contains(**f)))
        .collect();
    assert!(
        missing.is_empty(),
        "statements never run (or not recorded): {missing:?}"
    );
    let normalized: Vec<String> = statements
        .iter()
        .map(|s| s.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    let in_source = statements_in_source();
    assert!(in_source.len() >= EXPECTED.len(), "{in_source:?}");
    let unplanned: Vec<&String> = in_source
        .iter()
        .filter(|text| !NOT_RUN.iter().any(|f| text.starts_with(f)))
        .filter(|text| !normalized.iter().any(|s| s.contains(text.as_str())))
        .collect();
    assert!(
        unplanned.is_empty(),
        "statements in the source that the workload never runs, so never planned \
         (run them in `workload`): {unplanned:#?}"
    );

    let conn = Connection::open(&path).unwrap();
    let mut bad = Vec::new();
    let mut checked = 0;
    for sql in &statements {
        let head = sql
            .split_whitespace()
            .next()
            .unwrap_or("")
            .to_ascii_uppercase();
        if !["SELECT", "INSERT", "UPDATE", "DELETE", "WITH"].contains(&head.as_str()) {
            continue;
        }
        let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
        // Planned with its parameters unbound, as it is prepared.
        let mut rows = stmt.raw_query();
        let mut plan: Vec<String> = Vec::new();
        while let Some(row) = rows.next().unwrap() {
            plan.push(row.get(3).unwrap());
        }
        checked += 1;
        let scans = |line: &&String| {
            (line.starts_with("SCAN ") && !line.starts_with("SCAN CONSTANT ROW"))
                || line.contains("TEMP B-TREE")
        };
        // The schema table is read once, when the file is opened.
        let allowed =
            sql.contains("sqlite_master") || SORTS_ONE_RUN.iter().any(|f| sql.contains(f));
        if plan.iter().any(|l| scans(&l)) && !allowed {
            bad.push(format!("{sql}\n    {}", plan.join("\n    ")));
        }
    }
    assert!(checked >= EXPECTED.len(), "checked {checked}");
    assert!(
        bad.is_empty(),
        "statements that scan or sort:\n{}",
        bad.join("\n")
    );
}
