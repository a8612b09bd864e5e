//! The forms journal entries and timeline events take in the file, smaller than the
//! core's JSON and read back to exactly the same values.
//!
//! - An event wait's JSON Schema ([`WaitKind::Event`]'s `accepts`) is derived from the
//!   type the workflow waits for, so every run of a workflow carries the same one:
//!   the entry is stored without it, the schema once in the `schemas` table (keyed by
//!   its SHA-256), and the entry's row names it.
//! - A timeline event is stored as a JSON array of its fields in a fixed order, without
//!   its sequence number (the row's key holds it): the field names were a third of it.
//!   Rows written before this form (a JSON object) are read as they are.
//! - A run's body leaves out what its row's columns hold (tenant, id, workflow,
//!   status, creation and due time) and the fields that are empty; the run is read
//!   back from both. A body written before (the whole run) reads the same way: the
//!   columns were always written from the same run.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use siesta::ports::StoreError;
use siesta::telemetry::TraceParent;
use siesta::{
    DeliveryId, EntryState, ErrorInfo, EventType, FencingEpoch, HeldStart, JournalEntry, Lease,
    LimitSlot, MintedPosition, OperationKind, ParentLink, Payload, Position, QueuedAt, RestartMark,
    Run, RunId, RunStatus, SubType, TenantId, TimelineEvent, Timestamp, Wait, WaitKind,
};

use crate::{from_json, to_json};

/// A journal entry as stored: its JSON without its position (the row's key holds it)
/// or an event wait's schema, and that schema (JSON) with its SHA-256 when it had one.
pub(crate) struct StoredEntry {
    pub(crate) body: String,
    pub(crate) schema: Option<Schema>,
    /// Bytes of the entry's JSON (position and schema inline), as DynamoDB stores it.
    full_len: usize,
}

/// An event wait's schema, stored once per distinct content.
pub(crate) struct Schema {
    pub(crate) sha256: [u8; 32],
    pub(crate) body: String,
}

/// The schema a state carries inline, if it is an event wait with one.
fn schema_of(state: &mut EntryState) -> Option<&mut Option<serde_json::Value>> {
    match state {
        EntryState::Waiting(Wait {
            kind: WaitKind::Event { accepts, .. },
            ..
        }) => Some(accepts),
        _ => None,
    }
}

/// A journal entry as stored: every field but its position, as the core's JSON names
/// them.
#[derive(Serialize)]
struct EntryRef<'a> {
    index: u32,
    kind: OperationKind,
    name: &'a str,
    state: &'a EntryState,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    consumed: &'a [DeliveryId],
    #[serde(skip_serializing_if = "Option::is_none")]
    handle: Option<&'a str>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    minted: &'a [MintedPosition],
    #[serde(skip_serializing_if = "Option::is_none")]
    within: Option<&'a Position>,
    #[serde(skip_serializing_if = "Option::is_none")]
    superseded: Option<u32>,
    updated_at: Timestamp,
}

/// [`EntryRef`], read back; a body written before (the whole entry) has its position.
#[derive(Deserialize)]
struct EntryOwned {
    #[serde(default)]
    position: Option<Position>,
    index: u32,
    kind: OperationKind,
    name: String,
    state: EntryState,
    #[serde(default)]
    consumed: Vec<DeliveryId>,
    #[serde(default)]
    handle: Option<String>,
    #[serde(default)]
    minted: Vec<MintedPosition>,
    #[serde(default)]
    within: Option<Position>,
    #[serde(default)]
    superseded: Option<u32>,
    updated_at: Timestamp,
}

/// `"position":` and the comma after it, in the core's JSON.
const POSITION_FIELD_LEN: usize = "\"position\":,".len();

/// `,"accepts":` in the core's JSON.
const ACCEPTS_FIELD_LEN: usize = ",\"accepts\":".len();

impl StoredEntry {
    /// `entry` as stored.
    pub(crate) fn of(entry: &JournalEntry) -> Result<Self, StoreError> {
        // Destructured whole, so that a field added to the entry cannot be left out here.
        let JournalEntry {
            position,
            index,
            kind,
            name,
            state,
            consumed,
            handle,
            minted,
            within,
            superseded,
            updated_at,
        } = entry;
        let (bare, schema) = match state {
            EntryState::Waiting(Wait {
                kind:
                    WaitKind::Event {
                        accepts: Some(schema),
                        ..
                    },
                ..
            }) => {
                let mut without = state.clone();
                if let Some(slot) = schema_of(&mut without) {
                    *slot = None;
                }
                let schema = to_json(schema)?;
                let schema = Schema {
                    sha256: Sha256::digest(schema.as_bytes()).into(),
                    body: schema,
                };
                (Some(without), Some(schema))
            }
            _ => (None, None),
        };
        let body = to_json(&EntryRef {
            index: *index,
            kind: *kind,
            name,
            state: bare.as_ref().unwrap_or(state),
            consumed,
            handle: handle.as_deref(),
            minted,
            within: within.as_ref(),
            superseded: *superseded,
            updated_at: *updated_at,
        })?;
        let full_len = body.len()
            + POSITION_FIELD_LEN
            + to_json(position)?.len()
            + schema
                .as_ref()
                .map_or(0, |s| s.body.len() + ACCEPTS_FIELD_LEN);
        Ok(StoredEntry {
            body,
            schema,
            full_len,
        })
    }

    /// Bytes of the entry with its position and schema inline, as DynamoDB would store
    /// it.
    pub(crate) fn full_len(&self) -> usize {
        self.full_len
    }
}

/// The journal entry stored at `position` as `body`, with `schema` (the row's
/// reference resolved) put back.
pub(crate) fn entry(
    position: &str,
    body: &str,
    schema: Option<&str>,
) -> Result<JournalEntry, StoreError> {
    let EntryOwned {
        position: written,
        index,
        kind,
        name,
        mut state,
        consumed,
        handle,
        minted,
        within,
        superseded,
        updated_at,
    } = from_json(body)?;
    if let Some(schema) = schema {
        let slot = schema_of(&mut state).ok_or_else(|| {
            StoreError::Invalid(
                "corrupt record: a schema for an entry that is no event wait".into(),
            )
        })?;
        *slot = Some(from_json(schema)?);
    }
    Ok(JournalEntry {
        position: written.unwrap_or_else(|| Position(position.to_owned())),
        index,
        kind,
        name,
        state,
        consumed,
        handle,
        minted,
        within,
        superseded,
        updated_at,
    })
}

/// A timeline event as stored: every field but the sequence number, in this order.
#[derive(Serialize)]
struct EventRef<'a>(
    Timestamp,
    EventType,
    Option<SubType>,
    Option<&'a str>,
    Option<&'a str>,
    Option<&'a str>,
    &'a serde_json::Value,
);

/// [`EventRef`], read back.
#[derive(Deserialize)]
struct EventOwned(
    Timestamp,
    EventType,
    Option<SubType>,
    Option<String>,
    Option<String>,
    Option<String>,
    serde_json::Value,
);

/// `event` as stored.
pub(crate) fn event_body(event: &TimelineEvent) -> Result<String, StoreError> {
    // Destructured whole, so that a field added to the event cannot be left out here.
    let TimelineEvent {
        seq: _,
        at,
        event_type,
        sub_type,
        id,
        parent_id,
        name,
        details,
    } = event;
    to_json(&EventRef(
        *at,
        *event_type,
        *sub_type,
        id.as_deref(),
        parent_id.as_deref(),
        name.as_deref(),
        details,
    ))
}

/// The timeline event stored as `body` at `seq`.
pub(crate) fn event(seq: u64, body: &str) -> Result<TimelineEvent, StoreError> {
    if body.starts_with('{') {
        // Written before the compact form.
        return from_json(body);
    }
    let EventOwned(at, event_type, sub_type, id, parent_id, name, details) = from_json(body)?;
    Ok(TimelineEvent {
        seq,
        at,
        event_type,
        sub_type,
        id,
        parent_id,
        name,
        details,
    })
}

/// A run's body as stored: the fields its row's columns do not hold, empty ones left
/// out.
#[derive(Serialize)]
struct RunBodyRef<'a> {
    input: &'a Payload,
    version: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    output: Option<&'a Payload>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a ErrorInfo>,
    updated_at: Timestamp,
    #[serde(skip_serializing_if = "Option::is_none")]
    lease: Option<&'a Lease>,
    epoch: FencingEpoch,
    inbox_seq: u64,
    inbox_seen: u64,
    timeline_seq: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    resend_after: Option<Timestamp>,
    #[serde(skip_serializing_if = "is_false")]
    cancel_requested: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pause_requested: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    parent: Option<&'a ParentLink>,
    #[serde(skip_serializing_if = "Option::is_none")]
    build_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    trace_parent: Option<TraceParent>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    limits: &'a [LimitSlot],
    #[serde(skip_serializing_if = "Option::is_none")]
    queued: Option<&'a QueuedAt>,
    #[serde(skip_serializing_if = "Option::is_none")]
    held: Option<&'a HeldStart>,
    #[serde(skip_serializing_if = "Option::is_none")]
    restart: Option<&'a RestartMark>,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// [`RunBodyRef`], read back (a whole run's JSON reads too: its other fields are
/// ignored).
#[derive(Deserialize)]
struct RunBody {
    input: Payload,
    version: u64,
    #[serde(default)]
    output: Option<Payload>,
    #[serde(default)]
    error: Option<ErrorInfo>,
    updated_at: Timestamp,
    #[serde(default)]
    lease: Option<Lease>,
    epoch: FencingEpoch,
    inbox_seq: u64,
    inbox_seen: u64,
    timeline_seq: u64,
    #[serde(default)]
    resend_after: Option<Timestamp>,
    #[serde(default)]
    cancel_requested: bool,
    #[serde(default)]
    pause_requested: Option<String>,
    #[serde(default)]
    parent: Option<ParentLink>,
    #[serde(default)]
    build_id: Option<String>,
    #[serde(default)]
    trace_parent: Option<TraceParent>,
    #[serde(default)]
    limits: Vec<LimitSlot>,
    #[serde(default)]
    queued: Option<QueuedAt>,
    #[serde(default)]
    held: Option<HeldStart>,
    #[serde(default)]
    restart: Option<RestartMark>,
}

/// `run`'s body as stored.
pub(crate) fn run_body(run: &Run) -> Result<String, StoreError> {
    // Destructured whole, so that a field added to the run cannot be left out here.
    let Run {
        tenant: _,
        id: _,
        workflow: _,
        input,
        status: _,
        version,
        output,
        error,
        created_at: _,
        updated_at,
        lease,
        epoch,
        inbox_seq,
        inbox_seen,
        timeline_seq,
        due_at: _,
        resend_after,
        cancel_requested,
        pause_requested,
        parent,
        build_id,
        trace_parent,
        limits,
        queued,
        held,
        restart,
    } = run;
    to_json(&RunBodyRef {
        input,
        version: *version,
        output: output.as_ref(),
        error: error.as_ref(),
        updated_at: *updated_at,
        lease: lease.as_ref(),
        epoch: *epoch,
        inbox_seq: *inbox_seq,
        inbox_seen: *inbox_seen,
        timeline_seq: *timeline_seq,
        resend_after: *resend_after,
        cancel_requested: *cancel_requested,
        pause_requested: pause_requested.as_deref(),
        parent: parent.as_ref(),
        build_id: build_id.as_deref(),
        trace_parent: *trace_parent,
        limits,
        queued: queued.as_ref(),
        held: held.as_ref(),
        restart: restart.as_ref(),
    })
}

/// A `runs` row: the columns a run is read from.
pub(crate) struct RunRow {
    pub(crate) tenant: String,
    pub(crate) run_id: String,
    pub(crate) status: String,
    pub(crate) workflow: String,
    pub(crate) created_at: i64,
    pub(crate) due_at: Option<i64>,
    pub(crate) body: String,
}

impl RunRow {
    /// The row's columns from `at` on: `tenant, run_id, status, workflow, created_at,
    /// due_at, body`.
    pub(crate) fn read(r: &rusqlite::Row<'_>, at: usize) -> rusqlite::Result<RunRow> {
        Ok(RunRow {
            tenant: r.get(at)?,
            run_id: r.get(at + 1)?,
            status: r.get(at + 2)?,
            workflow: r.get(at + 3)?,
            created_at: r.get(at + 4)?,
            due_at: r.get(at + 5)?,
            body: r.get(at + 6)?,
        })
    }

    /// The run stored in this row.
    pub(crate) fn run(self) -> Result<Run, StoreError> {
        let status = RunStatus::ALL
            .into_iter()
            .find(|s| s.as_str() == self.status)
            .ok_or_else(|| {
                StoreError::Invalid(format!("corrupt record: run status {:?}", self.status))
            })?;
        let RunBody {
            input,
            version,
            output,
            error,
            updated_at,
            lease,
            epoch,
            inbox_seq,
            inbox_seen,
            timeline_seq,
            resend_after,
            cancel_requested,
            pause_requested,
            parent,
            build_id,
            trace_parent,
            limits,
            queued,
            held,
            restart,
        } = from_json(&self.body)?;
        Ok(Run {
            tenant: TenantId(self.tenant),
            id: RunId(self.run_id),
            workflow: self.workflow,
            input,
            status,
            version,
            output,
            error,
            created_at: Timestamp(self.created_at),
            updated_at,
            lease,
            epoch,
            inbox_seq,
            inbox_seen,
            timeline_seq,
            due_at: self.due_at.map(Timestamp),
            resend_after,
            cancel_requested,
            pause_requested,
            parent,
            build_id,
            trace_parent,
            limits,
            queued,
            held,
            restart,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use siesta::Timestamp;

    fn event_wait(accepts: Option<serde_json::Value>) -> JournalEntry {
        JournalEntry {
            position: Position("approval#0".into()),
            index: 1,
            kind: siesta::OperationKind::Wait,
            name: "approval".into(),
            state: EntryState::Waiting(Wait {
                kind: WaitKind::Event {
                    name: "approval".into(),
                    accepts,
                },
                deadline: Some(Timestamp(9)),
                started_at: Timestamp(3),
            }),
            consumed: Vec::new(),
            handle: None,
            minted: Vec::new(),
            within: None,
            superseded: None,
            updated_at: Timestamp(3),
        }
    }

    #[test]
    fn an_event_waits_schema_is_stored_apart_and_put_back() {
        let schema = serde_json::json!({"type": "object", "required": ["approved"]});
        let entry = event_wait(Some(schema.clone()));
        let stored = StoredEntry::of(&entry).unwrap();
        let kept = stored.schema.as_ref().expect("the schema, apart");
        assert!(!stored.body.contains("required"), "{}", stored.body);
        assert_eq!(kept.body, to_json(&schema).unwrap());
        assert_eq!(
            stored.full_len(),
            to_json(&entry).unwrap().len(),
            "counted as DynamoDB stores it"
        );
        assert_eq!(
            super::entry(&entry.position.0, &stored.body, Some(&kept.body)).unwrap(),
            entry
        );
    }

    #[test]
    fn an_entrys_position_is_left_to_its_rows_key() {
        let mut step = event_wait(None);
        step.position = Position("outer#0/pay \"ment\"#2".into());
        step.state = EntryState::Succeeded {
            value: siesta::Payload::Inline(serde_json::json!({"approved": true})),
            attempt: 1,
        };
        step.consumed = vec![DeliveryId("event:1".into())];
        step.handle = Some("cb_1".into());
        let stored = StoredEntry::of(&step).unwrap();
        assert!(!stored.body.contains("position"), "{}", stored.body);
        assert!(!stored.body.contains("outer#0"), "{}", stored.body);
        assert_eq!(
            stored.full_len(),
            to_json(&step).unwrap().len(),
            "counted as DynamoDB stores it"
        );
        assert_eq!(
            super::entry(&step.position.0, &stored.body, None).unwrap(),
            step
        );
    }

    #[test]
    fn entries_written_with_their_position_read_as_they_are() {
        let schema = serde_json::json!({"type": "object"});
        for accepts in [None, Some(schema)] {
            let entry = event_wait(accepts.clone());
            // The forms rows were written in before: the core's JSON, with the schema
            // inline (before run keys) or apart (run keys).
            let whole = to_json(&entry).unwrap();
            assert!(whole.contains("\"position\""), "{whole}");
            assert_eq!(super::entry("ignored#9", &whole, None).unwrap(), entry);
            let apart = to_json(&event_wait(None)).unwrap();
            let schema = accepts.map(|s| to_json(&s).unwrap());
            assert_eq!(
                super::entry("ignored#9", &apart, schema.as_deref()).unwrap(),
                entry
            );
        }
    }

    #[test]
    fn entries_without_a_schema_are_stored_without_one() {
        for entry in [event_wait(None), {
            let mut step = event_wait(None);
            step.state = EntryState::Succeeded {
                value: siesta::Payload::Inline(serde_json::json!([1, 2])),
                attempt: 1,
            };
            step
        }] {
            let stored = StoredEntry::of(&entry).unwrap();
            assert!(stored.schema.is_none());
            assert_eq!(stored.full_len(), to_json(&entry).unwrap().len());
            assert_eq!(
                super::entry(&entry.position.0, &stored.body, None).unwrap(),
                entry
            );
        }
    }

    #[test]
    fn a_schema_for_an_entry_that_waits_for_no_event_is_invalid() {
        let mut step = event_wait(None);
        step.state = EntryState::Started {
            attempt: 1,
            key: None,
        };
        let body = to_json(&step).unwrap();
        assert!(matches!(
            entry(&step.position.0, &body, Some("{}")),
            Err(StoreError::Invalid(_))
        ));
    }

    fn row_of(run: &Run, body: String) -> RunRow {
        RunRow {
            tenant: run.tenant.0.clone(),
            run_id: run.id.0.clone(),
            status: run.status.as_str().to_owned(),
            workflow: run.workflow.clone(),
            created_at: run.created_at.0,
            due_at: run.due_at.map(|d| d.0),
            body,
        }
    }

    #[test]
    fn runs_read_back_from_their_row_in_either_form() {
        let mut waiting = Run::new(
            TenantId::from("acme"),
            RunId::generate(),
            "approval",
            Payload::Inline(serde_json::json!({"change": "rotate the keys"})),
            Timestamp(1_764_000_000_000),
        );
        waiting.status = RunStatus::Waiting;
        waiting.build_id = Some("siesta@0.1.0".into());
        let mut leased = waiting.clone();
        leased.status = RunStatus::Running;
        leased.lease = Some(Lease {
            owner: "worker".into(),
            expires_at: Timestamp(9),
            epoch: FencingEpoch(2),
        });
        leased.resend_after = Some(Timestamp(7));
        leased.cancel_requested = true;
        leased.output = Some(Payload::Inline(serde_json::json!(1)));
        for run in [waiting, leased] {
            let body = run_body(&run).unwrap();
            assert!(
                !body.contains("acme") && !body.contains(&run.id.0),
                "{body}"
            );
            assert!(body.len() < to_json(&run).unwrap().len());
            assert_eq!(row_of(&run, body).run().unwrap(), run);
            assert_eq!(row_of(&run, to_json(&run).unwrap()).run().unwrap(), run);
        }
    }

    #[test]
    fn a_run_row_with_an_unknown_status_is_invalid() {
        let run = Run::new(
            TenantId::from("acme"),
            RunId::generate(),
            "approval",
            Payload::Inline(serde_json::Value::Null),
            Timestamp(5),
        );
        let mut row = row_of(&run, run_body(&run).unwrap());
        row.status = "dozing".into();
        assert!(matches!(row.run(), Err(StoreError::Invalid(_))));
    }

    #[test]
    fn timeline_events_read_back_from_either_form() {
        let events = [
            TimelineEvent {
                seq: 4,
                at: Timestamp(1_764_000_000_123),
                event_type: EventType::CallbackStarted,
                sub_type: Some(SubType::Callback),
                id: Some("payment#0".into()),
                parent_id: Some("outer#0".into()),
                name: Some("payment".into()),
                details: serde_json::json!({"CallbackId": "cb_1", "HeartbeatTimeoutMs": null}),
            },
            TimelineEvent::execution_started(Timestamp(5), "approval", serde_json::Value::Null),
        ];
        for event in events {
            let body = event_body(&event).unwrap();
            assert!(body.starts_with('['), "{body}");
            assert!(body.len() < to_json(&event).unwrap().len());
            assert_eq!(super::event(event.seq, &body).unwrap(), event);
            let old = to_json(&event).unwrap();
            assert_eq!(super::event(event.seq, &old).unwrap(), event);
        }
    }
}
