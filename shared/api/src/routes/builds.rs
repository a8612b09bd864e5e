//! `GET /builds`: the builds the caller's runs started on, each with its unfinished
//! runs by status, so an operator can see a deploy drain (`docs/deploys.md`).
//! Tenant-scoped like every authenticated route: the counts are of the runs of the
//! tenant the token names.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::State;
use siesta_api_types::{BuildList, BuildView};

use crate::auth::Tenant;
use crate::error::ApiError;
use crate::state::AppState;

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
