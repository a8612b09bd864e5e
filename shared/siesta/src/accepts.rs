//! What a typed callback or event wait accepts: a JSON Schema derived from the payload
//! type with `schemars` and recorded with the wait, so a delivery of the wrong shape is
//! refused when it arrives (422) instead of failing the run when it is consumed.
//!
//! Why a schema and not the Rust type: the webhook receiver and the API serve every
//! workflow of a deployment and must judge a delivery without the workflow's code; the
//! schema is data, stored with the callback record (found by its token) and with the
//! event wait's journal entry.
//!
//! The check is pure: no remote `$ref` is ever fetched.

use schemars::JsonSchema;

/// The most validation errors named in one refusal; the rest are counted.
const MAX_REASONS: usize = 5;

/// The JSON Schema of `T`, as stored with a wait.
pub fn schema_of<T: JsonSchema>() -> serde_json::Value {
    schemars::schema_for!(T).to_value()
}

/// Check `value` against `schema`: `Err` names where and how it does not match (at
/// most `MAX_REASONS` places, then how many more).
pub fn check(schema: &serde_json::Value, value: &serde_json::Value) -> Result<(), String> {
    let validator = jsonschema::validator_for(schema)
        .map_err(|e| format!("the stored schema is not usable: {e}"))?;
    let errors: Vec<String> = validator
        .iter_errors(value)
        .map(|e| {
            let at = e.instance_path().to_string();
            let at = if at.is_empty() { "/".to_owned() } else { at };
            format!("at {at}: {e}")
        })
        .collect();
    if errors.is_empty() {
        return Ok(());
    }
    let mut reason = errors[..errors.len().min(MAX_REASONS)].join("; ");
    if errors.len() > MAX_REASONS {
        reason.push_str(&format!(" (and {} more)", errors.len() - MAX_REASONS));
    }
    Err(reason)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_json::json;

    #[derive(Deserialize, JsonSchema)]
    #[allow(dead_code)]
    struct Payment {
        status: String,
        amount_cents: u64,
        #[serde(default)]
        note: Option<String>,
    }

    #[test]
    fn what_serde_accepts_the_schema_accepts() {
        let schema = schema_of::<Payment>();
        for ok in [
            json!({"status": "paid", "amount_cents": 10}),
            json!({"status": "paid", "amount_cents": 10, "note": null}),
            json!({"status": "paid", "amount_cents": 10, "extra": true}),
        ] {
            assert!(serde_json::from_value::<Payment>(ok.clone()).is_ok());
            assert_eq!(check(&schema, &ok), Ok(()), "{ok}");
        }
    }

    #[test]
    fn a_wrong_shape_is_refused_with_where_and_why() {
        let schema = schema_of::<Payment>();
        let reason = check(&schema, &json!({"unexpected": true})).unwrap_err();
        assert!(reason.contains("status"), "{reason}");
        let reason = check(&schema, &json!({"status": 7, "amount_cents": -1})).unwrap_err();
        assert!(reason.contains("at /status"), "{reason}");
        assert!(reason.contains("at /amount_cents"), "{reason}");
        assert!(check(&schema, &json!("paid")).is_err());
    }

    #[test]
    fn an_untyped_value_accepts_anything() {
        let schema = schema_of::<serde_json::Value>();
        for v in [json!(null), json!({"a": 1}), json!([1, "x"]), json!("s")] {
            assert_eq!(check(&schema, &v), Ok(()));
        }
    }

    #[test]
    fn many_errors_are_summarised() {
        let schema = json!({"type": "array", "items": {"type": "string"}});
        let reason = check(&schema, &json!([1, 2, 3, 4, 5, 6, 7])).unwrap_err();
        assert!(reason.ends_with("(and 2 more)"), "{reason}");
    }
}
