//! Dead letters for operators: `GET /dead-letters` lists the caller's runs parked
//! because a wake-up of theirs kept failing and was dead-lettered (newest first, cursor
//! paging), `POST /dead-letters/{id}/redrive` resumes one, `POST /dead-letters/redrive`
//! all of them. Tenant-scoped like every authenticated route: an operator sees and
//! redrives the dead letters of the tenant its token names (`docs/queue.md`).

use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode, header};
use serde::{Deserialize, Serialize};
use siesta::{Run, RunId};
use utoipa::{IntoParams, ToSchema};

use crate::auth::Tenant;
use crate::error::ApiError;
use crate::extract::{ApiPath, ApiQuery, IfMatch};
use crate::state::AppState;
use crate::time::Rfc3339;
use crate::view::RunView;

/// Most dead letters one `POST /dead-letters/redrive` resumes; call again for more.
const REDRIVE_ALL_LIMIT: usize = 1000;

/// A run parked for a dead-lettered wake-up; its run id names the dead letter.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct DeadLetterView {
    /// The run the dead letter parked.
    pub run_id: String,
    /// The run's workflow.
    pub workflow: String,
    /// Why it was parked.
    pub reason: String,
    /// When it was parked: the run's last change, which is its parking unless a
    /// delivery arrived since.
    pub parked_at: Rfc3339,
    /// The run's version (its `ETag`): pass it as `If-Match` to redrive exactly this.
    pub version: u64,
}

impl DeadLetterView {
    fn new(run: &Run) -> Self {
        DeadLetterView {
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
}

/// A page of dead letters.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct DeadLetterPage {
    /// The dead letters, newest first.
    pub dead_letters: Vec<DeadLetterView>,
    /// Pass as `cursor` for the next page; `null` on the last page. A page may hold
    /// fewer than `limit` and still have a next one (runs parked for other reasons are
    /// skipped).
    pub next_cursor: Option<String>,
}

/// What `POST /dead-letters/redrive` did.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Redriven {
    /// How many runs were resumed.
    pub redriven: usize,
    /// Their ids.
    pub run_ids: Vec<String>,
}

/// Paging of `GET /dead-letters`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct DeadLetterQuery {
    /// Where the previous page ended (its `next_cursor`).
    cursor: Option<String>,
    /// Dead letters per page, 1 to 200 (default 50).
    #[param(minimum = 1, maximum = 200)]
    limit: Option<u32>,
}

/// The caller's dead letters: runs parked because a wake-up of theirs was
/// dead-lettered while it was their latest.
#[utoipa::path(
    get, path = "/dead-letters", operation_id = "listDeadLetters", tag = "dead-letters",
    security(("bearer" = [])),
    params(DeadLetterQuery),
    responses(
        (status = 200, description = "A page of dead letters", body = DeadLetterPage),
        crate::responses::ListErrors,
    )
)]
pub(crate) async fn list_dead_letters(
    State(app): State<AppState>,
    Tenant(tenant): Tenant,
    ApiQuery(query): ApiQuery<DeadLetterQuery>,
) -> Result<Json<DeadLetterPage>, ApiError> {
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
    Ok(Json(DeadLetterPage {
        dead_letters: page.runs.iter().map(DeadLetterView::new).collect(),
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
    Tenant(tenant): Tenant,
    ApiPath(id): ApiPath<String>,
    IfMatch(if_match): IfMatch,
) -> Result<Response, ApiError> {
    let run = app
        .engine
        .redrive_dead_letter(&tenant, &RunId::from(id.as_str()), if_match)
        .await
        .map_err(|e| match e {
            siesta::EngineError::NotFound => ApiError::not_found("dead letter"),
            other => other.into(),
        })?;
    let view = RunView::new(&run, None, &app.engine.config().callback_base_url)
        .served_by(&app.engine.config().build_id);
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
