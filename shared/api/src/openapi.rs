//! The OpenAPI 3.1 document of the API, generated from a route table kept next to the
//! router; a test routes every entry of the table, so the two cannot drift apart.

use serde_json::{Value, json};

/// One route: method, path template, what it does, its success status, whether it
/// takes a JSON body.
pub struct Route {
    /// Lower-case HTTP method.
    pub method: &'static str,
    /// Path template with `{param}`s.
    pub path: &'static str,
    /// What it does.
    pub summary: &'static str,
    /// Its success status.
    pub success: u16,
    /// Whether it takes a JSON body.
    pub body: bool,
}

/// Every route of the control API and the webhook receiver.
pub const ROUTES: &[Route] = &[
    Route {
        method: "post",
        path: "/runs",
        summary: "Start a run (Idempotency-Key, Prefer: wait=N)",
        success: 201,
        body: true,
    },
    Route {
        method: "get",
        path: "/runs",
        summary: "List the caller's runs (status, workflow, limit, cursor)",
        success: 200,
        body: false,
    },
    Route {
        method: "get",
        path: "/runs/{id}",
        summary: "The run view; ETag is its version",
        success: 200,
        body: false,
    },
    Route {
        method: "get",
        path: "/runs/{id}/result",
        summary: "Long-poll for the outcome (Prefer: wait=N, N <= 60)",
        success: 200,
        body: false,
    },
    Route {
        method: "get",
        path: "/runs/{id}/timeline",
        summary: "Timeline events after a sequence number",
        success: 200,
        body: false,
    },
    Route {
        method: "post",
        path: "/runs/{id}/cancel",
        summary: "Cancel (If-Match optional)",
        success: 200,
        body: false,
    },
    Route {
        method: "post",
        path: "/runs/{id}/resume",
        summary: "Resume a parked run (If-Match optional)",
        success: 202,
        body: false,
    },
    Route {
        method: "post",
        path: "/runs/{id}/events/{name}",
        summary: "Deliver a named event",
        success: 202,
        body: true,
    },
    Route {
        method: "post",
        path: "/runs/{id}/messages",
        summary: "Inject a message",
        success: 202,
        body: true,
    },
    Route {
        method: "post",
        path: "/callbacks/{id}/succeed",
        summary: "Complete a callback with a result",
        success: 202,
        body: true,
    },
    Route {
        method: "post",
        path: "/callbacks/{id}/fail",
        summary: "Fail a callback",
        success: 202,
        body: true,
    },
    Route {
        method: "post",
        path: "/callbacks/{id}/heartbeat",
        summary: "Keep a callback alive",
        success: 202,
        body: false,
    },
    Route {
        method: "post",
        path: "/hooks/sources/{source}",
        summary: "Public webhook from a configured, signed source",
        success: 200,
        body: true,
    },
    Route {
        method: "post",
        path: "/hooks/{token}",
        summary: "Public webhook addressed by a callback token",
        success: 200,
        body: true,
    },
    Route {
        method: "get",
        path: "/healthz",
        summary: "Liveness",
        success: 200,
        body: false,
    },
    Route {
        method: "get",
        path: "/openapi.json",
        summary: "This document",
        success: 200,
        body: false,
    },
];

/// The OpenAPI 3.1 document.
pub fn openapi() -> Value {
    let error = json!({
        "type": "object",
        "required": ["error"],
        "properties": {"error": {"type": "object", "required": ["code", "message"],
            "properties": {"code": {"type": "string"}, "message": {"type": "string"}}}}
    });
    let mut paths = serde_json::Map::new();
    for route in ROUTES {
        let params: Vec<Value> = route
            .path
            .split('/')
            .filter_map(|s| s.strip_prefix('{').and_then(|s| s.strip_suffix('}')))
            .map(|name| json!({"name": name, "in": "path", "required": true, "schema": {"type": "string"}}))
            .collect();
        let mut op = json!({
            "summary": route.summary,
            "parameters": params,
            "responses": {
                route.success.to_string(): {"description": "success", "content": {"application/json": {"schema": {"type": "object"}}}},
                "default": {"description": "error", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
            }
        });
        if route.body {
            op["requestBody"] =
                json!({"required": true, "content": {"application/json": {"schema": {}}}});
        }
        let entry = paths
            .entry(route.path.to_owned())
            .or_insert_with(|| json!({}));
        entry[route.method] = op;
    }
    json!({
        "openapi": "3.1.0",
        "info": {"title": "Siesta", "version": env!("CARGO_PKG_VERSION"), "description": "Durable workflows: runs, events, callbacks and webhooks."},
        "paths": paths,
        "components": {
            "schemas": {"Error": error},
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}
        },
        "security": [{"bearer": []}]
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_route_is_documented_once_with_its_path_parameters() {
        let doc = openapi();
        for route in ROUTES {
            let op = &doc["paths"][route.path][route.method];
            assert!(op.is_object(), "{} {}", route.method, route.path);
            let params = op["parameters"].as_array().unwrap().len();
            assert_eq!(params, route.path.matches('{').count(), "{}", route.path);
        }
        assert_eq!(doc["openapi"], "3.1.0");
    }
}
