//! Siesta's embedded backend: every port in one local SQLite file.
//!
//! It honours the same contract as the DynamoDB/S3/SQS backend, item for item: each
//! port operation that DynamoDB does in one conditional write or one
//! `TransactWriteItems` is one atomic unit here (a savepoint of the writer's
//! transaction), with the same conditions checked inside it, so the engine cannot tell
//! the two apart and the same conformance suite passes on both.
//!
//! **Durable by default.** A write is acknowledged only once it is on disk: the WAL is
//! fsynced after its commit and before its caller is answered, so an acknowledged
//! start, step, delivery or webhook survives an OS crash or a power loss, not just a
//! process kill. One writer thread commits the writes of concurrent callers in groups
//! — one transaction for all of them, and one fsync for every group committed while
//! the previous fsync ran (see the `writer` module) — and reads run
//! on their own connections, never waiting for a commit. The queue's bookkeeping
//! (send, receive, ack, visibility) and claims commit without an fsync of their own:
//! the WAL is one log, so the next durable write makes them durable too, and losing
//! them with everything after them in an OS crash loses nothing acknowledged (a run
//! stays due until a checkpoint says otherwise; the sweep resends its wake-up).
//! [`Durability::Relaxed`] trades the OS-crash guarantee for speed.
//!
//! A file per port, as in the AWS backend: `store` ([`RunStore`], with `deliveries` for
//! the delivery rules and callback records and `cursors` for the run list's paging),
//! `queue` ([`WakeQueue`]) and `artifacts` ([`ArtifactStore`]); this file opens the
//! database and runs every read and write on its connections.
//!
//! ```no_run
//! # use std::sync::Arc;
//! let backend = siesta_embedded::EmbeddedBackend::open("siesta.db", Arc::new(siesta::SystemClock))?.backend();
//! # Ok::<(), siesta::ports::StoreError>(())
//! ```

mod action_jobs;
mod artifacts;
mod builds;
mod cursors;
mod debounces;
mod deliveries;
mod layout;
mod limits;
#[cfg(test)]
mod query_plans;
mod queue;
mod rate_turns;
pub use queue::QueueDepth;
mod recovery;
mod retention;
mod schedules;
mod step_slots;
mod store;
mod stored;
mod streams;
mod unfinished;
mod workflow_pauses;
mod writer;
mod writer_profile;

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use rusqlite::Connection;
use serde::Serialize;
use serde::de::DeserializeOwned;
use siesta::ports::*;
use siesta::*;

/// How many times a wake-up may be received before it goes to the dead-letter queue.
pub const DEFAULT_MAX_RECEIVES: u32 = 5;

/// Prepared statements kept per connection: every statement the backend runs, so none
/// is parsed twice (rusqlite's default keeps 16, fewer than the writer alone runs).
const STATEMENT_CACHE: usize = 64;

/// How many idle read connections are kept open.
const IDLE_READERS: usize = 8;

/// Bytes the WAL file is cut back to when a checkpoint lets SQLite start it over.
const WAL_SIZE_LIMIT: i64 = 4 * 1024 * 1024;

/// What an acknowledged write survives.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Durability {
    /// fsync of the WAL before every acknowledgement (concurrent writes share one
    /// fsync, made while the next group is written): an acknowledged write survives a
    /// process kill, an OS crash and a power loss. The default.
    #[default]
    Full,
    /// No fsync per commit (WAL, `synchronous=NORMAL`): an acknowledged write survives
    /// a process kill, but the last commits before an OS crash or a power loss may be
    /// lost. Faster; for throwaway data only.
    Relaxed,
}

/// How the embedded backend is opened.
#[derive(Debug, Clone)]
pub struct EmbeddedOptions {
    /// Receptions of a wake-up before it goes to the dead-letter queue.
    pub max_receives: u32,
    /// What an acknowledged write survives.
    pub durability: Durability,
}

impl Default for EmbeddedOptions {
    fn default() -> Self {
        EmbeddedOptions {
            max_receives: DEFAULT_MAX_RECEIVES,
            durability: Durability::Full,
        }
    }
}

/// What the backend's writer has done since it was opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriterStats {
    /// Transactions committed.
    pub commits: u64,
    /// Fsyncs of the WAL made before answering writes that must survive an OS crash,
    /// under [`Durability::Full`]; each covers every transaction committed before it,
    /// so under load there are fewer than `commits` (SQLite adds one more fsync per
    /// WAL checkpoint, every ~1000 pages).
    pub synced_commits: u64,
    /// Write operations committed (each acknowledged to its caller).
    pub writes: u64,
}

/// The embedded backend: one SQLite file holding runs, artifacts and the wake-up queue.
#[derive(Clone)]
pub struct EmbeddedBackend {
    inner: Arc<Inner>,
}

struct Inner {
    path: PathBuf,
    /// SQLite's `:memory:` database lives in its one connection: reads go through the
    /// writer too.
    in_memory: bool,
    writer: mpsc::Sender<Box<dyn writer::Job>>,
    readers: Mutex<Vec<Connection>>,
    counters: Arc<writer::Counters>,
    max_receives: u32,
    /// The retention rules last given, by which finishing writes set `reap_at`.
    reaping: retention::ReapSchedule,
}

impl EmbeddedBackend {
    /// Open (or create) the backend in the file at `path`, reading time from `clock`,
    /// durable by default.
    pub fn open(path: impl AsRef<Path>, clock: Arc<dyn Clock>) -> Result<Self, StoreError> {
        Self::open_with_options(path, clock, EmbeddedOptions::default())
    }

    /// Like [`EmbeddedBackend::open`], with the queue's receive limit before a wake-up is
    /// dead-lettered.
    pub fn open_with(
        path: impl AsRef<Path>,
        clock: Arc<dyn Clock>,
        max_receives: u32,
    ) -> Result<Self, StoreError> {
        let options = EmbeddedOptions {
            max_receives,
            ..EmbeddedOptions::default()
        };
        Self::open_with_options(path, clock, options)
    }

    /// Open (or create) the backend in the file at `path` with `options`.
    pub fn open_with_options(
        path: impl AsRef<Path>,
        clock: Arc<dyn Clock>,
        options: EmbeddedOptions,
    ) -> Result<Self, StoreError> {
        let path = path.as_ref().to_path_buf();
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|e| StoreError::Unavailable(format!("creating {}: {e}", dir.display())))?;
        }
        let conn = Connection::open(&path).map_err(sql)?;
        #[cfg(test)]
        query_plans::record(&conn);
        conn.busy_timeout(Duration::from_secs(5)).map_err(sql)?;
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(sql)?;
        // Commits append to the WAL without an fsync; under `Durability::Full` the
        // writer's syncer fsyncs the WAL before a durable write is answered.
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(sql)?;
        // A burst grows the WAL past the checkpoint's 1 000 pages while readers hold
        // it; without a limit the file keeps that size for good (bytes per run).
        conn.pragma_update(None, "journal_size_limit", WAL_SIZE_LIMIT)
            .map_err(sql)?;
        layout::open(&conn)?;
        recovery::forget_lost_wake_ups(&conn, clock.now())?;
        let counters = Arc::new(writer::Counters::default());
        let (sender, jobs) = mpsc::channel();
        {
            let counters = counters.clone();
            let in_memory = path.as_os_str() == ":memory:";
            let wal = (options.durability == Durability::Full && !in_memory).then(|| {
                let mut wal = path.clone().into_os_string();
                wal.push("-wal");
                PathBuf::from(wal)
            });
            std::thread::Builder::new()
                .name("siesta-embedded-writer".to_owned())
                .spawn(move || writer::run(conn, jobs, clock, counters, wal))
                .map_err(|e| StoreError::Unavailable(format!("starting the writer: {e}")))?;
        }
        Ok(EmbeddedBackend {
            inner: Arc::new(Inner {
                in_memory: path.as_os_str() == ":memory:",
                path,
                writer: sender,
                readers: Mutex::new(Vec::new()),
                counters,
                max_receives: options.max_receives.max(1),
                reaping: retention::ReapSchedule::default(),
            }),
        })
    }

    /// The ports over this file.
    pub fn backend(&self) -> Backend {
        let me = Arc::new(self.clone());
        Backend {
            store: me.clone(),
            artifacts: me.clone(),
            queue: me.clone(),
            streams: me.clone(),
            schedules: me,
        }
    }

    /// What the writer has done so far (commits, hence fsyncs, and writes).
    pub fn writer_stats(&self) -> WriterStats {
        WriterStats {
            commits: self.inner.counters.commits.load(Ordering::Relaxed),
            synced_commits: self.inner.counters.synced_commits.load(Ordering::Relaxed),
            writes: self.inner.counters.writes.load(Ordering::Relaxed),
        }
    }
}

fn sql(e: rusqlite::Error) -> StoreError {
    StoreError::Unavailable(format!("sqlite: {e}"))
}

fn to_json<T: Serialize>(v: &T) -> Result<String, StoreError> {
    serde_json::to_string(v).map_err(|e| StoreError::Invalid(e.to_string()))
}

fn from_json<T: DeserializeOwned>(s: &str) -> Result<T, StoreError> {
    serde_json::from_str(s).map_err(|e| StoreError::Invalid(format!("corrupt record: {e}")))
}

fn is_constraint(e: &rusqlite::Error) -> bool {
    matches!(e, rusqlite::Error::SqliteFailure(f, _) if f.code == rusqlite::ErrorCode::ConstraintViolation)
}

impl EmbeddedBackend {
    /// Run the write `f` atomically on the writer (one savepoint of a group commit);
    /// answered once it is durable, or with the error that undid it.
    async fn tx<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection, Timestamp) -> Result<T, StoreError> + Send + 'static,
    {
        self.write(f, true, None).await
    }

    /// [`Self::tx`] for a write of `tenant`'s, which takes `tenant`'s turn at the writer.
    async fn tx_of<T, F>(&self, tenant: String, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection, Timestamp) -> Result<T, StoreError> + Send + 'static,
    {
        self.write(f, true, Some(tenant)).await
    }

    /// Run the write `f` atomically on the writer, answered once it is committed but
    /// without waiting for an fsync of its own: for writes whose loss in an OS crash
    /// (together with every write after them — the WAL is one log) is healed by what
    /// is durable. Those are the queue's bookkeeping, healed by the run's `due_at`
    /// and the sweep or by redelivery, and a claim, which no durable record depends on
    /// until the claimant's first checkpoint makes it durable; a lost claim leaves the
    /// run as it was before, due, and the steps it ran are at-least-once anyway.
    async fn tx_unsynced<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection, Timestamp) -> Result<T, StoreError> + Send + 'static,
    {
        self.write(f, false, None).await
    }

    /// [`Self::tx_unsynced`] for a write of `tenant`'s, which takes `tenant`'s turn at
    /// the writer.
    async fn tx_unsynced_of<T, F>(&self, tenant: String, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection, Timestamp) -> Result<T, StoreError> + Send + 'static,
    {
        self.write(f, false, Some(tenant)).await
    }

    /// The schedule of finished runs' first look, for a write's closure.
    fn reaping(&self) -> retention::ReapSchedule {
        self.inner.reaping.clone()
    }

    async fn write<T, F>(
        &self,
        f: F,
        durable: bool,
        tenant: Option<String>,
    ) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection, Timestamp) -> Result<T, StoreError> + Send + 'static,
    {
        let (reply, answer) = tokio::sync::oneshot::channel();
        self.inner
            .writer
            .send(Box::new(writer::Pending::new(f, durable, tenant, reply)))
            .map_err(|_| StoreError::Unavailable("the writer has stopped".to_owned()))?;
        answer
            .await
            .map_err(|_| StoreError::Unavailable("the writer has stopped".to_owned()))?
    }

    /// Run the read `f` on a read connection, in one read transaction (one snapshot of
    /// the last commit), on the calling thread: a read from SQLite's page cache takes
    /// microseconds, less than a hand-off to another thread would.
    async fn read<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    {
        if self.inner.in_memory {
            return self.tx(move |conn, _| f(conn)).await;
        }
        let conn = self.reader()?;
        let out = (|| {
            conn.execute_batch("BEGIN").map_err(sql)?;
            let out = f(&conn);
            conn.execute_batch("COMMIT").map_err(sql)?;
            out
        })();
        self.put_back(conn);
        out
    }

    /// An idle read connection, or a new one.
    fn reader(&self) -> Result<Connection, StoreError> {
        let idle = self
            .inner
            .readers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop();
        if let Some(conn) = idle {
            return Ok(conn);
        }
        let conn = Connection::open(&self.inner.path).map_err(sql)?;
        #[cfg(test)]
        query_plans::record(&conn);
        conn.busy_timeout(Duration::from_secs(5)).map_err(sql)?;
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        Ok(conn)
    }

    /// Keep `conn` for the next read, unless it is still in a transaction or enough
    /// are kept.
    fn put_back(&self, conn: Connection) {
        if conn.is_autocommit() {
            let mut idle = self.inner.readers.lock().unwrap_or_else(|e| e.into_inner());
            if idle.len() < IDLE_READERS {
                idle.push(conn);
            }
        }
    }

    /// Copy the WAL into the file now, so that pages a write gave back (the reaper's
    /// `incremental_vacuum`) leave the file at once rather than at the next automatic
    /// checkpoint, which an idle server may not reach for hours. `PASSIVE`: it waits
    /// for no reader or writer, and does what it can; a later checkpoint does the rest.
    async fn checkpoint_wal(&self) {
        if self.inner.in_memory {
            return;
        }
        let store = self.clone();
        let done = tokio::task::spawn_blocking(move || {
            let conn = store.reader()?;
            let out = conn
                .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()))
                .map_err(sql);
            store.put_back(conn);
            out
        })
        .await;
        if let Ok(Err(e)) = done {
            tracing::warn!(error = %e, "could not checkpoint the WAL; the file shrinks at the next one");
        }
    }
}
