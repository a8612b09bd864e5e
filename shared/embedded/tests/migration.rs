//! A file written before run keys (main at 6961650) opens with this build, and its runs
//! go on: the fixture is `sqlite3 .dump` of a dev server's file after `approval` runs
//! were started and left waiting for their event (one given its event first, one
//! completed), written by that build.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use rusqlite::Connection;
use siesta::ports::*;
use siesta::*;
use siesta_embedded::EmbeddedBackend;

const FIXTURE: &str = include_str!("fixtures/before-run-keys.sql");

/// What the old file holds, read with its own tables.
struct Old {
    runs: Vec<Run>,
    journals: BTreeMap<String, Vec<JournalEntry>>,
    timelines: BTreeMap<String, Vec<TimelineEvent>>,
    deliveries: BTreeMap<String, Vec<Delivery>>,
}

fn rows<T: serde::de::DeserializeOwned>(conn: &Connection, sql: &str) -> Vec<(String, T)> {
    let mut stmt = conn.prepare(sql).expect("prepare");
    stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))
        .expect("query")
        .map(|row| {
            let (id, body) = row.expect("row");
            (
                id,
                serde_json::from_str(&body).expect("a record of the old file"),
            )
        })
        .collect()
}

fn grouped<T>(rows: Vec<(String, T)>) -> BTreeMap<String, Vec<T>> {
    let mut out: BTreeMap<String, Vec<T>> = BTreeMap::new();
    for (id, v) in rows {
        out.entry(id).or_default().push(v);
    }
    out
}

fn write_fixture(path: &Path) -> Old {
    let conn = Connection::open(path).expect("create the old file");
    conn.execute_batch(FIXTURE).expect("load the fixture");
    let runs = rows::<Run>(
        &conn,
        "SELECT run_id, body FROM runs ORDER BY created_at DESC, run_id DESC",
    )
    .into_iter()
    .map(|(_, run)| run)
    .collect();
    let old = Old {
        runs,
        journals: grouped(rows(
            &conn,
            "SELECT run_id, body FROM journal ORDER BY run_id, position",
        )),
        timelines: grouped(rows(
            &conn,
            "SELECT run_id, body FROM timeline ORDER BY run_id, seq",
        )),
        deliveries: grouped(rows(
            &conn,
            "SELECT run_id, body FROM deliveries ORDER BY run_id, seq",
        )),
    };
    assert!(
        conn.query_row(
            "SELECT count(*) FROM sqlite_master WHERE sql LIKE '%key INTEGER PRIMARY KEY%'",
            [],
            |r| r.get::<_, i64>(0)
        )
        .unwrap()
            == 0,
        "the fixture is of the old layout"
    );
    old
}

/// The clock just after the fixture was written (its runs' 3-day waits still open).
fn clock_after(old: &Old) -> Arc<ManualClock> {
    let last = old.runs.iter().map(|r| r.updated_at.0).max().expect("runs");
    let clock = Arc::new(ManualClock::default());
    clock.set(Timestamp(last + 60_000));
    clock
}

async fn drain(engine: &Engine) {
    while engine.work_queue_once(10).await.expect("work the queue") > 0 {}
}

/// GIVEN a file of the layout before run keys WHEN this build opens it THEN every run,
/// journal, timeline and delivery reads as it was stored, lists page through every run
/// (a cursor of the old build included), a waiting run resumes on its event and
/// completes, new runs start beside the old ones, and a second open changes nothing.
#[tokio::test]
async fn a_file_written_before_run_keys_opens_and_its_runs_go_on() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let path = dir.path().join("siesta.db");
    let old = write_fixture(&path);
    assert!(old.runs.len() >= 5, "the fixture holds runs");
    let tenant = old.runs[0].tenant.clone();
    let clock = clock_after(&old);

    let backend = EmbeddedBackend::open(&path, clock.clone()).expect("open the old file");
    let ports = backend.backend();
    // It is brought up to the last schema version, and frees pages incrementally.
    {
        let conn = Connection::open(&path).expect("read the file");
        let pragma = |name: &str| -> i64 {
            conn.query_row(&format!("PRAGMA {name}"), [], |r| r.get(0))
                .expect(name)
        };
        assert_eq!(pragma("auto_vacuum"), 2, "incremental");
        assert!(pragma("user_version") >= 5, "schema version");
        // Its finished runs, and they alone, are due to the reaper's look.
        let due: i64 = conn
            .query_row(
                "SELECT count(*) FROM runs WHERE reap_at IS NOT NULL AND reap_at = finished_at",
                [],
                |r| r.get(0),
            )
            .expect("reap_at");
        let finished = old.runs.iter().filter(|r| r.status.is_finished()).count();
        assert!(finished > 0, "the fixture holds a finished run");
        assert_eq!(
            due as usize, finished,
            "each finished run looked at once more"
        );
    }
    // The file had no counter of unfinished runs: its runs are counted when it opens.
    let unfinished = |runs: &[Run]| {
        runs.iter()
            .filter(|r| r.tenant == tenant && !r.status.is_finished())
            .count() as u64
    };
    assert_eq!(
        ports.store.unfinished_runs(&tenant).await.unwrap(),
        unfinished(&old.runs),
        "unfinished runs counted at open"
    );
    for run in &old.runs {
        let got = ports
            .store
            .get_run(&run.tenant, &run.id)
            .await
            .expect("get_run");
        assert_eq!(got.as_ref(), Some(run), "run {}", run.id);
        let history = ports
            .store
            .load_replay_input(&run.tenant, &run.id)
            .await
            .expect("history");
        let mut journal = history.journal.clone();
        journal.sort_by(|a, b| a.position.0.cmp(&b.position.0));
        assert_eq!(
            journal,
            old.journals.get(&run.id.0).cloned().unwrap_or_default(),
            "journal of {}",
            run.id
        );
        assert_eq!(
            history.deliveries,
            old.deliveries.get(&run.id.0).cloned().unwrap_or_default(),
            "deliveries of {}",
            run.id
        );
        let timeline = ports
            .store
            .timeline(&run.tenant, &run.id, 0, 1000)
            .await
            .expect("timeline");
        assert_eq!(timeline, old.timelines[&run.id.0], "timeline of {}", run.id);
    }

    // Lists: newest first, two at a time, every run once.
    let mut listed = Vec::new();
    let mut cursor = None;
    loop {
        let page = ports
            .store
            .list_runs(&tenant, &RunFilter::default(), cursor.as_deref(), 2)
            .await
            .expect("list");
        listed.extend(page.runs);
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    assert_eq!(listed, old.runs, "every run, newest first");
    // A cursor the old build handed out (creation time and run id) goes on after its run.
    let third = &old.runs[2];
    let old_cursor = siesta::cursor::encode(&format!("{}:{}", third.created_at.0, third.id));
    let page = ports
        .store
        .list_runs(&tenant, &RunFilter::default(), Some(&old_cursor), 100)
        .await
        .expect("list after an old cursor");
    assert_eq!(page.runs, old.runs[3..], "the runs after the old cursor's");
    let waiting = ports
        .store
        .list_runs(
            &tenant,
            &RunFilter {
                status: Some(RunStatus::Waiting),
                workflow: Some("approval".into()),
            },
            None,
            100,
        )
        .await
        .expect("list waiting")
        .runs;
    let expected: Vec<&Run> = old
        .runs
        .iter()
        .filter(|r| r.status == RunStatus::Waiting)
        .collect();
    assert_eq!(
        waiting.iter().collect::<Vec<_>>(),
        expected,
        "the waiting runs"
    );
    assert!(
        waiting.len() >= 3,
        "the fixture has runs waiting for their event"
    );

    // The runs' builds, read from their bodies once: every unfinished run counted.
    let builds = ports.store.builds(&tenant).await.expect("builds");
    let recorded = old.runs.iter().filter(|r| r.build_id.is_some());
    let recorded_unfinished = recorded.filter(|r| !r.status.is_finished()).count() as u64;
    assert!(
        recorded_unfinished > 0,
        "the fixture's runs record their build"
    );
    assert_eq!(
        builds
            .iter()
            .flat_map(|b| b.unfinished.values())
            .sum::<u64>(),
        recorded_unfinished,
        "{builds:?}"
    );

    // A waiting run resumes on its event and completes with the old journal replayed,
    // on an engine of the build that wrote the file (a run is served by its own build).
    let run = &waiting[0];
    let engine = Engine::new(
        ports.clone(),
        clock.clone(),
        siesta_workflows::registry(),
        EngineConfig {
            build_id: run.build_id.clone().unwrap_or_default(),
            ..EngineConfig::default()
        },
    );
    engine
        .deliver_event(
            &run.tenant,
            &run.id,
            "approval",
            serde_json::json!({"approved": true, "by": "ops"}),
            None,
        )
        .await
        .expect("deliver the approval");
    drain(&engine).await;
    let done = ports
        .store
        .get_run(&run.tenant, &run.id)
        .await
        .unwrap()
        .expect("the run");
    assert_eq!(done.status, RunStatus::Completed, "{done:?}");
    let output = done.output.clone().expect("an output");
    assert!(
        matches!(output, Payload::Inline(ref v) if v["approved_by"] == "ops"),
        "{output:?}"
    );

    // A decision of the wrong shape is still refused by the wait's schema (read back
    // from the old entry).
    let refused = engine
        .deliver_event(
            &waiting[1].tenant,
            &waiting[1].id,
            "approval",
            serde_json::json!({"approved": "maybe"}),
            None,
        )
        .await;
    assert!(refused.is_err(), "{refused:?}");

    // New runs beside the old ones: listed first, waiting in turn.
    let new = engine
        .start(
            &tenant,
            "approval",
            serde_json::json!({"change": "rotate the keys"}),
            None,
        )
        .await
        .expect("start");
    drain(&engine).await;
    let new = ports
        .store
        .get_run(&tenant, &new.id)
        .await
        .unwrap()
        .expect("the new run");
    assert_eq!(new.status, RunStatus::Waiting);
    let first = ports
        .store
        .list_runs(&tenant, &RunFilter::default(), None, 1)
        .await
        .unwrap();
    assert_eq!(first.runs[0].id, new.id, "the newest run first");
    drop((engine, ports, backend));

    // Opened again: the same layout, nothing migrated twice, nothing lost.
    let again = EmbeddedBackend::open(&path, clock.clone())
        .expect("open again")
        .backend();
    let all = again
        .store
        .list_runs(&tenant, &RunFilter::default(), None, 100)
        .await
        .unwrap();
    assert_eq!(all.runs.len(), old.runs.len() + 1);
    assert_eq!(
        again.store.unfinished_runs(&tenant).await.unwrap(),
        unfinished(&all.runs),
        "the counter kept through a resumed run, a new run and a second open"
    );
    let raw = Connection::open(&path).unwrap();
    let leftovers: i64 = raw
        .query_row(
            "SELECT count(*) FROM sqlite_master WHERE name LIKE '%_by_id'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(leftovers, 0, "the old tables are gone");
    let free: i64 = raw
        .query_row("PRAGMA freelist_count", [], |r| r.get(0))
        .unwrap();
    assert_eq!(free, 0, "the old tables' pages were given back");
}
