//! What the embedded backend promises beyond the port contracts: the file, its schema,
//! several handles on one file, and bad data.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use siesta::ports::*;
use siesta::*;
use siesta_embedded::{DEFAULT_MAX_RECEIVES, EmbeddedBackend};

fn open(path: &Path, clock: &Arc<ManualClock>) -> Backend {
    EmbeddedBackend::open(path, clock.clone())
        .expect("open the embedded backend")
        .backend()
}

fn pending_run(clock: &ManualClock, tenant: &str) -> (Run, TimelineEvent) {
    let now = clock.now();
    let mut run = Run::new(
        TenantId::from(tenant),
        RunId::generate(),
        "embedded",
        Payload::Inline(serde_json::json!({})),
        now,
    );
    run.timeline_seq = 1;
    let started = TimelineEvent::execution_started(now, "embedded", serde_json::Value::Null);
    (run, started)
}

fn wake(run: &Run) -> WakeUp {
    WakeUp {
        tenant: run.tenant.clone(),
        run_id: run.id.clone(),
        reason: WakeReason::Started,
        epoch_hint: 0,
        seq_hint: None,
    }
}

/// GIVEN a file written by one handle WHEN it is opened again (the schema is created
/// only if missing) THEN everything is still there; missing directories are created.
#[tokio::test]
async fn reopening_keeps_everything() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let path = dir.path().join("nested/deeper/siesta.db");
    let clock = Arc::new(ManualClock::default());
    let (run, started) = pending_run(&clock, "t1");
    {
        let backend = open(&path, &clock);
        backend
            .store
            .create_run(&run, &started)
            .await
            .expect("create_run");
        backend
            .queue
            .send(&wake(&run), Duration::ZERO)
            .await
            .expect("send");
    }
    let backend = open(&path, &clock);
    let again = open(&path, &clock);
    assert_eq!(
        backend
            .store
            .get_run(&run.tenant, &run.id)
            .await
            .expect("get_run"),
        Some(run.clone())
    );
    let received = again
        .queue
        .receive(10, Duration::from_secs(30))
        .await
        .expect("receive");
    assert_eq!(received.len(), 1);
    assert_eq!(received[0].wake, wake(&run));
}

/// GIVEN two handles on one file (the dev server and a second process) WHEN they race
/// to claim the same runs THEN exactly one claim per run wins and none fails with a
/// busy database.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_handles_on_one_file_serialise_their_writes() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let path = dir.path().join("siesta.db");
    let clock = Arc::new(ManualClock::default());
    let (a, b) = (open(&path, &clock), open(&path, &clock));
    for _ in 0..20 {
        let (run, started) = pending_run(&clock, "t1");
        a.store
            .create_run(&run, &started)
            .await
            .expect("create_run");
        let now = clock.now();
        let claims = [(&a, "engine-a"), (&b, "engine-b")].map(|(backend, owner)| {
            let store = backend.store.clone();
            let (tenant, id) = (run.tenant.clone(), run.id.clone());
            let claim = Claim {
                owner: owner.into(),
                now,
                expires_at: now.plus(Duration::from_secs(60)),
            };
            tokio::spawn(async move { store.claim(&tenant, &id, &claim).await })
        });
        let mut won = 0;
        for claim in claims {
            match claim.await.expect("claim task") {
                Ok(_) => won += 1,
                Err(StoreError::Conflict(Some(_))) => {}
                Err(e) => panic!("a racing claim failed: {e:?}"),
            }
        }
        assert_eq!(won, 1, "exactly one claim wins");
    }
}

/// GIVEN a row whose JSON is corrupt WHEN it is read THEN the read fails with
/// `Invalid`, and nothing panics.
#[tokio::test]
async fn corrupt_rows_are_invalid_not_panics() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let path = dir.path().join("siesta.db");
    let clock = Arc::new(ManualClock::default());
    let backend = open(&path, &clock);
    let (run, started) = pending_run(&clock, "t1");
    backend
        .store
        .create_run(&run, &started)
        .await
        .expect("create_run");
    backend
        .queue
        .send(&wake(&run), Duration::ZERO)
        .await
        .expect("send");

    let raw = rusqlite::Connection::open(&path).expect("open the file directly");
    raw.busy_timeout(Duration::from_secs(5))
        .expect("busy timeout");
    raw.execute_batch(
        "UPDATE runs SET body = '{\"not\": \"a run\"'; \
         UPDATE timeline SET body = '[]'; \
         UPDATE wake_queue SET body = 'garbage';",
    )
    .expect("corrupt the rows");
    drop(raw);

    let got = backend.store.get_run(&run.tenant, &run.id).await;
    assert!(matches!(got, Err(StoreError::Invalid(_))), "got {got:?}");
    let got = backend.store.timeline(&run.tenant, &run.id, 0, 10).await;
    assert!(matches!(got, Err(StoreError::Invalid(_))), "got {got:?}");
    let got = backend
        .store
        .list_runs(&run.tenant, &RunFilter::default(), None, 10)
        .await;
    assert!(matches!(got, Err(StoreError::Invalid(_))), "got {got:?}");
    let got = backend.queue.receive(10, Duration::from_secs(1)).await;
    assert!(matches!(got, Err(StoreError::Invalid(_))), "got {got:?}");
    let got = backend
        .store
        .list_runs(&run.tenant, &RunFilter::default(), Some("no-colon"), 10)
        .await;
    assert!(
        matches!(got, Err(StoreError::Invalid(_))),
        "a malformed cursor: got {got:?}"
    );
}

/// GIVEN the default options WHEN a wake-up is never acknowledged THEN it is handed out
/// `DEFAULT_MAX_RECEIVES` (5) times, then dead-lettered.
#[tokio::test]
async fn the_default_receive_limit_is_five() {
    assert_eq!(DEFAULT_MAX_RECEIVES, 5);
    let dir = tempfile::tempdir().expect("temporary directory");
    let clock = Arc::new(ManualClock::default());
    let backend = open(&dir.path().join("siesta.db"), &clock);
    let (run, _) = pending_run(&clock, "t1");
    backend
        .queue
        .send(&wake(&run), Duration::ZERO)
        .await
        .expect("send");
    let mut counts = Vec::new();
    for _ in 0..7 {
        for m in backend
            .queue
            .receive(10, Duration::from_secs(1))
            .await
            .expect("receive")
        {
            counts.push(m.receive_count);
        }
        clock.advance(Duration::from_secs(2));
    }
    assert_eq!(counts, vec![1, 2, 3, 4, 5]);
    let dead: Vec<WakeUp> = backend
        .queue
        .dead_letters(10, Duration::from_secs(1))
        .await
        .expect("dead_letters")
        .into_iter()
        .map(|d| d.wake)
        .collect();
    assert_eq!(dead, vec![wake(&run)]);
}

/// GIVEN the writer held up by another connection's write lock WHEN 64 creates arrive
/// meanwhile, eight of them repeating another's run id THEN they share transactions
/// (group commit: one fsync each; a group takes writes for at most the writer's
/// `MAX_GROUP_TIME`, so how many groups depends on the machine), every distinct run is stored,
/// and each repeat alone fails with `AlreadyExists` — one operation's failure undoes
/// nothing of the others in its group.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writes_share_one_commit_and_keep_their_own_outcomes() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let path = dir.path().join("siesta.db");
    let clock = Arc::new(ManualClock::default());
    let embedded = EmbeddedBackend::open(&path, clock.clone()).expect("open");
    let backend = embedded.backend();
    let runs: Vec<(Run, TimelineEvent)> = (0..56).map(|_| pending_run(&clock, "t1")).collect();
    let mut writes: Vec<(Run, TimelineEvent)> = runs.clone();
    writes.extend(runs.iter().take(8).cloned());

    let raw = rusqlite::Connection::open(&path).expect("open the file directly");
    raw.execute_batch("BEGIN IMMEDIATE")
        .expect("hold the write lock");
    let mut all = std::pin::pin!(futures::future::join_all(
        writes
            .iter()
            .map(|(run, started)| backend.store.create_run(run, started))
    ));
    // The first poll queues every write with the writer, which waits for the lock.
    assert!(futures::poll!(&mut all).is_pending());
    raw.execute_batch("COMMIT").expect("release the write lock");
    let outcomes = all.await;

    let stored = outcomes.iter().filter(|o| o.is_ok()).count();
    let repeats = outcomes
        .iter()
        .filter(|o| matches!(o, Err(StoreError::AlreadyExists)))
        .count();
    assert_eq!((stored, repeats), (56, 8), "{outcomes:?}");
    for (run, _) in &runs {
        let got = backend
            .store
            .get_run(&run.tenant, &run.id)
            .await
            .expect("get_run");
        assert_eq!(got.as_ref(), Some(run));
    }
    let stats = embedded.writer_stats();
    assert_eq!(stats.writes, 56);
    assert!(stats.commits < stats.writes, "{stats:?}");
    assert!(
        (1..=stats.commits).contains(&stats.synced_commits),
        "one fsync per group at most, and the starts waited for one: {stats:?}"
    );
}

/// GIVEN the default (durable) backend WHEN the queue's bookkeeping and a claim are
/// written THEN none of them costs an fsync of its own, while a start and a checkpoint
/// each do — and a reopened file holds all of them (the unsynced writes are committed,
/// only their fsync is left to the next durable write).
#[tokio::test]
async fn only_writes_that_must_survive_an_os_crash_wait_for_an_fsync() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let path = dir.path().join("siesta.db");
    let clock = Arc::new(ManualClock::default());
    let embedded = EmbeddedBackend::open(&path, clock.clone()).expect("open");
    let backend = embedded.backend();
    let (run, started) = pending_run(&clock, "t1");
    backend
        .store
        .create_run(&run, &started)
        .await
        .expect("create_run");
    let synced = |stats: siesta_embedded::WriterStats| stats.synced_commits;
    assert_eq!(synced(embedded.writer_stats()), 1, "the start is fsynced");

    backend
        .queue
        .send(&wake(&run), Duration::ZERO)
        .await
        .expect("send");
    let received = backend
        .queue
        .receive(10, Duration::from_secs(30))
        .await
        .expect("receive");
    backend
        .queue
        .extend_visibility(&received[0].receipt, Duration::from_secs(60))
        .await
        .expect("extend");
    let claim = Claim {
        owner: "o".into(),
        now: clock.now(),
        expires_at: clock.now().plus(Duration::from_secs(60)),
    };
    let claimed = backend
        .store
        .claim(&run.tenant, &run.id, &claim)
        .await
        .expect("claim");
    backend.queue.ack(&received[0].receipt).await.expect("ack");
    let stats = embedded.writer_stats();
    assert_eq!((stats.writes, synced(stats)), (6, 1), "{stats:?}");

    let mut next = claimed.clone();
    next.version += 1;
    next.status = RunStatus::Completed;
    next.lease = None;
    next.due_at = None;
    backend
        .store
        .checkpoint(&Checkpoint::new(
            next.clone(),
            claimed.version,
            Some(claimed.epoch),
        ))
        .await
        .expect("checkpoint");
    assert_eq!(
        synced(embedded.writer_stats()),
        2,
        "the checkpoint is fsynced"
    );
    drop(backend);
    drop(embedded);

    let reopened = open(&path, &clock);
    assert_eq!(
        reopened
            .store
            .get_run(&run.tenant, &run.id)
            .await
            .expect("get_run"),
        Some(next)
    );
    assert!(
        reopened
            .queue
            .receive(10, Duration::ZERO)
            .await
            .expect("receive")
            .is_empty(),
        "the ack was kept"
    );
}

#[tokio::test]
async fn the_queue_depth_counts_visible_received_and_delayed_wake_ups_and_dates_the_oldest_visible()
{
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::default());
    let embedded = EmbeddedBackend::open(dir.path().join("db"), clock.clone()).unwrap();
    let queue = embedded.backend().queue;
    let wake = |run: &str| WakeUp::new(TenantId::from("t"), RunId::from(run), WakeReason::Timer);
    let first_sent = clock.now();
    queue.send(&wake("a"), Duration::ZERO).await.unwrap();
    clock.advance(Duration::from_millis(500));
    queue.send(&wake("b"), Duration::ZERO).await.unwrap();
    queue.send(&wake("c"), Duration::ZERO).await.unwrap();
    queue
        .send(&wake("d"), Duration::from_secs(60))
        .await
        .unwrap();
    let received = queue.receive(1, Duration::from_secs(30)).await.unwrap();
    assert_eq!(received.len(), 1);
    clock.advance(Duration::from_millis(250));

    let depth = embedded.queue_depth(clock.now()).await.unwrap();
    assert_eq!(
        (depth.visible, depth.in_flight, depth.delayed),
        (2, 1, 1),
        "{depth:?}"
    );
    assert_eq!(
        depth.oldest_visible_at,
        Some(first_sent.plus(Duration::from_millis(500))),
        "a, sent first, was received: b is the oldest waiting"
    );

    queue.ack(&received[0].receipt).await.unwrap();
    clock.advance(Duration::from_secs(120));
    let depth = embedded.queue_depth(clock.now()).await.unwrap();
    assert_eq!(
        (depth.visible, depth.in_flight, depth.delayed),
        (3, 0, 0),
        "the delayed one is due: {depth:?}"
    );
}
