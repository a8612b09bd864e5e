//! Flow control: concurrency limits per key on runs, and starts held back by a
//! debounce or a start rate ([`held`]) (docs/flow-control.md).
//!
//! A [`RunLimit`] is declared on the [`Registry`](crate::Registry): at most `max`
//! unfinished runs of its workflows per key, the key read from the run's input (a
//! JSON pointer), given at start, or none (one count for all). A start over a limit is
//! accepted and *queued* ([`RunStatus::Queued`](crate::RunStatus::Queued)); the write
//! that frees a slot — the finishing checkpoint of a holder, or the cancel of a queued
//! run that held an earlier limit — hands it to the first in line in the same atomic
//! write, so no race can let more than `max` hold a key. [`slots::SlotBook`] is the rule
//! every store follows, as plain data: the stores' tests hold them to it.

pub mod held;
pub mod slots;

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::model::LimitSlot;

/// The longest key a limit may count under, in bytes (a DynamoDB key holds the tenant,
/// the limit's name and the key within its 1 KB sort key).
pub const MAX_KEY_BYTES: usize = 256;

/// Where a limit reads the key a run counts under.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeySource {
    /// No key: one count for every run of the limit's workflows (a total).
    None,
    /// The value at this JSON pointer (RFC 6901) in the run's input: a string as it is,
    /// a number or a boolean as its JSON text.
    Input(String),
    /// The key given with the start (`concurrency_key` on `POST /runs`).
    Given,
}

/// At most `max` unfinished runs per key of the workflows it names. A run holds its
/// slot from its start until it finishes (completed, failed or cancelled): a run that
/// waits for an approval or is parked holds it too.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunLimit {
    name: String,
    max: u32,
    key: KeySource,
    workflows: BTreeSet<String>,
}

impl RunLimit {
    /// At most `max` unfinished runs at once, counted under one key until
    /// [`RunLimit::key_from_input`] or [`RunLimit::key_given_at_start`] says otherwise.
    ///
    /// # Panics
    /// When `name` is empty or `max` is 0 (a limit that would hold every run for ever):
    /// a mistake in the code that declares it, found when the registry is built.
    pub fn new(name: impl Into<String>, max: u32) -> Self {
        let name = name.into();
        assert!(!name.is_empty(), "a concurrency limit needs a name");
        assert!(
            max > 0,
            "the concurrency limit {name} must let at least one run hold a key"
        );
        RunLimit {
            name,
            max,
            key: KeySource::None,
            workflows: BTreeSet::new(),
        }
    }

    /// Count each run under the value at `pointer` (a JSON pointer, e.g. `/customer`)
    /// in its input. A start whose input has no string, number or boolean there is
    /// refused as invalid input.
    pub fn key_from_input(mut self, pointer: impl Into<String>) -> Self {
        self.key = KeySource::Input(pointer.into());
        self
    }

    /// Count each run under the key its start gives (`concurrency_key`); a start
    /// without one is refused as invalid input.
    pub fn key_given_at_start(mut self) -> Self {
        self.key = KeySource::Given;
        self
    }

    /// Apply the limit to runs of `workflow` (call once per workflow sharing it).
    pub fn workflow(mut self, workflow: impl Into<String>) -> Self {
        self.workflows.insert(workflow.into());
        self
    }

    /// The limit's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The most runs per key, as declared in code.
    pub fn max(&self) -> u32 {
        self.max
    }

    /// Where the key comes from.
    pub fn key(&self) -> &KeySource {
        &self.key
    }

    /// The workflows it applies to.
    pub fn workflows(&self) -> impl Iterator<Item = &str> {
        self.workflows.iter().map(String::as_str)
    }

    /// The key a run of `input`, started with `given`, counts under.
    pub fn key_of(&self, input: &serde_json::Value, given: Option<&str>) -> Result<String, String> {
        self.key.read(
            &format!("the concurrency limit {}", self.name),
            input,
            given,
        )
    }
}

impl KeySource {
    /// The key a start of `input` with `given` counts under for `owner` (what the key
    /// is read for, e.g. "the concurrency limit per-customer", for the error): `""`
    /// without a key; a start without a usable key is refused with why.
    pub fn read(
        &self,
        owner: &str,
        input: &serde_json::Value,
        given: Option<&str>,
    ) -> Result<String, String> {
        let key = match self {
            KeySource::None => return Ok(String::new()),
            KeySource::Given => given
                .ok_or_else(|| {
                    format!("{owner} counts runs by a key given at start: pass concurrency_key")
                })?
                .to_owned(),
            KeySource::Input(pointer) => match input.pointer(pointer) {
                Some(serde_json::Value::String(s)) => s.clone(),
                Some(v @ (serde_json::Value::Number(_) | serde_json::Value::Bool(_))) => {
                    v.to_string()
                }
                _ => {
                    return Err(format!(
                        "{owner} counts runs by the input's {pointer}, which must be a string, a number or a boolean"
                    ));
                }
            },
        };
        if key.is_empty() || key.len() > MAX_KEY_BYTES {
            return Err(format!(
                "the key of {owner} must be 1 to {MAX_KEY_BYTES} bytes, not {}",
                key.len()
            ));
        }
        Ok(key)
    }
}

/// A deployment's own maximum for limits declared in code, by limit name
/// (`--limits '{"per-customer": 2}'`); a run started after a change counts under the
/// new maximum, runs already holding a slot keep it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct LimitOverrides(pub BTreeMap<String, u32>);

impl LimitOverrides {
    /// Parse `{"limit name": max, …}`; a max of 0 is refused.
    pub fn parse(json: &str) -> Result<LimitOverrides, String> {
        let overrides: LimitOverrides =
            serde_json::from_str(json).map_err(|e| format!("limits: {e}"))?;
        if let Some((name, _)) = overrides.0.iter().find(|(_, max)| **max == 0) {
            return Err(format!(
                "limits: {name} must let at least one run hold a key (a max of 0 would queue every run for ever)"
            ));
        }
        Ok(overrides)
    }

    /// The maximum of `limit` on this deployment.
    pub fn max_of(&self, limit: &RunLimit) -> u32 {
        self.max_for(limit.name(), limit.max())
    }

    /// The maximum on this deployment of the limit (or step limit) named `name`, whose
    /// code declares `declared`.
    pub fn max_for(&self, name: &str, declared: u32) -> u32 {
        self.0.get(name).copied().unwrap_or(declared)
    }
}

/// The slots a run of `workflow` with `input` (started with the key `given`) counts
/// against, in the order they are taken (by limit name), or why the start is invalid.
pub fn slots_for<'a>(
    limits: impl IntoIterator<Item = &'a RunLimit>,
    overrides: &LimitOverrides,
    workflow: &str,
    input: &serde_json::Value,
    given: Option<&str>,
) -> Result<Vec<LimitSlot>, String> {
    let mut slots = Vec::new();
    for limit in limits {
        if !limit.workflows.contains(workflow) {
            continue;
        }
        slots.push(LimitSlot {
            limit: limit.name.clone(),
            key: limit.key_of(input, given)?,
            max: overrides.max_of(limit),
        });
    }
    slots.sort();
    Ok(slots)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn per_customer() -> RunLimit {
        RunLimit::new("per-customer", 1)
            .key_from_input("/customer")
            .workflow("per_customer")
    }

    #[test]
    fn a_key_from_the_input_reads_strings_numbers_and_booleans() {
        let limit = per_customer();
        assert_eq!(
            limit.key_of(&json!({"customer": "acme"}), None).unwrap(),
            "acme"
        );
        assert_eq!(limit.key_of(&json!({"customer": 42}), None).unwrap(), "42");
        assert_eq!(
            limit.key_of(&json!({"customer": true}), None).unwrap(),
            "true"
        );
    }

    #[test]
    fn a_missing_or_structured_key_is_refused_with_the_limit_named() {
        let limit = per_customer();
        for input in [
            json!({}),
            json!({"customer": null}),
            json!({"customer": {"id": 1}}),
        ] {
            let e = limit.key_of(&input, None).unwrap_err();
            assert!(e.contains("per-customer") && e.contains("/customer"), "{e}");
        }
        let e = limit.key_of(&json!({"customer": ""}), None).unwrap_err();
        assert!(e.contains("1 to 256 bytes"), "{e}");
        let long = "x".repeat(MAX_KEY_BYTES + 1);
        assert!(limit.key_of(&json!({ "customer": long }), None).is_err());
    }

    #[test]
    fn a_given_key_is_required_when_the_limit_asks_for_one() {
        let limit = RunLimit::new("tenant-jobs", 2)
            .key_given_at_start()
            .workflow("w");
        assert_eq!(limit.key_of(&json!({}), Some("k")).unwrap(), "k");
        assert!(
            limit
                .key_of(&json!({}), None)
                .unwrap_err()
                .contains("concurrency_key")
        );
    }

    #[test]
    fn slots_apply_only_to_the_named_workflows_in_name_order_with_overrides() {
        let total = RunLimit::new("all-agents", 10)
            .workflow("per_customer")
            .workflow("agent");
        let limits = [per_customer(), total];
        let overrides = LimitOverrides::parse(r#"{"all-agents": 3}"#).unwrap();
        let slots = slots_for(
            &limits,
            &overrides,
            "per_customer",
            &json!({"customer": "a"}),
            None,
        )
        .unwrap();
        assert_eq!(
            slots,
            vec![
                LimitSlot {
                    limit: "all-agents".into(),
                    key: String::new(),
                    max: 3
                },
                LimitSlot {
                    limit: "per-customer".into(),
                    key: "a".into(),
                    max: 1
                },
            ]
        );
        assert!(
            slots_for(&limits, &overrides, "order", &json!({}), None)
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn an_override_of_zero_is_refused() {
        assert!(
            LimitOverrides::parse(r#"{"x": 0}"#)
                .unwrap_err()
                .contains("at least one")
        );
        assert!(LimitOverrides::parse("[1]").is_err());
    }
}
