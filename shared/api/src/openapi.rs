//! The OpenAPI 3.1 document, generated from the route table ([`crate::routes`]) on top of
//! its info and components, so the router and the document cannot drift apart.

use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{ComponentsBuilder, InfoBuilder, OpenApi, OpenApiBuilder};

use siesta_api_types::ValueRef;

/// The document's info and components, which the route table adds its paths to.
pub(crate) fn base() -> OpenApi {
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
    crate::routes::table(base()).into_openapi()
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    fn doc() -> Value {
        serde_json::to_value(super::openapi()).unwrap()
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
