//! The single writer: one thread owns the write connection and commits the writes of
//! concurrent callers in groups.
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
//! - **Acknowledged only when durable.** A caller's answer is sent after the group's
//!   `COMMIT` returned — with `synchronous=FULL` that is after the WAL was fsynced — so
//!   one fsync covers every write of the group (group commit). If the commit fails,
//!   every caller of the group gets the failure and nothing of the group is stored.
//! - **Only what must survive an OS crash waits for an fsync.** A write is durable or
//!   not (see [`Job::durable`]); a group commits with `synchronous=FULL` when any of its
//!   writes is durable and with `NORMAL` (no fsync) otherwise. The WAL is one log, so a
//!   later durable commit makes every earlier one durable too: a non-durable write is
//!   lost in an OS crash only together with everything after it.
//! - **Groups form by themselves.** The writer takes what is queued when it starts a
//!   group (up to [`MAX_GROUP`]); while it commits, new writes queue up for the next
//!   one. An idle writer commits a lone write at once: no timer, no added latency.

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
    /// Of those, groups committed with an fsync (holding at least one durable write).
    pub synced_commits: AtomicU64,
    /// Write operations committed.
    pub writes: AtomicU64,
}

/// An operation `f` whose result reaches `reply` only after its group is committed.
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

/// Run the writer until every sender is dropped. `fsync` is whether durable writes are
/// fsynced at all ([`crate::Durability::Full`]).
pub(crate) fn run(
    conn: Connection,
    jobs: mpsc::Receiver<Box<dyn Job>>,
    clock: Arc<dyn Clock>,
    counters: Arc<Counters>,
    fsync: bool,
) {
    let mut group: Vec<Box<dyn Job>> = Vec::with_capacity(MAX_GROUP);
    // The connection was opened with `synchronous=FULL` exactly when `fsync`.
    let mut synced = fsync;
    while let Ok(first) = jobs.recv() {
        group.push(first);
        while group.len() < MAX_GROUP {
            match jobs.try_recv() {
                Ok(job) => group.push(job),
                Err(_) => break,
            }
        }
        let sync = fsync && group.iter().any(|job| job.durable());
        if sync != synced {
            let level = if sync { "FULL" } else { "NORMAL" };
            match conn.pragma_update(None, "synchronous", level).map_err(sql) {
                Ok(()) => synced = sync,
                Err(e) if sync => {
                    // Never answer a durable write from a commit that may not fsync.
                    for job in group.drain(..) {
                        job.answer(Some(&e));
                    }
                    continue;
                }
                // Staying at FULL only costs an fsync.
                Err(_) => {}
            }
        }
        commit_group(&conn, &mut group, clock.as_ref(), &counters, synced);
    }
}

/// Run `group` in one transaction, each job in its own savepoint, commit once, answer.
fn commit_group(
    conn: &Connection,
    group: &mut Vec<Box<dyn Job>>,
    clock: &dyn Clock,
    counters: &Counters,
    synced: bool,
) {
    let mut ran: Vec<Box<dyn Job>> = Vec::with_capacity(group.len());
    let mut written = 0u64;
    let mut jobs = group.drain(..);
    if let Err(e) = conn.execute_batch("BEGIN IMMEDIATE").map_err(sql) {
        for job in jobs {
            job.answer(Some(&e));
        }
        return;
    }
    while let Some(mut job) = jobs.next() {
        if let Err(e) = conn.execute_batch("SAVEPOINT op").map_err(sql) {
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
            if let Err(e) = conn.execute_batch("BEGIN IMMEDIATE").map_err(sql) {
                for job in jobs {
                    job.answer(Some(&e));
                }
                return;
            }
            continue;
        }
        let closed = if ok {
            conn.execute_batch("RELEASE op")
        } else {
            conn.execute_batch("ROLLBACK TO op; RELEASE op")
        };
        match closed.map_err(sql) {
            Ok(()) => {
                written += u64::from(ok);
                ran.push(job);
            }
            Err(e) => job.answer(Some(&e)),
        }
    }
    drop(jobs);
    match conn.execute_batch("COMMIT").map_err(sql) {
        Ok(()) => {
            counters.commits.fetch_add(1, Ordering::Relaxed);
            if synced {
                counters.synced_commits.fetch_add(1, Ordering::Relaxed);
            }
            counters.writes.fetch_add(written, Ordering::Relaxed);
            for job in ran {
                job.answer(None);
            }
        }
        Err(e) => {
            let _ = conn.execute_batch("ROLLBACK");
            for job in ran {
                job.answer(Some(&e));
            }
        }
    }
}
