//! Schedules for operators: `GET /schedules` lists the caller's schedules with their
//! next ticks; `POST /schedules/{name}/pause`, `/resume` and `/trigger` act on one.
//! Tenant-scoped like every authenticated route: a schedule belongs to the tenant its
//! runs start in, and another tenant's is not found (`docs/flow-control.md`).

use axum::Json;
use axum::extract::State;
use axum::response::Response;
use http::{HeaderValue, StatusCode, header};
use sha2::{Digest, Sha256};
use siesta::{EngineError, ScheduleInfo};
use siesta_api_types::{RunView, ScheduleList, ScheduleView};

use crate::auth::Tenant;
use crate::error::ApiError;
use crate::extract::{ApiPath, IdempotencyKey};
use crate::state::AppState;
use crate::view::run_answer;

/// The view of a schedule.
fn schedule_view(s: ScheduleInfo) -> ScheduleView {
    ScheduleView {
        name: s.name,
        workflow: s.workflow,
        cron: s.cron,
        timezone: s.timezone,
        next: s.next.map(Into::into),
        paused: s.paused,
        disabled: s.disabled,
        last_fired: s.last_fired.map(Into::into),
        last_run_id: s.last_run.map(|r| r.0),
        buffered: s.buffered.map(Into::into),
        overlap: s.overlap.to_owned(),
        catch_up: s.catch_up.to_owned(),
    }
}

/// [`EngineError::NotFound`] names the schedule, not a run.
fn on_schedule(e: EngineError) -> ApiError {
    match e {
        EngineError::NotFound => ApiError::not_found("schedule"),
        other => other.into(),
    }
}

/// The caller's schedules, by name, each with its next tick.
#[utoipa::path(
    get, path = "/schedules", operation_id = "listSchedules", tag = "schedules",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The caller's schedules", body = ScheduleList),
        crate::responses::ScheduleListErrors,
    )
)]
pub(crate) async fn list_schedules(
    State(app): State<AppState>,
    Tenant(tenant): Tenant,
) -> Result<Json<ScheduleList>, ApiError> {
    let schedules = app.engine.schedules(&tenant).await?;
    Ok(Json(ScheduleList {
        schedules: schedules.into_iter().map(schedule_view).collect(),
    }))
}

/// Pause a schedule: it fires no tick until resumed (a run of it in flight goes on).
#[utoipa::path(
    post, path = "/schedules/{name}/pause", operation_id = "pauseSchedule", tag = "schedules",
    security(("bearer" = [])),
    params(("name" = String, Path, description = "The schedule's name")),
    responses(
        (status = 200, description = "Paused: the schedule", body = ScheduleView),
        crate::responses::ScheduleErrors,
    )
)]
pub(crate) async fn pause_schedule(
    State(app): State<AppState>,
    Tenant(tenant): Tenant,
    ApiPath(name): ApiPath<String>,
) -> Result<Json<ScheduleView>, ApiError> {
    let info = app
        .engine
        .pause_schedule(&tenant, &name)
        .await
        .map_err(on_schedule)?;
    Ok(Json(schedule_view(info)))
}

/// Resume a paused schedule: it fires from its next tick on; the ticks that fell while
/// it was paused are not caught up.
#[utoipa::path(
    post, path = "/schedules/{name}/resume", operation_id = "resumeSchedule", tag = "schedules",
    security(("bearer" = [])),
    params(("name" = String, Path, description = "The schedule's name")),
    responses(
        (status = 200, description = "Resumed: the schedule", body = ScheduleView),
        crate::responses::ScheduleErrors,
    )
)]
pub(crate) async fn resume_schedule(
    State(app): State<AppState>,
    Tenant(tenant): Tenant,
    ApiPath(name): ApiPath<String>,
) -> Result<Json<ScheduleView>, ApiError> {
    let info = app
        .engine
        .resume_schedule(&tenant, &name)
        .await
        .map_err(on_schedule)?;
    Ok(Json(schedule_view(info)))
}

/// Start a run of the schedule now, with its input, outside its ticks (also when
/// paused or disabled; not a tick, so the overlap policy does not apply). With an
/// `Idempotency-Key`, a retry answers the run the first call started (200).
#[utoipa::path(
    post, path = "/schedules/{name}/trigger", operation_id = "triggerSchedule", tag = "schedules",
    security(("bearer" = [])),
    params(
        ("name" = String, Path, description = "The schedule's name"),
        ("Idempotency-Key" = Option<String>, Header, description = "The same key again: the run the first call started"),
    ),
    responses(
        (status = 201, description = "Started: the run", body = RunView,
            headers(("Location" = String, description = "The run's URL"))),
        (status = 200, description = "A retry with the same Idempotency-Key: the run started then", body = RunView,
            headers(("Location" = String, description = "The run's URL"))),
        crate::responses::TriggerErrors,
    )
)]
pub(crate) async fn trigger_schedule(
    State(app): State<AppState>,
    Tenant(tenant): Tenant,
    ApiPath(name): ApiPath<String>,
    IdempotencyKey(key): IdempotencyKey,
) -> Result<Response, ApiError> {
    // The key as a run id can carry it: its digest, per tenant like a start's.
    let key = key.map(|k| {
        let mut h = Sha256::new();
        h.update(tenant.as_str().as_bytes());
        h.update([0]);
        h.update(k.as_bytes());
        hex::encode(h.finalize())[..32].to_owned()
    });
    let (run, created) = app
        .engine
        .trigger_schedule(&tenant, &name, key.as_deref())
        .await
        .map_err(on_schedule)?;
    let view: RunView = app.view(&tenant, &run).await?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    let mut response = run_answer(status, &view);
    if let Ok(location) = HeaderValue::from_str(&format!(
        "/runs/{}",
        siesta_api_types::path_segment(run.id.as_str())
    )) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    Ok(response)
}
