//! The single writer: one thread owns the write connection and commits the writes of
//! concurrent callers in groups; a second thread fsyncs the log behind it.
//!
//! Invariants this module keeps, and why:
//! - **One writer.** SQLite allows one writer per file anyway; owning the write
//!   connection on one thread, fed by a channel, replaces a lock plus a blocking-pool
//!   hop per call with one queue push per call.
//! - **Each operation is atomic on its own.** Every operation runs inside its own
//!   `SAVEPOINT` of the group's transaction: an operation that fails (a condition, a
//!   constraint) is rolled back to its savepoint and leaves the others in the group
//!   untouched, so each caller sees exactly what a transaction of its own would give.
//!   Operations of one group run one after another on one connection, so each sees the
//!   writes of those before it, as serial transactions would.
//! - **Acknowledged only when durable.** A durable write's caller is answered only once
//!   the WAL holding its group was fsynced after the group's `COMMIT`; if the commit
//!   fails, every caller of the group gets the failure and nothing of the group is
//!   stored.
//! - **The fsync runs beside the next group, not before it.** The writer commits with
//!   `synchronous=NORMAL` (the WAL is appended, not fsynced) and hands the group's
//!   durable callers to the syncer thread, which fsyncs the WAL file and answers them
//!   while the writer already runs the next group. The WAL is one append-only log, so
//!   one fsync makes every commit before it durable: the syncer takes every group
//!   handed to it meanwhile and answers all of them after one fsync. A commit is
//!   visible to readers before its fsync, as the unsynced writes always were; an OS
//!   crash loses a suffix of the log, so nothing acknowledged and nothing it depends
//!   on. SQLite's own WAL checkpoints (NORMAL) fsync the WAL before copying it into
//!   the database and the database after, so a log restart never overwrites frames
//!   that were not yet durable.
//! - **Only what must survive an OS crash waits for an fsync.** A write is durable or
//!   not (see [`Job::durable`]); a non-durable write is answered right after its
//!   group's `COMMIT`. A later fsync makes it durable too: a non-durable write is lost
//!   in an OS crash only together with everything after it.
//! - **Groups form by themselves.** The writer takes what is queued when it starts a
//!   group (up to [`MAX_GROUP`]); while it commits, new writes queue up for the next
//!   one. An idle writer commits a lone write at once: no timer, no added latency.
//! - **A failed fsync fails every durable write after it.** After a failed fsync the
//!   kernel may have dropped the dirty pages and a later fsync may succeed without
//!   them, so the syncer answers every durable write from then on with the error
//!   (the backend must be reopened), as PostgreSQL does.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;

use rusqlite::Connection;
use siesta::ports::StoreError;
use siesta::{Clock, Timestamp};

use crate::sql;

/// Most operations committed in one group: bounds the time one caller waits behind
/// others and the size of one WAL append.
pub(crate) const MAX_GROUP: usize = 256;

/// One write operation, queued for the writer.
pub(crate) trait Job: Send {
    /// Run the operation on the writer's connection at `now`; whether it succeeded (so
    /// its savepoint is kept).
    fn run(&mut self, conn: &Connection, now: Timestamp) -> bool;
    /// Answer the caller once the group's fate is known: `failed` is the reason the
    /// group was not committed, `None` when it was.
    fn answer(self: Box<Self>, failed: Option<&StoreError>);
    /// Whether the caller may be answered only once the write is on disk (fsynced).
    fn durable(&self) -> bool;
}

/// Counters of what the writer did, for benchmarks and tests.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    /// Groups committed.
    pub commits: AtomicU64,
    /// Fsyncs of the WAL made for durable writes (each covers every group committed
    /// before it).
    pub synced_commits: AtomicU64,
    /// Write operations committed.
    pub writes: AtomicU64,
}

/// An operation `f` whose result reaches `reply` only after its group is committed (and,
/// when durable, fsynced).
pub(crate) struct Pending<T, F> {
    f: Option<F>,
    durable: bool,
    out: Option<Result<T, StoreError>>,
    reply: tokio::sync::oneshot::Sender<Result<T, StoreError>>,
}

impl<T, F> Pending<T, F> {
    pub(crate) fn new(
        f: F,
        durable: bool,
        reply: tokio::sync::oneshot::Sender<Result<T, StoreError>>,
    ) -> Self {
        Pending {
            f: Some(f),
            durable,
            out: None,
            reply,
        }
    }
}

impl<T, F> Job for Pending<T, F>
where
    T: Send + 'static,
    F: FnOnce(&Connection, Timestamp) -> Result<T, StoreError> + Send + 'static,
{
    fn run(&mut self, conn: &Connection, now: Timestamp) -> bool {
        let out = self.f.take().map(|f| f(conn, now));
        let ok = matches!(out, Some(Ok(_)));
        self.out = out;
        ok
    }

    fn answer(self: Box<Self>, failed: Option<&StoreError>) {
        let out = match (failed, self.out) {
            // An operation's own error stands: it wrote nothing either way.
            (_, Some(Err(e))) => Err(e),
            (None, Some(ok)) => ok,
            (Some(e), _) => Err(StoreError::Unavailable(format!(
                "not committed, nothing was written: {e}"
            ))),
            (None, None) => Err(StoreError::Unavailable(
                "the operation did not run".to_owned(),
            )),
        };
        // The caller may have gone away (a dropped request); nothing to do then.
        let _ = self.reply.send(out);
    }

    fn durable(&self) -> bool {
        self.durable
    }
}

/// Run the writer until every sender is dropped. `wal` is the WAL file to fsync before a
/// durable write is answered ([`crate::Durability::Full`]); `None` answers every write
/// once committed. The connection was opened with `synchronous=NORMAL`.
pub(crate) fn run(
    conn: Connection,
    jobs: mpsc::Receiver<Box<dyn Job>>,
    clock: Arc<dyn Clock>,
    counters: Arc<Counters>,
    wal: Option<PathBuf>,
) {
    let syncer = match wal {
        Some(wal) => {
            let (sender, synced) = mpsc::channel();
            let counters = counters.clone();
            let started = std::thread::Builder::new()
                .name("siesta-embedded-syncer".to_owned())
                .spawn(move || sync(&wal, &synced, &counters));
            match started {
                Ok(_) => Some(sender),
                Err(e) => {
                    let e = StoreError::Unavailable(format!("starting the syncer: {e}"));
                    for job in jobs {
                        job.answer(Some(&e));
                    }
                    return;
                }
            }
        }
        None => None,
    };
    let mut group: Vec<Box<dyn Job>> = Vec::with_capacity(MAX_GROUP);
    while let Ok(first) = jobs.recv() {
        group.push(first);
        while group.len() < MAX_GROUP {
            match jobs.try_recv() {
                Ok(job) => group.push(job),
                Err(_) => break,
            }
        }
        let committed = commit_group(&conn, &mut group, clock.as_ref(), &counters);
        let (durable, done): (Vec<_>, Vec<_>) = committed
            .into_iter()
            .partition(|job| syncer.is_some() && job.durable());
        for job in done {
            job.answer(None);
        }
        if let Some(syncer) = &syncer
            && !durable.is_empty()
            && let Err(mpsc::SendError(durable)) = syncer.send(durable)
        {
            let e = StoreError::Unavailable(
                "committed, but the syncer has stopped: it may not survive an OS crash".to_owned(),
            );
            for job in durable {
                job.answer(Some(&e));
            }
        }
    }
}

/// Fsync `wal` for the committed durable writes handed over, as many groups per fsync
/// as queued up meanwhile, and answer them.
fn sync(wal: &Path, groups: &mpsc::Receiver<Vec<Box<dyn Job>>>, counters: &Counters) {
    let mut file: Option<std::fs::File> = None;
    let mut failed: Option<StoreError> = None;
    while let Ok(mut waiting) = groups.recv() {
        while let Ok(more) = groups.try_recv() {
            waiting.extend(more);
        }
        if failed.is_none() {
            let synced = match &file {
                Some(f) => f.sync_data(),
                None => std::fs::File::open(wal).and_then(|f| {
                    let done = f.sync_data();
                    file = Some(f);
                    done
                }),
            };
            match synced {
                Ok(()) => {
                    counters.synced_commits.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => {
                    failed = Some(StoreError::Unavailable(format!(
                        "committed, but fsync of {} failed ({e}): it may not survive an OS crash; reopen the backend",
                        wal.display()
                    )));
                }
            }
        }
        for job in waiting {
            job.answer(failed.as_ref());
        }
    }
}

/// Run one fixed statement through the connection's statement cache (parsed once).
fn exec(conn: &Connection, statement: &str) -> Result<(), StoreError> {
    conn.prepare_cached(statement)
        .and_then(|mut s| s.execute([]))
        .map(|_| ())
        .map_err(sql)
}

/// Run `group` in one transaction, each job in its own savepoint, and commit once. Jobs
/// that failed to run or whose group failed are answered here; the committed ones
/// (whether their own operation succeeded or not) are returned, to be answered once
/// their group is as durable as they need.
fn commit_group(
    conn: &Connection,
    group: &mut Vec<Box<dyn Job>>,
    clock: &dyn Clock,
    counters: &Counters,
) -> Vec<Box<dyn Job>> {
    let mut ran: Vec<Box<dyn Job>> = Vec::with_capacity(group.len());
    let mut written = 0u64;
    let mut jobs = group.drain(..);
    if let Err(e) = exec(conn, "BEGIN IMMEDIATE") {
        for job in jobs {
            job.answer(Some(&e));
        }
        return ran;
    }
    while let Some(mut job) = jobs.next() {
        if let Err(e) = exec(conn, "SAVEPOINT op") {
            job.answer(Some(&e));
            continue;
        }
        let ok = job.run(conn, clock.now());
        if conn.is_autocommit() {
            // A severe error (disk full, I/O) rolled the whole transaction back: what
            // the group wrote so far is gone, and its callers must hear it.
            let e = StoreError::Unavailable("sqlite rolled the transaction back".to_owned());
            job.answer(Some(&e));
            for job in ran.drain(..) {
                job.answer(Some(&e));
            }
            written = 0;
            if let Err(e) = exec(conn, "BEGIN IMMEDIATE") {
                for job in jobs {
                    job.answer(Some(&e));
                }
                return ran;
            }
            continue;
        }
        let closed = if ok {
            exec(conn, "RELEASE op")
        } else {
            exec(conn, "ROLLBACK TO op").and_then(|()| exec(conn, "RELEASE op"))
        };
        match closed {
            Ok(()) => {
                written += u64::from(ok);
                ran.push(job);
            }
            Err(e) => job.answer(Some(&e)),
        }
    }
    drop(jobs);
    match exec(conn, "COMMIT") {
        Ok(()) => {
            counters.commits.fetch_add(1, Ordering::Relaxed);
            counters.writes.fetch_add(written, Ordering::Relaxed);
            ran
        }
        Err(e) => {
            let _ = conn.execute_batch("ROLLBACK");
            for job in ran {
                job.answer(Some(&e));
            }
            Vec::new()
        }
    }
}
