//! How the API shows a run: the views (`siesta-api-types`: what a run looks like on the
//! wire) built from the engine's records, and a run answered with its `ETag`.

use axum::Json;
use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode, header};
use siesta::ports::ReplayInput;
use siesta::*;
use siesta_api_types::{
    OperationsSummary, QueuedView, Rfc3339, RunView, TimelineEventView, WaitView,
};

/// The view of `event` of run `run_id`: large values as references to fetch them by,
/// times in RFC 3339.
pub fn timeline_event_view(run_id: &str, event: TimelineEvent) -> TimelineEventView {
    let mut details = event.details;
    crate::time::show_detail_times(event.event_type, &mut details);
    crate::values::show_refs(run_id, &mut details);
    TimelineEventView {
        seq: event.seq,
        event_timestamp: event.at.into(),
        event_type: event.event_type,
        sub_type: event.sub_type,
        id: event.id,
        parent_id: event.parent_id,
        name: event.name,
        details: (!details.is_null()).then_some(details),
    }
}

/// The run view as an answer with `status`, its `ETag` the run's version.
pub(crate) fn run_answer(status: StatusCode, view: &RunView) -> Response {
    let mut response = (status, Json(view)).into_response();
    if let Ok(etag) = HeaderValue::from_str(&format!("\"{}\"", view.version)) {
        response.headers_mut().insert(header::ETAG, etag);
    }
    response
}

/// A stored value as the API shows it: the value, or for a large one kept in the
/// artifact store, `{"value_ref": ...}` ([`siesta_api_types::ValueRef`]) to fetch it by.
pub(crate) fn payload_json(run_id: &str, p: &Payload) -> serde_json::Value {
    match p {
        Payload::Inline(v) => v.clone(),
        Payload::Artifact(a) => crate::values::value_ref(run_id, a).to_json(),
    }
}

/// The view as the build `serving` shows it: [`RunView::awaiting_build`] names the run's
/// build when that is another and the run is not finished.
pub fn served_by(mut view: RunView, serving: &str) -> RunView {
    view.awaiting_build = view
        .build_id
        .clone()
        .filter(|b| b != serving && !view.status.is_finished());
    view
}

/// The view of `run` as the engine configured by `config` serves it (its callback URLs,
/// its build).
pub(crate) fn served_view(
    run: &Run,
    replay_input: Option<&ReplayInput>,
    config: &EngineConfig,
) -> RunView {
    served_by(
        run_view(run, replay_input, &config.callback_base_url),
        &config.build_id,
    )
}

/// The view of `run`; with its replay input (its journal), also its waits and
/// operations.
pub fn run_view(run: &Run, replay_input: Option<&ReplayInput>, callback_base_url: &str) -> RunView {
    let mut view = RunView {
        id: run.id.to_string(),
        workflow: run.workflow.clone(),
        tenant: run.tenant.to_string(),
        status: run.status,
        version: run.version,
        input: payload_json(run.id.as_str(), &run.input),
        output: run
            .output
            .as_ref()
            .map(|p| payload_json(run.id.as_str(), p)),
        error: run.error.clone(),
        cancel_requested: run.cancel_requested && !run.status.is_finished(),
        pause_requested: run
            .pause_requested
            .clone()
            .filter(|_| run.status == RunStatus::Running),
        created_at: run.created_at.into(),
        updated_at: run.updated_at.into(),
        build_id: run.build_id.clone(),
        awaiting_build: None,
        queued: queued_view(run),
        restart: run.restart.as_ref().map(Into::into),
        waits: Vec::new(),
        operations: None,
    };
    let Some(replay_input) = replay_input else {
        return view;
    };
    // What a restart superseded is history, not an operation of the run now.
    let mut entries: Vec<&JournalEntry> = replay_input
        .journal
        .iter()
        .filter(|e| !e.is_superseded(siesta::restarts_of(run)))
        .collect();
    let mut summary = OperationsSummary {
        total: entries.len(),
        ..Default::default()
    };
    entries.sort_by(|a, b| a.position.cmp(&b.position));
    for entry in entries {
        match &entry.state {
            EntryState::Succeeded { .. } => summary.succeeded += 1,
            EntryState::Failed { .. } => summary.failed += 1,
            state => {
                summary.pending += 1;
                if run.status.is_finished() {
                    continue;
                }
                if let Some(wait) = wait_view(entry, state, callback_base_url) {
                    view.waits.push(wait);
                }
            }
        }
    }
    view.operations = Some(summary);
    view
}

fn wait_view(entry: &JournalEntry, state: &EntryState, base: &str) -> Option<WaitView> {
    let mut view = WaitView {
        operation: entry.position.to_string(),
        kind: "timer".into(),
        callback_id: None,
        url: None,
        event: None,
        deadline: None,
    };
    match state {
        EntryState::Waiting(wait) => {
            view.deadline = wait.deadline.map(Rfc3339);
            match &wait.kind {
                WaitKind::Timer => {}
                WaitKind::Callback { callback_id, .. } => {
                    view.kind = "callback".into();
                    view.url = Some(format!(
                        "{}/hooks/{callback_id}",
                        base.trim_end_matches('/')
                    ));
                    view.callback_id = Some(callback_id.to_string());
                }
                WaitKind::Event { name, .. } => {
                    view.kind = "event".into();
                    view.event = Some(name.clone());
                }
                WaitKind::Child { .. } => view.kind = "child".into(),
            }
        }
        EntryState::Retrying { retry_at, .. } => {
            view.kind = "retry".into();
            view.deadline = Some(Rfc3339(*retry_at));
        }
        EntryState::Polling { next_check_at, .. } => {
            view.kind = "retry".into();
            view.deadline = Some(Rfc3339(*next_check_at));
        }
        _ => return None,
    }
    Some(view)
}

/// Why a queued run waits, as its view says it (its place in line is read apart).
fn queued_view(run: &Run) -> Option<QueuedView> {
    if run.status != RunStatus::Queued {
        return None;
    }
    if let Some(held) = &run.held {
        let next_at = Some(held.until.into());
        return Some(match &held.reason {
            HoldReason::Debounce {
                name, key, starts, ..
            } => QueuedView {
                limit: None,
                debounce: Some(name.clone()),
                key: key.clone(),
                position: None,
                next_at,
                starts: Some(*starts),
            },
            HoldReason::Rate { name, key } => QueuedView {
                limit: Some(name.clone()),
                debounce: None,
                key: key.clone(),
                position: None,
                next_at,
                starts: None,
            },
        });
    }
    run.queued.as_ref().map(|at| QueuedView {
        limit: Some(at.limit.clone()),
        debounce: None,
        key: at.key.clone(),
        position: None,
        next_at: None,
        starts: None,
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use serde_json::{Value, json};
    use utoipa::PartialSchema;

    use super::*;

    fn keys(value: &Value) -> BTreeSet<String> {
        value.as_object().unwrap().keys().cloned().collect()
    }

    fn schema_of<T: PartialSchema>() -> Value {
        serde_json::to_value(T::schema()).unwrap()
    }

    fn full_event() -> TimelineEvent {
        let mut event = TimelineEvent::execution_started(
            Timestamp(1_800_000_000_123),
            "order",
            json!({"CallbackId": "cb_1", "Timeout": 1_800_000_060_000_i64, "HeartbeatTimeoutMs": 5000}),
        );
        // A callback's start: its details hold an instant and a duration.
        event.event_type = EventType::CallbackStarted;
        event.sub_type = Some(SubType::Step);
        event.id = Some("a#1".into());
        event.parent_id = Some("p#1".into());
        event.name = Some("a".into());
        event
    }

    #[test]
    fn the_timeline_event_schema_has_the_fields_a_full_event_serializes() {
        let value = serde_json::to_value(timeline_event_view("r", full_event())).unwrap();
        let schema = schema_of::<TimelineEventView>();
        let properties: BTreeSet<String> = schema["properties"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        assert_eq!(keys(&value), properties);
    }

    #[test]
    fn a_timeline_event_shows_its_time_and_the_instants_in_its_details_in_rfc_3339() {
        let value = serde_json::to_value(timeline_event_view("r", full_event())).unwrap();
        assert_eq!(value["EventTimestamp"], "2027-01-15T08:00:00.123Z");
        assert_eq!(
            value["Details"],
            json!({"CallbackId": "cb_1", "Timeout": "2027-01-15T08:01:00.000Z", "HeartbeatTimeoutMs": 5000})
        );
        assert_eq!(value["EventType"], "CallbackStarted");
        assert_eq!(value["SubType"], "Step");
        let back: TimelineEventView = serde_json::from_value(value).unwrap();
        assert_eq!(back.event_timestamp.millis(), 1_800_000_000_123);
    }

    #[test]
    fn the_details_schema_has_an_object_per_event_type_with_the_keys_of_its_type() {
        let schema = schema_of::<TimelineEventView>();
        let items = schema["properties"]["Details"]["anyOf"].as_array().unwrap();
        let titled = |t: EventType| {
            items
                .iter()
                .find(|i| i["title"] == format!("{t:?}"))
                .unwrap_or_else(|| panic!("no schema for {t:?}"))
        };
        let callback = titled(EventType::CallbackStarted);
        assert_eq!(
            keys(&callback["properties"]),
            ["CallbackId", "HeartbeatTimeoutMs", "Timeout"]
                .map(String::from)
                .into()
        );
        for t in siesta::timeline::EVENT_TYPES {
            let fields = siesta::timeline::EventDetails::fields(t);
            if !fields.is_empty() {
                let declared: BTreeSet<String> = fields.iter().map(|f| f.to_string()).collect();
                assert_eq!(keys(&titled(t)["properties"]), declared, "{t:?}");
            }
        }
    }

    #[test]
    fn an_event_without_details_shows_none() {
        let mut event = full_event();
        event.details = Value::Null;
        let value = serde_json::to_value(timeline_event_view("r", event)).unwrap();
        assert!(value.get("Details").is_none(), "{value}");
    }

    #[test]
    fn a_run_view_shows_its_times_in_rfc_3339() {
        let mut run = Run::new(
            TenantId::from("t"),
            RunId::from("r"),
            "order",
            Payload::Inline(json!({})),
            Timestamp(0),
        );
        run.updated_at = Timestamp(1_800_000_000_123);
        let value = serde_json::to_value(run_view(&run, None, "http://x")).unwrap();
        assert_eq!(value["created_at"], "1970-01-01T00:00:00.000Z");
        assert_eq!(value["updated_at"], "2027-01-15T08:00:00.123Z");
    }
}
