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
//! - **Groups form by themselves.** A group takes what is queued, one write after
//!   another, until nothing is left, it holds [`MAX_GROUP`] writes or it has run for
//!   [`MAX_GROUP_TIME`]; while it commits, new writes queue up for the next one. An
//!   idle writer commits a lone write at once: no timer, no added latency.
//! - **Tenants take turns.** Queued writes wait in one line per owner (the tenant a
//!   write is for; for a write of no one tenant — the queue's receive and ack, the
//!   sweep's reads — its operation), and a group takes one write from each line in
//!   turn, looking at the channel again before each write. A tenant whose burst
//!   fills the queue with hundreds of writes therefore delays another tenant's write
//!   by at most one write of its own plus the rest of the group in progress, which
//!   [`MAX_GROUP_TIME`] bounds: a group that ran that long commits, so a write never
//!   waits behind a long group, only behind a short one.
//! - **A failed fsync fails every durable write after it.** After a failed fsync the
//!   kernel may have dropped the dirty pages and a later fsync may succeed without
//!   them, so the syncer answers every durable write from then on with the error
//!   (the backend must be reopened), as PostgreSQL does.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::Instant;

use rusqlite::Connection;
use siesta::ports::StoreError;
use siesta::{Clock, Timestamp};

use crate::sql;
use crate::writer_profile::{self, Profile};

/// Most operations committed in one group: bounds the time one caller waits behind
/// others and the size of one WAL append.
pub(crate) const MAX_GROUP: usize = 256;

/// Longest a group takes new writes: bounds how long a write that arrives while a
/// group runs waits for its commit (plus the one write running then), whoever fills
/// the queue.
pub(crate) const MAX_GROUP_TIME: std::time::Duration = std::time::Duration::from_millis(1);

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
    /// When it was queued.
    fn queued(&self) -> Instant;
    /// The operation it belongs to (for the profile).
    fn kind(&self) -> &'static str;
    /// Whose turn it takes: its tenant, or `None` for a write of no one tenant (it
    /// then takes its operation's turn).
    fn tenant(&self) -> Option<&str>;
}

/// Writes waiting for the writer, one line per owner, served in turns (see the
/// module's invariants).
#[derive(Default)]
pub(crate) struct Backlog {
    /// Each owner's writes, oldest first.
    lines: std::collections::HashMap<String, std::collections::VecDeque<Box<dyn Job>>>,
    /// Owners with writes waiting, the next to be served first.
    turns: std::collections::VecDeque<String>,
}

impl Backlog {
    /// Queue `job` at the end of its owner's line.
    pub(crate) fn push(&mut self, job: Box<dyn Job>) {
        let owner = match job.tenant() {
            Some(tenant) => tenant,
            None => job.kind(),
        };
        match self.lines.get_mut(owner) {
            Some(line) => line.push_back(job),
            None => {
                let owner = owner.to_owned();
                self.turns.push_back(owner.clone());
                self.lines
                    .insert(owner, std::collections::VecDeque::from([job]));
            }
        }
    }

    /// The oldest write of the owner whose turn it is; that owner's next turn comes
    /// after every other owner waiting now.
    pub(crate) fn pop(&mut self) -> Option<Box<dyn Job>> {
        let owner = self.turns.pop_front()?;
        let line = self.lines.get_mut(&owner)?;
        let job = line.pop_front();
        if line.is_empty() {
            self.lines.remove(&owner);
        } else {
            self.turns.push_back(owner);
        }
        job
    }

    /// Whether no write waits.
    pub(crate) fn is_empty(&self) -> bool {
        self.turns.is_empty()
    }

    /// Move every write waiting in `channel` into the backlog.
    fn take_from(&mut self, channel: &mpsc::Receiver<Box<dyn Job>>) {
        while let Ok(job) = channel.try_recv() {
            self.push(job);
        }
    }
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
    queued: Instant,
    tenant: Option<String>,
    out: Option<Result<T, StoreError>>,
    reply: tokio::sync::oneshot::Sender<Result<T, StoreError>>,
}

impl<T, F> Pending<T, F> {
    pub(crate) fn new(
        f: F,
        durable: bool,
        tenant: Option<String>,
        reply: tokio::sync::oneshot::Sender<Result<T, StoreError>>,
    ) -> Self {
        Pending {
            f: Some(f),
            durable,
            queued: Instant::now(),
            tenant,
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

    fn queued(&self) -> Instant {
        self.queued
    }

    fn kind(&self) -> &'static str {
        writer_profile::kind_of(std::any::type_name::<F>())
    }

    fn tenant(&self) -> Option<&str> {
        self.tenant.as_deref()
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
    let profile = Profile::from_env();
    let syncer = match wal {
        Some(wal) => {
            let (sender, synced) = mpsc::channel();
            let counters = counters.clone();
            let profile = profile.clone();
            let started = std::thread::Builder::new()
                .name("siesta-embedded-syncer".to_owned())
                .spawn(move || sync(&wal, &synced, &counters, profile.as_ref()));
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
    let mut backlog = Backlog::default();
    loop {
        if backlog.is_empty() {
            match jobs.recv() {
                Ok(job) => backlog.push(job),
                Err(_) => return,
            }
        }
        let committed = commit_group(
            &conn,
            &jobs,
            &mut backlog,
            clock.as_ref(),
            &counters,
            profile.as_ref(),
        );
        let committed_at = Instant::now();
        let (durable, done): (Vec<_>, Vec<_>) = committed
            .into_iter()
            .partition(|job| syncer.is_some() && job.durable());
        for job in done {
            job.answer(None);
        }
        if let Some(syncer) = &syncer
            && !durable.is_empty()
            && let Err(mpsc::SendError((_, durable))) = syncer.send((committed_at, durable))
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
fn sync(
    wal: &Path,
    groups: &mpsc::Receiver<(Instant, Vec<Box<dyn Job>>)>,
    counters: &Counters,
    profile: Option<&Profile>,
) {
    let mut file: Option<std::fs::File> = None;
    let mut failed: Option<StoreError> = None;
    let mut committed: Vec<Instant> = Vec::new();
    while let Ok((at, mut waiting)) = groups.recv() {
        committed.clear();
        committed.extend(std::iter::repeat_n(at, waiting.len()));
        while let Ok((at, more)) = groups.try_recv() {
            committed.extend(std::iter::repeat_n(at, more.len()));
            waiting.extend(more);
        }
        let began = Instant::now();
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
        if let Some(profile) = profile {
            profile.fsync(began.elapsed(), &committed, Instant::now());
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

/// Run a group in one transaction — writes taken in turns from `backlog`, refilled from
/// `channel` before each, until it is empty or the group is full ([`MAX_GROUP`],
/// [`MAX_GROUP_TIME`]) — each in its own savepoint, and commit once. Jobs that failed
/// to run or whose group failed are answered here; the committed ones (whether their
/// own operation succeeded or not) are returned, to be answered once their group is as
/// durable as they need.
fn commit_group(
    conn: &Connection,
    channel: &mpsc::Receiver<Box<dyn Job>>,
    backlog: &mut Backlog,
    clock: &dyn Clock,
    counters: &Counters,
    profile: Option<&Profile>,
) -> Vec<Box<dyn Job>> {
    let began = Instant::now();
    let mut profiled: Vec<(Instant, Instant, &'static str, std::time::Duration)> = Vec::new();
    let mut ran: Vec<Box<dyn Job>> = Vec::new();
    let mut written = 0u64;
    let mut taken = 0usize;
    // The group's time runs from its first write: waiting for the file's write lock
    // (another process) is not time the group holds anyone up with.
    let mut first_taken: Option<Instant> = None;
    let mut next = |backlog: &mut Backlog| {
        let first = *first_taken.get_or_insert_with(Instant::now);
        if taken >= MAX_GROUP || (taken > 0 && first.elapsed() >= MAX_GROUP_TIME) {
            return None;
        }
        backlog.take_from(channel);
        taken += 1;
        backlog.pop()
    };
    if let Err(e) = exec(conn, "BEGIN IMMEDIATE") {
        while let Some(job) = next(backlog) {
            job.answer(Some(&e));
        }
        return ran;
    }
    while let Some(mut job) = next(backlog) {
        if let Err(e) = exec(conn, "SAVEPOINT op") {
            job.answer(Some(&e));
            continue;
        }
        let run_began = profile.map(|_| Instant::now());
        let ok = job.run(conn, clock.now());
        if let Some(at) = run_began {
            profiled.push((job.queued(), at, job.kind(), at.elapsed()));
        }
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
                while let Some(job) = next(backlog) {
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
    let commit_began = Instant::now();
    match exec(conn, "COMMIT") {
        Ok(()) => {
            if let Some(profile) = profile {
                let now = Instant::now();
                profile.group(began, now - commit_began, now, &profiled);
            }
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// A write of `tenant` that notes its name in `ran` when it runs.
    struct Noting {
        name: String,
        tenant: Option<String>,
        kind: &'static str,
        ran: Arc<Mutex<Vec<String>>>,
        /// Told when it starts; then it waits for `release` (holding the writer).
        hold: Option<(mpsc::Sender<()>, mpsc::Receiver<()>)>,
        /// How long it keeps the writer busy once released.
        busy: std::time::Duration,
        done: mpsc::Sender<String>,
    }

    impl Job for Noting {
        fn run(&mut self, _: &Connection, _: Timestamp) -> bool {
            if let Some((started, release)) = self.hold.take() {
                let _ = started.send(());
                let _ = release.recv();
            }
            let began = Instant::now();
            // A long operation (a big checkpoint): the writer is busy, not waiting.
            while began.elapsed() < self.busy {
                std::hint::spin_loop();
            }
            self.ran.lock().unwrap().push(self.name.clone());
            true
        }
        fn answer(self: Box<Self>, failed: Option<&StoreError>) {
            assert!(failed.is_none(), "{failed:?}");
            let _ = self.done.send(self.name.clone());
        }
        fn durable(&self) -> bool {
            false
        }
        fn queued(&self) -> Instant {
            Instant::now()
        }
        fn kind(&self) -> &'static str {
            self.kind
        }
        fn tenant(&self) -> Option<&str> {
            self.tenant.as_deref()
        }
    }

    struct Writes {
        ran: Arc<Mutex<Vec<String>>>,
        done: mpsc::Sender<String>,
    }

    impl Writes {
        fn of(&self, name: &str, tenant: Option<&str>, kind: &'static str) -> Box<Noting> {
            Box::new(Noting {
                name: name.to_owned(),
                tenant: tenant.map(str::to_owned),
                kind,
                ran: self.ran.clone(),
                hold: None,
                busy: std::time::Duration::ZERO,
                done: self.done.clone(),
            })
        }
    }

    fn writes() -> (Writes, mpsc::Receiver<String>) {
        let (done, answered) = mpsc::channel();
        let ran = Arc::new(Mutex::new(Vec::new()));
        (Writes { ran, done }, answered)
    }

    #[test]
    fn the_backlog_serves_one_write_per_owner_in_turn() {
        // GIVEN tenant a's five writes, then one of tenant b and a receive (no tenant)
        let (w, _answered) = writes();
        let mut backlog = Backlog::default();
        for i in 1..=5 {
            backlog.push(w.of(&format!("a{i}"), Some("a"), "create_run"));
        }
        backlog.push(w.of("b1", Some("b"), "create_run"));
        backlog.push(w.of("receive", None, "receive"));
        // WHEN the writer takes them
        let mut order = Vec::new();
        while let Some(mut job) = backlog.pop() {
            job.run(&Connection::open_in_memory().unwrap(), Timestamp(0));
        }
        order.extend(w.ran.lock().unwrap().iter().cloned());
        // THEN b's write and the receive come right after a's first, not after all five
        assert_eq!(order, ["a1", "b1", "receive", "a2", "a3", "a4", "a5"]);
        assert!(backlog.is_empty());
    }

    #[test]
    fn a_tenants_write_is_taken_ahead_of_another_tenants_queued_writes() {
        // GIVEN a writer busy with a write of tenant a
        let (w, answered) = writes();
        let (sender, channel) = mpsc::channel::<Box<dyn Job>>();
        let conn = Connection::open_in_memory().unwrap();
        let counters = Arc::new(Counters::default());
        let writer = {
            let counters = counters.clone();
            std::thread::spawn(move || {
                run(conn, channel, Arc::new(siesta::SystemClock), counters, None)
            })
        };
        let (started, is_running) = mpsc::channel();
        let (release, held) = mpsc::channel();
        let mut long = w.of("a0", Some("a"), "checkpoint");
        long.hold = Some((started, held));
        // It runs longer than a group may take writes.
        long.busy = MAX_GROUP_TIME * 2;
        sender.send(long).unwrap();
        is_running.recv().unwrap();
        // WHEN tenant a queues ten more writes and then tenant b one
        for i in 1..=10 {
            sender
                .send(w.of(&format!("a{i}"), Some("a"), "checkpoint"))
                .unwrap();
        }
        sender.send(w.of("b1", Some("b"), "create_run")).unwrap();
        release.send(()).unwrap();
        let answers: Vec<String> = (0..12).map(|_| answered.recv().unwrap()).collect();
        drop(sender);
        writer.join().unwrap();
        // THEN b's write runs right after a's next one, ahead of a's other nine
        let order = w.ran.lock().unwrap().clone();
        let expected: Vec<String> = ["a0", "a1", "b1"]
            .into_iter()
            .map(str::to_owned)
            .chain((2..=10).map(|i| format!("a{i}")))
            .collect();
        assert_eq!(order, expected);
        // … and the long write's group committed on its own, before the writes queued
        // behind it were taken: a write never waits behind a group that ran long.
        assert_eq!(answers[0], "a0");
        assert!(counters.commits.load(Ordering::Relaxed) >= 2);
    }
}
