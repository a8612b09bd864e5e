//! How each domain record is laid out as a DynamoDB item.
//!
//! The run item keeps as top-level attributes everything a condition or an `UpdateItem`
//! touches (status, version, fencing epoch, lease, due time) and everything an index
//! keys on; the rest of the run (input, output, error, inbox and timeline counters,
//! parent link) is one JSON attribute, because no condition ever looks inside it. Other
//! records are their key attributes plus a JSON `body`.

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use siesta::ports::StoreError;
use siesta::*;

use crate::error::corrupt;
use crate::keys::*;

/// A DynamoDB item.
pub(crate) type Item = HashMap<String, AttributeValue>;

/// Run attributes.
pub(crate) const STATUS: &str = "status";
pub(crate) const VERSION: &str = "version";
pub(crate) const EPOCH: &str = "epoch";
pub(crate) const LEASE_OWNER: &str = "lease_owner";
pub(crate) const LEASE_EXPIRES: &str = "lease_expires";
pub(crate) const LEASE_EPOCH: &str = "lease_epoch";
pub(crate) const UPDATED_AT: &str = "updated_at";
pub(crate) const RUN_ID: &str = "run_id";
const WORKFLOW: &str = "workflow";
pub(crate) const CREATED_AT: &str = "created_at";
pub(crate) const BODY: &str = "body";
/// The run's last timeline seq, beside its copy in the body, for conditions: a
/// checkpoint's events share an item keyed by the run's version (see
/// [`crate::checkpoint_item`]), so whether one of them was taken already is asked of the
/// run.
pub(crate) const TIMELINE_SEQ: &str = "timeline_seq";
/// The token of the reaper that claimed a finished run.
pub(crate) const REAP_CLAIM: &str = "reap_claim";
/// The sort key the checkpoint tail has once archived as a checkpoint item.
pub(crate) const TAIL_SK: &str = "tail_sk";
/// The checkpoint tail: the run's last checkpoint item that its own build wrote, kept in
/// the run item until the next such checkpoint archives it (see
/// [`crate::checkpoint_item`]), deflated.
pub(crate) const TAIL: &str = "tail";
/// The attributes a run item may have that [`run_item`] leaves out when the run has no
/// use for them: a write of the whole run removes those it does not set. (The checkpoint
/// tail is not among them: writers of the whole run keep it.)
const RUN_OPTIONAL: [&str; 11] = [
    LEASE_OWNER,
    LEASE_EXPIRES,
    LEASE_EPOCH,
    DUE_AT,
    SWEEP_AT,
    DUE_SHARD,
    RESEND_AFTER,
    REAP_SHARD,
    REAP_AT,
    BUILD_KEY,
    REAP_CLAIM,
];
/// A delivery's inbox sequence number.
pub(crate) const SEQ: &str = "seq";
/// A callback record's status, which a delivery's condition checks.
pub(crate) const CALLBACK_STATUS: &str = "callback_status";
/// A callback record's deadline (ms), which a delivery's condition checks too.
pub(crate) const CALLBACK_DEADLINE: &str = "callback_deadline";
/// A callback record's heartbeat deadline (ms), which a delivery's condition checks too.
pub(crate) const CALLBACK_HEARTBEAT_DEADLINE: &str = "callback_heartbeat_deadline";

pub(crate) fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

pub(crate) fn n(v: impl ToString) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

pub(crate) fn key(pk: String, sk: impl Into<String>) -> Item {
    HashMap::from([(PK.to_owned(), s(pk)), (SK.to_owned(), s(sk))])
}

pub(crate) fn get_s<'a>(item: &'a Item, name: &str, what: &str) -> Result<&'a str, StoreError> {
    match item.get(name) {
        Some(AttributeValue::S(v)) => Ok(v),
        _ => Err(corrupt(what, format!("no string attribute {name}"))),
    }
}

pub(crate) fn get_n<T: std::str::FromStr>(
    item: &Item,
    name: &str,
    what: &str,
) -> Result<T, StoreError> {
    match item.get(name) {
        Some(AttributeValue::N(v)) => v
            .parse()
            .map_err(|_| corrupt(what, format!("{name} = {v} is not a number"))),
        _ => Err(corrupt(what, format!("no number attribute {name}"))),
    }
}

fn opt_n<T: std::str::FromStr>(
    item: &Item,
    name: &str,
    what: &str,
) -> Result<Option<T>, StoreError> {
    match item.get(name) {
        None | Some(AttributeValue::Null(_)) => Ok(None),
        Some(_) => get_n(item, name, what).map(Some),
    }
}

pub(crate) fn to_json<T: Serialize>(v: &T) -> Result<String, StoreError> {
    serde_json::to_string(v).map_err(|e| StoreError::Invalid(e.to_string()))
}

pub(crate) fn from_json<T: DeserializeOwned>(item: &Item, what: &str) -> Result<T, StoreError> {
    serde_json::from_str(get_s(item, BODY, what)?).map_err(|e| corrupt(what, e))
}

/// An item's size as DynamoDB counts it for capacity: each attribute's name and value
/// (a string its UTF-8 bytes, a number about one byte per two digits plus one).
pub(crate) fn item_size(item: &Item) -> usize {
    item.iter()
        .map(|(name, v)| name.len() + value_size(v))
        .sum()
}

fn value_size(v: &AttributeValue) -> usize {
    match v {
        AttributeValue::S(s) => s.len(),
        AttributeValue::N(n) => {
            let digits = n.chars().filter(char::is_ascii_digit).count();
            digits.div_ceil(2) + 1
        }
        AttributeValue::B(b) => b.as_ref().len(),
        AttributeValue::Bool(_) | AttributeValue::Null(_) => 1,
        AttributeValue::M(m) => {
            3 + m
                .iter()
                .map(|(k, v)| k.len() + value_size(v) + 1)
                .sum::<usize>()
        }
        AttributeValue::L(l) => 3 + l.iter().map(|v| value_size(v) + 1).sum::<usize>(),
        AttributeValue::Ss(ss) => ss.iter().map(String::len).sum(),
        AttributeValue::Ns(ns) => ns.iter().map(|n| n.len().div_ceil(2) + 1).sum(),
        AttributeValue::Bs(bs) => bs.iter().map(|b| b.as_ref().len()).sum(),
        _ => 0,
    }
}

/// The part of a run that no condition looks into.
#[derive(Serialize, Deserialize)]
struct RunBody {
    input: Payload,
    // An absent option reads as `None` in every build: left out, the run item is
    // smaller on every write.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    output: Option<Payload>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<ErrorInfo>,
    inbox_seq: u64,
    inbox_seen: u64,
    timeline_seq: u64,
    cancel_requested: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pause_requested: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    parent: Option<ParentLink>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    build_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    trace_parent: Option<siesta::telemetry::TraceParent>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    limits: Vec<siesta::LimitSlot>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    queued: Option<siesta::QueuedAt>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    held: Option<siesta::HeldStart>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    restart: Option<siesta::RestartMark>,
}

/// The TTL of a record closed at `at`: kept for `retention`, then removed by DynamoDB.
/// A deployment that keeps everything for ever has a retention of [`Duration::MAX`]:
/// the sum saturates rather than wrapping round to a time long past.
fn expiry(at: Timestamp, retention: Duration) -> AttributeValue {
    n((at.0.max(0) as u64 / 1000).saturating_add(retention.as_secs()))
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// The run's item. A finished run enters the sparse reap index, to be looked at
/// `retention` after it finished (the shortest retention of the deployment: the reaper
/// decides by the run's own); a run with a due time enters the sparse due index on its
/// shard.
pub(crate) fn run_item(run: &Run, retention: Duration) -> Result<Item, StoreError> {
    let mut item = key(run_pk(&run.tenant, &run.id), RUN_SK);
    item.insert(TENANT.into(), s(run.tenant.as_str()));
    item.insert(RUN_ID.into(), s(run.id.as_str()));
    item.insert(WORKFLOW.into(), s(&run.workflow));
    item.insert(STATUS.into(), s(run.status.as_str()));
    item.insert(VERSION.into(), n(run.version));
    item.insert(EPOCH.into(), n(run.epoch.0));
    item.insert(CREATED_AT.into(), n(run.created_at.0));
    item.insert(UPDATED_AT.into(), n(run.updated_at.0));
    item.insert(TIMELINE_SEQ.into(), n(run.timeline_seq));
    item.insert(
        CREATED_KEY.into(),
        s(created_key(run.created_at.0, &run.id)),
    );
    if let Some(lease) = &run.lease {
        item.insert(LEASE_OWNER.into(), s(&lease.owner));
        item.insert(LEASE_EXPIRES.into(), n(lease.expires_at.0));
        item.insert(LEASE_EPOCH.into(), n(lease.epoch.0));
    }
    if let (Some(due), Some(sweep_at)) = (run.due_at, run.sweep_at()) {
        item.insert(DUE_AT.into(), n(due.0));
        item.insert(SWEEP_AT.into(), n(sweep_at.0));
        item.insert(DUE_SHARD.into(), s(due_shard(&run.tenant, &run.id)));
        if let Some(resend_after) = run.resend_after {
            item.insert(RESEND_AFTER.into(), n(resend_after.0));
        }
    }
    if run.status.is_finished() {
        // Into the reap index, not a TTL: the run item is what finds the run's other
        // items, so it goes last, when the reaper has removed them (crate::retention).
        let first_look = run.updated_at.0.max(0).saturating_add(millis(retention));
        item.insert(REAP_SHARD.into(), s(due_shard(&run.tenant, &run.id)));
        item.insert(REAP_AT.into(), n(first_look));
    } else if let Some(build) = &run.build_id {
        item.insert(BUILD_KEY.into(), s(build_key(&run.tenant, build)));
    }
    let body = RunBody {
        input: run.input.clone(),
        output: run.output.clone(),
        error: run.error.clone(),
        inbox_seq: run.inbox_seq,
        inbox_seen: run.inbox_seen,
        timeline_seq: run.timeline_seq,
        cancel_requested: run.cancel_requested,
        pause_requested: run.pause_requested.clone(),
        parent: run.parent.clone(),
        build_id: run.build_id.clone(),
        trace_parent: run.trace_parent,
        limits: run.limits.clone(),
        queued: run.queued.clone(),
        held: run.held.clone(),
        restart: run.restart.clone(),
    };
    item.insert(BODY.into(), s(to_json(&body)?));
    Ok(item)
}

/// An `UpdateItem` expression that writes the whole run `item` over the one stored,
/// keeping only its checkpoint tail (unless `drop_tail`) and the callback states not
/// `removed`: `SET` each attribute of `item` but its key, `REMOVE` each of
/// [`RUN_OPTIONAL`] and of `removed` it lacks. With its names and values.
pub(crate) fn run_update(
    item: &Item,
    drop_tail: bool,
    removed: &[String],
) -> (String, HashMap<String, String>, Item) {
    let mut names = HashMap::new();
    let mut values = HashMap::new();
    let mut set = Vec::new();
    let mut attrs: Vec<_> = item
        .iter()
        .filter(|(name, _)| name.as_str() != PK && name.as_str() != SK)
        .collect();
    attrs.sort_by_key(|(name, _)| name.as_str());
    for (i, (name, value)) in attrs.into_iter().enumerate() {
        names.insert(format!("#w{i}"), name.clone());
        values.insert(format!(":w{i}"), value.clone());
        set.push(format!("#w{i} = :w{i}"));
    }
    let mut remove = Vec::new();
    let tail: &[&str] = if drop_tail { &[TAIL_SK, TAIL] } else { &[] };
    for (i, name) in RUN_OPTIONAL
        .iter()
        .chain(tail)
        .copied()
        .chain(removed.iter().map(String::as_str))
        .filter(|name| !item.contains_key(*name))
        .enumerate()
    {
        names.insert(format!("#r{i}"), name.to_owned());
        remove.push(format!("#r{i}"));
    }
    let mut expr = format!("SET {}", set.join(", "));
    if !remove.is_empty() {
        expr.push_str(&format!(" REMOVE {}", remove.join(", ")));
    }
    (expr, names, values)
}

/// The run stored in `item`.
pub(crate) fn run_from_item(item: &Item) -> Result<Run, StoreError> {
    const WHAT: &str = "run";
    let body: RunBody = from_json(item, WHAT)?;
    let status_name = get_s(item, STATUS, WHAT)?;
    let status = RunStatus::ALL
        .into_iter()
        .find(|s| s.as_str() == status_name)
        .ok_or_else(|| corrupt(WHAT, format!("unknown status {status_name}")))?;
    let lease = match opt_n::<u64>(item, LEASE_EPOCH, WHAT)? {
        Some(epoch) => Some(Lease {
            owner: get_s(item, LEASE_OWNER, WHAT)?.to_owned(),
            expires_at: Timestamp(get_n(item, LEASE_EXPIRES, WHAT)?),
            epoch: FencingEpoch(epoch),
        }),
        None => None,
    };
    Ok(Run {
        tenant: TenantId(get_s(item, TENANT, WHAT)?.to_owned()),
        id: RunId(get_s(item, RUN_ID, WHAT)?.to_owned()),
        workflow: get_s(item, WORKFLOW, WHAT)?.to_owned(),
        input: body.input,
        status,
        version: get_n(item, VERSION, WHAT)?,
        output: body.output,
        error: body.error,
        created_at: Timestamp(get_n(item, CREATED_AT, WHAT)?),
        updated_at: Timestamp(get_n(item, UPDATED_AT, WHAT)?),
        lease,
        epoch: FencingEpoch(get_n(item, EPOCH, WHAT)?),
        inbox_seq: body.inbox_seq,
        inbox_seen: body.inbox_seen,
        timeline_seq: body.timeline_seq,
        due_at: opt_n(item, DUE_AT, WHAT)?.map(Timestamp),
        resend_after: opt_n(item, RESEND_AFTER, WHAT)?.map(Timestamp),
        cancel_requested: body.cancel_requested,
        pause_requested: body.pause_requested,
        parent: body.parent,
        build_id: body.build_id,
        trace_parent: body.trace_parent,
        limits: body.limits,
        queued: body.queued,
        held: body.held,
        restart: body.restart,
    })
}

/// A run's timeline event, alone in its item.
pub(crate) fn timeline_item(
    tenant: &TenantId,
    run_id: &RunId,
    event: &TimelineEvent,
) -> Result<Item, StoreError> {
    let mut item = key(run_pk(tenant, run_id), timeline_sk(event.seq));
    item.insert(BODY.into(), s(to_json(event)?));
    Ok(item)
}

/// A run's delivery; its sort key is its dedup id.
pub(crate) fn delivery_item(delivery: &Delivery) -> Result<Item, StoreError> {
    let mut item = key(
        run_pk(&delivery.tenant, &delivery.run_id),
        delivery_sk(&delivery.id),
    );
    item.insert(SEQ.into(), n(delivery.seq));
    item.insert(BODY.into(), s(to_json(delivery)?));
    Ok(item)
}

/// A callback's index record. A closed one gets a TTL: it only serves to tell a late
/// webhook 410 from an unknown token 404. So does an open one with a deadline, of its
/// deadline plus the retention: past its deadline no outcome is accepted, and the
/// record would otherwise outlive a run that never closes it — one opened by a
/// checkpoint that was refused and whose record could not be withdrawn
/// (`store::openings`), which the run's journal does not name for the reaper.
pub(crate) fn callback_item(
    record: &CallbackRecord,
    now: Timestamp,
    retention: Duration,
) -> Result<Item, StoreError> {
    let mut item = key(callback_pk(&record.callback_id), RECORD_SK);
    let status = serde_json::to_value(record.status)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default();
    item.insert(CALLBACK_STATUS.into(), s(status));
    if let Some(deadline) = record.deadline {
        item.insert(CALLBACK_DEADLINE.into(), n(deadline.millis()));
    }
    if let Some(heartbeat) = record.heartbeat {
        item.insert(
            CALLBACK_HEARTBEAT_DEADLINE.into(),
            n(heartbeat.deadline.millis()),
        );
    }
    match (record.status, record.deadline) {
        (CallbackStatus::Open, Some(deadline)) => {
            item.insert(EXPIRES_AT.into(), expiry(deadline, retention));
        }
        (CallbackStatus::Open, None) => {}
        _ => {
            item.insert(EXPIRES_AT.into(), expiry(now, retention));
        }
    }
    item.insert(BODY.into(), s(to_json(record)?));
    Ok(item)
}

/// The callback record stored in `item`.
pub(crate) fn callback_from_item(item: &Item) -> Result<CallbackRecord, StoreError> {
    from_json(item, "callback")
}

/// The value of [`CALLBACK_STATUS`] for an open callback.
pub(crate) fn open_callback_status() -> AttributeValue {
    s("open")
}

/// A tool-call record. A finished call's gets a TTL: the journal holds its outcome from
/// the same checkpoint on, and the record is outside the run's partition, where the
/// reaper cannot find it (its key hashes the call's input, which is not kept).
pub(crate) fn tool_call_item(
    record: &ToolCallRecord,
    retention: Duration,
) -> Result<Item, StoreError> {
    let mut item = key(tool_call_pk(&record.tenant, &record.key), RECORD_SK);
    if matches!(
        record.status,
        ToolCallStatus::Succeeded | ToolCallStatus::Failed
    ) {
        item.insert(EXPIRES_AT.into(), expiry(record.updated_at, retention));
    }
    item.insert(BODY.into(), s(to_json(record)?));
    Ok(item)
}

/// The tool-call record stored in `item`.
pub(crate) fn tool_call_from_item(item: &Item) -> Result<ToolCallRecord, StoreError> {
    from_json(item, "tool call")
}

/// A tenant's build record: the build id, its first and last seen.
pub(crate) fn build_from_item(item: &Item) -> Result<(String, Timestamp, Timestamp), StoreError> {
    const WHAT: &str = "build record";
    Ok((
        get_s(item, SK, WHAT)?.to_owned(),
        Timestamp(get_n(item, FIRST_SEEN, WHAT)?),
        Timestamp(get_n(item, LAST_SEEN, WHAT)?),
    ))
}

/// A due-index entry, as the index projects it.
pub(crate) fn due_from_item(item: &Item) -> Result<siesta::ports::DueRun, StoreError> {
    const WHAT: &str = "due index";
    let status_name = get_s(item, STATUS, WHAT)?;
    let due_at = Timestamp(get_n(item, DUE_AT, WHAT)?);
    let sweep_at = Timestamp(get_n(item, SWEEP_AT, WHAT)?);
    Ok(siesta::ports::DueRun {
        tenant: TenantId(get_s(item, TENANT, WHAT)?.to_owned()),
        run_id: RunId(get_s(item, RUN_ID, WHAT)?.to_owned()),
        due_at,
        resend_after: (sweep_at > due_at).then_some(sweep_at),
        // Not projected: the AWS sweep wakes every build's runs (the step function
        // forwards a run of another build to it).
        build_id: None,
        status: RunStatus::ALL
            .into_iter()
            .find(|s| s.as_str() == status_name)
            .ok_or_else(|| corrupt(WHAT, format!("unknown status {status_name}")))?,
    })
}

/// The created key of a tenant-index entry.
pub(crate) fn created_key_of(item: &Item) -> Result<String, StoreError> {
    get_s(item, CREATED_KEY, "tenant index").map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sample() -> Run {
        let mut run = Run::new(
            TenantId("acme#1".into()),
            RunId("run-1".into()),
            "order",
            Payload::Inline(json!({"item": "Lamp", "amount": 20})),
            Timestamp(1_700_000_000_000),
        );
        run.lease = Some(Lease {
            owner: "worker-a".into(),
            expires_at: Timestamp(1_700_000_060_000),
            epoch: FencingEpoch(3),
        });
        run.epoch = FencingEpoch(3);
        run.inbox_seq = 2;
        run.timeline_seq = 7;
        run.build_id = Some("shop@1.4.0+9f2c1e0".into());
        run.trace_parent = siesta::telemetry::TraceParent::parse(
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        );
        run
    }

    #[test]
    fn a_run_survives_the_round_trip_through_its_item() {
        let run = sample();
        let item = run_item(&run, Duration::from_secs(60)).unwrap();
        assert_eq!(run_from_item(&item).unwrap(), run);
    }

    #[test]
    fn a_run_without_lease_or_due_time_has_no_such_attributes() {
        let mut run = sample();
        run.lease = None;
        run.due_at = None;
        run.status = RunStatus::Completed;
        let item = run_item(&run, Duration::from_secs(60)).unwrap();
        for absent in [LEASE_EPOCH, LEASE_OWNER, LEASE_EXPIRES, DUE_AT, DUE_SHARD] {
            assert!(!item.contains_key(absent), "{absent} is absent");
        }
        assert_eq!(run_from_item(&item).unwrap(), run);
    }

    #[test]
    fn only_finished_runs_enter_the_reap_index_a_retention_after_they_finished() {
        let mut run = sample();
        let live = run_item(&run, Duration::from_secs(60)).unwrap();
        assert!(!live.contains_key(REAP_AT) && !live.contains_key(REAP_SHARD));
        run.status = RunStatus::Failed;
        let done = run_item(&run, Duration::from_secs(60)).unwrap();
        assert_eq!(
            done.get(REAP_AT),
            Some(&n(1_700_000_060_000u64)),
            "ms since the epoch, retention after the last update"
        );
        assert_eq!(
            done.get(REAP_SHARD),
            Some(&s(due_shard(&run.tenant, &run.id)))
        );
        assert!(
            !done.contains_key(EXPIRES_AT),
            "the run item goes last, by the reaper, never before its other items"
        );
    }

    #[test]
    fn a_record_kept_for_ever_expires_at_the_end_of_time_not_in_the_past() {
        let at = Timestamp(1_700_000_000_000);
        assert_eq!(
            expiry(at, Duration::from_secs(60)),
            n(1_700_000_060u64),
            "seconds since the epoch, retention after it closed"
        );
        assert_eq!(expiry(at, Duration::MAX), n(u64::MAX));
    }

    /// The attributes every run item has.
    const RUN_ALWAYS: [&str; 13] = [
        PK,
        SK,
        TENANT,
        RUN_ID,
        WORKFLOW,
        STATUS,
        VERSION,
        EPOCH,
        CREATED_AT,
        UPDATED_AT,
        TIMELINE_SEQ,
        CREATED_KEY,
        BODY,
    ];

    #[test]
    fn a_whole_run_write_removes_every_attribute_a_run_item_may_lack() {
        // Every attribute any run item has (a live run with lease, due time and resend,
        // a finished one in the reap index, a new one) is always set, or removed by a
        // write of a run that lacks it.
        let mut live = sample();
        live.due_at = Some(Timestamp(1_700_000_100_000));
        live.resend_after = Some(Timestamp(1_700_000_200_000));
        let mut done = sample();
        done.status = RunStatus::Completed;
        done.lease = None;
        done.due_at = None;
        let items = [
            run_item(&live, Duration::from_secs(60)).unwrap(),
            run_item(&done, Duration::from_secs(60)).unwrap(),
            run_item(&sample(), Duration::from_secs(60)).unwrap(),
        ];
        for item in &items {
            for name in item.keys() {
                assert!(
                    RUN_ALWAYS.contains(&name.as_str()) || RUN_OPTIONAL.contains(&name.as_str()),
                    "{name} is neither always written nor removed when absent"
                );
            }
        }
        let (expr, names, values) = run_update(&items[1], false, &[]);
        let removed: Vec<_> = expr
            .split(" REMOVE ")
            .nth(1)
            .unwrap()
            .split(", ")
            .map(|n| names[n].as_str())
            .collect();
        for name in [
            LEASE_OWNER,
            LEASE_EXPIRES,
            LEASE_EPOCH,
            DUE_AT,
            BUILD_KEY,
            REAP_CLAIM,
        ] {
            assert!(removed.contains(&name), "{name} removed: {expr}");
        }
        assert!(!removed.contains(&REAP_AT), "set, not removed");
        assert!(
            !names
                .values()
                .any(|n| n == PK || n == SK || n == TAIL || n == TAIL_SK),
            "the key is not written, the tail is kept: {expr}"
        );
        assert_eq!(
            values.len(),
            items[1].len() - 2,
            "every attribute but the key"
        );
    }

    #[test]
    fn a_run_body_leaves_out_empty_options_and_reads_back_with_them_written() {
        let run = sample();
        let item = run_item(&run, Duration::ZERO).unwrap();
        let body = get_s(&item, BODY, "test").unwrap();
        assert!(
            !body.contains("\"output\"") && !body.contains("\"parent\""),
            "{body}"
        );
        // As builds before this wrote it.
        let mut old = item.clone();
        let mut json: serde_json::Value = serde_json::from_str(body).unwrap();
        json["output"] = json!(null);
        json["error"] = json!(null);
        json["parent"] = json!(null);
        old.insert(BODY.into(), s(json.to_string()));
        assert_eq!(run_from_item(&old).unwrap(), run);
    }

    #[test]
    fn a_corrupt_run_item_is_an_error_not_a_panic() {
        let mut item = run_item(&sample(), Duration::ZERO).unwrap();
        item.insert(STATUS.into(), s("sleeping"));
        assert!(matches!(run_from_item(&item), Err(StoreError::Invalid(_))));
        item.remove(STATUS);
        assert!(matches!(run_from_item(&item), Err(StoreError::Invalid(_))));
    }

    /// An open callback's record, with `deadline`.
    fn open_record(deadline: Option<Timestamp>) -> CallbackRecord {
        CallbackRecord {
            callback_id: CallbackId("cb".into()),
            tenant: TenantId("t".into()),
            run_id: RunId("r".into()),
            position: Position("p".into()),
            status: CallbackStatus::Open,
            deadline,
            created_at: Timestamp(0),
            accepts: None,
            heartbeat: None,
        }
    }

    #[test]
    fn callback_status_attribute_matches_the_record() {
        let record = open_record(None);
        let item = callback_item(&record, Timestamp(0), Duration::ZERO).unwrap();
        assert_eq!(item.get(CALLBACK_STATUS), Some(&open_callback_status()));
        assert!(!item.contains_key(EXPIRES_AT));
        let closed = CallbackRecord {
            status: CallbackStatus::Completed,
            ..record
        };
        let item = callback_item(&closed, Timestamp(0), Duration::ZERO).unwrap();
        assert_ne!(item.get(CALLBACK_STATUS), Some(&open_callback_status()));
        assert!(item.contains_key(EXPIRES_AT));
        assert_eq!(callback_from_item(&item).unwrap(), closed);
    }

    #[test]
    fn an_open_callback_record_expires_a_retention_after_its_deadline_and_not_before() {
        let day = Duration::from_secs(24 * 3600);
        let record = open_record(Some(Timestamp(7_200_000)));
        let item = callback_item(&record, Timestamp(1_000), day).unwrap();
        assert_eq!(item.get(EXPIRES_AT), Some(&n(7_200 + 24 * 3600)));
        // Without a deadline it may wait for ever: the run closes it, or the reaper
        // finds it through the run's journal.
        let forever = CallbackRecord {
            deadline: None,
            ..record
        };
        let item = callback_item(&forever, Timestamp(1_000), day).unwrap();
        assert!(!item.contains_key(EXPIRES_AT));
    }
}
