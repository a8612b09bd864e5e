//! What the API says about itself: `/healthz` and `/openapi.json`.

use std::sync::OnceLock;

use axum::Json;
use axum::extract::State;

use crate::error::ApiError;
use crate::openapi::openapi;
use crate::state::AppState;
use siesta_api_types::{ErrorBody, Health};

/// Liveness: 200 while this process can serve, 503 (with the reason) when a part it
/// depends on stopped.
#[utoipa::path(
    get, path = "/healthz", operation_id = "health", tag = "meta",
    responses(
        (status = 200, description = "Alive", body = Health),
        (status = 503, description = "Not serving", body = ErrorBody),
    )
)]
pub(crate) async fn health(State(app): State<AppState>) -> Result<Json<Health>, ApiError> {
    if let Some(check) = &app.health {
        check.check().map_err(ApiError::unavailable)?;
    }
    Ok(Json(Health {
        status: "ok".into(),
    }))
}

/// This document, as this server serves it: `StartRun.workflow` lists the workflows
/// registered here (an `enum`), so a generated client or a fuzzer can start a run.
#[utoipa::path(
    get, path = "/openapi.json", operation_id = "openapi", tag = "meta",
    responses((status = 200, description = "The OpenAPI 3.1 document", body = Object))
)]
pub(crate) async fn openapi_json(State(app): State<AppState>) -> Json<serde_json::Value> {
    static DOCUMENT: OnceLock<serde_json::Value> = OnceLock::new();
    let mut document = DOCUMENT
        .get_or_init(|| serde_json::to_value(openapi()).unwrap_or_default())
        .clone();
    with_workflows(&mut document, app.engine.registry().names());
    Json(document)
}

/// Name the registered workflows in the start request's schema.
fn with_workflows<'a>(document: &mut serde_json::Value, names: impl Iterator<Item = &'a str>) {
    let names: Vec<&str> = names.collect();
    if let Some(workflow) = document
        .pointer_mut("/components/schemas/StartRun/properties/workflow")
        .and_then(|w| w.as_object_mut())
    {
        workflow.insert("enum".into(), serde_json::json!(names));
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_served_document_names_the_registered_workflows() {
        let mut doc = serde_json::to_value(crate::openapi()).unwrap();
        super::with_workflows(&mut doc, ["chain", "order"].into_iter());
        assert_eq!(
            doc["components"]["schemas"]["StartRun"]["properties"]["workflow"]["enum"],
            serde_json::json!(["chain", "order"])
        );
    }
}
