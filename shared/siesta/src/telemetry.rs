//! What a tracing backend sees of a run: its trace id and the names of the spans the
//! engine opens (see docs/telemetry.md).
//!
//! The core emits spans through `tracing` only; exporting them (OpenTelemetry, OTLP) is
//! the application's business. A run's wake-ups happen days and processes apart, so
//! none of them can hand its trace context to the next in memory: every wake-up derives
//! the same trace id from the run instead, records it on its span as
//! [`TRACE_ID_FIELD`], and an exporter parents the span on that trace, under the run's
//! root span ([`root_span_id_for`]). No process holds that root open for the run's
//! life: it is emitted whole when the run ends ([`RunSpan`]).

use crate::model::{RunId, TenantId};
pub use crate::model::{TraceParent, root_span_id_for, trace_id_for};
use sha2::{Digest, Sha256};

/// The span of one wake-up's handling (AWS's durable-execution SDK names its
/// per-invocation span the same).
pub const EXECUTION_SPAN: &str = "durable_execution";

/// The span of one operation attempt that actually runs (never a replayed one).
pub const OPERATION_SPAN: &str = "durable_operation";

/// The span of a whole run, from its creation to its end: the root of a run's trace
/// when it was started with no `traceparent` ([`RunSpan`]).
pub const RUN_SPAN: &str = "durable_run";

/// The field of the [`EXECUTION_SPAN`] that carries the run's trace id, 32 lowercase hex
/// digits.
pub const TRACE_ID_FIELD: &str = "siesta.trace_id";

/// The parent of every wake-up's [`EXECUTION_SPAN`] of `run`: the one it was started
/// with, else its derived one ([`TraceParent::derived`]).
pub fn run_trace_parent(run: &crate::model::Run) -> TraceParent {
    run.trace_parent
        .unwrap_or_else(|| TraceParent::derived(&run.tenant, &run.id))
}

/// The span id of the wait of the `invoke` that started the child run `child_id` (a
/// SHA-256 of the id): the span the child's wake-ups name as their parent from its
/// first one, though the wait's span is emitted only when the child has finished
/// ([`WaitSpan::span_id`]). A child's id is derived from its parent's and the invoke's
/// position, so it is unique within the trace. Never all zeros.
pub fn invoke_span_id_for(child_id: &RunId) -> [u8; 8] {
    let mut hash = Sha256::new();
    for part in ["invoke", child_id.as_str()] {
        hash.update((part.len() as u64).to_be_bytes());
        hash.update(part.as_bytes());
    }
    let digest: [u8; 32] = hash.finalize().into();
    let mut id = [0u8; 8];
    id.copy_from_slice(&digest[..8]);
    if id == [0; 8] {
        id[7] = 1;
    }
    id
}

/// The trace a child run started by `parent`'s invoke joins: `parent`'s
/// ([`run_trace_parent`], so a caller's trace when the parent joined one), under the
/// invoke's wait span ([`invoke_span_id_for`]). Stored with the child as its
/// [`crate::Run::trace_parent`].
pub fn child_trace_parent(parent: &crate::model::Run, child_id: &RunId) -> TraceParent {
    let trace = run_trace_parent(parent);
    TraceParent {
        span_id: invoke_span_id_for(child_id),
        ..trace
    }
}

/// A wait (timer, callback, event, condition, child run) that ended, reported once, by
/// the pass that saw it end: its span spans wake-ups, so it is emitted whole, with the
/// recorded start ([`Exporter::wait_ended`]). A wait's [`OPERATION_SPAN`].
#[derive(Debug, Clone)]
pub struct WaitSpan {
    /// The operation's kind, as the journal names it: `wait` (a timer), `callback`,
    /// `event`, `condition` (the pause before one check), `invoke` (a child run's
    /// result).
    pub kind: &'static str,
    /// AWS's operation sub-type: `Wait`, `Callback`, `WaitForEvent`,
    /// `WaitForCondition`, `ChainedInvoke`.
    pub sub_type: &'static str,
    /// The operation's name.
    pub name: String,
    /// Its position (`name#n`), the `operationId`.
    pub position: String,
    /// When the wait began.
    pub started_at: crate::time::Timestamp,
    /// When it ended (the pass that saw it end).
    pub ended_at: crate::time::Timestamp,
    /// What ended it: `succeeded`, `failed` (see `error_kind`: `TimedOut`, …), or
    /// `elapsed` (a condition's next check came due).
    pub outcome: &'static str,
    /// The error's kind when it failed.
    pub error_kind: Option<String>,
    /// A condition's check the wait preceded (from 2); `None` for other waits.
    pub attempt: Option<u32>,
    /// The span's own id, when others named it before it was emitted: an invoke's,
    /// the parent of its child run's wake-ups ([`invoke_span_id_for`]). `None`: any.
    pub span_id: Option<[u8; 8]>,
}

/// The wait that `after` ends, `before` being the operation's journal entry until now:
/// a `Waiting` entry settled (succeeded or failed), or a condition's pause between
/// checks over (its next check written). Never names a callback's token.
pub(crate) fn wait_ended(
    before: &crate::model::JournalEntry,
    after: &crate::model::JournalEntry,
) -> Option<WaitSpan> {
    use crate::model::{EntryState, WaitKind};
    let mut span_id = None;
    let (sub_type, started_at, attempt) = match &before.state {
        EntryState::Waiting(wait) => {
            let sub_type = match &wait.kind {
                WaitKind::Timer => "Wait",
                WaitKind::Callback { .. } => "Callback",
                WaitKind::Event { .. } => "WaitForEvent",
                WaitKind::Child { run_id } => {
                    span_id = Some(invoke_span_id_for(run_id));
                    "ChainedInvoke"
                }
            };
            (sub_type, wait.started_at, None)
        }
        EntryState::Polling { attempt, .. } => {
            ("WaitForCondition", before.updated_at, Some(attempt + 1))
        }
        _ => return None,
    };
    let (outcome, error_kind) = match &after.state {
        EntryState::Succeeded { .. } => ("succeeded", None),
        EntryState::Failed { error, .. } => ("failed", Some(error.kind.clone())),
        EntryState::Polling { .. } if attempt.is_some() => ("elapsed", None),
        _ => return None,
    };
    Some(WaitSpan {
        kind: after.kind.as_str(),
        sub_type,
        name: after.name.clone(),
        position: after.position.to_string(),
        started_at,
        ended_at: after.updated_at,
        outcome,
        error_kind,
        attempt,
        span_id,
    })
}

/// A run that ended, whose [`RUN_SPAN`] is the root of its trace: the span every
/// wake-up of the run named as its parent from the first ([`root_span_id_for`]),
/// emitted once, whole, by the write that finished the run. Only a run started with no
/// `traceparent` has one: the wake-ups of a run started with one hang under its start
/// request, and a child run's (`invoke`) under its parent's invoke, both spans that
/// others emit.
#[derive(Debug, Clone)]
pub struct RunSpan {
    /// The run's trace ([`trace_id_for`]).
    pub trace_id: [u8; 16],
    /// The span's own id ([`root_span_id_for`]).
    pub span_id: [u8; 8],
    /// The run's tenant.
    pub tenant: String,
    /// The run's id.
    pub run_id: String,
    /// Its workflow.
    pub workflow: String,
    /// The build it ran on, when it recorded one.
    pub build_id: Option<String>,
    /// How it ended: completed, failed or cancelled.
    pub status: crate::model::RunStatus,
    /// Its error's kind when it did not complete.
    pub error_kind: Option<String>,
    /// When the run was created.
    pub started_at: crate::time::Timestamp,
    /// When it ended.
    pub ended_at: crate::time::Timestamp,
}

/// What the core asks of a span exporter; an exporter installs one
/// ([`set_exporter`]) so the core depends on none. Every method is called on spans of
/// this process's subscriber and must not block.
pub trait Exporter: Send + Sync + 'static {
    /// Make `parent` (a remote span) the parent of `span`, before it is entered.
    fn set_parent(&self, span: &tracing::Span, parent: TraceParent);
    /// Link `span` to `to`: a span that learns which run it served only once it runs
    /// (a webhook's delivery, a start without a `traceparent`).
    fn add_link(&self, span: &tracing::Span, to: TraceParent);
    /// `span`'s own context as a `traceparent`: what an outgoing call made under it
    /// sends. `None` when the span is not exported.
    fn context(&self, span: &tracing::Span) -> Option<TraceParent>;
    /// Emit the span of a wait that ended, as a child of `parent` (the wake-up's span),
    /// with its recorded start and end, and its [`WaitSpan::span_id`] when it has one.
    fn wait_ended(&self, parent: &tracing::Span, wait: &WaitSpan);
    /// Emit the root span of a run that ended, with no parent, its trace and span ids
    /// those of [`RunSpan`] and its recorded start and end. Not on any span of this
    /// process: it may be called outside a wake-up (a waiting run cancelled).
    fn run_finished(&self, run: &RunSpan);
}

static EXPORTER: std::sync::OnceLock<Box<dyn Exporter>> = std::sync::OnceLock::new();

/// Install the [`Exporter`], once per process; false if one was installed already (the
/// first stays).
pub fn set_exporter(exporter: impl Exporter) -> bool {
    EXPORTER.set(Box::new(exporter)).is_ok()
}

fn exporter() -> Option<&'static dyn Exporter> {
    EXPORTER.get().map(|e| &**e)
}

/// Parent `span` on `parent` when an exporter is installed.
pub fn set_parent(span: &tracing::Span, parent: TraceParent) {
    if let Some(e) = exporter() {
        e.set_parent(span, parent);
    }
}

/// Link `span` to `run`'s trace ([`run_trace_parent`]) when an exporter is installed.
pub fn link_to_run(span: &tracing::Span, run: &crate::model::Run) {
    if let Some(e) = exporter() {
        e.add_link(span, run_trace_parent(run));
    }
}

/// The current span's context as a `traceparent`, when an exporter is installed and
/// the span is exported.
pub fn current_trace_parent() -> Option<TraceParent> {
    exporter()?.context(&tracing::Span::current())
}

/// Whether an exporter is installed (what the core computes only for one is skipped
/// otherwise).
pub fn exporting() -> bool {
    EXPORTER.get().is_some()
}

/// `span`'s context as a `traceparent`, when an exporter is installed and the span is
/// exported.
pub fn trace_parent_of(span: &tracing::Span) -> Option<TraceParent> {
    exporter()?.context(span)
}

/// Parent a wake-up's span on its run's trace, `trace` ([`run_trace_parent`], derived
/// once per wake-up by the caller: each derivation is two SHA-256 digests).
pub(crate) fn on_execution_span(span: &tracing::Span, trace: TraceParent) {
    set_parent(span, trace);
}

pub(crate) fn on_wait_ended(parent: &tracing::Span, wait: &WaitSpan) {
    if let Some(e) = exporter() {
        e.wait_ended(parent, wait);
    }
}

/// Report `run`, which has just ended with `status` and `error` (its finishing write
/// committed), as its trace's root when it has one (see [`RunSpan`]).
pub(crate) fn on_run_finished(
    run: &crate::model::Run,
    status: crate::model::RunStatus,
    error: Option<&crate::model::ErrorInfo>,
    ended_at: crate::time::Timestamp,
) {
    let Some(e) = exporter() else {
        return;
    };
    if run.trace_parent.is_some() || !status.is_finished() {
        return;
    }
    e.run_finished(&RunSpan {
        trace_id: trace_id_for(&run.tenant, &run.id),
        span_id: root_span_id_for(&run.tenant, &run.id),
        tenant: run.tenant.to_string(),
        run_id: run.id.to_string(),
        workflow: run.workflow.clone(),
        build_id: run.build_id.clone(),
        status,
        error_kind: error.map(|e| e.kind.clone()),
        started_at: run.created_at,
        ended_at,
    });
}

/// [`trace_id_for`] as W3C Trace Context writes it: 32 lowercase hex digits.
pub fn trace_id_hex(tenant: &TenantId, run_id: &RunId) -> String {
    hex::encode(trace_id_for(tenant, run_id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_reads_back_as_it_was_written_and_bad_ones_are_refused() {
        let header = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let parent = TraceParent::parse(header).unwrap();
        assert!(parent.sampled);
        assert_eq!(parent.to_string(), header);
        assert_eq!(parent.trace_id_hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
        let json = serde_json::to_string(&parent).unwrap();
        assert_eq!(serde_json::from_str::<TraceParent>(&json).unwrap(), parent);
        assert!(
            !TraceParent::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00")
                .unwrap()
                .sampled
        );
        for bad in [
            "",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
        ] {
            assert_eq!(TraceParent::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn trace_id_is_stable_and_differs_by_tenant_and_run() {
        let t = TenantId::from("acme");
        let r = RunId::from("run_1");
        assert_eq!(trace_id_for(&t, &r), trace_id_for(&t, &r));
        assert_eq!(trace_id_hex(&t, &r).len(), 32);
        assert_ne!(
            trace_id_for(&t, &r),
            trace_id_for(&TenantId::from("acm"), &RunId::from("erun_1"))
        );
        assert_ne!(
            trace_id_for(&t, &r),
            trace_id_for(&t, &RunId::from("run_2"))
        );
    }
}
