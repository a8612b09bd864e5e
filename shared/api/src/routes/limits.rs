//! `GET /limits`: every concurrency limit with, per key, how many of the caller's runs
//! hold a slot and how many wait (docs/flow-control.md). Tenant-scoped like every
//! authenticated route: a tenant sees its own runs' keys.

use axum::Json;
use axum::extract::State;
use siesta::KeySource;
use siesta_api_types::{LimitKeyView, LimitList, LimitView};

use crate::auth::Tenant;
use crate::error::ApiError;
use crate::state::AppState;

/// Every concurrency limit, with the caller's keys in use.
#[utoipa::path(
    get, path = "/limits", operation_id = "listLimits", tag = "limits",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The limits, by name", body = LimitList),
        crate::responses::LimitsErrors,
    )
)]
pub(crate) async fn list_limits(
    State(app): State<AppState>,
    Tenant(tenant): Tenant,
) -> Result<Json<LimitList>, ApiError> {
    let limits = app
        .engine
        .limits(&tenant)
        .await?
        .into_iter()
        .map(|report| LimitView {
            name: report.name,
            scope: "runs".to_owned(),
            max: report.max,
            key: report.key.map(|key| match key {
                KeySource::None => "none".to_owned(),
                KeySource::Given => "given".to_owned(),
                KeySource::Input(pointer) => format!("input:{pointer}"),
            }),
            workflows: report.workflows,
            keys: report
                .keys
                .into_iter()
                .map(|k| LimitKeyView {
                    key: k.key,
                    holders: k.holders,
                    waiters: k.waiters,
                })
                .collect(),
        })
        .collect();
    Ok(Json(LimitList { limits }))
}
