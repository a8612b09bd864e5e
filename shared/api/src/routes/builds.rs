//! `GET /builds`: the builds the caller's runs started on, each with its unfinished
//! runs by status, so an operator can see a deploy drain (`docs/deploys.md`).
//! Tenant-scoped like every authenticated route: the counts are of the runs of the
//! tenant the token names.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::State;
use serde::{Deserialize, Serialize};
use siesta::RunStatus;
use utoipa::ToSchema;

use crate::auth::Tenant;
use crate::error::ApiError;
use crate::state::AppState;
use crate::time::Rfc3339;

/// A build of the app, as the caller's runs know it.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct BuildView {
    /// The build id (`myapp@0.1.0+5f3a9c0e1b2d4a67`).
    pub build_id: String,
    /// Whether it is the build serving this API. A run of another build that is not
    /// finished waits for its build (its view says `awaiting_build`).
    pub serving: bool,
    /// Whether it is still deployed: the serving build is; on the dev server no other
    /// build is (it serves only its own); on Lambda, a build whose step function
    /// version is still in the build registry (`builds prune` removes it with the
    /// versions). `null` where that cannot be known (the registry could not be read).
    /// An unfinished run of a build that is not deployed waits until its build is
    /// deployed again or the run is upgraded.
    pub deployed: Option<bool>,
    /// Its unfinished runs by status (`{"waiting": 3, "parked": 1}`); empty when all
    /// of them finished.
    #[schema(value_type = BTreeMap<String, u64>)]
    pub unfinished: BTreeMap<RunStatus, u64>,
    /// When its first run was created; `null` for the serving build before it ran any.
    pub first_seen: Option<Rfc3339>,
    /// When its latest run was created; `null` as for `first_seen`.
    pub last_seen: Option<Rfc3339>,
}

/// The caller's builds.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct BuildList {
    /// The build serving this API.
    pub serving: String,
    /// Every build that started a run of the caller, and the serving one: the serving
    /// build first, then the others by their latest run, newest first.
    pub builds: Vec<BuildView>,
}

/// The builds the caller's runs started on, with their unfinished runs by status.
#[utoipa::path(
    get, path = "/builds", operation_id = "listBuilds", tag = "builds",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The caller's builds", body = BuildList),
        crate::responses::BuildsErrors,
    )
)]
pub(crate) async fn list_builds(
    State(app): State<AppState>,
    Tenant(tenant): Tenant,
) -> Result<Json<BuildList>, ApiError> {
    let serving = app.engine.config().build_id.clone();
    let mut known = app.engine.backend().store.builds(&tenant).await?;
    known.sort_by(|a, b| {
        b.last_seen
            .cmp(&a.last_seen)
            .then(a.build_id.cmp(&b.build_id))
    });
    let others: Vec<String> = known
        .iter()
        .map(|b| b.build_id.clone())
        .filter(|b| *b != serving)
        .collect();
    let found = match &app.deployments {
        // The dev server serves only its own build: no other is deployed.
        None => Some(others.iter().map(|b| (b.clone(), false)).collect()),
        Some(port) => match port.deployed(&others).await {
            Ok(found) => Some(found),
            Err(e) => {
                tracing::warn!(error = %e, "could not tell which builds are deployed");
                None
            }
        },
    };
    let deployed_of = |build: &str| -> Option<bool> {
        if build == serving {
            return Some(true);
        }
        found
            .as_ref()
            .and_then(|f: &std::collections::HashMap<String, bool>| f.get(build).copied())
    };
    let mut builds: Vec<BuildView> = known
        .into_iter()
        .map(|b| BuildView {
            serving: b.build_id == serving,
            deployed: deployed_of(&b.build_id),
            build_id: b.build_id,
            unfinished: b.unfinished,
            first_seen: Some(b.first_seen.into()),
            last_seen: Some(b.last_seen.into()),
        })
        .collect();
    match builds.iter().position(|b| b.serving) {
        Some(i) => {
            let this = builds.remove(i);
            builds.insert(0, this);
        }
        None => builds.insert(
            0,
            BuildView {
                build_id: serving.clone(),
                serving: true,
                deployed: Some(true),
                unfinished: BTreeMap::new(),
                first_seen: None,
                last_seen: None,
            },
        ),
    }
    Ok(Json(BuildList { serving, builds }))
}
