//! The file keeps every committed write when the process is killed mid-flight.
//!
//! The test re-executes its own binary, filtered to itself, with [`CHILD_DIR`] set: in
//! that child it opens the backend in the given directory, creates a run, writes a
//! checkpoint (a journal entry and a timeline event), sends a wake-up and calls
//! `std::process::abort()` (no destructors, no orderly close of the SQLite file). The
//! parent then reopens the file and finds all of it.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use siesta::ports::*;
use siesta::*;
use siesta_embedded::EmbeddedBackend;

/// Set, to the directory of the database, only in the child process.
const CHILD_DIR: &str = "SIESTA_SURVIVES_KILL_CHILD_DIR";
/// This test's name, the child's filter.
const TEST_NAME: &str = "committed_writes_survive_a_process_kill";
/// What the child prints just before it aborts, so the parent knows it got that far.
const ABORTING: &str = "survives_kill: every write committed, aborting now";
const TENANT: &str = "kill-tenant";
const RUN: &str = "kill-run";

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

fn open(dir: &Path) -> Backend {
    EmbeddedBackend::open(dir.join("siesta.db"), Arc::new(ManualClock::default()))
        .expect("open the embedded backend")
        .backend()
}

fn journal_entry(at: Timestamp) -> JournalEntry {
    JournalEntry {
        position: Position::from("charge#0"),
        index: 0,
        kind: OperationKind::Step,
        name: "charge".into(),
        state: EntryState::Succeeded {
            value: Payload::Inline(serde_json::json!({"charge": "ch_1"})),
            attempt: 1,
        },
        consumed: Vec::new(),
        handle: None,
        minted: Vec::new(),
        within: None,
        superseded: None,
        updated_at: at,
    }
}

fn step_succeeded(at: Timestamp) -> TimelineEvent {
    TimelineEvent {
        seq: 2,
        at,
        event_type: EventType::StepSucceeded,
        sub_type: Some(SubType::Step),
        id: Some("charge#0".into()),
        parent_id: None,
        name: Some("charge".into()),
        details: serde_json::json!({"Attempt": 1}),
    }
}

fn wake_up() -> WakeUp {
    WakeUp {
        tenant: TenantId::from(TENANT),
        run_id: RunId::from(RUN),
        reason: WakeReason::Timer,
        epoch_hint: 1,
        seq_hint: None,
    }
}

/// The child's half: write, then die without closing anything.
fn child(dir: &Path) -> ! {
    let backend = open(dir);
    runtime().block_on(async {
        let now = ManualClock::default().now();
        let mut run = Run::new(
            TenantId::from(TENANT),
            RunId::from(RUN),
            "survivor",
            Payload::Inline(serde_json::json!({"n": 1})),
            now,
        );
        run.timeline_seq = 1;
        let started = TimelineEvent {
            seq: 1,
            at: now,
            event_type: EventType::ExecutionStarted,
            sub_type: None,
            id: None,
            parent_id: None,
            name: Some("survivor".into()),
            details: serde_json::Value::Null,
        };
        let store = &backend.store;
        store.create_run(&run, &started).await.expect("create_run");
        let claim = Claim {
            owner: "child".into(),
            now,
            expires_at: now.plus(Duration::from_secs(60)),
        };
        let held = store
            .claim(&run.tenant, &run.id, &claim)
            .await
            .expect("claim");
        let mut next = held.clone();
        next.version += 1;
        next.status = RunStatus::Waiting;
        next.lease = None;
        next.timeline_seq = 2;
        next.due_at = Some(now.plus(Duration::from_secs(600)));
        let mut cp = Checkpoint::new(next, held.version, Some(held.epoch));
        cp.journal.push(journal_entry(now));
        cp.timeline.push(step_succeeded(now));
        store.checkpoint(&cp).await.expect("checkpoint");
        backend
            .queue
            .send(&wake_up(), Duration::ZERO)
            .await
            .expect("send");
    });
    println!("{ABORTING}");
    std::process::abort();
}

#[test]
fn committed_writes_survive_a_process_kill() {
    if let Some(dir) = std::env::var_os(CHILD_DIR) {
        child(Path::new(&dir));
    }

    let dir = tempfile::tempdir().expect("temporary directory");
    let output = Command::new(std::env::current_exe().expect("the test binary"))
        .args([TEST_NAME, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_DIR, dir.path())
        .output()
        .expect("run the child");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success(),
        "the child must die, it exited with {}\n{stdout}\n{stderr}",
        output.status
    );
    assert!(
        stdout.contains(ABORTING),
        "the child died before it had written everything ({})\n{stdout}\n{stderr}",
        output.status
    );
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(
            output.status.signal(),
            Some(6),
            "the child died by SIGABRT, not an orderly exit: {}",
            output.status
        );
    }

    let backend = open(dir.path());
    runtime().block_on(async {
        let (tenant, run_id) = (TenantId::from(TENANT), RunId::from(RUN));
        let store = &backend.store;
        let run = store
            .get_run(&tenant, &run_id)
            .await
            .expect("get_run")
            .expect("the run survived");
        assert_eq!(run.status, RunStatus::Waiting, "the checkpoint survived");
        assert_eq!(run.version, 3, "created, claimed, checkpointed");
        let input = store
            .load_replay_input(&tenant, &run_id)
            .await
            .expect("load_replay_input");
        let at = run.created_at;
        assert_eq!(
            input.journal,
            vec![journal_entry(at)],
            "the journal entry survived"
        );
        let timeline = store
            .timeline(&tenant, &run_id, 0, 10)
            .await
            .expect("timeline");
        assert_eq!(
            timeline.iter().map(|e| e.seq).collect::<Vec<_>>(),
            vec![1, 2],
            "both timeline events survived"
        );
        assert_eq!(timeline[1], step_succeeded(at));
        let wakes = backend
            .queue
            .receive(10, Duration::from_secs(30))
            .await
            .expect("receive");
        assert_eq!(wakes.len(), 1, "the wake-up survived: {wakes:?}");
        assert_eq!(wakes[0].wake, wake_up());
        assert_eq!(wakes[0].receive_count, 1);
    });
}
