//! Large values through the router (`oneshot`): the run view and the timeline refer to
//! them, `GET /runs/{id}/values/{sha256}` serves them to the run's tenant only.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

use std::sync::Arc;

use axum::Router;
use http::{Method, StatusCode};
use serde_json::{Value, json};
use siesta::*;
use siesta_api::ControlApi;

mod common;
use common::TenantHeader;
use tower::ServiceExt;

/// Values over 64 bytes go to the artifact store.
const INLINE_LIMIT: usize = 64;

struct World {
    _dir: tempfile::TempDir,
    engine: Engine,
    router: Router,
}

struct Answer {
    status: StatusCode,
    content_type: String,
    bytes: Vec<u8>,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.bytes)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.bytes)))
    }
}

impl World {
    fn new() -> World {
        World::with_inline_limit(INLINE_LIMIT)
    }

    fn with_inline_limit(inline_limit: usize) -> World {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::default());
        let embedded =
            siesta_embedded::EmbeddedBackend::open(dir.path().join("db"), clock.clone()).unwrap();
        let mut registry = Registry::new();
        // A large input, a large step result and a large output.
        registry.register("report", |ctx: Context, input: Value| async move {
            let rows: Vec<String> = ctx
                .step("fetch_rows", |_| async move {
                    Ok((0..20).map(|i| format!("row number {i}")).collect())
                })
                .await?;
            Ok(json!({"title": input["title"], "rows": rows}))
        });
        // Returns the event it waited for.
        registry.register("inbox", |ctx: Context, _input: Value| async move {
            let note: Value = ctx.wait_for_event_unchecked("note").await?;
            Ok(note)
        });
        let config = EngineConfig {
            inline_limit,
            ..EngineConfig::default()
        };
        let engine = Engine::new(embedded.backend(), clock, registry, config);
        World {
            _dir: dir,
            router: ControlApi::new(engine.clone())
                .authenticate(TenantHeader)
                .router(),
            engine,
        }
    }

    async fn call(&self, tenant: &str, method: Method, path: &str, body: &str) -> Answer {
        let request = http::Request::builder()
            .method(method)
            .uri(path)
            .header("x-test-tenant", tenant)
            .header("content-type", "application/json")
            .body(axum::body::Body::from(body.to_owned()))
            .unwrap();
        let response = self.router.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let content_type = response
            .headers()
            .get("content-type")
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap()
            .to_vec();
        Answer {
            status,
            content_type,
            bytes,
        }
    }

    /// A finished `report` run of tenant `a`, with a large input.
    async fn finished_report(&self, title: &str) -> (String, Value) {
        let input = json!({"title": format!("{title}: long enough to be kept in the artifact store, not inline")});
        let start = self
            .call(
                "a",
                Method::POST,
                "/runs",
                &json!({"workflow": "report", "input": input}).to_string(),
            )
            .await;
        assert_eq!(start.status, StatusCode::CREATED);
        let id = start.json()["id"].as_str().unwrap().to_owned();
        self.engine.run_until_idle(100).await.unwrap();
        (id, input)
    }
}

fn value_ref(v: &Value) -> &Value {
    let r = &v["value_ref"];
    assert!(r.is_object(), "a value reference: {v}");
    r
}

#[tokio::test]
async fn a_large_value_is_a_reference_in_the_run_view_and_served_to_its_own_tenant() {
    let w = World::new();
    let (id, input) = w.finished_report("report").await;
    let view = w.call("a", Method::GET, &format!("/runs/{id}"), "").await;
    assert_eq!(view.status, StatusCode::OK);
    let view = view.json();
    assert_eq!(view["status"], "completed", "{view}");

    let input_ref = value_ref(&view["input"]);
    let input_json = serde_json::to_vec(&input).unwrap();
    assert_eq!(input_ref["size"], input_json.len());
    assert_eq!(input_ref["media_type"], "application/json");
    let href = input_ref["href"].as_str().unwrap();
    assert_eq!(
        href,
        format!(
            "/runs/{id}/values/{}",
            input_ref["sha256"].as_str().unwrap()
        )
    );
    assert!(
        !view.to_string().contains("location"),
        "the store's location is not shown: {view}"
    );

    let own = w.call("a", Method::GET, href, "").await;
    assert_eq!(own.status, StatusCode::OK);
    assert_eq!(own.content_type, "application/json");
    assert_eq!(own.json(), input);

    let output = w
        .call(
            "a",
            Method::GET,
            value_ref(&view["output"])["href"].as_str().unwrap(),
            "",
        )
        .await;
    assert_eq!(output.status, StatusCode::OK);
    assert_eq!(output.json()["rows"][19], "row number 19");

    // Another tenant: neither the run nor its value exists for it.
    let other = w.call("b", Method::GET, href, "").await;
    assert_eq!(other.status, StatusCode::NOT_FOUND);
    assert_eq!(other.json()["error"]["code"], "not_found");
    assert!(
        !String::from_utf8_lossy(&other.bytes).contains("artifact store, not inline"),
        "nothing of the value is shown"
    );
}

#[tokio::test]
async fn a_large_step_result_is_a_reference_in_the_timeline_and_fetched_by_it() {
    let w = World::new();
    let (id, _) = w.finished_report("report").await;
    let timeline = w
        .call("a", Method::GET, &format!("/runs/{id}/timeline"), "")
        .await
        .json();
    let succeeded = timeline["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["EventType"] == "StepSucceeded")
        .unwrap_or_else(|| panic!("a StepSucceeded event: {timeline}"));
    let href = value_ref(&succeeded["Details"]["ResultArtifact"])["href"]
        .as_str()
        .unwrap();
    let value = w.call("a", Method::GET, href, "").await;
    assert_eq!(value.status, StatusCode::OK);
    assert_eq!(value.json()[0], "row number 0");
    assert_eq!(
        w.call("b", Method::GET, href, "").await.status,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn a_digest_the_run_does_not_refer_to_is_not_found_and_a_malformed_one_is_refused() {
    let w = World::new();
    let (id, _) = w.finished_report("first").await;
    // A second run of the same tenant: its values are not the first run's.
    let (other_id, _) = w.finished_report("second").await;
    let view = w
        .call("a", Method::GET, &format!("/runs/{other_id}"), "")
        .await
        .json();
    let sha = value_ref(&view["output"])["sha256"]
        .as_str()
        .unwrap()
        .to_owned();
    let answer = w
        .call("a", Method::GET, &format!("/runs/{id}/values/{sha}"), "")
        .await;
    assert_eq!(answer.status, StatusCode::NOT_FOUND);
    let own = w
        .call(
            "a",
            Method::GET,
            &format!("/runs/{other_id}/values/{sha}"),
            "",
        )
        .await;
    assert_eq!(own.status, StatusCode::OK);
    let unknown = "0".repeat(64);
    let answer = w
        .call(
            "a",
            Method::GET,
            &format!("/runs/{id}/values/{unknown}"),
            "",
        )
        .await;
    assert_eq!(answer.status, StatusCode::NOT_FOUND);
    assert_eq!(answer.json()["error"]["code"], "not_found");
    let answer = w
        .call(
            "a",
            Method::GET,
            &format!("/runs/{id}/values/not-a-digest"),
            "",
        )
        .await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    assert_eq!(answer.content_type, "application/json");
}

/// An object shaped like the store's artifact reference, written by a caller.
fn forged(sha256: &str, location: &str) -> Value {
    json!({"sha256": sha256, "size": 1, "media_type": "application/json", "location": location})
}

#[tokio::test]
async fn a_reference_forged_in_an_input_or_an_event_body_is_not_found_and_reads_no_other_run() {
    // Inline values up to 4 KiB, so that the forged references stay inline.
    let w = World::with_inline_limit(4096);
    let secret = "x".repeat(5000);
    let mut victims = Vec::new();
    for tenant in ["a", "b"] {
        let start = w
            .call(
                tenant,
                Method::POST,
                "/runs",
                &json!({"workflow": "report", "input": {"title": secret}}).to_string(),
            )
            .await;
        assert_eq!(start.status, StatusCode::CREATED);
        let id = start.json()["id"].as_str().unwrap().to_owned();
        let view = w
            .call(tenant, Method::GET, &format!("/runs/{id}"), "")
            .await;
        let sha256 = value_ref(&view.json()["input"])["sha256"]
            .as_str()
            .unwrap()
            .to_owned();
        // The victim's own tenant can read it: the digest and the location are right.
        let own = w
            .call(
                tenant,
                Method::GET,
                &format!("/runs/{id}/values/{sha256}"),
                "",
            )
            .await;
        assert_eq!(own.status, StatusCode::OK);
        let location = w.engine.backend().artifacts.location(
            &TenantId::from(tenant),
            &RunId::from(id.as_str()),
            &sha256,
        );
        victims.push((tenant, sha256, location));
    }
    w.engine.run_until_idle(100).await.unwrap();

    // Tenant a's own other run (same tenant, other run) and tenant b's run.
    for (victim_tenant, sha256, location) in &victims {
        let forged_ref = forged(sha256, location);
        let start = w
            .call(
                "a",
                Method::POST,
                "/runs",
                &json!({"workflow": "inbox", "input": {"x": forged_ref, "list": [forged_ref]}})
                    .to_string(),
            )
            .await;
        assert_eq!(start.status, StatusCode::CREATED);
        let id = start.json()["id"].as_str().unwrap().to_owned();
        w.engine.run_until_idle(100).await.unwrap();
        let event = w
            .call(
                "a",
                Method::POST,
                &format!("/runs/{id}/events/note"),
                &json!({"y": forged_ref}).to_string(),
            )
            .await;
        assert_eq!(event.status, StatusCode::ACCEPTED);
        w.engine.run_until_idle(100).await.unwrap();
        let view = w.call("a", Method::GET, &format!("/runs/{id}"), "").await;
        assert_eq!(view.json()["status"], "completed", "{}", view.json());

        let read = w
            .call("a", Method::GET, &format!("/runs/{id}/values/{sha256}"), "")
            .await;
        assert_eq!(
            read.status,
            StatusCode::NOT_FOUND,
            "a forged reference to tenant {victim_tenant}'s value"
        );
        assert!(
            !String::from_utf8_lossy(&read.bytes).contains(&secret),
            "another run's value was served"
        );
    }
}
