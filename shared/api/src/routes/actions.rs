//! Bulk actions by filter: start a job that cancels, pauses, resumes, restarts,
//! upgrades or redrives every run of the caller's tenant that a filter matches
//! (`POST /runs/actions`, 202 with the job), follow it (`GET /runs/actions/{id}`),
//! list the caller's jobs (`GET /runs/actions`) and cancel one
//! (`POST /runs/actions/{id}/cancel`). The job is durable and paced (see
//! `siesta::engine::actions`); each run's action is by the caller who started it.

use axum::Json;
use axum::extract::State;
use http::StatusCode;
use siesta::{
    ActionFilter, ActionJob, ActionJobStatus, ActionRequest, BulkAction, Position, RestartOptions,
};
use siesta_api_types::{
    RunsActionFilter, RunsActionKind, RunsActionList, RunsActionNote, RunsActionStatus,
    RunsActionView, StartRunsAction,
};

use super::control::Caller;
use crate::auth::Tenant;
use crate::error::ApiError;
use crate::extract::{ApiBody, ApiPath, json};
use crate::state::AppState;

/// How many jobs `GET /runs/actions` lists.
const JOBS_LISTED: usize = 100;

fn action_of(kind: RunsActionKind) -> BulkAction {
    match kind {
        RunsActionKind::Cancel => BulkAction::Cancel,
        RunsActionKind::Pause => BulkAction::Pause,
        RunsActionKind::Resume => BulkAction::Resume,
        RunsActionKind::Restart => BulkAction::Restart,
        RunsActionKind::Upgrade => BulkAction::Upgrade,
        RunsActionKind::Redrive => BulkAction::Redrive,
    }
}

fn kind_of(action: BulkAction) -> RunsActionKind {
    match action {
        BulkAction::Cancel => RunsActionKind::Cancel,
        BulkAction::Pause => RunsActionKind::Pause,
        BulkAction::Resume => RunsActionKind::Resume,
        BulkAction::Restart => RunsActionKind::Restart,
        BulkAction::Upgrade => RunsActionKind::Upgrade,
        BulkAction::Redrive => RunsActionKind::Redrive,
    }
}

fn filter_of(f: RunsActionFilter) -> ActionFilter {
    ActionFilter {
        workflow: f.workflow,
        status: f.status,
        build: f.build,
        created_after: f.created_after.map(|t| t.0),
        created_before: f.created_before.map(|t| t.0),
        failed_after: f.failed_after.map(|t| t.0),
        failed_before: f.failed_before.map(|t| t.0),
        error_kind: f.error_kind,
        dead_lettered: f.dead_lettered,
    }
}

fn filter_view(f: &ActionFilter) -> RunsActionFilter {
    RunsActionFilter {
        tenant: None,
        workflow: f.workflow.clone(),
        status: f.status,
        build: f.build.clone(),
        created_after: f.created_after.map(Into::into),
        created_before: f.created_before.map(Into::into),
        failed_after: f.failed_after.map(Into::into),
        failed_before: f.failed_before.map(Into::into),
        error_kind: f.error_kind.clone(),
        dead_lettered: f.dead_lettered,
    }
}

fn status_view(status: ActionJobStatus) -> RunsActionStatus {
    match status {
        ActionJobStatus::Running => RunsActionStatus::Running,
        ActionJobStatus::Done => RunsActionStatus::Done,
        ActionJobStatus::Failed => RunsActionStatus::Failed,
        ActionJobStatus::Cancelled => RunsActionStatus::Cancelled,
    }
}

/// The job as the API shows it.
pub(crate) fn job_view(job: &ActionJob) -> RunsActionView {
    let notes = |notes: &[siesta::ActionNote]| {
        notes
            .iter()
            .map(|n| RunsActionNote {
                run_id: n.run_id.to_string(),
                why: n.why.clone(),
            })
            .collect()
    };
    RunsActionView {
        id: job.id.clone(),
        action: kind_of(job.action),
        filter: filter_view(&job.filter),
        from: job.restart.from.as_ref().map(|p| p.0.clone()),
        as_new: job.restart.as_new,
        repeat_tool_calls: job.restart.repeat_tool_calls,
        rate: job.rate,
        build: job.build.clone(),
        status: status_view(job.status),
        matched: job.matched,
        done: job.done,
        skipped: job.skipped,
        failed: job.failed,
        skipped_reasons: notes(&job.skipped_sample),
        failures: notes(&job.failures),
        error: job.error.clone(),
        by: job.by.clone(),
        cancelled_by: job.cancelled_by.clone(),
        created_at: job.created_at.into(),
        updated_at: job.updated_at.into(),
    }
}

/// The job's id in a path: not found when it is none of the caller's.
fn not_found(e: siesta::EngineError) -> ApiError {
    match e {
        siesta::EngineError::NotFound => ApiError::not_found("bulk action"),
        other => other.into(),
    }
}

/// Start a bulk action: a durable job that does `action` to every run of the caller's
/// tenant that `filter` matches, at most `rate` runs a second, each by the caller (the
/// runs' timelines say so). Runs created after it starts are not looked at. Answered
/// at once with the job; follow it with `GET /runs/actions/{id}`.
#[utoipa::path(
    post, path = "/runs/actions", operation_id = "startRunsAction", tag = "runs",
    security(("bearer" = [])),
    request_body(content = StartRunsAction, content_type = "application/json", description = "The action and the filter"),
    responses(
        (status = 202, description = "Started: the job, running", body = RunsActionView),
        crate::responses::StartActionErrors,
    )
)]
pub(crate) async fn start_runs_action(
    State(app): State<AppState>,
    caller: Caller,
    ApiBody(body): ApiBody,
) -> Result<(StatusCode, Json<RunsActionView>), ApiError> {
    let body: StartRunsAction = json(&body)?;
    if let Some(tenant) = body
        .filter
        .tenant
        .as_deref()
        .filter(|t| *t != caller.tenant.as_str())
    {
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_input",
            format!(
                "the filter names the tenant '{tenant}': a bulk action acts on the caller's tenant only"
            ),
        ));
    }
    let request = ActionRequest {
        action: action_of(body.action),
        filter: filter_of(body.filter),
        restart: RestartOptions {
            from: body.from.as_deref().map(Position::from),
            as_new: body.as_new,
            repeat_tool_calls: body.repeat_tool_calls,
        },
        rate: body.rate,
    };
    let job = app
        .engine
        .start_action_job(&caller.tenant, request, &caller.who)
        .await?;
    Ok((StatusCode::ACCEPTED, Json(job_view(&job))))
}

/// The caller's bulk actions, newest first (the latest 100).
#[utoipa::path(
    get, path = "/runs/actions", operation_id = "listRunsActions", tag = "runs",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The jobs, newest first", body = RunsActionList),
        crate::responses::ListActionErrors,
    )
)]
pub(crate) async fn list_runs_actions(
    State(app): State<AppState>,
    Tenant(tenant): Tenant,
) -> Result<Json<RunsActionList>, ApiError> {
    let jobs = app.engine.action_jobs(&tenant, JOBS_LISTED).await?;
    Ok(Json(RunsActionList {
        jobs: jobs.iter().map(job_view).collect(),
    }))
}

/// A bulk action: where it is and what it did so far (`matched = done + skipped +
/// failed`, with a sample of the runs skipped and failed, and why).
#[utoipa::path(
    get, path = "/runs/actions/{id}", operation_id = "getRunsAction", tag = "runs",
    security(("bearer" = [])),
    params(("id" = String, Path, description = "The job's id")),
    responses(
        (status = 200, description = "The job", body = RunsActionView),
        crate::responses::ActionErrors,
    )
)]
pub(crate) async fn get_runs_action(
    State(app): State<AppState>,
    Tenant(tenant): Tenant,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<RunsActionView>, ApiError> {
    let job = app
        .engine
        .action_job(&tenant, &id)
        .await
        .map_err(not_found)?;
    Ok(Json(job_view(&job)))
}

/// Cancel a bulk action: it stops within ten runs (a slice in flight reads its job
/// every ten); the runs acted on stay acted on. A finished job is answered as it is.
#[utoipa::path(
    post, path = "/runs/actions/{id}/cancel", operation_id = "cancelRunsAction", tag = "runs",
    security(("bearer" = [])),
    params(("id" = String, Path, description = "The job's id")),
    responses(
        (status = 200, description = "The job, cancelled (or as it finished)", body = RunsActionView),
        crate::responses::ActionErrors,
    )
)]
pub(crate) async fn cancel_runs_action(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<RunsActionView>, ApiError> {
    let job = app
        .engine
        .cancel_action_job(&caller.tenant, &id, &caller.who)
        .await
        .map_err(not_found)?;
    Ok(Json(job_view(&job)))
}
