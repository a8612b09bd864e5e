//! OpenAPI schemas of the core's types that the API shows. The core crate knows nothing
//! of HTTP, so its types are described here, beside the views that carry them; the tests
//! below hold each description to the type's real serialization. These types are never
//! built: they exist for their schema (`#[schema(value_type = ...)]`, `body = ...`).

use serde::Serialize;
use siesta::timeline::{EVENT_TYPES, EventDetails};
use utoipa::ToSchema;
use utoipa::openapi::schema::{AnyOfBuilder, ObjectBuilder, Schema, SchemaType, Type};

/// Where a run is in its life.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
#[schema(as = RunStatus)]
#[allow(dead_code)]
// The variants are `siesta::RunStatus`'s, documented there; doc lines here would
// change the schema.
#[allow(missing_docs)]
pub enum RunStatusSchema {
    Queued,
    Pending,
    Running,
    Waiting,
    Completed,
    Failed,
    Cancelled,
    Parked,
    Paused,
}

/// An error as recorded in the journal and shown to users.
#[derive(Serialize, ToSchema)]
#[schema(as = ErrorInfo, no_recursion)]
#[allow(dead_code)]
pub struct ErrorInfoSchema {
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

/// Where a run's journal and a build's code part ways, as a replay check finds it.
#[derive(Serialize, ToSchema)]
#[schema(as = Divergence)]
#[allow(dead_code)]
pub struct DivergenceSchema {
    /// The position the code reached when it left the journal (or, when the code
    /// finished without reaching part of the journal, the first position it missed).
    position: String,
    /// The operation the journal holds there (`step`, `wait`, `event`...); null when
    /// the journal holds nothing there.
    journal_kind: Option<String>,
    /// The operation the code runs there; null when the code no longer reaches it.
    code_kind: Option<String>,
    /// The whole story.
    message: String,
}

/// A run and its replay input as one document (`GET /runs/{id}/export`), in the core's
/// own serialization of runs, journal entries and deliveries.
#[derive(Serialize, ToSchema)]
#[schema(as = RunExport)]
#[allow(dead_code)]
pub struct RunExportSchema {
    /// `siesta.run-export.v1`.
    format: String,
    /// The run as stored.
    run: serde_json::Value,
    /// Every journal entry as stored.
    journal: Vec<serde_json::Value>,
    /// Every delivery as stored, in `seq` order.
    deliveries: Vec<serde_json::Value>,
}

/// What upgrading every unfinished run of a build did.
#[derive(Serialize, ToSchema)]
#[schema(as = UpgradeReport)]
#[allow(dead_code)]
pub struct UpgradeReportSchema {
    /// The build the runs were on.
    from: String,
    /// The build serving the API, the moved runs' new build.
    to: String,
    /// The runs moved.
    upgraded: Vec<String>,
    /// The runs left on their build because their journal does not replay here.
    diverged: Vec<DivergedRunSchema>,
    /// The runs left on their build for another reason (running now): try again.
    skipped: Vec<SkippedRunSchema>,
}

/// A run left on its build because its journal does not replay.
#[derive(Serialize, ToSchema)]
#[schema(as = DivergedRun)]
#[allow(dead_code)]
pub struct DivergedRunSchema {
    /// The run.
    run_id: String,
    /// Where its journal and the code part ways.
    divergence: DivergenceSchema,
}

/// A run an upgrade did not move for a reason other than its journal.
#[derive(Serialize, ToSchema)]
#[schema(as = SkippedRun)]
#[allow(dead_code)]
pub struct SkippedRunSchema {
    /// The run.
    run_id: String,
    /// Why.
    reason: String,
}

/// A timeline event's `Details`: one object per event type that has details, titled
/// with the event type, its properties the keys of that type's variant of
/// [`EventDetails`] (read from the type, so the document cannot drift from it). The
/// instants among them are RFC 3339 strings, the durations milliseconds (`…Ms`).
pub fn event_details() -> Schema {
    // anyOf, not oneOf: the objects list their keys without closing themselves, so
    // one value (`{"BuildId": …, "Workflow": …}`) is valid under several of them.
    let mut any_of = AnyOfBuilder::new().description(Some(
        "The event's details; which object is given by EventType (the object's title). \
         Instants are RFC 3339, durations milliseconds (keys ending in Ms).",
    ));
    for event_type in EVENT_TYPES {
        let fields = EventDetails::fields(event_type);
        if fields.is_empty() {
            continue;
        }
        let mut object = ObjectBuilder::new()
            .schema_type(Type::Object)
            .title(Some(format!("{event_type:?}")));
        for field in fields {
            object = object.property(
                *field,
                ObjectBuilder::new().schema_type(SchemaType::AnyValue),
            );
        }
        any_of = any_of.item(object);
    }
    Schema::AnyOf(any_of.build())
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

    #[test]
    fn the_divergence_schema_has_the_fields_a_divergence_serializes() {
        let divergence = Divergence {
            position: Position::from("triage#0"),
            journal_kind: Some(OperationKind::Step),
            code_kind: Some(OperationKind::Step),
            message: "non-determinism at triage#0".into(),
        };
        let value = serde_json::to_value(&divergence).unwrap();
        assert_eq!(
            keys(&value),
            properties(&schema_of::<super::DivergenceSchema>())
        );
    }

    #[test]
    fn the_upgrade_report_and_export_schemas_have_the_fields_they_serialize() {
        let report = UpgradeReport::default();
        assert_eq!(
            keys(&serde_json::to_value(&report).unwrap()),
            properties(&schema_of::<super::UpgradeReportSchema>())
        );
        let export = RunExport::new(
            Run::new(
                TenantId::from("t"),
                RunId::from("r"),
                "w",
                Payload::Inline(serde_json::Value::Null),
                Timestamp(0),
            ),
            siesta::ports::ReplayInput::default(),
        );
        assert_eq!(
            keys(&serde_json::to_value(&export).unwrap()),
            properties(&schema_of::<super::RunExportSchema>())
        );
    }
}
