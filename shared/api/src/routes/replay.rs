//! Runs across deploys: export a run with its replay input (what `myapp replay --export`
//! checks away from the store), check that a run's journal replays on the build serving
//! this API, and upgrade a run — or every run of a build — to this build when it does.
//! Nothing here runs a step: a check only reads, and an upgrade is one conditional write
//! after a clean check.

use axum::Json;
use axum::extract::State;
use axum::response::Response;
use http::StatusCode;
use siesta::{ReplayCheck, RunExport, RunId, UpgradeReport};

use crate::ApiError;
use crate::auth::Tenant;
use crate::extract::{ApiPath, IfMatch};
use crate::responses::*;
use crate::state::AppState;
use siesta_api_types::schema::{RunExportSchema, UpgradeReportSchema};
use siesta_api_types::{ReplayCheckView, RunView};

/// The run and its replay input (journal and deliveries) as one JSON document, in the
/// core's own serialization, with values offloaded to the artifact store put inline:
/// save it to a file and check it with `myapp replay --export FILE`.
#[utoipa::path(
    get, path = "/runs/{id}/export", operation_id = "exportRun", tag = "runs",
    security(("bearer" = [])),
    params(("id" = String, Path, description = "The run's id")),
    responses(
        (status = 200, description = "The run and its replay input", body = RunExportSchema),
        ReadRunErrors,
    )
)]
pub(crate) async fn export_run(
    State(app): State<AppState>,
    Tenant(tenant): Tenant,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<RunExport>, ApiError> {
    Ok(Json(
        app.engine
            .export_run(&tenant, &RunId::from(id.as_str()))
            .await?,
    ))
}

/// Replay the run's journal on the build serving this API, with no side effect and no
/// write: an operation the journal does not hold ends the replay (the run is clean so
/// far). Says whether `POST /runs/{id}/upgrade` would move it.
#[utoipa::path(
    get, path = "/runs/{id}/replay-check", operation_id = "checkRunReplay", tag = "runs",
    security(("bearer" = [])),
    params(("id" = String, Path, description = "The run's id")),
    responses(
        (status = 200, description = "The check's result", body = ReplayCheckView),
        ReadRunErrors,
    )
)]
pub(crate) async fn check_run_replay(
    State(app): State<AppState>,
    Tenant(tenant): Tenant,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<ReplayCheckView>, ApiError> {
    let id = RunId::from(id.as_str());
    let run = app.engine.get_run(&tenant, &id).await?;
    let check = app.engine.check_replay(&tenant, &id).await?;
    let (result, replayed, divergence) = match check {
        ReplayCheck::Clean { replayed } => ("clean", Some(replayed), None),
        ReplayCheck::Diverged(d) => ("diverged", None, Some(d)),
    };
    Ok(Json(ReplayCheckView {
        build_id: app.engine.config().build_id.clone(),
        run_build_id: run.build_id,
        result: result.to_owned(),
        replayed,
        divergence,
    }))
}

/// Move the unfinished run to the build serving this API, only if its journal replays
/// cleanly on it now; otherwise 409 `diverged` with the divergence in the error body,
/// and the run is left as it was. A run parked for `NonDeterminism` whose journal now
/// replays is resumed by the same call. The timeline shows `RunUpgraded` (`From`, `To`).
#[utoipa::path(
    post, path = "/runs/{id}/upgrade", operation_id = "upgradeRun", tag = "runs",
    security(("bearer" = [])),
    params(
        ("id" = String, Path, description = "The run's id"),
        IfMatch,
    ),
    responses(
        (status = 200, description = "The run, on this build", body = RunView),
        UpgradeErrors,
    )
)]
pub(crate) async fn upgrade_run(
    State(app): State<AppState>,
    super::control::Caller { tenant, who }: super::control::Caller,
    ApiPath(id): ApiPath<String>,
    IfMatch(if_match): IfMatch,
) -> Result<Response, ApiError> {
    let run = app
        .engine
        .upgrade_as(&tenant, &RunId::from(id.as_str()), if_match, Some(&who))
        .await?;
    app.run_answer(StatusCode::OK, &tenant, &run).await
}

/// Upgrade every unfinished run (of the caller's tenant) on `build` whose journal
/// replays on the build serving this API; report the others with where they diverge,
/// and the ones that could not be moved right now (running) as skipped. Runs that
/// recorded no build are `build` = `-`.
#[utoipa::path(
    post, path = "/builds/{build}/upgrade", operation_id = "upgradeBuild", tag = "runs",
    security(("bearer" = [])),
    params(("build" = String, Path, description = "The build whose runs to move (`-`: runs with no build)")),
    responses(
        (status = 200, description = "What moved and what did not", body = UpgradeReportSchema),
        BuildUpgradeErrors,
    )
)]
pub(crate) async fn upgrade_build(
    State(app): State<AppState>,
    Tenant(tenant): Tenant,
    ApiPath(build): ApiPath<String>,
) -> Result<Json<UpgradeReport>, ApiError> {
    let build = if build == "-" { "" } else { build.as_str() };
    Ok(Json(app.engine.upgrade_build(&tenant, build).await?))
}
