//! The route table: every route of the API, each registered with its OpenAPI
//! description (utoipa-axum), so the router and the document are made from the same list
//! and cannot drift apart. The handlers live in one file per family of routes; nothing
//! but this table imports them.

mod actions;
mod builds;
mod control;
mod dead_letters;
mod deliveries;
mod limits;
mod meta;
mod replay;
mod restart;
mod runs;
mod schedules;
mod streams;
mod values;
mod webhooks;
mod workflows;

use utoipa::openapi::header::HeaderBuilder;
use utoipa::openapi::{Content, OpenApi, Ref, RefOr, Response};
use utoipa::{PartialSchema, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::state::AppState;
use actions::*;
use builds::*;
use control::*;
use dead_letters::*;
use deliveries::*;
use limits::*;
use meta::*;
use replay::*;
use restart::*;
use runs::*;
use schedules::*;
use siesta_api_types::{RunResult, RunView};
use streams::*;
use values::*;
use webhooks::*;
use workflows::*;

pub use runs::idempotent_run_id;

/// Every route of the API, described, on top of `base` (the document's info and
/// components).
pub(crate) fn table(base: utoipa::openapi::OpenApi) -> OpenApiRouter<AppState> {
    let mut table = OpenApiRouter::with_openapi(base)
        .routes(routes!(start_run, list_runs))
        .routes(routes!(start_runs_action, list_runs_actions))
        .routes(routes!(get_runs_action))
        .routes(routes!(cancel_runs_action))
        .routes(routes!(get_run))
        .routes(routes!(get_run_result))
        .routes(routes!(get_run_timeline))
        .routes(routes!(get_run_stream))
        .routes(routes!(get_run_value))
        .routes(routes!(cancel_run))
        .routes(routes!(pause_run))
        .routes(routes!(resume_run))
        .routes(routes!(restart_run))
        .routes(routes!(pause_workflow))
        .routes(routes!(resume_workflow))
        .routes(routes!(get_workflow_pause))
        .routes(routes!(resolve_operation))
        .routes(routes!(export_run))
        .routes(routes!(check_run_replay))
        .routes(routes!(upgrade_run))
        .routes(routes!(upgrade_build))
        .routes(routes!(deliver_event))
        .routes(routes!(inject_message))
        .routes(routes!(succeed_callback))
        .routes(routes!(fail_callback))
        .routes(routes!(heartbeat_callback))
        .routes(routes!(source_webhook))
        .routes(routes!(callback_webhook))
        .routes(routes!(health))
        .routes(routes!(openapi_json))
        .routes(routes!(list_dead_letters))
        .routes(routes!(redrive_dead_letter))
        .routes(routes!(redrive_dead_letters))
        .routes(routes!(list_builds))
        .routes(routes!(list_limits))
        .routes(routes!(list_schedules))
        .routes(routes!(pause_schedule))
        .routes(routes!(resume_schedule))
        .routes(routes!(trigger_schedule));
    run_answers_carry_their_etag(table.get_openapi_mut());
    table
}

/// Every answer that carries a run (a `RunView` or a `RunResult`) has the run's version
/// as its `ETag` ([`crate::view::run_answer`]): the document says so here, once.
fn run_answers_carry_their_etag(doc: &mut OpenApi) {
    let etag = HeaderBuilder::new()
        .schema(Some(String::schema()))
        .description(Some("The run's version"))
        .build();
    for item in doc.paths.paths.values_mut() {
        let operations = [
            &mut item.get,
            &mut item.put,
            &mut item.post,
            &mut item.delete,
            &mut item.patch,
        ];
        for operation in operations.into_iter().flatten() {
            for response in operation.responses.responses.values_mut() {
                if let RefOr::T(response) = response
                    && carries_a_run(response)
                {
                    response
                        .headers
                        .insert("ETag".to_owned(), RefOr::T(etag.clone()));
                }
            }
        }
    }
}

fn carries_a_run(response: &Response) -> bool {
    let runs = [RunView::name(), RunResult::name()].map(Ref::from_schema_name);
    response.content.values().any(|content| {
        matches!(
            content,
            RefOr::T(Content { schema: Some(RefOr::Ref(r)), .. }) if runs.contains(r)
        )
    })
}
