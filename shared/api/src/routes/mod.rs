//! The route table: every route of the API, each registered with its OpenAPI
//! description (utoipa-axum), so the router and the document are made from the same list
//! and cannot drift apart. The handlers live in one file per family of routes; nothing
//! but this table imports them.

mod builds;
mod control;
mod dead_letters;
mod deliveries;
mod meta;
mod replay;
mod runs;
mod streams;
mod values;
mod webhooks;

use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::state::AppState;
use builds::*;
use control::*;
use dead_letters::*;
use deliveries::*;
use meta::*;
use replay::*;
use runs::*;
use streams::*;
use values::*;
use webhooks::*;

pub use builds::{BuildList, BuildView};
pub use dead_letters::{DeadLetterPage, DeadLetterView, Redriven};
pub use runs::idempotent_run_id;
pub use streams::{StreamChunkView, StreamPageView};

/// Every route of the API, described, on top of `base` (the document's info and
/// components).
pub(crate) fn table(base: utoipa::openapi::OpenApi) -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(base)
        .routes(routes!(start_run, list_runs))
        .routes(routes!(get_run))
        .routes(routes!(get_run_result))
        .routes(routes!(get_run_timeline))
        .routes(routes!(get_run_stream))
        .routes(routes!(get_run_value))
        .routes(routes!(cancel_run))
        .routes(routes!(resume_run))
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
}
