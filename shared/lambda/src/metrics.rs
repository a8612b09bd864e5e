//! CloudWatch Embedded Metric Format: one JSON line on stdout that CloudWatch Logs turns
//! into metrics, without an API call from the function.

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

/// The EMF line for `metrics` of `function` (the one dimension), at `timestamp_ms`.
pub fn line(function: &str, metrics: &[(&str, Unit, f64)], timestamp_ms: u128) -> String {
    let mut root = Map::new();
    root.insert(
        "_aws".into(),
        json!({
            "Timestamp": timestamp_ms as u64,
            "CloudWatchMetrics": [{
                "Namespace": NAMESPACE,
                "Dimensions": [["Function"]],
                "Metrics": metrics.iter().map(|(name, unit, _)| json!({"Name": name, "Unit": unit.as_str()})).collect::<Vec<_>>(),
            }],
        }),
    );
    root.insert("Function".into(), Value::from(function));
    for (name, _, value) in metrics {
        root.insert((*name).into(), json!(value));
    }
    Value::Object(root).to_string()
}

/// Print the EMF line for `metrics` of `function`, now.
pub fn emit(function: &str, metrics: &[(&str, Unit, f64)]) {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    println!("{}", line(function, metrics, now));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_emf_line_declares_each_metric_and_carries_its_value() {
        let l = line(
            "step",
            &[
                ("StepLatency", Unit::Milliseconds, 12.5),
                ("Conflicts", Unit::Count, 1.0),
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
}
