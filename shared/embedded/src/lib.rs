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
//! ```no_run
//! # use std::sync::Arc;
//! let backend = siesta_embedded::EmbeddedBackend::open("siesta.db", Arc::new(siesta::SystemClock))?.backend();
//! # Ok::<(), siesta::ports::StoreError>(())
//! ```

mod layout;
#[cfg(test)]
mod query_plans;
mod recovery;
mod stored;
mod unfinished;
mod writer;
mod writer_profile;

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;
use serde::de::DeserializeOwned;
use sha2::{Digest, Sha256};
use siesta::ports::*;
use siesta::*;

/// A page of a tenant's runs, newest first, after the cursor `(?4, ?5)` (its creation
/// time and run key).
const LIST_RUNS: &str = "SELECT key, tenant, run_id, status, workflow, created_at, due_at, body FROM runs INDEXED BY runs_by_tenant
    WHERE tenant = ?1 AND ?2 IS NULL AND ?3 IS NULL AND (created_at, key) < (?4, ?5)
    ORDER BY created_at DESC, key DESC LIMIT ?6";
/// [`LIST_RUNS`] in one status.
const LIST_RUNS_BY_STATUS: &str = "SELECT key, tenant, run_id, status, workflow, created_at, due_at, body FROM runs INDEXED BY runs_by_status
    WHERE tenant = ?1 AND status = ?2 AND ?3 IS NULL AND (created_at, key) < (?4, ?5)
    ORDER BY created_at DESC, key DESC LIMIT ?6";
/// [`LIST_RUNS`] of one workflow.
const LIST_RUNS_BY_WORKFLOW: &str = "SELECT key, tenant, run_id, status, workflow, created_at, due_at, body FROM runs INDEXED BY runs_by_workflow
    WHERE tenant = ?1 AND ?2 IS NULL AND workflow = ?3 AND (created_at, key) < (?4, ?5)
    ORDER BY created_at DESC, key DESC LIMIT ?6";
/// [`LIST_RUNS`] in one status and of one workflow.
const LIST_RUNS_BY_STATUS_AND_WORKFLOW: &str =
    "SELECT key, tenant, run_id, status, workflow, created_at, due_at, body FROM runs INDEXED BY runs_by_status_workflow
    WHERE tenant = ?1 AND status = ?2 AND workflow = ?3 AND (created_at, key) < (?4, ?5)
    ORDER BY created_at DESC, key DESC LIMIT ?6";

/// A run and its key by tenant and run id; the columns after the key are those
/// [`stored::RunRow::read`] reads.
const GET_RUN: &str = "SELECT key, tenant, run_id, status, workflow, created_at, due_at, body
    FROM runs WHERE tenant = ?1 AND run_id = ?2";

/// Where a page of a list ends: the last run listed, which the next page starts after.
#[derive(Debug, Clone, PartialEq, Eq)]
enum ListPosition {
    /// Its creation time and run key: `created_at.key` (what cursors hold).
    Keyed { created_at: i64, key: i64 },
    /// Its creation time and run id: `created_at:run_id`, what a cursor handed out
    /// before run keys held; still accepted, so a client paging across the upgrade
    /// goes on where it was.
    ByRunId { created_at: i64, run_id: String },
}

impl ListPosition {
    /// The cursor of a page that ends at the run created at `created_at` with key `key`
    /// (cursors are handed out [`ListPosition::Keyed`] only).
    fn cursor(created_at: i64, key: i64) -> String {
        siesta::cursor::encode(&format!("{created_at}.{key}"))
    }

    fn decode(cursor: &str) -> Result<Self, StoreError> {
        let malformed = || StoreError::Invalid("malformed cursor".into());
        let position = siesta::cursor::decode(cursor)?;
        if let Some((created_at, run_id)) = position.split_once(':') {
            return Ok(ListPosition::ByRunId {
                created_at: created_at.parse().map_err(|_| malformed())?,
                run_id: run_id.to_owned(),
            });
        }
        let (created_at, key) = position.split_once('.').ok_or_else(malformed)?;
        Ok(ListPosition::Keyed {
            created_at: created_at.parse().map_err(|_| malformed())?,
            key: key.parse().map_err(|_| malformed())?,
        })
    }
}

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
            }),
        })
    }

    /// The three ports over this file.
    pub fn backend(&self) -> Backend {
        let me = Arc::new(self.clone());
        Backend {
            store: me.clone(),
            artifacts: me.clone(),
            queue: me,
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
        let conn = {
            let idle = self
                .inner
                .readers
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .pop();
            match idle {
                Some(conn) => conn,
                None => {
                    let conn = Connection::open(&self.inner.path).map_err(sql)?;
                    #[cfg(test)]
                    query_plans::record(&conn);
                    conn.busy_timeout(Duration::from_secs(5)).map_err(sql)?;
                    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
                    conn
                }
            }
        };
        let out = (|| {
            conn.execute_batch("BEGIN").map_err(sql)?;
            let out = f(&conn);
            conn.execute_batch("COMMIT").map_err(sql)?;
            out
        })();
        if conn.is_autocommit() {
            let mut idle = self.inner.readers.lock().unwrap_or_else(|e| e.into_inner());
            if idle.len() < IDLE_READERS {
                idle.push(conn);
            }
        }
        out
    }
}

fn get_run(tx: &Connection, tenant: &str, run_id: &str) -> Result<Option<Run>, StoreError> {
    Ok(get_keyed_run(tx, tenant, run_id)?.map(|(_, run)| run))
}

/// The stored run and its key (the rowid its own rows are stored under).
fn get_keyed_run(
    tx: &Connection,
    tenant: &str,
    run_id: &str,
) -> Result<Option<(i64, Run)>, StoreError> {
    let row: Option<(i64, stored::RunRow)> = tx
        .prepare_cached(GET_RUN)
        .map_err(sql)?
        .query_row(params![tenant, run_id], |r| {
            Ok((r.get(0)?, stored::RunRow::read(r, 1)?))
        })
        .optional()
        .map_err(sql)?;
    row.map(|(key, row)| Ok((key, row.run()?))).transpose()
}

/// Insert `run`; its key.
fn put_run(tx: &Connection, run: &Run) -> Result<i64, StoreError> {
    tx.prepare_cached(
        "INSERT INTO runs (tenant, run_id, status, workflow, created_at, due_at, body, sweep_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    )
    .map_err(sql)?
    .execute(params![run.tenant.0, run.id.0, run.status.as_str(), run.workflow, run.created_at.0, run.due_at.map(|d| d.0), stored::run_body(run)?, run.sweep_at().map(|d| d.0)])
    .map_err(sql)?;
    Ok(tx.last_insert_rowid())
}

/// The indexed columns of a stored run that change over its life.
#[derive(Clone, Copy)]
struct Indexed {
    status: RunStatus,
    due_at: Option<Timestamp>,
    sweep_at: Option<Timestamp>,
}

impl Indexed {
    fn of(run: &Run) -> Self {
        Indexed {
            status: run.status,
            due_at: run.due_at,
            sweep_at: run.sweep_at(),
        }
    }
}

/// Rewrite the stored run, whose indexed columns are `old`, as `run`. Only the columns that changed are set:
/// SQLite rewrites the index entries of every column an `UPDATE` sets, and a run's
/// status and due time change far less often than its body (a checkpoint of a running
/// run changes neither), so most checkpoints touch the row's page and no index.
fn update_run(tx: &Connection, old: Indexed, run: &Run) -> Result<(), StoreError> {
    update_run_as(tx, old, run, &stored::run_body(run)?)
}

/// [`update_run`] with the run already encoded as `body`.
fn update_run_as(tx: &Connection, old: Indexed, run: &Run, body: &str) -> Result<(), StoreError> {
    let due_changed = run.due_at != old.due_at || run.sweep_at() != old.sweep_at;
    let sweep_at = run.sweep_at().map(|d| d.0);
    let changed = match (run.status != old.status, due_changed) {
        (false, false) => tx
            .prepare_cached("UPDATE runs SET body = ?3 WHERE tenant = ?1 AND run_id = ?2")
            .map_err(sql)?
            .execute(params![run.tenant.0, run.id.0, body]),
        (true, false) => tx
            .prepare_cached(
                "UPDATE runs SET body = ?3, status = ?4 WHERE tenant = ?1 AND run_id = ?2",
            )
            .map_err(sql)?
            .execute(params![run.tenant.0, run.id.0, body, run.status.as_str()]),
        (false, true) => tx
            .prepare_cached(
                "UPDATE runs SET body = ?3, due_at = ?4, sweep_at = ?5 WHERE tenant = ?1 AND run_id = ?2",
            )
            .map_err(sql)?
            .execute(params![run.tenant.0, run.id.0, body, run.due_at.map(|d| d.0), sweep_at]),
        (true, true) => tx
            .prepare_cached(
                "UPDATE runs SET body = ?3, status = ?4, due_at = ?5, sweep_at = ?6 WHERE tenant = ?1 AND run_id = ?2",
            )
            .map_err(sql)?
            .execute(params![
                run.tenant.0,
                run.id.0,
                body,
                run.status.as_str(),
                run.due_at.map(|d| d.0),
                sweep_at
            ]),
    }
    .map_err(sql)?;
    if changed != 1 {
        return Err(StoreError::NotFound);
    }
    Ok(())
}

fn insert_run(tx: &Connection, run: &Run, started: &TimelineEvent) -> Result<(), StoreError> {
    if get_run(tx, &run.tenant.0, &run.id.0)?.is_some() {
        return Err(StoreError::AlreadyExists);
    }
    let key = put_run(tx, run)?;
    insert_event(tx, key, run, started)
}

/// Append `event` to the timeline of `run`, whose key is `key`.
fn insert_event(
    tx: &Connection,
    key: i64,
    run: &Run,
    event: &TimelineEvent,
) -> Result<(), StoreError> {
    insert_event_as(tx, key, run, event.seq, &stored::event_body(event)?)
}

/// [`insert_event`] with the event already in its stored form, `body`; a conflict (with
/// the run as stored) when the run's timeline has `seq` already.
fn insert_event_as(
    tx: &Connection,
    key: i64,
    run: &Run,
    seq: u64,
    body: &str,
) -> Result<(), StoreError> {
    let inserted = tx
        .prepare_cached("INSERT INTO timeline (run, seq, body) VALUES (?1, ?2, ?3)")
        .and_then(|mut s| s.execute(params![key, seq as i64, body]));
    match inserted {
        Ok(_) => Ok(()),
        Err(e) if is_constraint(&e) => Err(StoreError::Conflict(
            get_run(tx, &run.tenant.0, &run.id.0)?.map(Box::new),
        )),
        Err(e) => Err(sql(e)),
    }
}

/// Apply a delivery inside a transaction, with the rules of [`RunStore::deliver`].
fn apply_delivery(tx: &Connection, d: &NewDelivery) -> Result<DeliverOutcome, StoreError> {
    let (key, mut run) =
        get_keyed_run(tx, &d.tenant.0, &d.run_id.0)?.ok_or(StoreError::NotFound)?;
    let stored = Indexed::of(&run);
    let duplicate: Option<i64> = tx
        .prepare_cached("SELECT seq FROM deliveries WHERE run = ?1 AND id = ?2")
        .map_err(sql)?
        .query_row(params![key, d.id.0], |r| r.get(0))
        .optional()
        .map_err(sql)?;
    if duplicate.is_some() {
        return Ok(DeliverOutcome::Duplicate);
    }
    if run.status.is_finished() {
        return Err(StoreError::Gone(format!(
            "run {} is {}",
            run.id, run.status
        )));
    }
    if let Some(callback_id) = d.body.callback_id() {
        let mut record = get_callback(tx, callback_id)?
            .filter(|r| r.tenant == d.tenant && r.run_id == d.run_id)
            .ok_or(StoreError::NotFound)?;
        if record.status != CallbackStatus::Open {
            return Err(StoreError::Gone(format!(
                "callback {callback_id} is closed"
            )));
        }
        if let Some(why) = record.too_late(d.received_at) {
            return Err(StoreError::Gone(why));
        }
        if !matches!(d.body, DeliveryBody::CallbackHeartbeat { .. }) {
            record.status = CallbackStatus::Completed;
            put_callback(tx, &record)?;
        } else if record.heartbeat.is_some() {
            record.heartbeat_received(d.received_at);
            put_callback(tx, &record)?;
        }
    }
    run.inbox_seq += 1;
    run.timeline_seq += 1;
    run.version += 1;
    run.updated_at = d.received_at;
    if run.status == RunStatus::Waiting {
        run.due_at = Some(d.received_at);
        run.resend_after = d.resend_after;
    }
    let delivery = Delivery {
        id: d.id.clone(),
        tenant: d.tenant.clone(),
        run_id: d.run_id.clone(),
        seq: run.inbox_seq,
        body: d.body.clone(),
        received_at: d.received_at,
    };
    tx.prepare_cached("INSERT INTO deliveries (run, id, seq, body) VALUES (?1, ?2, ?3, ?4)")
        .map_err(sql)?
        .execute(params![
            key,
            d.id.0,
            delivery.seq as i64,
            to_json(&delivery)?
        ])
        .map_err(sql)?;
    let mut event = d.event.clone();
    event.seq = run.timeline_seq;
    insert_event(tx, key, &run, &event)?;
    update_run(tx, stored, &run)?;
    Ok(DeliverOutcome::Accepted(Box::new(run)))
}

fn get_callback(tx: &Connection, id: &CallbackId) -> Result<Option<CallbackRecord>, StoreError> {
    let body: Option<String> = tx
        .query_row(
            "SELECT body FROM callbacks WHERE callback_id = ?1",
            params![id.0],
            |r| r.get(0),
        )
        .optional()
        .map_err(sql)?;
    body.map(|b| from_json(&b)).transpose()
}

fn put_callback(tx: &Connection, record: &CallbackRecord) -> Result<(), StoreError> {
    put_callback_as(tx, &record.callback_id, &to_json(record)?)
}

/// [`put_callback`] with the record already encoded as `body`.
fn put_callback_as(tx: &Connection, id: &CallbackId, body: &str) -> Result<(), StoreError> {
    tx.prepare_cached("INSERT OR REPLACE INTO callbacks (callback_id, body) VALUES (?1, ?2)")
        .map_err(sql)?
        .execute(params![id.0, body])
        .map_err(sql)?;
    Ok(())
}

/// A checkpoint's records as stored, encoded once on the caller's thread: the writer
/// thread, which every write of the process goes through, only binds them.
struct EncodedCheckpoint {
    run: String,
    journal: Vec<stored::StoredEntry>,
    timeline: Vec<String>,
    callbacks: Vec<String>,
    tool_calls: Vec<String>,
}

impl EncodedCheckpoint {
    /// Encode `cp`, refusing a checkpoint DynamoDB would refuse: more than
    /// [`MAX_TRANSACTION_ITEMS`] items or [`MAX_TRANSACTION_BYTES`] in one transaction
    /// (sizes counted as the core's JSON, which DynamoDB stores), so the dev server
    /// fails exactly where AWS would.
    fn of(cp: &Checkpoint) -> Result<Self, StoreError> {
        let items = cp.item_count();
        if items > MAX_TRANSACTION_ITEMS {
            return Err(StoreError::Invalid(format!(
                "checkpoint: {items} items exceed the {MAX_TRANSACTION_ITEMS} of one transaction"
            )));
        }
        let encoded = EncodedCheckpoint {
            run: stored::run_body(&cp.run)?,
            journal: cp
                .journal
                .iter()
                .map(stored::StoredEntry::of)
                .collect::<Result<_, _>>()?,
            timeline: cp
                .timeline
                .iter()
                .map(stored::event_body)
                .collect::<Result<_, _>>()?,
            callbacks: cp.callbacks.iter().map(to_json).collect::<Result<_, _>>()?,
            tool_calls: cp
                .tool_calls
                .iter()
                .map(to_json)
                .collect::<Result<_, _>>()?,
        };
        let mut bytes = encoded.run.len();
        for entry in &encoded.journal {
            bytes += entry.full_len();
        }
        for body in encoded
            .timeline
            .iter()
            .chain(&encoded.callbacks)
            .chain(&encoded.tool_calls)
        {
            bytes += body.len();
        }
        // The stored forms of the run and its events differ from their JSON by the
        // fields the row's columns hold (strings of any length, escaped at most 6 to
        // a char), field names and nulls: near the limit, count the JSON itself.
        let run_strings = cp.run.tenant.0.len() + cp.run.id.0.len() + cp.run.workflow.len();
        let slack = 512 + 6 * run_strings + 128 * cp.timeline.len();
        if bytes.abs_diff(MAX_TRANSACTION_BYTES) <= slack {
            bytes = bytes - encoded.run.len() + to_json(&cp.run)?.len();
            for (event, body) in cp.timeline.iter().zip(&encoded.timeline) {
                bytes = bytes - body.len() + to_json(event)?.len();
            }
        }
        for (child, started) in &cp.child_runs {
            bytes += to_json(child)?.len() + to_json(started)?.len();
        }
        if let Some(delivery) = &cp.parent_delivery {
            bytes += to_json(delivery)?.len();
        }
        if bytes > MAX_TRANSACTION_BYTES {
            return Err(StoreError::Invalid(format!(
                "checkpoint: {bytes} bytes exceed the {MAX_TRANSACTION_BYTES} of one transaction"
            )));
        }
        Ok(encoded)
    }
}

/// The id under which `schema` is stored, storing it the first time it is seen.
fn schema_id(tx: &Connection, schema: &stored::Schema) -> Result<i64, StoreError> {
    let id: Option<i64> = tx
        .prepare_cached("SELECT id FROM schemas WHERE sha256 = ?1")
        .map_err(sql)?
        .query_row(params![schema.sha256], |r| r.get(0))
        .optional()
        .map_err(sql)?;
    if let Some(id) = id {
        return Ok(id);
    }
    tx.prepare_cached("INSERT INTO schemas (sha256, body) VALUES (?1, ?2)")
        .map_err(sql)?
        .execute(params![schema.sha256, schema.body])
        .map_err(sql)?;
    Ok(tx.last_insert_rowid())
}

fn conflict(current: Run) -> StoreError {
    StoreError::Conflict(Some(Box::new(current)))
}

#[async_trait]
impl RunStore for EmbeddedBackend {
    async fn create_run(&self, run: &Run, started: &TimelineEvent) -> Result<(), StoreError> {
        let (run, started) = (run.clone(), started.clone());
        self.tx_of(run.tenant.0.clone(), move |tx, _| {
            insert_run(tx, &run, &started)
        })
        .await
    }

    async fn create_run_within(
        &self,
        run: &Run,
        started: &TimelineEvent,
        max_unfinished: u64,
    ) -> Result<(), StoreError> {
        let (run, started) = (run.clone(), started.clone());
        self.tx_of(run.tenant.0.clone(), move |tx, _| {
            // An existing run is reported as such, whatever the count (a retried start).
            if get_run(tx, &run.tenant.0, &run.id.0)?.is_some() {
                return Err(StoreError::AlreadyExists);
            }
            let unfinished = unfinished::count(tx, &run.tenant)?;
            if unfinished >= max_unfinished {
                return Err(StoreError::OverQuota(format!(
                    "tenant {} has {unfinished} unfinished runs; its limit is {max_unfinished}",
                    run.tenant
                )));
            }
            insert_run(tx, &run, &started)
        })
        .await
    }

    async fn unfinished_runs(&self, tenant: &TenantId) -> Result<u64, StoreError> {
        let tenant = tenant.clone();
        self.read(move |tx| unfinished::count(tx, &tenant)).await
    }

    async fn get_run(&self, tenant: &TenantId, run_id: &RunId) -> Result<Option<Run>, StoreError> {
        let (tenant, run_id) = (tenant.0.clone(), run_id.0.clone());
        self.read(move |tx| get_run(tx, &tenant, &run_id)).await
    }

    async fn claim(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        claim: &Claim,
    ) -> Result<Run, StoreError> {
        let (tenant, run_id, claim) = (tenant.0.clone(), run_id.0.clone(), claim.clone());
        self.tx_unsynced_of(tenant.clone(), move |tx, _| {
            let mut run = get_run(tx, &tenant, &run_id)?.ok_or(StoreError::NotFound)?;
            let stored = Indexed::of(&run);
            let claimable = matches!(
                run.status,
                RunStatus::Pending | RunStatus::Running | RunStatus::Waiting
            );
            if !claimable || run.is_leased(claim.now) {
                return Err(conflict(run));
            }
            let epoch = run.epoch.next();
            run.epoch = epoch;
            run.lease = Some(Lease {
                owner: claim.owner.clone(),
                expires_at: claim.expires_at,
                epoch,
            });
            run.status = RunStatus::Running;
            run.due_at = Some(claim.expires_at);
            run.resend_after = None;
            run.version += 1;
            run.updated_at = claim.now;
            update_run(tx, stored, &run)?;
            Ok(run)
        })
        .await
    }

    async fn renew_lease(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        epoch: FencingEpoch,
        expires_at: Timestamp,
    ) -> Result<Run, StoreError> {
        let (tenant, run_id) = (tenant.0.clone(), run_id.0.clone());
        self.tx(move |tx, _| {
            let mut run = get_run(tx, &tenant, &run_id)?.ok_or(StoreError::NotFound)?;
            let stored = Indexed::of(&run);
            match &mut run.lease {
                Some(lease) if lease.epoch == epoch => lease.expires_at = expires_at,
                _ => return Err(conflict(run)),
            }
            run.due_at = Some(expires_at);
            run.resend_after = None;
            update_run(tx, stored, &run)?;
            Ok(run)
        })
        .await
    }

    async fn load_history(&self, tenant: &TenantId, run_id: &RunId) -> Result<History, StoreError> {
        let (tenant, run_id) = (tenant.0.clone(), run_id.0.clone());
        self.read(move |tx| {
            let mut history = History::default();
            let mut stmt = tx
                .prepare_cached(
                    "SELECT journal.position, journal.body, schemas.body FROM runs JOIN journal ON journal.run = runs.key
                       LEFT JOIN schemas ON schemas.id = journal.accepts
                      WHERE runs.tenant = ?1 AND runs.run_id = ?2",
                )
                .map_err(sql)?;
            for row in stmt
                .query_map(params![tenant, run_id], |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, Option<String>>(2)?,
                    ))
                })
                .map_err(sql)?
            {
                let (position, body, schema) = row.map_err(sql)?;
                history
                    .journal
                    .push(stored::entry(&position, &body, schema.as_deref())?);
            }
            let mut stmt = tx
                .prepare_cached(
                    "SELECT deliveries.body FROM runs JOIN deliveries ON deliveries.run = runs.key
                      WHERE runs.tenant = ?1 AND runs.run_id = ?2 ORDER BY deliveries.seq",
                )
                .map_err(sql)?;
            for body in stmt
                .query_map(params![tenant, run_id], |r| r.get::<_, String>(0))
                .map_err(sql)?
            {
                history.deliveries.push(from_json(&body.map_err(sql)?)?);
            }
            Ok(history)
        })
        .await
    }

    async fn checkpoint(&self, checkpoint: &Checkpoint) -> Result<(), StoreError> {
        let cp = checkpoint.clone();
        let encoded = EncodedCheckpoint::of(&cp)?;
        self.tx_of(cp.run.tenant.0.clone(), move |tx, _| {
                let (key, current) = get_keyed_run(tx, &cp.run.tenant.0, &cp.run.id.0)?.ok_or(StoreError::NotFound)?;
                let epoch_ok = cp.epoch.is_none_or(|e| current.lease.as_ref().is_some_and(|l| l.epoch == e));
                if current.version != cp.expected_version || !epoch_ok {
                    return Err(conflict(current));
                }
                update_run_as(tx, Indexed::of(&current), &cp.run, &encoded.run)?;
                for (entry, stored) in cp.journal.iter().zip(&encoded.journal) {
                    let schema = stored.schema.as_ref().map(|s| schema_id(tx, s)).transpose()?;
                    tx.prepare_cached("INSERT OR REPLACE INTO journal (run, position, accepts, body) VALUES (?1, ?2, ?3, ?4)")
                        .map_err(sql)?
                        .execute(params![key, entry.position.0, schema, stored.body])
                        .map_err(sql)?;
                }
                for (event, body) in cp.timeline.iter().zip(&encoded.timeline) {
                    insert_event_as(tx, key, &cp.run, event.seq, body).map_err(|e| match e {
                        StoreError::Conflict(_) => conflict(current.clone()),
                        other => other,
                    })?;
                }
                for (record, body) in cp.callbacks.iter().zip(&encoded.callbacks) {
                    put_callback_as(tx, &record.callback_id, body)?;
                }
                for (record, body) in cp.tool_calls.iter().zip(&encoded.tool_calls) {
                    tx.prepare_cached(
                        "INSERT OR REPLACE INTO tool_calls (tenant, key, body) VALUES (?1, ?2, ?3)",
                    )
                    .map_err(sql)?
                    .execute(params![record.tenant.0, record.key.0, body])
                    .map_err(sql)?;
                }
                for (child, started) in &cp.child_runs {
                    insert_run(tx, child, started)?;
                }
                if let Some(delivery) = &cp.parent_delivery {
                    match apply_delivery(tx, delivery) {
                        Ok(_) | Err(StoreError::NotFound) | Err(StoreError::Gone(_)) => {}
                        Err(e) => return Err(e),
                    }
                }
                Ok(())
            })
            .await
    }

    async fn deliver(&self, delivery: &NewDelivery) -> Result<DeliverOutcome, StoreError> {
        let delivery = delivery.clone();
        self.tx_of(delivery.tenant.0.clone(), move |tx, _| {
            apply_delivery(tx, &delivery)
        })
        .await
    }

    async fn get_callback(
        &self,
        callback_id: &CallbackId,
    ) -> Result<Option<CallbackRecord>, StoreError> {
        let id = callback_id.clone();
        self.read(move |tx| get_callback(tx, &id)).await
    }

    async fn get_tool_call(
        &self,
        tenant: &TenantId,
        key: &IdempotencyKey,
    ) -> Result<Option<ToolCallRecord>, StoreError> {
        let (tenant, key) = (tenant.0.clone(), key.0.clone());
        self.read(move |tx| {
            let body: Option<String> = tx
                .query_row(
                    "SELECT body FROM tool_calls WHERE tenant = ?1 AND key = ?2",
                    params![tenant, key],
                    |r| r.get(0),
                )
                .optional()
                .map_err(sql)?;
            body.map(|b| from_json(&b)).transpose()
        })
        .await
    }

    async fn timeline(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        after: u64,
        limit: usize,
    ) -> Result<Vec<TimelineEvent>, StoreError> {
        let (tenant, run_id) = (tenant.0.clone(), run_id.0.clone());
        self.read(move |tx| {
                let mut stmt = tx
                    .prepare_cached("SELECT timeline.seq, timeline.body FROM runs JOIN timeline ON timeline.run = runs.key
                                      WHERE runs.tenant = ?1 AND runs.run_id = ?2 AND timeline.seq > ?3 ORDER BY timeline.seq LIMIT ?4")
                    .map_err(sql)?;
                let rows = stmt
                    .query_map(params![tenant, run_id, after as i64, limit as i64], |r| {
                        Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?))
                    })
                    .map_err(sql)?;
                rows.map(|row| {
                    let (seq, body) = row.map_err(sql)?;
                    stored::event(seq as u64, &body)
                })
                .collect()
            })
            .await
    }

    async fn list_runs(
        &self,
        tenant: &TenantId,
        filter: &RunFilter,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<RunPage, StoreError> {
        let tenant = tenant.0.clone();
        let status = filter.status.map(|s| s.as_str().to_owned());
        let workflow = filter.workflow.clone();
        let after = cursor.map(ListPosition::decode).transpose()?;
        let limit = limit.max(1);
        // One statement per filter, each a range seek on its own index: a filter
        // folded into one statement (`?2 IS NULL OR status = ?2`) can use none, and
        // the page would cost a walk over every run of the tenant it skips.
        let query = match (&status, &workflow) {
            (None, None) => LIST_RUNS,
            (Some(_), None) => LIST_RUNS_BY_STATUS,
            (None, Some(_)) => LIST_RUNS_BY_WORKFLOW,
            (Some(_), Some(_)) => LIST_RUNS_BY_STATUS_AND_WORKFLOW,
        };
        self.read(move |tx| {
            // Before every run: `(created_at, key) < (MAX, MAX)`.
            let (after_created, after_key) = match after {
                None => (i64::MAX, i64::MAX),
                Some(ListPosition::Keyed { created_at, key }) => (created_at, key),
                Some(ListPosition::ByRunId { created_at, run_id }) => {
                    let (key, _) = get_keyed_run(tx, &tenant, &run_id)?
                        .ok_or_else(|| StoreError::Invalid("malformed cursor".into()))?;
                    (created_at, key)
                }
            };
            let mut stmt = tx.prepare_cached(query).map_err(sql)?;
            let rows = stmt
                .query_map(
                    params![
                        tenant,
                        status,
                        workflow,
                        after_created,
                        after_key,
                        (limit + 1) as i64
                    ],
                    |r| Ok((r.get::<_, i64>(0)?, stored::RunRow::read(r, 1)?)),
                )
                .map_err(sql)?;
            let mut runs: Vec<(i64, Run)> = rows
                .map(|row| {
                    let (key, row) = row.map_err(sql)?;
                    Ok((key, row.run()?))
                })
                .collect::<Result<_, StoreError>>()?;
            let next_cursor = if runs.len() > limit {
                runs.truncate(limit);
                runs.last()
                    .map(|(key, run)| ListPosition::cursor(run.created_at.0, *key))
            } else {
                None
            };
            Ok(RunPage {
                runs: runs.into_iter().map(|(_, run)| run).collect(),
                next_cursor,
            })
        })
        .await
    }

    async fn due_runs(&self, before: Timestamp, limit: usize) -> Result<Vec<DueRun>, StoreError> {
        self.read(move |tx| {
                let mut stmt = tx
                    .prepare_cached("SELECT tenant, run_id, due_at, status, sweep_at FROM runs WHERE sweep_at IS NOT NULL AND sweep_at <= ?1 ORDER BY sweep_at LIMIT ?2")
                    .map_err(sql)?;
                let rows = stmt
                    .query_map(params![before.0, limit as i64], |r| {
                        let status: String = r.get(3)?;
                        let status = RunStatus::ALL.into_iter().find(|s| s.as_str() == status).unwrap_or(RunStatus::Pending);
                        let (due_at, sweep_at) = (Timestamp(r.get(2)?), Timestamp(r.get(4)?));
                        let resend_after = (sweep_at > due_at).then_some(sweep_at);
                        Ok(DueRun { tenant: TenantId(r.get(0)?), run_id: RunId(r.get(1)?), due_at, status, resend_after })
                    })
                    .map_err(sql)?;
                rows.map(|r| r.map_err(sql)).collect()
            })
            .await
    }

    async fn set_resend_after(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        due_at: Timestamp,
        resend_after: Option<Timestamp>,
    ) -> Result<(), StoreError> {
        let (tenant, run_id) = (tenant.0.clone(), run_id.0.clone());
        // Bookkeeping: lost in an OS crash, it costs a duplicate wake-up or a margin.
        self.tx_unsynced(move |tx, _| match get_run(tx, &tenant, &run_id)? {
            Some(mut run) if run.due_at == Some(due_at) => {
                let stored = Indexed::of(&run);
                run.resend_after = resend_after;
                update_run(tx, stored, &run)
            }
            _ => Ok(()),
        })
        .await
    }
}

#[async_trait]
impl ArtifactStore for EmbeddedBackend {
    fn location(&self, tenant: &TenantId, run_id: &RunId, sha256: &str) -> String {
        siesta::ports::artifact_location(tenant, run_id, sha256)
    }

    async fn put(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        media_type: &str,
        bytes: Bytes,
    ) -> Result<ArtifactRef, StoreError> {
        let sha256 = hex::encode(Sha256::digest(&bytes));
        let artifact = ArtifactRef {
            location: self.location(tenant, run_id, &sha256),
            sha256,
            size: bytes.len() as u64,
            media_type: media_type.to_owned(),
        };
        let a = artifact.clone();
        self.tx(move |tx, _| {
                // Content-addressed: a second writer of the same content changes nothing.
                tx.execute(
                    "INSERT OR IGNORE INTO artifacts (location, sha256, media_type, size, content) VALUES (?1, ?2, ?3, ?4, ?5)",
                    params![a.location, a.sha256, a.media_type, a.size as i64, bytes.as_ref()],
                )
                .map_err(sql)?;
                Ok(())
            })
            .await?;
        Ok(artifact)
    }

    async fn get(&self, artifact: &ArtifactRef) -> Result<Bytes, StoreError> {
        let location = artifact.location.clone();
        self.read(move |tx| {
            let content: Option<Vec<u8>> = tx
                .query_row(
                    "SELECT content FROM artifacts WHERE location = ?1",
                    params![location],
                    |r| r.get(0),
                )
                .optional()
                .map_err(sql)?;
            content.map(Bytes::from).ok_or(StoreError::NotFound)
        })
        .await
    }
}

/// The queue's lanes: wake-ups caused by the outside world (a delivery, a timer, a
/// child's result, the sweep) are taken before the engine's own (starts,
/// continuations), so an event for a run that has waited for days does not queue
/// behind a burst of starts.
fn lane(reason: WakeReason) -> i64 {
    match reason {
        WakeReason::Delivery | WakeReason::Timer | WakeReason::Child | WakeReason::Sweep => 0,
        WakeReason::Started | WakeReason::Continue => 1,
    }
}

/// The lanes, in the order they are served.
const LANES: [i64; 2] = [0, 1];

/// How much later than a run's `due_at` its wake-up may become visible and still be
/// the one for that due time (the sender computed the delay a moment before sending).
const HOLD_SLACK: Duration = Duration::from_secs(1);

/// The tenant after `after` with a wake-up in `lane`, in tenant order (one index seek).
fn next_tenant(tx: &Connection, lane: i64, after: &str) -> Result<Option<String>, StoreError> {
    tx.prepare_cached(
        "SELECT tenant FROM wake_queue WHERE lane = ?1 AND tenant > ?2 ORDER BY tenant LIMIT 1",
    )
    .map_err(sql)?
    .query_row(params![lane, after], |r| r.get(0))
    .optional()
    .map_err(sql)
}

/// The tenant's oldest visible wake-up in `lane` (one index seek).
fn oldest_visible(
    tx: &Connection,
    lane: i64,
    tenant: &str,
    now: Timestamp,
) -> Result<Option<(i64, String, u32)>, StoreError> {
    tx.prepare_cached(
        "SELECT id, body, receive_count FROM wake_queue
          WHERE lane = ?1 AND tenant = ?2 AND visible_at <= ?3 ORDER BY visible_at, id LIMIT 1",
    )
    .map_err(sql)?
    .query_row(params![lane, tenant, now.0], |r| {
        Ok((r.get(0)?, r.get(1)?, r.get(2)?))
    })
    .optional()
    .map_err(sql)
}

/// Take up to `max` visible wake-ups: the outside-world lane first, and within a lane
/// one wake-up per tenant in turn (round robin, resumed where the last receive
/// stopped), so that one tenant's backlog never stands between another tenant and
/// the queue. A wake-up received `max_receives` times already goes to the dead-letter
/// queue instead.
fn receive_fair(
    tx: &Connection,
    now: Timestamp,
    max: usize,
    visibility: Duration,
    max_receives: u32,
) -> Result<Vec<ReceivedWakeUp>, StoreError> {
    let mut out = Vec::new();
    for lane in LANES {
        let mut turn: String = tx
            .prepare_cached("SELECT tenant FROM queue_turns WHERE lane = ?1")
            .map_err(sql)?
            .query_row(params![lane], |r| r.get(0))
            .optional()
            .map_err(sql)?
            .unwrap_or_default();
        // The first tenant of a round in which nobody had anything visible.
        let mut idle_since: Option<String> = None;
        while out.len() < max {
            let tenant = match next_tenant(tx, lane, &turn)? {
                Some(t) => t,
                None => match next_tenant(tx, lane, "")? {
                    Some(t) => t,
                    None => break,
                },
            };
            if idle_since.as_ref() == Some(&tenant) {
                break;
            }
            match oldest_visible(tx, lane, &tenant, now)? {
                None => {
                    idle_since.get_or_insert_with(|| tenant.clone());
                }
                Some((id, body, count)) => {
                    idle_since = None;
                    if count >= max_receives {
                        tx.execute(
                            "INSERT INTO dead_letter_queue (body, moved_at, visible_at) VALUES (?1, ?2, ?2)",
                            params![body, now.0],
                        )
                        .map_err(sql)?;
                        tx.execute("DELETE FROM wake_queue WHERE id = ?1", params![id])
                            .map_err(sql)?;
                    } else {
                        let receipt = format!("{id}:{}", uuid::Uuid::new_v4());
                        tx.prepare_cached(
                            "UPDATE wake_queue SET receipt = ?1, receive_count = receive_count + 1, visible_at = ?2 WHERE id = ?3",
                        )
                        .map_err(sql)?
                        .execute(params![receipt, now.plus(visibility).0, id])
                        .map_err(sql)?;
                        out.push(ReceivedWakeUp {
                            wake: from_json(&body)?,
                            receipt,
                            receive_count: count + 1,
                        });
                    }
                }
            }
            turn = tenant;
        }
        tx.prepare_cached("INSERT OR REPLACE INTO queue_turns (lane, tenant) VALUES (?1, ?2)")
            .map_err(sql)?
            .execute(params![lane, turn])
            .map_err(sql)?;
    }
    Ok(out)
}

#[async_trait]
impl WakeQueue for EmbeddedBackend {
    async fn send(&self, wake: &WakeUp, delay: Duration) -> Result<(), StoreError> {
        let body = to_json(wake)?;
        let (tenant, run_id, lane) = (
            wake.tenant.0.clone(),
            wake.run_id.0.clone(),
            lane(wake.reason),
        );
        let delay = delay.min(MAX_QUEUE_DELAY);
        self.tx_unsynced_of(tenant.clone(), move |tx, now| {
            tx.prepare_cached(
                "INSERT INTO wake_queue (tenant, run_id, lane, body, visible_at) VALUES (?1, ?2, ?3, ?4, ?5)",
            )
            .map_err(sql)?
            .execute(params![tenant, run_id, lane, body, now.plus(delay).0])
            .map_err(sql)?;
            Ok(())
        })
        .await
    }

    async fn receive(
        &self,
        max: usize,
        visibility: Duration,
    ) -> Result<Vec<ReceivedWakeUp>, StoreError> {
        if max == 0 {
            return Ok(Vec::new());
        }
        let max_receives = self.inner.max_receives;
        self.tx_unsynced(move |tx, now| receive_fair(tx, now, max, visibility, max_receives))
            .await
    }

    async fn ack(&self, receipt: &str) -> Result<(), StoreError> {
        let receipt = receipt.to_owned();
        self.tx_unsynced(move |tx, _| {
            tx.prepare_cached("DELETE FROM wake_queue WHERE receipt = ?1")
                .map_err(sql)?
                .execute(params![receipt])
                .map_err(sql)?;
            Ok(())
        })
        .await
    }

    async fn extend_visibility(
        &self,
        receipt: &str,
        visibility: Duration,
    ) -> Result<(), StoreError> {
        let receipt = receipt.to_owned();
        self.tx_unsynced(move |tx, now| {
            tx.prepare_cached("UPDATE wake_queue SET visible_at = ?1 WHERE receipt = ?2")
                .map_err(sql)?
                .execute(params![now.plus(visibility).0, receipt])
                .map_err(sql)?;
            Ok(())
        })
        .await
    }

    async fn dead_letters(
        &self,
        max: usize,
        visibility: Duration,
    ) -> Result<Vec<DeadLetter>, StoreError> {
        let max = max.min(10);
        self.tx(move |tx, now| {
            let page: Vec<(i64, String)> = {
                let mut stmt = tx
                    .prepare_cached(
                        "SELECT id, body FROM dead_letter_queue WHERE visible_at <= ?1 ORDER BY visible_at, id LIMIT ?2",
                    )
                    .map_err(sql)?;
                let rows = stmt
                    .query_map(params![now.0, max as i64], |r| Ok((r.get(0)?, r.get(1)?)))
                    .map_err(sql)?;
                rows.collect::<Result<_, _>>().map_err(sql)?
            };
            let mut out = Vec::with_capacity(page.len());
            for (id, body) in page {
                let receipt = format!("{id}:{}", uuid::Uuid::new_v4());
                tx.prepare_cached(
                    "UPDATE dead_letter_queue SET receipt = ?1, visible_at = ?2 WHERE id = ?3",
                )
                .map_err(sql)?
                .execute(params![receipt, now.plus(visibility).0, id])
                .map_err(sql)?;
                match from_json(&body) {
                    Ok(wake) => out.push(DeadLetter { wake, receipt }),
                    // Nothing can act on it; dropping it beats handing it out forever.
                    Err(_) => {
                        tx.execute("DELETE FROM dead_letter_queue WHERE id = ?1", params![id])
                            .map_err(sql)?;
                    }
                }
            }
            Ok(out)
        })
        .await
    }

    async fn delete_dead_letter(&self, receipt: &str) -> Result<(), StoreError> {
        let receipt = receipt.to_owned();
        self.tx(move |tx, _| {
            tx.prepare_cached("DELETE FROM dead_letter_queue WHERE receipt = ?1")
                .map_err(sql)?
                .execute(params![receipt])
                .map_err(sql)?;
            Ok(())
        })
        .await
    }

    async fn holds(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        due_at: Timestamp,
    ) -> Result<Option<bool>, StoreError> {
        let (tenant, run_id) = (tenant.0.clone(), run_id.0.clone());
        // A read: the sweep asks this for a page of runs at a time, and the writer is
        // for writes.
        self.read(move |tx| {
            tx.prepare_cached(
                "SELECT EXISTS (SELECT 1 FROM wake_queue WHERE tenant = ?1 AND run_id = ?2
                                  AND (receipt IS NOT NULL OR visible_at <= ?3))",
            )
            .map_err(sql)?
            .query_row(params![tenant, run_id, due_at.plus(HOLD_SLACK).0], |r| {
                r.get::<_, bool>(0)
            })
            .map(Some)
            .map_err(sql)
        })
        .await
    }
}
