//! OpenAPI schemas of the core's types that the API shows. The core crate knows nothing
//! of HTTP, so its types are described here, beside the views that carry them; the tests
//! below hold each description to the type's real serialization.

use serde::Serialize;
use utoipa::ToSchema;

/// Where a run is in its life.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
#[schema(as = RunStatus)]
#[allow(dead_code)]
pub(crate) enum RunStatusSchema {
    Pending,
    Running,
    Waiting,
    Completed,
    Failed,
    Cancelled,
    Parked,
}

/// An error as recorded in the journal and shown to users.
#[derive(Serialize, ToSchema)]
#[schema(as = ErrorInfo, no_recursion)]
#[allow(dead_code)]
pub(crate) struct ErrorInfoSchema {
    /// A stable, machine-readable kind (`timeout`, `validation`, `NonDeterminism`...).
    kind: String,
    /// What happened, for a person.
    message: String,
    /// Whether trying again may succeed.
    retryable: bool,
    /// The error underneath, e.g. the last attempt's error of a failed step.
    #[serde(skip_serializing_if = "Option::is_none")]
    cause: Option<Box<ErrorInfoSchema>>,
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use serde_json::Value;
    use siesta::*;
    use utoipa::PartialSchema;

    fn schema_of<T: PartialSchema>() -> Value {
        serde_json::to_value(T::schema()).unwrap()
    }

    fn properties(schema: &Value) -> BTreeSet<String> {
        schema["properties"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect()
    }

    fn keys(value: &Value) -> BTreeSet<String> {
        value.as_object().unwrap().keys().cloned().collect()
    }

    #[test]
    fn the_run_status_schema_lists_every_status() {
        let schema = schema_of::<super::RunStatusSchema>();
        let listed: BTreeSet<String> = schema["enum"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_owned())
            .collect();
        let real: BTreeSet<String> = RunStatus::ALL
            .iter()
            .map(|s| s.as_str().to_owned())
            .collect();
        assert_eq!(listed, real);
    }

    #[test]
    fn the_error_info_schema_has_the_fields_an_error_info_serializes() {
        let mut error = ErrorInfo::new("StepFailed", "boom", true);
        error.cause = Some(Box::new(ErrorInfo::new("timeout", "slow", true)));
        let value = serde_json::to_value(&error).unwrap();
        assert_eq!(
            keys(&value),
            properties(&schema_of::<super::ErrorInfoSchema>())
        );
    }
}
