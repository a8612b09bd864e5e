//! A run's place in a trace: W3C Trace Context's `traceparent` as a run stores it, and
//! the trace and root span ids a run derives from its own id (see [`crate::telemetry`],
//! which names the spans and hands them to an exporter). In the model because a run
//! carries its [`TraceParent`]; depends on nothing but the ids.

use sha2::{Digest, Sha256};

use super::{RunId, TenantId};

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

/// The span id of the run's root: the parent every [`EXECUTION_SPAN`](crate::telemetry::EXECUTION_SPAN) of the run names
/// (bytes 16 to 24 of the same hash), so a backend groups the wake-ups under one
/// parent, emitted as the [`RUN_SPAN`](crate::telemetry::RUN_SPAN) when the run ends. Never all zeros.
pub fn root_span_id_for(tenant: &TenantId, run_id: &RunId) -> [u8; 8] {
    let digest = run_digest(tenant, run_id);
    let mut id = [0u8; 8];
    id.copy_from_slice(&digest[16..24]);
    if id == [0; 8] {
        id[7] = 1;
    }
    id
}

/// A W3C Trace Context parent (`traceparent`): a trace id, the id of the span to parent
/// on, and whether the caller sampled it. Stored with a run started with one
/// ([`crate::Run::trace_parent`]), written as the header's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct TraceParent {
    /// The trace's id (never all zeros).
    pub trace_id: [u8; 16],
    /// The parent span's id (never all zeros).
    pub span_id: [u8; 8],
    /// The caller's sampled flag.
    pub sampled: bool,
}

impl TraceParent {
    /// The `traceparent` header's value parsed: version `00` (or a later one, read as
    /// `00` as the spec says), lowercase hex, neither id all zeros; `None` otherwise.
    pub fn parse(header: &str) -> Option<TraceParent> {
        let header = header.trim();
        let mut parts = header.split('-');
        let (version, trace, span, flags) =
            (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        let lower_hex = |s: &str, n: usize| {
            s.len() == n
                && s.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        };
        if !lower_hex(version, 2) || version == "ff" || !lower_hex(flags, 2) {
            return None;
        }
        // Version 00 has exactly four fields; a later version may append more.
        if version == "00" && parts.next().is_some() {
            return None;
        }
        if !lower_hex(trace, 32) || !lower_hex(span, 16) {
            return None;
        }
        let mut parent = TraceParent {
            trace_id: [0; 16],
            span_id: [0; 8],
            sampled: u8::from_str_radix(flags, 16).ok()? & 1 == 1,
        };
        hex::decode_to_slice(trace, &mut parent.trace_id).ok()?;
        hex::decode_to_slice(span, &mut parent.span_id).ok()?;
        if parent.trace_id == [0; 16] || parent.span_id == [0; 8] {
            return None;
        }
        Some(parent)
    }

    /// The run's own parent when it was started with none: its derived trace and its
    /// root's span id ([`trace_id_for`], [`root_span_id_for`]), sampled.
    pub fn derived(tenant: &TenantId, run_id: &RunId) -> TraceParent {
        TraceParent {
            trace_id: trace_id_for(tenant, run_id),
            span_id: root_span_id_for(tenant, run_id),
            sampled: true,
        }
    }

    /// The trace id as W3C Trace Context writes it: 32 lowercase hex digits.
    pub fn trace_id_hex(&self) -> String {
        hex::encode(self.trace_id)
    }
}

impl std::fmt::Display for TraceParent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "00-{}-{}-{:02x}",
            hex::encode(self.trace_id),
            hex::encode(self.span_id),
            u8::from(self.sampled)
        )
    }
}

impl From<TraceParent> for String {
    fn from(parent: TraceParent) -> String {
        parent.to_string()
    }
}

impl TryFrom<String> for TraceParent {
    type Error = String;

    fn try_from(header: String) -> Result<TraceParent, String> {
        TraceParent::parse(&header).ok_or_else(|| format!("not a W3C traceparent: {header:?}"))
    }
}

/// SHA-256 over the tenant and the run id, each length-prefixed.
fn run_digest(tenant: &TenantId, run_id: &RunId) -> [u8; 32] {
    let mut hash = Sha256::new();
    for part in [tenant.as_str(), run_id.as_str()] {
        hash.update((part.len() as u64).to_be_bytes());
        hash.update(part.as_bytes());
    }
    hash.finalize().into()
}
