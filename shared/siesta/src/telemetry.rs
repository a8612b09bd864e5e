//! What a tracing backend sees of a run: its trace id and the names of the spans the
//! engine opens (see docs/telemetry.md).
//!
//! The core emits spans through `tracing` only; exporting them (OpenTelemetry, OTLP) is
//! the application's business. A run's wake-ups happen days and processes apart, so
//! none of them can hand its trace context to the next in memory: every wake-up derives
//! the same trace id from the run instead, records it on its span as
//! [`TRACE_ID_FIELD`], and an exporter parents the span on that trace.

use sha2::{Digest, Sha256};

use crate::model::{RunId, TenantId};

/// The span of one wake-up's handling (AWS's durable-execution SDK names its
/// per-invocation span the same).
pub const EXECUTION_SPAN: &str = "durable_execution";

/// The span of one operation attempt that actually runs (never a replayed one).
pub const OPERATION_SPAN: &str = "durable_operation";

/// The field of the [`EXECUTION_SPAN`] that carries the run's trace id, 32 lowercase hex
/// digits.
pub const TRACE_ID_FIELD: &str = "siesta.trace_id";

/// The run's trace id: the first 16 bytes of SHA-256 over the tenant and the run id
/// (each length-prefixed, so no two pairs collide by shifting a boundary). Never all
/// zeros, which W3C Trace Context forbids.
pub fn trace_id_for(tenant: &TenantId, run_id: &RunId) -> [u8; 16] {
    let digest = run_digest(tenant, run_id);
    let mut id = [0u8; 16];
    id.copy_from_slice(&digest[..16]);
    if id == [0; 16] {
        id[15] = 1;
    }
    id
}

/// The span id of the run's virtual root: the parent every [`EXECUTION_SPAN`] of the run
/// names (bytes 16 to 24 of the same hash), so a backend groups the wake-ups under one
/// parent. Never all zeros.
pub fn root_span_id_for(tenant: &TenantId, run_id: &RunId) -> [u8; 8] {
    let digest = run_digest(tenant, run_id);
    let mut id = [0u8; 8];
    id.copy_from_slice(&digest[16..24]);
    if id == [0; 8] {
        id[7] = 1;
    }
    id
}

/// Called with each new [`EXECUTION_SPAN`], its run's trace id and root span id; an
/// exporter installs one to put the span in the run's trace (the core depends on no
/// exporter).
pub type ExecutionSpanHook = fn(&tracing::Span, [u8; 16], [u8; 8]);

static HOOK: std::sync::OnceLock<ExecutionSpanHook> = std::sync::OnceLock::new();

/// Install the [`ExecutionSpanHook`], once per process; false if one was installed
/// already (the first stays).
pub fn set_execution_span_hook(hook: ExecutionSpanHook) -> bool {
    HOOK.set(hook).is_ok()
}

pub(crate) fn on_execution_span(span: &tracing::Span, tenant: &TenantId, run_id: &RunId) {
    if let Some(hook) = HOOK.get() {
        hook(
            span,
            trace_id_for(tenant, run_id),
            root_span_id_for(tenant, run_id),
        );
    }
}

fn run_digest(tenant: &TenantId, run_id: &RunId) -> [u8; 32] {
    let mut hash = Sha256::new();
    for part in [tenant.as_str(), run_id.as_str()] {
        hash.update((part.len() as u64).to_be_bytes());
        hash.update(part.as_bytes());
    }
    hash.finalize().into()
}

/// [`trace_id_for`] as W3C Trace Context writes it: 32 lowercase hex digits.
pub fn trace_id_hex(tenant: &TenantId, run_id: &RunId) -> String {
    hex::encode(trace_id_for(tenant, run_id))
}

#[cfg(test)]
mod tests {
    use super::*;

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
