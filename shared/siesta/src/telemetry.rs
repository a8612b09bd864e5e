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
    let mut hash = Sha256::new();
    for part in [tenant.as_str(), run_id.as_str()] {
        hash.update((part.len() as u64).to_be_bytes());
        hash.update(part.as_bytes());
    }
    let digest = hash.finalize();
    let mut id = [0u8; 16];
    id.copy_from_slice(&digest[..16]);
    if id == [0; 16] {
        id[15] = 1;
    }
    id
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
