//! Dead letters for operators: `GET /dead-letters` lists the caller's runs parked
//! because a wake-up of theirs kept failing and was dead-lettered (newest first, cursor
//! paging), `POST /dead-letters/{id}/redrive` resumes one, `POST /dead-letters/redrive`
//! all of them. Tenant-scoped like every authenticated route: an operator sees and
//! redrives the dead letters of the tenant its token names (`docs/queue.md`).

use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode, header};
use siesta::{Run, RunId};
use siesta_api_types::{
    DeadLetteredRunPage, DeadLetteredRunQuery, DeadLetteredRunView, Redriven, RunView,
};

use crate::auth::Tenant;
use crate::error::ApiError;
use crate::extract::{ApiPath, ApiQuery, IfMatch};
use crate::state::AppState;
use crate::view::served_view;

/// Most dead letters one `POST /dead-letters/redrive` resumes; call again for more.
const REDRIVE_ALL_LIMIT: usize = 1000;

/// The view of `run`, parked because a wake-up of its own was dead-lettered.
fn dead_lettered_run(run: &Run) -> DeadLetteredRunView {
    DeadLetteredRunView {
        run_id: run.id.to_string(),
        workflow: run.workflow.clone(),
        reason: run
            .error
            .as_ref()
            .map(|e| e.message.clone())
            .unwrap_or_default(),
        parked_at: run.updated_at.into(),
        version: run.version,
    }
}

/// The caller's dead letters: runs parked because a wake-up of theirs was
/// dead-lettered while it was their latest.
#[utoipa::path(
    get, path = "/dead-letters", operation_id = "listDeadLetters", tag = "dead-letters",
    security(("bearer" = [])),
    params(DeadLetteredRunQuery),
    responses(
        (status = 200, description = "A page of dead letters", body = DeadLetteredRunPage),
        crate::responses::ListErrors,
    )
)]
pub(crate) async fn list_dead_letters(
    State(app): State<AppState>,
    Tenant(tenant): Tenant,
    ApiQuery(query): ApiQuery<DeadLetteredRunQuery>,
) -> Result<Json<DeadLetteredRunPage>, ApiError> {
    let limit = crate::extract::page_size(query.limit, 50, 200)?;
    let page = app
        .engine
        .dead_lettered_runs(&tenant, query.cursor.as_deref(), limit)
        .await
        .map_err(|e| match e {
            // The caller's cursor is what did not parse.
            siesta::EngineError::Store(siesta::ports::StoreError::Invalid(m)) => {
                ApiError::bad_request(m)
            }
            other => other.into(),
        })?;
    Ok(Json(DeadLetteredRunPage {
        dead_letters: page.runs.iter().map(dead_lettered_run).collect(),
        next_cursor: page.next_cursor,
    }))
}

/// Redrive one dead letter: resume the run it parked (pending, due now, woken).
#[utoipa::path(
    post, path = "/dead-letters/{id}/redrive", operation_id = "redriveDeadLetter",
    tag = "dead-letters",
    security(("bearer" = [])),
    params(
        ("id" = String, Path, description = "The run the dead letter parked"),
        IfMatch,
    ),
    responses(
        (status = 202, description = "Redriven: the run, resumed", body = RunView),
        crate::responses::RedriveErrors,
    )
)]
pub(crate) async fn redrive_dead_letter(
    State(app): State<AppState>,
    super::control::Caller { tenant, who }: super::control::Caller,
    ApiPath(id): ApiPath<String>,
    IfMatch(if_match): IfMatch,
) -> Result<Response, ApiError> {
    let run = app
        .engine
        .redrive_dead_letter_as(&tenant, &RunId::from(id.as_str()), if_match, Some(&who))
        .await
        .map_err(|e| match e {
            siesta::EngineError::NotFound => ApiError::not_found("dead letter"),
            other => other.into(),
        })?;
    let view: RunView = served_view(&run, None, app.engine.config());
    let mut response = (StatusCode::ACCEPTED, Json(view)).into_response();
    if let Ok(etag) = HeaderValue::from_str(&format!("\"{}\"", run.version)) {
        response.headers_mut().insert(header::ETAG, etag);
    }
    Ok(response)
}

/// Redrive every dead letter of the caller (at most 1 000 per call; call again while
/// `redriven` is 1 000).
#[utoipa::path(
    post, path = "/dead-letters/redrive", operation_id = "redriveDeadLetters",
    tag = "dead-letters",
    security(("bearer" = [])),
    responses(
        (status = 202, description = "The runs resumed", body = Redriven),
        crate::responses::RedriveAllErrors,
    )
)]
pub(crate) async fn redrive_dead_letters(
    State(app): State<AppState>,
    Tenant(tenant): Tenant,
) -> Result<(StatusCode, Json<Redriven>), ApiError> {
    let runs = app
        .engine
        .redrive_dead_letters(&tenant, REDRIVE_ALL_LIMIT)
        .await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(Redriven {
            redriven: runs.len(),
            run_ids: runs.iter().map(|r| r.id.to_string()).collect(),
        }),
    ))
}
