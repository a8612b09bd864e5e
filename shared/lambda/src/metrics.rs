//! CloudWatch Embedded Metric Format: one JSON line on stdout that CloudWatch Logs turns
//! into metrics, without an API call from the function.
//!
//! The functions' metrics, in namespace `Siesta` with the dimension `Function`:
//!
//! | function | metric | unit | what |
//! |---|---|---|---|
//! | step | `StepLatency` | ms | each wake-up's handling (one sample per wake-up) |
//! | step | `WakeUps`, `Advanced` | count | wake-ups in the batch; runs advanced |
//! | step | `Conflicts` | count | wake-ups for a run another invocation held (lease) |
//! | step | `Aborted` | count | invocations that lost their lease or storage mid-run |
//! | step | `Retries` | count | records SQS delivered again (`ApproximateReceiveCount` > 1) |
//! | step | `BatchItemFailures` | count | records reported failed (incl. poison messages) |
//! | step | `Forwarded`, `WakeupsForUnservedBuild` | count | wake-ups forwarded to their build's version; wake-ups for a build no version serves |
//! | start | `IdempotentReplays` | count | a request answered from its `Idempotency-Key` |
//! | start | `StartsQueued`, `StartsJoined` | count | by `Limit` too: a start queued by a concurrency limit, a start rate or a debounce (its name); a start a debounce gathered into a run queued already |
//! | webhook | `WebhookDuplicates` | count | a delivery already received |
//! | webhook | `WebhooksRefused` | count | a non-2xx answer (bad signature, unknown source…) |
//! | sweep | `SweepWoken`, `SweepExpiredLeases`, `SweepDueWaits`, `SweepLostWakeUps`, `SweepDeadLetters`, `SweepParkedDeadLetters`, `SweepScheduled`, `SweepActionJobs` | count | what the sweep did (`SweepScheduled`: runs started for schedules' ticks; `SweepActionJobs`: stalled bulk actions woken again) |
//! | sweep | `RunsOnUndeployedBuilds`, `UndeployedBuilds` | count | the drain check (every 5 min): unfinished runs whose build no step version serves any more, and those builds |

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value, json};

/// The namespace every Siesta metric is in.
pub const NAMESPACE: &str = "Siesta";

/// A unit CloudWatch knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// A count.
    Count,
    /// Milliseconds.
    Milliseconds,
}

impl Unit {
    fn as_str(self) -> &'static str {
        match self {
            Unit::Count => "Count",
            Unit::Milliseconds => "Milliseconds",
        }
    }
}

/// One metric of an EMF line: its name, unit and values. One value is written as a
/// number, several as an array (EMF's way of carrying up to 100 samples in one line, e.g.
/// the latency of each wake-up in a batch); a metric without values is left out.
pub type Metric<'a> = (&'a str, Unit, &'a [f64]);

/// The EMF line for `metrics` of `function` (the one dimension), at `timestamp_ms`.
pub fn line(function: &str, metrics: &[Metric<'_>], timestamp_ms: u128) -> String {
    line_by(function, &[], metrics, timestamp_ms)
}

/// [`line()`], the metrics also by the dimensions `by` (name, value): e.g. per limit.
pub fn line_by(
    function: &str,
    by: &[(&str, &str)],
    metrics: &[Metric<'_>],
    timestamp_ms: u128,
) -> String {
    let metrics: Vec<&Metric<'_>> = metrics.iter().filter(|(_, _, v)| !v.is_empty()).collect();
    let dimensions: Vec<&str> = std::iter::once("Function")
        .chain(by.iter().map(|(name, _)| *name))
        .collect();
    let mut root = Map::new();
    root.insert(
        "_aws".into(),
        json!({
            "Timestamp": timestamp_ms as u64,
            "CloudWatchMetrics": [{
                "Namespace": NAMESPACE,
                "Dimensions": [dimensions],
                "Metrics": metrics.iter().map(|(name, unit, _)| json!({"Name": name, "Unit": unit.as_str()})).collect::<Vec<_>>(),
            }],
        }),
    );
    root.insert("Function".into(), Value::from(function));
    for (name, value) in by {
        root.insert((*name).into(), Value::from(*value));
    }
    for (name, _, values) in metrics {
        let value = match values {
            [one] => json!(one),
            many => json!(many),
        };
        root.insert((*name).into(), value);
    }
    Value::Object(root).to_string()
}

/// Print the EMF line for `metrics` of `function`, now.
pub fn emit(function: &str, metrics: &[Metric<'_>]) {
    emit_by(function, &[], metrics);
}

/// Print the EMF line for `metrics` of `function` by the dimensions `by`, now.
pub fn emit_by(function: &str, by: &[(&str, &str)], metrics: &[Metric<'_>]) {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    println!("{}", line_by(function, by, metrics, now));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_emf_line_declares_each_metric_and_carries_its_value() {
        let l = line(
            "step",
            &[
                ("StepLatency", Unit::Milliseconds, &[12.5]),
                ("Conflicts", Unit::Count, &[1.0]),
            ],
            1_700_000_000_000,
        );
        let v: Value = serde_json::from_str(&l).unwrap();
        assert_eq!(v["_aws"]["Timestamp"], 1_700_000_000_000u64);
        let cw = &v["_aws"]["CloudWatchMetrics"][0];
        assert_eq!(cw["Namespace"], "Siesta");
        assert_eq!(cw["Dimensions"], json!([["Function"]]));
        assert_eq!(
            cw["Metrics"],
            json!([{"Name": "StepLatency", "Unit": "Milliseconds"}, {"Name": "Conflicts", "Unit": "Count"}])
        );
        assert_eq!(v["Function"], "step");
        assert_eq!(v["StepLatency"], 12.5);
        assert_eq!(v["Conflicts"], 1.0);
        assert!(!l.contains('\n'), "one line");
    }

    #[test]
    fn several_values_of_a_metric_are_one_array_and_a_metric_without_values_is_left_out() {
        let l = line(
            "step",
            &[
                ("StepLatency", Unit::Milliseconds, &[3.0, 40.0, 7.5]),
                ("Retries", Unit::Count, &[]),
            ],
            1,
        );
        let v: Value = serde_json::from_str(&l).unwrap();
        assert_eq!(v["StepLatency"], json!([3.0, 40.0, 7.5]));
        assert_eq!(
            v["_aws"]["CloudWatchMetrics"][0]["Metrics"],
            json!([{"Name": "StepLatency", "Unit": "Milliseconds"}])
        );
        assert!(v.get("Retries").is_none(), "{l}");
    }

    #[test]
    fn a_line_by_a_limit_declares_both_dimensions_and_carries_the_limit() {
        let l = line_by(
            "start",
            &[("Limit", "per-customer")],
            &[("StartsQueued", Unit::Count, &[1.0])],
            1,
        );
        let v: Value = serde_json::from_str(&l).unwrap();
        assert_eq!(
            v["_aws"]["CloudWatchMetrics"][0]["Dimensions"],
            json!([["Function", "Limit"]])
        );
        assert_eq!(v["Limit"], "per-customer");
        assert_eq!(v["StartsQueued"], 1.0);
    }
}
