//! The routes, each registered with its OpenAPI description (utoipa-axum), so the router
//! and the document are made from the same list and cannot drift apart.

use std::sync::OnceLock;

use axum::Json;
use axum::extract::State;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{ComponentsBuilder, InfoBuilder, OpenApi, OpenApiBuilder};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::dead_letters::*;
use crate::routes::*;
use crate::values::*;
use crate::webhook::*;

/// Every route of the API, described.
pub(crate) fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(base())
        .routes(routes!(start_run, list_runs))
        .routes(routes!(get_run))
        .routes(routes!(get_run_result))
        .routes(routes!(get_run_timeline))
        .routes(routes!(get_run_value))
        .routes(routes!(cancel_run))
        .routes(routes!(resume_run))
        .routes(routes!(crate::resolve::resolve_operation))
        .routes(routes!(deliver_event))
        .routes(routes!(inject_message))
        .routes(routes!(succeed_callback))
        .routes(routes!(fail_callback))
        .routes(routes!(heartbeat_callback))
        .routes(routes!(source_webhook))
        .routes(routes!(callback_webhook))
        .routes(routes!(health))
        .routes(routes!(openapi_json))
        .routes(routes!(list_dead_letters))
        .routes(routes!(redrive_dead_letter))
        .routes(routes!(redrive_dead_letters))
}

fn base() -> OpenApi {
    OpenApiBuilder::new()
        .info(
            InfoBuilder::new()
                .title("Siesta")
                .version(env!("CARGO_PKG_VERSION"))
                .description(Some(
                    "Durable workflows: runs, events, callbacks and webhooks. Authenticated \
                     routes take `Authorization: Bearer <token>` (an API key in `siesta dev`, \
                     a JWT behind API Gateway); `/healthz`, `/openapi.json` and `/hooks/*` \
                     are public. Errors are `{\"error\": {\"code\", \"message\"}}`.",
                ))
                .build(),
        )
        .components(Some(
            ComponentsBuilder::new()
                .schema_from::<ValueRef>()
                .security_scheme(
                    "bearer",
                    SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
                )
                .build(),
        ))
        .build()
}

/// The OpenAPI 3.1 document of the API.
pub fn openapi() -> OpenApi {
    routes().into_openapi()
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
    use serde_json::Value;

    fn doc() -> Value {
        serde_json::to_value(super::openapi()).unwrap()
    }

    #[test]
    fn the_served_document_names_the_registered_workflows() {
        let mut doc = doc();
        super::with_workflows(&mut doc, ["chain", "order"].into_iter());
        assert_eq!(
            doc["components"]["schemas"]["StartRun"]["properties"]["workflow"]["enum"],
            serde_json::json!(["chain", "order"])
        );
    }

    #[test]
    fn the_document_is_openapi_3_1_with_no_global_security() {
        let doc = doc();
        assert_eq!(doc["openapi"], "3.1.0");
        assert!(doc.get("security").is_none(), "security is per route");
    }

    #[test]
    fn public_routes_are_public_and_every_other_route_needs_the_bearer_token() {
        let doc = doc();
        for (path, item) in doc["paths"].as_object().unwrap() {
            for (method, op) in item.as_object().unwrap() {
                let public = matches!(path.as_str(), "/healthz" | "/openapi.json")
                    || path.starts_with("/hooks/");
                let security = &op["security"];
                if public {
                    assert!(security.is_null(), "{method} {path} is public");
                } else {
                    assert_eq!(
                        security,
                        &serde_json::json!([{"bearer": []}]),
                        "{method} {path}"
                    );
                }
            }
        }
    }

    #[test]
    fn every_operation_has_an_id_a_success_schema_and_only_listed_json_errors() {
        let doc = doc();
        let mut ids = std::collections::BTreeSet::new();
        for (path, item) in doc["paths"].as_object().unwrap() {
            for (method, op) in item.as_object().unwrap() {
                assert!(
                    ids.insert(op["operationId"].as_str().unwrap().to_owned()),
                    "{method} {path}: duplicate operationId"
                );
                let responses = op["responses"].as_object().unwrap();
                let success = responses
                    .iter()
                    .find(|(code, _)| code.starts_with('2'))
                    .unwrap_or_else(|| panic!("{method} {path}: no 2xx"));
                assert!(
                    success.1["content"]["application/json"]["schema"].is_object(),
                    "{method} {path}: the 2xx has no schema"
                );
                // Statuses are listed one by one: a catch-all would hide from a fuzzer a
                // status the document never mentions.
                assert!(
                    !responses.contains_key("default"),
                    "{method} {path}: a default answer"
                );
                let errors: Vec<_> = responses
                    .iter()
                    .filter(|(code, _)| !code.starts_with('2'))
                    .collect();
                if path != "/openapi.json" {
                    assert!(
                        errors.iter().any(|(code, _)| *code == "503"),
                        "{method} {path}"
                    );
                }
                for (code, error) in errors {
                    assert_eq!(
                        error["content"]["application/json"]["schema"]["$ref"],
                        "#/components/schemas/Error",
                        "{method} {path} {code}"
                    );
                }
            }
        }
    }

    #[test]
    fn the_four_typed_delivery_routes_document_the_422_delivery_rejected_and_others_do_not() {
        let doc = doc();
        let typed = [
            ("/runs/{id}/events/{name}", "post"),
            ("/callbacks/{callback_id}/succeed", "post"),
            ("/hooks/{token}", "post"),
            ("/hooks/sources/{source}", "post"),
        ];
        for (path, method) in typed {
            let description = doc["paths"][path][method]["responses"]["422"]["description"]
                .as_str()
                .unwrap_or_else(|| panic!("{method} {path}: no 422"));
            assert!(description.contains("delivery_rejected"), "{path}");
        }
        for (path, method) in [
            ("/runs/{id}/messages", "post"),
            ("/callbacks/{callback_id}/fail", "post"),
        ] {
            assert!(
                doc["paths"][path][method]["responses"]["422"].is_null(),
                "{path}"
            );
        }
    }

    #[test]
    fn authenticated_routes_document_401_and_public_webhooks_only_where_signed() {
        let doc = doc();
        for (path, item) in doc["paths"].as_object().unwrap() {
            for (method, op) in item.as_object().unwrap() {
                let has_401 = op["responses"].get("401").is_some();
                let signed = path == "/hooks/sources/{source}";
                assert_eq!(
                    has_401,
                    !op["security"].is_null() || signed,
                    "{method} {path}"
                );
            }
        }
    }

    #[test]
    fn a_started_run_links_to_every_route_that_takes_its_id() {
        let doc = doc();
        let links = doc["paths"]["/runs"]["post"]["responses"]["201"]["links"]
            .as_object()
            .unwrap();
        let linked: std::collections::BTreeSet<&str> = links
            .values()
            .map(|l| l["operationId"].as_str().unwrap())
            .collect();
        for (path, item) in doc["paths"].as_object().unwrap() {
            if !path.starts_with("/runs/{id}") {
                continue;
            }
            for op in item.as_object().unwrap().values() {
                let id = op["operationId"].as_str().unwrap();
                assert!(linked.contains(id), "{path}: {id} is not linked");
            }
        }
    }
}
