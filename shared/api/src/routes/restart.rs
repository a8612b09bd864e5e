//! `POST /runs/{id}/restart`: restart a run from a step, in place or as a new run
//! forked from it, once its journal before that step is proved to replay on the build
//! serving this API (docs/operations.md, "Restart from a step").

use axum::extract::State;
use axum::response::Response;
use http::StatusCode;
use siesta::{Position, RestartRequest, RunId};

use super::control::Caller;
use crate::ApiError;
use crate::extract::{ApiPath, IfMatch, JsonObject};
use crate::responses::RestartErrors;
use crate::state::AppState;
use siesta_api_types::{RestartBody, RunView};

/// Restart the run from a step: no body restarts it in place from the first operation
/// that failed. The journal before the point must replay on this build (else `409
/// diverged`, naming where, and nothing changes); from the point on it is set aside,
/// kept readable. A tool call after the point that succeeded keeps its outcome unless
/// `repeat_tool_calls`; a child run is taken over, not started again. A running run is
/// cancelled at its next boundary first. Who restarted it is in the timeline
/// (`RunRestarted`).
#[utoipa::path(
    post, path = "/runs/{id}/restart", operation_id = "restartRun", tag = "runs",
    security(("bearer" = [])),
    params(
        ("id" = String, Path, description = "The run's id"),
        IfMatch,
    ),
    request_body(content = Option<RestartBody>, content_type = "application/json", description = "Where to go on from, and how (optional)"),
    responses(
        (status = 200, description = "Restarted in place: the run, pending", body = RunView),
        (status = 201, description = "Restarted as new: the fork, pending", body = RunView),
        RestartErrors,
    )
)]
pub(crate) async fn restart_run(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    IfMatch(if_match): IfMatch,
    JsonObject(body): JsonObject<RestartBody, true>,
) -> Result<Response, ApiError> {
    let request = RestartRequest {
        from: body.from.as_deref().map(Position::from),
        as_new: body.as_new,
        repeat_tool_calls: body.repeat_tool_calls,
        token: None,
    };
    let restarted = app
        .engine
        .restart(
            &caller.tenant,
            &RunId::from(id.as_str()),
            request,
            if_match,
            &caller.who,
        )
        .await?;
    let status = if body.as_new {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    app.run_answer(status, &caller.tenant, &restarted.run).await
}
