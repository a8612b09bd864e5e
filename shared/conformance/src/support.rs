//! Builders and probes shared by the cases.

use std::fmt::Debug;
use std::time::Duration;

use siesta::ports::*;
use siesta::*;

use crate::Harness;

/// The lease the cases take when they do not care how long it is.
pub(crate) const LEASE: Duration = Duration::from_secs(60);

/// A tenant no other case (and no other run of this case) uses.
pub(crate) fn tenant() -> TenantId {
    TenantId(format!("conf-{}", uuid::Uuid::new_v4().simple()))
}

/// A fresh run id.
pub(crate) fn run_id() -> RunId {
    RunId::generate()
}

/// A fresh id with a readable prefix.
pub(crate) fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", uuid::Uuid::new_v4().simple())
}

/// An inline JSON payload.
pub(crate) fn json(v: serde_json::Value) -> Payload {
    Payload::Inline(v)
}

/// A timeline event of `event_type` at `at`, with its `seq`.
pub(crate) fn event(seq: u64, at: Timestamp, event_type: EventType) -> TimelineEvent {
    TimelineEvent {
        seq,
        at,
        event_type,
        sub_type: None,
        id: None,
        parent_id: None,
        name: None,
        details: serde_json::Value::Null,
    }
}

/// An operation event with every optional field set, so round trips check them all.
pub(crate) fn op_event(
    at: Timestamp,
    event_type: EventType,
    sub_type: SubType,
    position: &str,
    details: serde_json::Value,
) -> TimelineEvent {
    TimelineEvent {
        seq: 0,
        at,
        event_type,
        sub_type: Some(sub_type),
        id: Some(position.to_owned()),
        parent_id: Some("parent#0".to_owned()),
        name: Some(position.split('#').next().unwrap_or(position).to_owned()),
        details,
    }
}

/// A new pending run of `workflow` for `tenant`, as the engine would start it: due now,
/// its `timeline_seq` at its first event.
pub(crate) fn new_run(h: &Harness, tenant: &TenantId, workflow: &str) -> Run {
    let mut run = Run::new(
        tenant.clone(),
        run_id(),
        workflow,
        json(serde_json::json!({"order": "o-1", "amount": 42, "items": ["a", "b"]})),
        h.now(),
    );
    run.timeline_seq = 1;
    run
}

/// The `ExecutionStarted` event that goes with a new run.
pub(crate) fn started(run: &Run) -> TimelineEvent {
    let mut e = event(1, run.created_at, EventType::ExecutionStarted);
    e.name = Some(run.workflow.clone());
    e
}

/// Create `run` with its first event, asserting it worked.
pub(crate) async fn create_run(h: &Harness, run: &Run) {
    h.backend
        .store
        .create_run(run, &started(run))
        .await
        .unwrap_or_else(|e| panic!("create_run {}: {e}", run.id));
}

/// Create a fresh pending run for `tenant`.
pub(crate) async fn create(h: &Harness, tenant: &TenantId) -> Run {
    let run = new_run(h, tenant, "conformance");
    create_run(h, &run).await;
    run
}

/// The claim request of `owner` at the harness's now, for `lease`.
pub(crate) fn claim_for(h: &Harness, owner: &str, lease: Duration) -> Claim {
    let now = h.now();
    Claim {
        owner: owner.to_owned(),
        now,
        expires_at: now.plus(lease),
    }
}

/// Claim `run` for `owner`, asserting it worked.
pub(crate) async fn claim(h: &Harness, run: &Run, owner: &str, lease: Duration) -> Run {
    h.backend
        .store
        .claim(&run.tenant, &run.id, &claim_for(h, owner, lease))
        .await
        .unwrap_or_else(|e| panic!("claim {} by {owner}: {e}", run.id))
}

/// Renew the lease `held` (a run as claimed) holds until `until`, asserting it worked.
pub(crate) async fn renew(h: &Harness, held: &Run, until: Timestamp) -> Run {
    h.backend
        .store
        .renew_lease(&held.tenant, &held.id, held.epoch, until)
        .await
        .expect("renew with the holder's epoch")
}

/// A checkpoint over `current` (as read): the run with its version bumped, `updated_at`
/// now and `mutate` applied, guarded by `epoch`; written by the run's own build when
/// under a lease.
pub(crate) fn checkpoint_over(
    h: &Harness,
    current: &Run,
    epoch: Option<FencingEpoch>,
    mutate: impl FnOnce(&mut Run),
) -> Checkpoint {
    let mut run = current.clone();
    run.version += 1;
    run.updated_at = h.now();
    mutate(&mut run);
    let mut cp = Checkpoint::new(run, current.version, epoch);
    // A write under the lease is the engine's, the run's own build; one without, the
    // control plane's.
    cp.by_own_build = epoch.is_some();
    cp
}

/// Append `event` to the checkpoint, numbering it after the run's last event.
pub(crate) fn push_event(cp: &mut Checkpoint, mut event: TimelineEvent) {
    cp.run.timeline_seq += 1;
    event.seq = cp.run.timeline_seq;
    cp.timeline.push(event);
}

/// Write `cp`, asserting it worked.
pub(crate) async fn write(h: &Harness, cp: &Checkpoint) {
    h.backend
        .store
        .checkpoint(cp)
        .await
        .unwrap_or_else(|e| panic!("checkpoint of {} at v{}: {e}", cp.run.id, cp.run.version));
}

/// Bring a fresh run to `waiting` as an engine would (claim, then suspend with a
/// timer an hour away); the run after the write.
pub(crate) async fn waiting_run(h: &Harness, tenant: &TenantId) -> Run {
    let run = create(h, tenant).await;
    let claimed = claim(h, &run, "suspender", LEASE).await;
    let mut cp = checkpoint_over(h, &claimed, Some(claimed.epoch), |r| {
        r.status = RunStatus::Waiting;
        r.lease = None;
        r.due_at = Some(h.now().plus(Duration::from_secs(3600)));
    });
    push_event(
        &mut cp,
        op_event(
            h.now(),
            EventType::WaitStarted,
            SubType::Wait,
            "nap#0",
            serde_json::Value::Null,
        ),
    );
    write(h, &cp).await;
    cp.run
}

/// Move `current` to the finished (or parked) `status` without a lease, as a
/// cancellation would; the run after the write.
pub(crate) async fn finish(h: &Harness, current: &Run, status: RunStatus) -> Run {
    let mut cp = checkpoint_over(h, current, None, |r| {
        r.status = status;
        r.lease = None;
        r.due_at = None;
        if status == RunStatus::Completed {
            r.output = Some(json(serde_json::json!("done")));
        } else {
            r.error = Some(ErrorInfo::new("Stopped", "stopped by the suite", false));
        }
    });
    let event_type = match status {
        RunStatus::Completed => EventType::ExecutionSucceeded,
        RunStatus::Cancelled => EventType::ExecutionCancelled,
        RunStatus::Parked => EventType::RunParked,
        _ => EventType::ExecutionFailed,
    };
    push_event(&mut cp, event(0, h.now(), event_type));
    write(h, &cp).await;
    cp.run
}

/// The run as stored, which must exist.
pub(crate) async fn get(h: &Harness, tenant: &TenantId, run_id: &RunId) -> Run {
    h.backend
        .store
        .get_run(tenant, run_id)
        .await
        .unwrap_or_else(|e| panic!("get_run {run_id}: {e}"))
        .unwrap_or_else(|| panic!("run {run_id} is missing"))
}

/// Every timeline event of the run.
pub(crate) async fn timeline(h: &Harness, tenant: &TenantId, run_id: &RunId) -> Vec<TimelineEvent> {
    h.backend
        .store
        .timeline(tenant, run_id, 0, 10_000)
        .await
        .unwrap_or_else(|e| panic!("timeline of {run_id}: {e}"))
}

/// Everything stored about one run, to show that a refused write changed nothing.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Snapshot {
    pub(crate) run: Option<Run>,
    pub(crate) journal: Vec<JournalEntry>,
    pub(crate) deliveries: Vec<Delivery>,
    pub(crate) timeline: Vec<TimelineEvent>,
}

/// Take a [`Snapshot`]; the journal sorted by position, since its order is not part of
/// the contract.
pub(crate) async fn snapshot(h: &Harness, tenant: &TenantId, run_id: &RunId) -> Snapshot {
    let run = h
        .backend
        .store
        .get_run(tenant, run_id)
        .await
        .unwrap_or_else(|e| panic!("get_run {run_id}: {e}"));
    let replay_input = h
        .backend
        .store
        .load_replay_input(tenant, run_id)
        .await
        .unwrap_or_else(|e| panic!("load_replay_input {run_id}: {e}"));
    let mut journal = replay_input.journal;
    journal.sort_by(|a, b| a.position.cmp(&b.position));
    Snapshot {
        run,
        journal,
        deliveries: replay_input.deliveries,
        timeline: timeline(h, tenant, run_id).await,
    }
}

/// The run a [`StoreError::Conflict`] carries; panics on anything else.
#[track_caller]
pub(crate) fn conflict<T: Debug>(result: Result<T, StoreError>, what: &str) -> Run {
    match result {
        Err(StoreError::Conflict(Some(run))) => *run,
        other => panic!("{what}: expected Conflict carrying the current run, got {other:?}"),
    }
}

/// A journal entry at `position` in `state`.
pub(crate) fn entry(h: &Harness, position: &str, index: u32, state: EntryState) -> JournalEntry {
    JournalEntry {
        position: Position::from(position),
        index,
        kind: OperationKind::Step,
        name: position.split('#').next().unwrap_or(position).to_owned(),
        state,
        consumed: Vec::new(),
        handle: None,
        minted: Vec::new(),
        within: None,
        superseded: None,
        updated_at: h.now(),
    }
}

/// A finished step's state with `value`.
pub(crate) fn succeeded(value: serde_json::Value) -> EntryState {
    EntryState::Succeeded {
        value: json(value),
        attempt: 1,
    }
}

/// An open callback record of `run`.
pub(crate) fn open_callback(h: &Harness, run: &Run, position: &str) -> CallbackRecord {
    CallbackRecord {
        callback_id: CallbackId::generate(),
        tenant: run.tenant.clone(),
        run_id: run.id.clone(),
        position: Position::from(position),
        status: CallbackStatus::Open,
        deadline: Some(h.now().plus(Duration::from_secs(3600))),
        created_at: h.now(),
        accepts: None,
        heartbeat: None,
    }
}

/// A running tool-call record of `run`.
pub(crate) fn running_tool_call(h: &Harness, run: &Run, position: &str) -> ToolCallRecord {
    ToolCallRecord {
        key: IdempotencyKey(unique("idem")),
        tenant: run.tenant.clone(),
        run_id: run.id.clone(),
        position: Position::from(position),
        status: ToolCallStatus::Running,
        outcome: None,
        updated_at: h.now(),
    }
}

/// Register an open callback on `current` with a checkpoint that needs no lease; the
/// record and the run after the write.
pub(crate) async fn with_open_callback(h: &Harness, current: &Run) -> (CallbackRecord, Run) {
    let record = open_callback(h, current, "payment#0");
    let mut cp = checkpoint_over(h, current, None, |_| {});
    cp.callbacks.push(record.clone());
    write(h, &cp).await;
    (record, cp.run)
}

/// A delivery of `body` to `run`, received now, recorded by an event of `event_type`.
pub(crate) fn delivery(
    h: &Harness,
    tenant: &TenantId,
    run_id: &RunId,
    body: DeliveryBody,
    event_type: EventType,
) -> NewDelivery {
    let now = h.now();
    let mut recorded = event(0, now, event_type);
    recorded.details = serde_json::json!({"via": "conformance"});
    NewDelivery {
        id: DeliveryId(unique("dlv")),
        tenant: tenant.clone(),
        run_id: run_id.clone(),
        body,
        received_at: now,
        resend_after: None,
        event: recorded,
    }
}

/// A named event delivery to `run`.
pub(crate) fn event_delivery(h: &Harness, run: &Run, name: &str) -> NewDelivery {
    delivery(
        h,
        &run.tenant,
        &run.id,
        DeliveryBody::Event {
            name: name.to_owned(),
            value: json(serde_json::json!({"approved": true, "by": "ada"})),
        },
        EventType::EventDelivered,
    )
}

/// A callback delivery of `body` for `record`.
pub(crate) fn callback_delivery(
    h: &Harness,
    record: &CallbackRecord,
    body: DeliveryBody,
) -> NewDelivery {
    delivery(
        h,
        &record.tenant,
        &record.run_id,
        body,
        EventType::CallbackDelivered,
    )
}

/// Deliver, expecting it to be accepted; the run after the write.
pub(crate) async fn deliver(h: &Harness, d: &NewDelivery) -> Run {
    match h.backend.store.deliver(d).await {
        Ok(DeliverOutcome::Accepted(run)) => *run,
        other => panic!(
            "deliver {} to {}: expected Accepted, got {other:?}",
            d.id, d.run_id
        ),
    }
}
