//! Per-tenant quotas: how much one tenant may hold or send, so that one tenant cannot
//! take a deployment's storage, queue or workers from the others.
//!
//! A deployment configures [`Quotas`]: limits for every tenant (`default`) and
//! overrides for some (`tenants`), each limit left out meaning no limit. Over a limit,
//! the engine refuses with [`QuotaExceeded`] and records nothing (the API answers 429
//! with `Retry-After` and the limit's name).
//!
//! The count of a tenant's unfinished runs is kept by the store, in the same atomic
//! write that creates or finishes a run (see
//! [`RunStore::create_run_within`](crate::ports::RunStore::create_run_within)), so two
//! starts racing for the last slot cannot both win. The start rate is a token bucket
//! per tenant in this process ([`StartRate`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::model::TenantId;
use crate::time::Timestamp;

/// One tenant's limits; `None` is no limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Quota {
    /// Most runs not yet finished (pending, running, waiting or parked) at once. Runs a
    /// workflow starts (`invoke`) count, but are never refused: only starts are.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unfinished_runs: Option<u64>,
    /// Most starts per minute (a bucket of this many, refilled evenly).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub starts_per_minute: Option<u32>,
    /// Largest input of a start, in bytes of JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_input_bytes: Option<u64>,
    /// Largest delivery (an event, a message, a callback's result), in bytes of JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_delivery_bytes: Option<u64>,
    /// Most deliveries a run holds that it has not yet taken in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_pending_deliveries: Option<u64>,
    /// How many days the tenant's finished runs are kept, in place of the deployment's
    /// retention (`0`: for ever); a workflow with a retention of its own keeps it. Not
    /// a limit the engine checks: the AWS backend's reaper reads it
    /// (docs/retention.md); the dev server keeps every tenant's runs for its
    /// `--retention`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention_days: Option<u64>,
}

impl Quota {
    /// `self`, with each limit `over` sets replacing this one's.
    pub fn overridden_by(self, over: &Quota) -> Quota {
        Quota {
            max_unfinished_runs: over.max_unfinished_runs.or(self.max_unfinished_runs),
            starts_per_minute: over.starts_per_minute.or(self.starts_per_minute),
            max_input_bytes: over.max_input_bytes.or(self.max_input_bytes),
            max_delivery_bytes: over.max_delivery_bytes.or(self.max_delivery_bytes),
            max_pending_deliveries: over.max_pending_deliveries.or(self.max_pending_deliveries),
            retention_days: over.retention_days.or(self.retention_days),
        }
    }
}

/// A deployment's quotas: limits for every tenant, and per-tenant overrides. As JSON
/// (`siesta dev --quotas FILE`, `SIESTA_QUOTAS` or its SSM parameter on Lambda):
///
/// ```json
/// {"default": {"max_unfinished_runs": 1000, "starts_per_minute": 600,
///              "max_input_bytes": 262144, "max_delivery_bytes": 262144,
///              "max_pending_deliveries": 1000},
///  "tenants": {"acme": {"max_unfinished_runs": 10000}}}
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Quotas {
    /// Every tenant's limits.
    #[serde(default)]
    pub default: Quota,
    /// Overrides by tenant: each limit given replaces the default's.
    #[serde(default)]
    pub tenants: BTreeMap<String, Quota>,
}

impl Quotas {
    /// Parse the JSON form; empty text is no quotas.
    pub fn parse(json: &str) -> Result<Quotas, String> {
        if json.trim().is_empty() {
            return Ok(Quotas::default());
        }
        serde_json::from_str(json).map_err(|e| format!("quotas: {e}"))
    }

    /// The limits that hold for `tenant`.
    pub fn for_tenant(&self, tenant: &TenantId) -> Quota {
        match self.tenants.get(tenant.as_str()) {
            Some(over) => self.default.overridden_by(over),
            None => self.default,
        }
    }
}

/// Which limit was reached: its name is the [`Quota`] field's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuotaLimit {
    /// [`Quota::max_unfinished_runs`].
    UnfinishedRuns,
    /// [`Quota::starts_per_minute`].
    StartRate,
    /// [`Quota::max_input_bytes`].
    InputBytes,
    /// [`Quota::max_delivery_bytes`].
    DeliveryBytes,
    /// [`Quota::max_pending_deliveries`].
    PendingDeliveries,
}

impl QuotaLimit {
    /// The limit's name, as configured.
    pub fn as_str(self) -> &'static str {
        match self {
            QuotaLimit::UnfinishedRuns => "max_unfinished_runs",
            QuotaLimit::StartRate => "starts_per_minute",
            QuotaLimit::InputBytes => "max_input_bytes",
            QuotaLimit::DeliveryBytes => "max_delivery_bytes",
            QuotaLimit::PendingDeliveries => "max_pending_deliveries",
        }
    }
}

/// A request refused because its tenant reached a limit; nothing was recorded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("quota {} reached: {message}", limit.as_str())]
pub struct QuotaExceeded {
    /// The limit.
    pub limit: QuotaLimit,
    /// What was asked and what is allowed, for a person.
    pub message: String,
    /// When trying again may succeed.
    pub retry_after: Duration,
}

impl QuotaExceeded {
    /// A limit on a size or a count that frees up as runs progress: retry in a second.
    pub fn new(limit: QuotaLimit, message: impl Into<String>) -> Self {
        QuotaExceeded {
            limit,
            message: message.into(),
            retry_after: Duration::from_secs(1),
        }
    }
}

/// The size of `value` as JSON, in bytes, counted without building the text.
pub fn json_size(value: &serde_json::Value) -> u64 {
    struct Count(u64);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len() as u64;
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Writing a `Value` into a counter cannot fail.
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

/// Refuse `bytes` over `max`.
pub fn check_size(
    limit: QuotaLimit,
    what: &str,
    bytes: u64,
    max: Option<u64>,
) -> Result<(), QuotaExceeded> {
    match max {
        Some(max) if bytes > max => Err(QuotaExceeded::new(
            limit,
            format!("{what} is {bytes} bytes; this tenant's limit is {max}"),
        )),
        _ => Ok(()),
    }
}

/// Token buckets of starts, one per tenant, in this process: `per_minute` tokens,
/// refilled evenly over a minute. Behind several processes (Lambda instances) each
/// keeps its own, so a tenant's rate there is per instance.
#[derive(Debug, Default)]
pub struct StartRate {
    buckets: Mutex<HashMap<TenantId, Bucket>>,
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Timestamp,
}

impl StartRate {
    /// Take a start from `tenant`'s bucket at `now`; when it is empty, how long until
    /// it holds one.
    pub fn take(&self, tenant: &TenantId, per_minute: u32, now: Timestamp) -> Result<(), Duration> {
        let capacity = f64::from(per_minute.max(1));
        let per_ms = capacity / 60_000.0;
        let mut buckets = self
            .buckets
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let bucket = buckets.entry(tenant.clone()).or_insert(Bucket {
            tokens: capacity,
            at: now,
        });
        let elapsed = (now.millis() - bucket.at.millis()).max(0) as f64;
        bucket.tokens = (bucket.tokens + elapsed * per_ms).min(capacity);
        bucket.at = Timestamp(now.0.max(bucket.at.0));
        if per_minute == 0 {
            return Err(Duration::from_secs(60));
        }
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            Ok(())
        } else {
            let wait_ms = ((1.0 - bucket.tokens) / per_ms).ceil() as u64;
            Err(Duration::from_millis(wait_ms.max(1)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tenant_override_replaces_only_the_limits_it_names() {
        let quotas = Quotas::parse(
            r#"{"default": {"max_unfinished_runs": 10, "max_input_bytes": 100},
                "tenants": {"acme": {"max_unfinished_runs": 1000}}}"#,
        )
        .unwrap();
        let acme = quotas.for_tenant(&TenantId::from("acme"));
        assert_eq!(acme.max_unfinished_runs, Some(1000));
        assert_eq!(acme.max_input_bytes, Some(100));
        assert_eq!(
            quotas
                .for_tenant(&TenantId::from("other"))
                .max_unfinished_runs,
            Some(10)
        );
        assert_eq!(Quotas::parse("  ").unwrap(), Quotas::default());
    }

    #[test]
    fn an_unknown_limit_is_refused_with_its_name() {
        let e = Quotas::parse(r#"{"default": {"max_runs": 1}}"#).unwrap_err();
        assert!(e.contains("max_runs"), "{e}");
    }

    #[test]
    fn the_start_bucket_allows_a_minutes_worth_then_says_when_the_next_start_fits() {
        let rate = StartRate::default();
        let tenant = TenantId::from("t");
        let t0 = Timestamp(1_000_000);
        for _ in 0..6 {
            rate.take(&tenant, 6, t0).unwrap();
        }
        // 6 a minute: one every 10 s.
        assert_eq!(rate.take(&tenant, 6, t0), Err(Duration::from_secs(10)));
        assert_eq!(
            rate.take(&tenant, 6, Timestamp(t0.0 + 4_000)),
            Err(Duration::from_secs(6))
        );
        rate.take(&tenant, 6, Timestamp(t0.0 + 10_000)).unwrap();
        // Another tenant has its own bucket.
        rate.take(&TenantId::from("u"), 6, t0).unwrap();
    }

    #[test]
    fn a_json_size_is_the_length_of_its_text() {
        let value = serde_json::json!({"item": "book", "amount": [1, 2.5, null]});
        assert_eq!(
            json_size(&value),
            serde_json::to_vec(&value).unwrap().len() as u64
        );
    }

    #[test]
    fn sizes_over_the_limit_name_it() {
        assert!(check_size(QuotaLimit::InputBytes, "the input", 10, Some(10)).is_ok());
        assert!(check_size(QuotaLimit::InputBytes, "the input", 11, None).is_ok());
        let e = check_size(QuotaLimit::InputBytes, "the input", 11, Some(10)).unwrap_err();
        assert_eq!(e.limit.as_str(), "max_input_bytes");
        assert!(e.to_string().contains("11 bytes"), "{e}");
    }
}
