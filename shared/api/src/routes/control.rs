//! Control of a run by its operator: cancel it, pause it, resume it once parked or
//! paused, and resolve a tool call whose outcome is `unknown`.
//!
//! The operator's resolution of a tool call whose outcome is `unknown` (a crash between
//! "running" and its result, with no lookup): `POST /runs/{id}/operations/{position}/resolve`
//! says what happened to the call — it succeeded (with its value), failed (with an
//! error), or must be made again — and resumes the parked run. Who resolved it (the
//! caller's identity, see [`crate::Authenticate::caller`]) is journaled and shown in the
//! timeline as `ResolvedBy`.

use axum::extract::{FromRequestParts, State};
use axum::response::Response;
use http::StatusCode;
use http::request::Parts;
use serde::Deserialize;
use siesta::{EngineError, ErrorInfo, Position, RunId, TenantId, ToolCallResolution};

use crate::ApiError;
use crate::extract::{ApiBody, ApiPath, IfMatch, json};
use crate::responses::*;
use crate::state::AppState;
use siesta_api_types::{ErrorBody, Resolution, ResolvedError, RunView};

/// Cancel the run: at once when it waits, at its next step boundary when it runs.
#[utoipa::path(
    post, path = "/runs/{id}/cancel", operation_id = "cancelRun", tag = "runs",
    security(("bearer" = [])),
    params(
        ("id" = String, Path, description = "The run's id"),
        IfMatch,
    ),
    responses(
        (status = 200, description = "Cancelled", body = RunView),
        (status = 202, description = "Cancellation requested; honoured at the next step boundary", body = RunView),
        CancelErrors,
    )
)]
pub(crate) async fn cancel_run(
    State(app): State<AppState>,
    Caller { tenant, who }: Caller,
    ApiPath(id): ApiPath<String>,
    IfMatch(if_match): IfMatch,
) -> Result<Response, ApiError> {
    let run = app
        .engine
        .cancel_as(&tenant, &RunId::from(id.as_str()), if_match, Some(&who))
        .await?;
    let status = if run.status.is_finished() {
        StatusCode::OK
    } else {
        StatusCode::ACCEPTED
    };
    app.run_answer(status, &tenant, &run).await
}

/// Pause the run: at once when it is pending or waits, at its next step boundary when
/// it runs (its attempt in flight finishes and is checkpointed first). A paused run
/// takes no turn; deliveries are still recorded; timers and deadlines that fall due
/// meanwhile take effect on resume (`POST /runs/{id}/resume`). Who paused it is in the
/// timeline (`RunPaused`, `PausedBy`).
#[utoipa::path(
    post, path = "/runs/{id}/pause", operation_id = "pauseRun", tag = "runs",
    security(("bearer" = [])),
    params(
        ("id" = String, Path, description = "The run's id"),
        IfMatch,
    ),
    responses(
        (status = 200, description = "Paused (or paused already)", body = RunView),
        (status = 202, description = "Running: it pauses at its next boundary (`pause_requested`)", body = RunView),
        PauseErrors,
    )
)]
pub(crate) async fn pause_run(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    IfMatch(if_match): IfMatch,
) -> Result<Response, ApiError> {
    let run = app
        .engine
        .pause(
            &caller.tenant,
            &RunId::from(id.as_str()),
            if_match,
            &caller.who,
        )
        .await?;
    let status = if run.status == siesta::RunStatus::Paused {
        StatusCode::OK
    } else {
        StatusCode::ACCEPTED
    };
    app.run_answer(status, &caller.tenant, &run).await
}

/// Resume a parked or paused run.
#[utoipa::path(
    post, path = "/runs/{id}/resume", operation_id = "resumeRun", tag = "runs",
    security(("bearer" = [])),
    params(
        ("id" = String, Path, description = "The run's id"),
        IfMatch,
    ),
    responses(
        (status = 202, description = "Resumed", body = RunView),
        ResumeErrors,
    )
)]
pub(crate) async fn resume_run(
    State(app): State<AppState>,
    Caller { tenant, who }: Caller,
    ApiPath(id): ApiPath<String>,
    IfMatch(if_match): IfMatch,
) -> Result<Response, ApiError> {
    let run = app
        .engine
        .resume_as(&tenant, &RunId::from(id.as_str()), if_match, Some(&who))
        .await?;
    app.run_answer(StatusCode::ACCEPTED, &tenant, &run).await
}

/// What the engine is told: the operator's resolution as a [`ToolCallResolution`].
fn into_engine(resolution: Resolution) -> ToolCallResolution {
    match resolution {
        Resolution::Succeeded { value } => ToolCallResolution::Succeeded(value),
        Resolution::Failed { error } => {
            let (code, message) = match error {
                ResolvedError::Message(message) => (None, message),
                ResolvedError::Detailed { code, message } => (code, message),
            };
            ToolCallResolution::Failed(ErrorInfo::new(
                code.unwrap_or_else(|| "ResolvedAsFailed".into()),
                message,
                false,
            ))
        }
        Resolution::Retry => ToolCallResolution::Retry,
    }
}

/// The caller of an authenticated route: its tenant and who it is, as the router's
/// [`crate::Authenticate`] says.
pub(crate) struct Caller {
    pub(super) tenant: TenantId,
    pub(super) who: String,
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let tenant = state.auth.authenticate(parts)?;
        tracing::Span::current().record("tenant", tracing::field::display(&tenant));
        let who = state.auth.caller(parts, &tenant);
        Ok(Caller { tenant, who })
    }
}

/// The run's id and the operation's position (percent-encoded: a nested position has
/// `/` in it).
#[derive(Debug, Deserialize)]
pub(crate) struct OperationPath {
    id: String,
    position: String,
}

/// Resolve the tool call at `position`, whose outcome is unknown, of a parked run: the
/// resolution is journaled with who made it, and the run resumes.
#[utoipa::path(
    post, path = "/runs/{id}/operations/{position}/resolve", operation_id = "resolveOperation", tag = "runs",
    security(("bearer" = [])),
    params(
        ("id" = String, Path, description = "The run's id"),
        ("position" = String, Path, description = "The tool call's position (its timeline `Id`, percent-encoded: `charge%230`, `pay%2Fcharge%230`)"),
        IfMatch,
    ),
    request_body(content = Resolution, content_type = "application/json", description = "What happened to the call"),
    responses(
        (status = 202, description = "Resolved; the run resumes", body = RunView),
        (status = 400, description = "A malformed body or an unknown outcome", body = ErrorBody),
        (status = 404, description = "No such run, or no operation at this position", body = ErrorBody),
        (status = 409, description = "The run is not parked (`not_parked`, `already_finished`), or the operation is not a tool call whose outcome is unknown (`nothing_to_resolve`)", body = ErrorBody),
        (status = 412, description = "If-Match does not match the run's version", body = ErrorBody),
        crate::responses::ResolveErrors,
    )
)]
pub(crate) async fn resolve_operation(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(path): ApiPath<OperationPath>,
    IfMatch(if_match): IfMatch,
    ApiBody(body): ApiBody,
) -> Result<Response, ApiError> {
    let resolution: Resolution = json(&body)?;
    let run_id = RunId::from(path.id.as_str());
    let position = Position::from(path.position.as_str());
    let resolved = app
        .engine
        .resolve_tool_call(
            &caller.tenant,
            &run_id,
            &position,
            into_engine(resolution),
            &caller.who,
            if_match,
        )
        .await;
    let run = match resolved {
        Ok(run) => run,
        // The run was found (it passed the parked check) when the position was not.
        Err(EngineError::NotFound) if app.engine.get_run(&caller.tenant, &run_id).await.is_ok() => {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                "not_found",
                format!("run {run_id} has no operation at position '{position}'"),
            ));
        }
        Err(EngineError::NotParked(status)) => {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "not_parked",
                format!("only a parked run's tool call can be resolved; this run is {status}"),
            ));
        }
        Err(e) => return Err(e.into()),
    };
    app.run_answer(StatusCode::ACCEPTED, &caller.tenant, &run)
        .await
}
