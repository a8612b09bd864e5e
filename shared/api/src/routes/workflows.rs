//! A workflow's pause (docs/operations.md, "Pause a workflow"): `POST
//! /workflows/{name}/pause` holds its runs and queues (or refuses) its new starts and
//! its schedules' ticks, `POST /workflows/{name}/resume` lets them go on; each answers
//! with the bulk action doing it to the runs. `GET /workflows/{name}/pause` reads it.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use siesta::ports::{PausedStarts, WorkflowPause};

use super::control::Caller;
use crate::ApiError;
use crate::auth::Tenant;
use crate::extract::{ApiPath, JsonObject};
use crate::responses::WorkflowPauseErrors;
use crate::state::AppState;
use siesta_api_types::{PauseWorkflowBody, WorkflowPauseView};

fn starts_name(starts: PausedStarts) -> &'static str {
    match starts {
        PausedStarts::Queue => "queue",
        PausedStarts::Refuse => "refuse",
    }
}

fn view(workflow: &str, pause: Option<&WorkflowPause>, job: Option<String>) -> WorkflowPauseView {
    WorkflowPauseView {
        workflow: workflow.to_owned(),
        paused: pause.is_some_and(|p| p.paused),
        starts: starts_name(pause.map_or(PausedStarts::Queue, |p| p.starts)).to_owned(),
        by: pause.map(|p| p.by.clone()),
        at: pause.map(|p| p.at.into()),
        job,
    }
}

/// Pause the workflow: a bulk action pauses its runs (follow it at `GET
/// /runs/actions/{job}`); until it is resumed its new starts and its schedules' ticks
/// are created `paused` (`"starts": "queue"`, the default) or refused (`"refuse"`).
#[utoipa::path(
    post, path = "/workflows/{name}/pause", operation_id = "pauseWorkflow", tag = "workflows",
    security(("bearer" = [])),
    params(("name" = String, Path, description = "The workflow's registered name")),
    request_body(content = Option<PauseWorkflowBody>, content_type = "application/json", description = "What its new starts get (optional)"),
    responses(
        (status = 202, description = "Paused; its runs are being paused", body = WorkflowPauseView),
        WorkflowPauseErrors,
    )
)]
pub(crate) async fn pause_workflow(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
    JsonObject(body): JsonObject<PauseWorkflowBody, true>,
) -> Result<Response, ApiError> {
    let starts = match body.starts.as_deref() {
        None | Some("queue") => PausedStarts::Queue,
        Some("refuse") => PausedStarts::Refuse,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "starts: '{other}' is neither queue nor refuse"
            )));
        }
    };
    known(&app, &name)?;
    let paused = app
        .engine
        .pause_workflow(&caller.tenant, &name, starts, &caller.who)
        .await?;
    let body = view(&name, Some(&paused.pause), Some(paused.job.id));
    Ok((StatusCode::ACCEPTED, axum::Json(body)).into_response())
}

/// Resume the workflow: its starts begin again, and a bulk action resumes its paused
/// runs (follow it at `GET /runs/actions/{job}`).
#[utoipa::path(
    post, path = "/workflows/{name}/resume", operation_id = "resumeWorkflow", tag = "workflows",
    security(("bearer" = [])),
    params(("name" = String, Path, description = "The workflow's registered name")),
    responses(
        (status = 202, description = "Resumed; its paused runs are being resumed", body = WorkflowPauseView),
        WorkflowPauseErrors,
    )
)]
pub(crate) async fn resume_workflow(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
) -> Result<Response, ApiError> {
    known(&app, &name)?;
    let resumed = app
        .engine
        .resume_workflow(&caller.tenant, &name, &caller.who)
        .await?;
    let body = view(&name, Some(&resumed.pause), Some(resumed.job.id));
    Ok((StatusCode::ACCEPTED, axum::Json(body)).into_response())
}

/// Whether the workflow is paused, by whom, and what its starts get.
#[utoipa::path(
    get, path = "/workflows/{name}/pause", operation_id = "getWorkflowPause", tag = "workflows",
    security(("bearer" = [])),
    params(("name" = String, Path, description = "The workflow's registered name")),
    responses(
        (status = 200, description = "The workflow's pause (`paused: false` when never paused)", body = WorkflowPauseView),
        WorkflowPauseErrors,
    )
)]
pub(crate) async fn get_workflow_pause(
    State(app): State<AppState>,
    Tenant(tenant): Tenant,
    ApiPath(name): ApiPath<String>,
) -> Result<Response, ApiError> {
    known(&app, &name)?;
    let pause = app.engine.workflow_pause(&tenant, &name).await?;
    Ok(axum::Json(view(&name, pause.as_ref(), None)).into_response())
}

/// A 404 for a workflow this build does not register.
fn known(app: &AppState, name: &str) -> Result<(), ApiError> {
    if app.engine.registry().get(name).is_some() {
        Ok(())
    } else {
        Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("no workflow is registered as '{name}'"),
        ))
    }
}
