//! The run store: durable storage of runs, their journals, deliveries and timelines,
//! and the atomic checkpoint the lease holder writes.

use super::*;

/// A claim request: take the run's lease.
#[derive(Debug, Clone)]
pub struct Claim {
    /// The claiming invocation.
    pub owner: String,
    /// The claim's time (lease expiry is compared against it).
    pub now: Timestamp,
    /// When the new lease lapses.
    pub expires_at: Timestamp,
}

/// The most items one atomic write may touch (DynamoDB's `TransactWriteItems` limit).
/// Every backend refuses a larger [`Checkpoint`] with [`StoreError::Invalid`], so the
/// local backend fails exactly where DynamoDB would; the engine splits what may grow
/// without bound (closing a finished run's callbacks) to stay under it.
pub const MAX_TRANSACTION_ITEMS: usize = 100;

/// The most bytes one atomic write may carry (DynamoDB's 4 MB per transaction).
pub const MAX_TRANSACTION_BYTES: usize = 4 * 1024 * 1024;

/// One atomic checkpoint written by the lease holder: the run as it is after the
/// write, plus everything that changed with it.
///
/// Maps onto one `TransactWriteItems`: the run item (condition: `version =
/// expected_version` and, when `epoch` is set, `lease.epoch = epoch`; without one, a
/// lease written back must still be the stored one), the journal
/// entries, the timeline events (condition: not already there), the callback index
/// records, the tool-call records, child runs (condition: not already there) and the
/// delivery to a parent run. Callers keep it within [`MAX_TRANSACTION_ITEMS`] and
/// [`MAX_TRANSACTION_BYTES`]; a store refuses a larger one with [`StoreError::Invalid`]
/// and writes nothing.
#[derive(Debug, Clone)]
pub struct Checkpoint {
    /// The run after this write; its `version` is `expected_version + 1`.
    pub run: Run,
    /// The version the writer read.
    pub expected_version: u64,
    /// The writer's fencing epoch; `None` for writes made without a lease (the control
    /// plane's), which the version condition guards — and, when `run` carries a lease
    /// (written back as read), the lease's expiry (see [`RunStore::checkpoint`]).
    pub epoch: Option<FencingEpoch>,
    /// Journal entries to insert or replace.
    pub journal: Vec<JournalEntry>,
    /// Timeline events to append; their `seq` run on from the stored `timeline_seq` and
    /// `run.timeline_seq` is the last of them.
    pub timeline: Vec<TimelineEvent>,
    /// Callback index records to insert or replace.
    pub callbacks: Vec<CallbackRecord>,
    /// Tool-call records to insert or replace.
    pub tool_calls: Vec<ToolCallRecord>,
    /// Child runs to create, each with its first timeline event.
    pub child_runs: Vec<(Run, TimelineEvent)>,
    /// A delivery to the parent run, when this run finishes as a child.
    pub parent_delivery: Option<NewDelivery>,
    /// Whether the run's own build writes this (its engine, under the lease). A store
    /// may keep what only the run's own next write replaces (DynamoDB's checkpoint tail,
    /// docs/dynamodb.md): a write made for the run by other code — the control plane's
    /// cancel, resume, resolution, park or upgrade — leaves it as it is. `false` from
    /// [`Checkpoint::new`].
    pub by_own_build: bool,
    /// Whether it moves a finished run back to unfinished (a restart in place,
    /// docs/operations.md): the tenant's count of unfinished runs goes up by one with
    /// it, as with a start. Its condition on `expected_version` keeps two such writes
    /// from both counting. `false` from [`Checkpoint::new`].
    pub reopens: bool,
}

impl Checkpoint {
    /// A checkpoint that writes `run` and nothing else.
    pub fn new(run: Run, expected_version: u64, epoch: Option<FencingEpoch>) -> Self {
        Checkpoint {
            run,
            expected_version,
            epoch,
            journal: Vec::new(),
            timeline: Vec::new(),
            callbacks: Vec::new(),
            tool_calls: Vec::new(),
            child_runs: Vec::new(),
            parent_delivery: None,
            by_own_build: false,
            reopens: false,
        }
    }

    /// How many items the write touches (at most [`MAX_TRANSACTION_ITEMS`]).
    pub fn item_count(&self) -> usize {
        1 + self.journal.len()
            + self.timeline.len()
            + self.callbacks.len()
            + self.tool_calls.len()
            + self.child_runs.len() * 2
            + self.parent_delivery.as_ref().map_or(0, |_| 3)
            // The tenant's count of unfinished runs, when children start or the run
            // may finish (see `RunStore::create_run`).
            + usize::from(
                !self.child_runs.is_empty() || self.run.status.is_finished() || self.reopens,
            )
    }
}

/// A delivery to store: the store assigns its `seq` and its timeline event's `seq`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewDelivery {
    /// Dedup id.
    pub id: DeliveryId,
    /// The owning tenant.
    pub tenant: TenantId,
    /// The run it is for.
    pub run_id: RunId,
    /// What it is.
    pub body: DeliveryBody,
    /// When it was received.
    pub received_at: Timestamp,
    /// The run's [`Run::resend_after`] when the delivery makes it due (a waiting run):
    /// the sender sends its wake-up right after the write, so the sweep need not look
    /// before then — nor much later, as a sender that died between the two leaves the
    /// run to the sweep.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resend_after: Option<Timestamp>,
    /// The timeline event that records it (its `seq` is assigned by the store).
    pub event: TimelineEvent,
}

/// What [`RunStore::deliver`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum DeliverOutcome {
    /// Stored; the run after the write (its `due_at` now, when it was waiting).
    Accepted(Box<Run>),
    /// A delivery with this id was already stored; nothing changed.
    Duplicate,
}

/// What a replay reads: a run's journal and its deliveries. (Called *history* before;
/// that word is now kept for AWS's *execution history*, our timeline.)
#[derive(Debug, Clone, Default)]
pub struct ReplayInput {
    /// Every journal entry.
    pub journal: Vec<JournalEntry>,
    /// Every delivery, in `seq` order.
    pub deliveries: Vec<Delivery>,
}

/// Filters for listing a tenant's runs.
#[derive(Debug, Clone, Default)]
pub struct RunFilter {
    /// Only runs in this status.
    pub status: Option<RunStatus>,
    /// Only runs of this workflow.
    pub workflow: Option<String>,
}

/// One page of runs, newest first.
#[derive(Debug, Clone, Default)]
pub struct RunPage {
    /// The runs.
    pub runs: Vec<Run>,
    /// Pass back to get the next page; `None` on the last page.
    pub next_cursor: Option<String>,
}

/// A run that the due index says needs attention.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DueRun {
    /// The owning tenant.
    pub tenant: TenantId,
    /// The run.
    pub run_id: RunId,
    /// When it fell due.
    pub due_at: Timestamp,
    /// Its status: running means its lease expired, waiting a timer or deadline fell
    /// due or a delivery arrived, pending that its wake-up was lost.
    pub status: RunStatus,
    /// Until when a wake-up sent for it was expected to arrive ([`Run::resend_after`]),
    /// if one was sent; it has passed, or the run would not be due for the sweep.
    pub resend_after: Option<Timestamp>,
    /// The build the run started on ([`Run::build_id`]), when the index carries it
    /// (the embedded store's does; DynamoDB's due index does not project it, and its
    /// sweep wakes every build's runs). `None` reads as "any build's": a sweep that
    /// leaves other builds' runs alone ([`crate::OtherBuilds::Leave`]) wakes it.
    pub build_id: Option<String>,
}

impl DueRun {
    /// When the sweep looks at it: the later of `due_at` and `resend_after`.
    pub fn sweep_at(&self) -> Timestamp {
        self.resend_after
            .map_or(self.due_at, |r| r.max(self.due_at))
    }
}

/// A build as one tenant's runs know it ([`RunStore::builds`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BuildSummary {
    /// The build ([`Run::build_id`]).
    pub build_id: String,
    /// When the tenant's first run on this build was created.
    pub first_seen: Timestamp,
    /// When the tenant's latest run on this build was created.
    pub last_seen: Timestamp,
    /// How many of the tenant's runs on this build are not finished, by status; a
    /// status with none is left out, and a build whose runs all finished has none.
    pub unfinished: std::collections::BTreeMap<RunStatus, u64>,
}

/// A finished run [`RunStore::reap_due`] removed for good.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReapedRun {
    /// The owning tenant.
    pub tenant: TenantId,
    /// The run.
    pub run_id: RunId,
    /// The workflow it ran.
    pub workflow: String,
}

/// How many hold and wait for one key of one concurrency limit ([`RunStore::limit_usage`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LimitUsage {
    /// The limit's name.
    pub limit: String,
    /// The key (`""` for a limit without one).
    pub key: String,
    /// Runs holding a slot.
    pub holders: u64,
    /// Runs queued for one.
    pub waiters: u64,
}

/// A step attempt's claim on a slot of a step limit ([`RunStore::take_step_slot`]):
/// the run, the step's position and the fencing epoch of the invocation running it. A
/// holder whose run's lease moved to another epoch, or lapsed, holds nothing any more.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepSlotHolder {
    /// The run's tenant.
    pub tenant: TenantId,
    /// The run.
    pub run_id: RunId,
    /// The step's position.
    pub position: Position,
    /// The epoch of the lease the attempt runs under.
    pub epoch: FencingEpoch,
}

/// What [`RunStore::take_step_slot`] gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepSlot {
    /// The attempt holds a slot: it may run.
    Held,
    /// Every slot is held: the attempt waits in the key's line, at this place (1:
    /// next).
    Queued {
        /// Its place in line.
        position: u64,
    },
}

/// When a step attempt under a rate limit may run ([`RunStore::take_rate_turn`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RateTurn {
    /// Now: its turn has come (and is used).
    Now,
    /// At this instant: its turn is kept for it until then.
    At(Timestamp),
}

/// Which run the starts under one key of a debounce join now
/// ([`RunStore::get_debounce_entry`]), with the entry's version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DebounceEntry {
    /// The run: once it began (or if it is missing) the next start points the entry
    /// at a new one.
    pub run_id: RunId,
    /// The stored entry's version: each write adds one.
    pub version: u64,
}

/// A run a write made due so that it takes the step slot handed to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandedSlot {
    /// The run's tenant.
    pub tenant: TenantId,
    /// The run.
    pub run_id: RunId,
}

/// Durable storage of runs and everything that belongs to them.
#[async_trait]
pub trait RunStore: Send + Sync + 'static {
    /// Create `run` with its first timeline event (`seq` 1).
    /// One `TransactWriteItems`, conditioned on the run not existing:
    /// [`StoreError::AlreadyExists`] if it does.
    ///
    /// Every run created (by this, by [`RunStore::create_run_within`] or as a child in a
    /// [`Checkpoint`]) counts among its tenant's unfinished runs until the checkpoint that
    /// moves it to a finished status ([`RunStatus::is_finished`]), which releases it in
    /// the same atomic write — once, since a second such checkpoint of the same run
    /// finds it finished already. See [`RunStore::unfinished_runs`].
    async fn create_run(&self, run: &Run, started: &TimelineEvent) -> Result<(), StoreError>;

    /// [`RunStore::create_run`], only while the run's tenant has fewer than
    /// `max_unfinished` unfinished runs: otherwise [`StoreError::OverQuota`], and nothing
    /// is written. Atomic with the create: of two creates racing for the last slot,
    /// exactly one succeeds. On DynamoDB, a counter item per tenant updated in the
    /// create's `TransactWriteItems` (condition: below the limit) and in the finishing
    /// checkpoint's; never a count by query.
    async fn create_run_within(
        &self,
        run: &Run,
        started: &TimelineEvent,
        max_unfinished: u64,
    ) -> Result<(), StoreError>;

    /// Create `run` under its concurrency limits ([`Run::limits`]), taking its slots by
    /// the rule of [`crate::flow::slots`] in the same atomic write: returns the run as
    /// stored — as given (pending) when it holds every slot, else
    /// [`RunStatus::Queued`] with [`Run::queued`] saying where it waits, `due_at` and
    /// `resend_after` `None` (a queued run is not due: the write that frees its slot
    /// makes it so). Within `max_unfinished` as [`RunStore::create_run_within`], when
    /// given; errors as [`RunStore::create_run`]. A run without limits is created as
    /// [`RunStore::create_run`] creates it.
    ///
    /// Each slot taken or line joined is one more item in the create's transaction (on
    /// DynamoDB a counter item per key of a limit, conditioned on its count, and an
    /// item per waiter). Default: [`StoreError::Unsupported`] for a run with limits.
    async fn admit_run(
        &self,
        run: &Run,
        started: &TimelineEvent,
        max_unfinished: Option<u64>,
    ) -> Result<Run, StoreError> {
        if !run.limits.is_empty() {
            return Err(StoreError::Unsupported(
                "concurrency limits on this backend".to_owned(),
            ));
        }
        match max_unfinished {
            Some(max) => self.create_run_within(run, started, max).await?,
            None => self.create_run(run, started).await?,
        }
        Ok(run.clone())
    }

    /// Every key of `tenant`'s concurrency limits that a run holds or waits for, by
    /// limit and key. Bounded by the keys in use, never by the runs. Default: none (a
    /// backend without limits).
    async fn limit_usage(&self, tenant: &TenantId) -> Result<Vec<LimitUsage>, StoreError> {
        let _ = tenant;
        Ok(Vec::new())
    }

    /// The place of the queued run waiting at `at` in its line: 1 when it is next.
    /// Default: [`StoreError::Unsupported`].
    async fn queue_position(&self, tenant: &TenantId, at: &QueuedAt) -> Result<u64, StoreError> {
        let _ = (tenant, at);
        Err(StoreError::Unsupported(
            "concurrency limits on this backend".to_owned(),
        ))
    }

    /// Take a slot of the step limit `key` (at most `max` attempts in flight across the
    /// deployment) for `holder`'s attempt, by the rule of [`crate::flow::slots`] with
    /// holders that lapse: first every holder that no longer holds is let go — one whose
    /// run's lease is at another epoch or expired at `now` (its attempt crashed or was
    /// abandoned), or a slot handed to a waiting run that did not take it by its grant's
    /// end — and freed slots go to the first in line. Then `holder` holds when a slot
    /// was handed to its run's step, when it is first in line and a slot is free, or
    /// when no one waits and a slot is free; otherwise it joins the line (once: a holder
    /// already in line keeps its place) and is [`StepSlot::Queued`].
    ///
    /// A slot handed to a waiting run is granted until `now` + `grant_for`; the run is
    /// made due at `now` when it waits (its `version` + 1) and returned, for the caller
    /// to send its wake-up. One atomic write. Default: [`StoreError::Unsupported`].
    async fn take_step_slot(
        &self,
        key: &str,
        max: u32,
        holder: &StepSlotHolder,
        now: Timestamp,
        grant_for: std::time::Duration,
    ) -> Result<(StepSlot, Vec<HandedSlot>), StoreError> {
        let _ = (key, max, holder, now, grant_for);
        Err(StoreError::Unsupported(
            "step concurrency limits on this backend".to_owned(),
        ))
    }

    /// Give back `holder`'s slot of the step limit `key` (its attempt ended): the slot
    /// goes to the first in line, as [`RunStore::take_step_slot`] hands one. The runs
    /// made due. Giving back a slot not held does nothing. Default: nothing to give
    /// back.
    async fn give_back_step_slot(
        &self,
        key: &str,
        max: u32,
        holder: &StepSlotHolder,
        now: Timestamp,
        grant_for: std::time::Duration,
    ) -> Result<Vec<HandedSlot>, StoreError> {
        let _ = (key, max, holder, now, grant_for);
        Ok(Vec::new())
    }

    /// The turn of `holder`'s attempt under the rate limit `key`, whose turns are
    /// `interval` apart across the deployment (N per period: `interval` = period / N).
    /// An attempt that was given a turn before (the same run and step) gets the same
    /// one; otherwise its turn is the later of `now` and the key's last turn plus
    /// `interval`, and becomes the key's last. A turn at or before `now` is used
    /// ([`RateTurn::Now`]) and forgotten; a later one is kept for the attempt
    /// ([`RateTurn::At`]) so that it goes first when it comes back then. One atomic
    /// write. Default: [`StoreError::Unsupported`].
    async fn take_rate_turn(
        &self,
        key: &str,
        interval: std::time::Duration,
        holder: &StepSlotHolder,
        now: Timestamp,
    ) -> Result<RateTurn, StoreError> {
        let _ = (key, interval, holder, now);
        Err(StoreError::Unsupported(
            "step rate limits on this backend".to_owned(),
        ))
    }

    /// The entry of `tenant`'s debounce `name` for `key`: which run its starts join
    /// now; `None` when none is stored (or it was forgotten past its `keep_until`). One
    /// strongly consistent read. Default: [`StoreError::Unsupported`].
    async fn get_debounce_entry(
        &self,
        tenant: &TenantId,
        name: &str,
        key: &str,
    ) -> Result<Option<DebounceEntry>, StoreError> {
        let _ = (tenant, name, key);
        Err(StoreError::Unsupported(
            "debounces on this backend".to_owned(),
        ))
    }

    /// Point the entry of `tenant`'s debounce `name` for `key` at `run_id`, if the
    /// stored entry is at version `expected` (0: none stored): answers the version
    /// written (`expected + 1`), or [`StoreError::Conflict`] (with no run) when another
    /// write came first. The store may forget the entry after `keep_until` (by then its
    /// run takes no more starts). One conditional write. Default:
    /// [`StoreError::Unsupported`].
    async fn put_debounce_entry(
        &self,
        tenant: &TenantId,
        name: &str,
        key: &str,
        run_id: &RunId,
        expected: u64,
        keep_until: Timestamp,
    ) -> Result<u64, StoreError> {
        let _ = (tenant, name, key, run_id, expected, keep_until);
        Err(StoreError::Unsupported(
            "debounces on this backend".to_owned(),
        ))
    }

    /// Write `job` (a bulk action's job, see [`ActionJob`]) whole, if the stored record
    /// of `job.tenant` and `job.id` is at version `expected` (0: none stored): answers
    /// the version written (`expected + 1`), or [`StoreError::Conflict`] (with no run)
    /// when another write came first, and nothing is written. The job's own `version`
    /// field is not read. The same write keeps the deployment's list of active jobs
    /// ([`RunStore::active_action_jobs`]): the job is on it while its status is
    /// [`ActionJobStatus::Running`], off it once finished. A finished job may be
    /// forgotten after its [`ActionJob::keep_until`]. Default:
    /// [`StoreError::Unsupported`].
    async fn put_action_job(&self, job: &ActionJob, expected: u64) -> Result<u64, StoreError> {
        let _ = (job, expected);
        Err(StoreError::Unsupported(
            "bulk actions on this backend".to_owned(),
        ))
    }

    /// The job `id` of `tenant`, with its stored version; `None` when there is none.
    /// One strongly consistent read. Default: [`StoreError::Unsupported`].
    async fn get_action_job(
        &self,
        tenant: &TenantId,
        id: &str,
    ) -> Result<Option<ActionJob>, StoreError> {
        let _ = (tenant, id);
        Err(StoreError::Unsupported(
            "bulk actions on this backend".to_owned(),
        ))
    }

    /// `tenant`'s jobs, newest first (by id, which is time-ordered), at most `limit`.
    /// One query of the tenant's jobs; another tenant's are never listed. Default:
    /// [`StoreError::Unsupported`].
    async fn list_action_jobs(
        &self,
        tenant: &TenantId,
        limit: usize,
    ) -> Result<Vec<ActionJob>, StoreError> {
        let _ = (tenant, limit);
        Err(StoreError::Unsupported(
            "bulk actions on this backend".to_owned(),
        ))
    }

    /// The active jobs of the whole deployment (every tenant's jobs that are
    /// [`ActionJobStatus::Running`]), at most `limit`: what the sweep looks at to
    /// resume a job whose wake-up was lost. Costs what the active jobs number, never
    /// what the finished ones do. Default: none (a backend without bulk actions has no
    /// jobs).
    async fn active_action_jobs(&self, limit: usize) -> Result<Vec<ActiveActionJob>, StoreError> {
        let _ = limit;
        Ok(Vec::new())
    }

    /// How many of `tenant`'s runs are not finished, as the store counts them for
    /// [`RunStore::create_run_within`].
    async fn unfinished_runs(&self, tenant: &TenantId) -> Result<u64, StoreError>;

    /// The run, if it exists for this tenant. One `GetItem`.
    async fn get_run(&self, tenant: &TenantId, run_id: &RunId) -> Result<Option<Run>, StoreError>;

    /// Take the run's lease. One conditional `UpdateItem`: the run is pending, running
    /// or waiting, and has no lease live at `claim.now`. Sets the lease (owner, expiry,
    /// epoch + 1), `epoch` + 1, status running, `due_at` = the lease expiry (so a crashed
    /// holder is found by the sweep), clears `resend_after` (the wake-up arrived),
    /// `version` + 1; returns the run after the write.
    /// [`StoreError::Conflict`] with the current run if a condition fails,
    /// [`StoreError::NotFound`] if there is no run.
    async fn claim(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        claim: &Claim,
    ) -> Result<Run, StoreError>;

    /// Extend the lease granted with `epoch` until `expires_at` (and `due_at` with it),
    /// without changing `version`. One conditional `UpdateItem` on `lease.epoch`;
    /// returns the run after the write, or [`StoreError::Conflict`] if the lease was lost.
    async fn renew_lease(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        epoch: FencingEpoch,
        expires_at: Timestamp,
    ) -> Result<Run, StoreError>;

    /// The run's journal and deliveries. One `Query` (paged).
    async fn load_replay_input(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
    ) -> Result<ReplayInput, StoreError>;

    /// [`RunStore::load_replay_input`] of `run` as this store's [`RunStore::claim`] just
    /// returned it: the replay that follows a claim. An adapter that kept what the
    /// claim's write returned may start from it rather than read the run again; the
    /// replay input is then as of the claimed version or later, which is all a replay under
    /// that claim can write over. Default: [`RunStore::load_replay_input`].
    async fn load_claimed_replay_input(&self, run: &Run) -> Result<ReplayInput, StoreError> {
        self.load_replay_input(&run.tenant, &run.id).await
    }

    /// The run's journal alone, without its deliveries (which grow with every event
    /// and message): what an event delivery checks its payload against. One `Query`
    /// (paged) of the journal's keys. Default: [`RunStore::load_replay_input`]'s journal.
    async fn load_journal(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
    ) -> Result<Vec<JournalEntry>, StoreError> {
        Ok(self.load_replay_input(tenant, run_id).await?.journal)
    }

    /// Write a checkpoint atomically; see [`Checkpoint`]. [`StoreError::Conflict`] with
    /// the current run when the version or epoch condition fails or a timeline `seq`
    /// exists already, or when a checkpoint without an epoch (the control plane's) that
    /// writes a lease back as it read it finds the run's lease expiring at another time:
    /// a renewal since the read moves it without a new version, and must not be undone;
    /// [`StoreError::AlreadyExists`] when a child run exists already;
    /// in every error case nothing is written. The parent delivery follows the rules of
    /// [`RunStore::deliver`], except that a missing or finished parent or a duplicate id
    /// skips it silently instead of failing the checkpoint.
    async fn checkpoint(&self, checkpoint: &Checkpoint) -> Result<(), StoreError>;

    /// [`RunStore::checkpoint`], answering which runs the write admitted. A checkpoint
    /// that finishes a run with concurrency limits ([`Run::limits`]) — or cancels a
    /// queued one — frees the slots it held in the same atomic write and hands each to
    /// the first in its line by the rule of [`crate::flow::slots`]; a run handed its
    /// last slot becomes pending and due at the checkpoint's `run.updated_at`
    /// (`version` + 1), and is among those returned, so the caller sends its wake-up at
    /// once (one lost is healed by the sweep: the run is due). Every checkpoint frees
    /// slots so, whichever of the two methods wrote it. Default:
    /// [`RunStore::checkpoint`], admitting none.
    async fn checkpoint_admitting(&self, checkpoint: &Checkpoint) -> Result<Vec<Run>, StoreError> {
        self.checkpoint(checkpoint).await?;
        Ok(Vec::new())
    }

    /// Store a delivery. One `TransactWriteItems`: the delivery (condition: its id is new
    /// for this run), its timeline event, and the run (`inbox_seq` + 1, `timeline_seq` +
    /// 1, `version` + 1, `due_at` = `received_at` and `resend_after` = the delivery's when
    /// waiting, both unchanged otherwise;
    /// condition: the version read). Checks, in this order: [`StoreError::NotFound`] if
    /// the run does not exist; [`DeliverOutcome::Duplicate`] (nothing changes) if the id
    /// was stored before — so a retried webhook is acknowledged even after its callback
    /// closed; [`StoreError::Gone`] if the run is finished, or, for a child's outcome
    /// whose `parent_created_at` is not the run's creation time, if the run is a later
    /// one under its parent's id; for callback bodies
    /// [`StoreError::NotFound`] if the callback record is missing or belongs to another
    /// run, [`StoreError::Gone`] if it is not open or its deadline is at or before
    /// `received_at` (checked in the write's condition, so a completion after the
    /// deadline is refused even before the run records the timeout). Success and
    /// failure close the record;
    /// heartbeats leave it open. A lost race on the version is retried inside the
    /// adapter (re-read, re-condition), never surfaced as [`StoreError::Conflict`].
    async fn deliver(&self, delivery: &NewDelivery) -> Result<DeliverOutcome, StoreError>;

    /// A callback's index record. One `GetItem`.
    async fn get_callback(
        &self,
        callback_id: &CallbackId,
    ) -> Result<Option<CallbackRecord>, StoreError>;

    /// A tool-call record by its idempotency key. One `GetItem`.
    async fn get_tool_call(
        &self,
        tenant: &TenantId,
        key: &IdempotencyKey,
    ) -> Result<Option<ToolCallRecord>, StoreError>;

    /// Timeline events with `seq` > `after`, oldest first, at most `limit`.
    async fn timeline(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        after: u64,
        limit: usize,
    ) -> Result<Vec<TimelineEvent>, StoreError>;

    /// The tenant's runs, newest first (ties broken by id), filtered, one page of at
    /// most `limit`. One `Query` on a tenant-keyed index; a filtered page may hold fewer
    /// than `limit` runs (DynamoDB applies the limit before the filter), so callers
    /// follow `next_cursor` until it is `None`.
    async fn list_runs(
        &self,
        tenant: &TenantId,
        filter: &RunFilter,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<RunPage, StoreError>;

    /// The builds that started `tenant`'s runs (a run records its build,
    /// [`Run::build_id`]; runs that record none are any build's and not counted), by
    /// build id, each with its unfinished runs by status and the creation times of its
    /// first and latest run. Tenant-scoped like every read of the control API: a
    /// tenant sees the builds its own runs started on and counts of its own runs,
    /// never another tenant's; an operator's view of a deployment asks per tenant.
    /// Costs what the tenant's builds and unfinished runs number, never what its
    /// finished runs do: a record per tenant and build, and an index of unfinished
    /// runs by build (on DynamoDB a query, never a scan). A run counts on the build it
    /// records; a checkpoint that moves it to another (an upgrade) carries a
    /// [`EventType::RunUpgraded`] event, which tells a store that keeps a record per
    /// build to note the new one.
    async fn builds(&self, tenant: &TenantId) -> Result<Vec<BuildSummary>, StoreError>;

    /// Runs the sweep should look at by `before`: their `due_at` and, when a wake-up was
    /// sent for them, their `resend_after` are at or before `before` ([`Run::sweep_at`]);
    /// earliest sweep time first, at most `limit`. Served by the sparse due index, keyed
    /// by the sweep time (a `Query` per shard), never a scan: runs whose wake-up is on
    /// its way cost nothing to skip, however many there are.
    async fn due_runs(&self, before: Timestamp, limit: usize) -> Result<Vec<DueRun>, StoreError>;

    /// Set the run's `resend_after` (`None`: clear it), if it is still due at `due_at`
    /// (the caller saw it so); otherwise, or when the run does not exist, do nothing.
    /// Neither `version` nor the timeline changes: this is the sweep's bookkeeping, not
    /// the run's progress. One conditional `UpdateItem`. The sweep sets it when it has
    /// sent a wake-up; the engine clears it when the send that followed a write failed,
    /// so the next sweep sends it again.
    async fn set_resend_after(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        due_at: Timestamp,
        resend_after: Option<Timestamp>,
    ) -> Result<(), StoreError>;

    /// Look at up to `limit` finished runs (completed, failed, cancelled) that are due
    /// to be looked at by `now`, earliest first, and do what `rules` say of each
    /// ([`crate::retention::RetentionRules::verdict`], counted from when it finished):
    /// remove it for good with everything that is its own — the run (and so its
    /// `Idempotency-Key`, which names it), its journal, timeline, deliveries and their
    /// dedup records, callback and tool-call records, stream chunks, queued wake-ups
    /// and the artifacts stored under it; or put it back, to be looked at when its
    /// retention ends (for ever: never). A finished run is due to be looked at as soon
    /// as it finishes — or, once [`RunStore::rearm_reaping`] has given the store its
    /// rules, at the end of its retention under them, so it is read once, when it goes;
    /// one put back is not read again before its time, so a run kept longer than the
    /// rest costs nothing meanwhile. `rules` are those last given to
    /// [`RunStore::rearm_reaping`] (give it new ones when they change).
    ///
    /// What it never touches: a run that is not finished (pending, running, waiting
    /// or parked), however old; and a finished child run whose parent still exists —
    /// the parent may still read the child's outcome and the values it offloaded, so
    /// the child is looked at again after [`crate::retention::PARENT_RECHECK`]. Each
    /// run goes in one atomic write, whole or not at all, so a caller stopped half-way
    /// (a crash, a dropped future) leaves no run half-removed and the next call goes on
    /// with what is left. Bounded: one call reads at most `limit` runs, never a scan of
    /// the runs that are not due; the report's `more` says the page was full.
    ///
    /// Default: [`StoreError::Unsupported`] (a backend that cannot remove runs this
    /// way; the DynamoDB one has its own reaper, run by the sweep function, which
    /// decides by the same rules).
    async fn reap_due(
        &self,
        rules: &crate::retention::RetentionRules,
        now: Timestamp,
        limit: usize,
    ) -> Result<crate::retention::ReapReport, StoreError> {
        let _ = (rules, now, limit);
        Err(StoreError::Unsupported(
            "removing finished runs past their retention".to_owned(),
        ))
    }

    /// Called once when a server starts with its `rules`: if they differ from the rules
    /// of the last call, every finished run not due yet (put back, or due at its end
    /// under the last rules) is due at `now` again, to be decided by the new rules — so
    /// a retention shortened since (a new `--retention`) applies at once rather than at
    /// the old end. A store may keep `rules` to make each run that finishes from then
    /// on due at its end rather than at its finish. Default: nothing to do (a backend
    /// without [`RunStore::reap_due`]).
    async fn rearm_reaping(
        &self,
        rules: &crate::retention::RetentionRules,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        let _ = (rules, now);
        Ok(())
    }
}
