//! Starts held back through the API: a debounced start answers 201 with the run it
//! created, a start that joins it 200 with that run, its view saying which debounce
//! gathers it, how many starts and when it begins; a start over a start rate answers
//! 201 `queued` with its turn; an Idempotency-Key on a debounced start is refused.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

use std::time::Duration;

mod common;

use http::StatusCode;
use serde_json::{Value, json};
use siesta::{Context, Debounce, Registry, StartRate};
use siesta_api::ControlApi;
use siesta_testing::TestEnv;

fn registry() -> Registry {
    let mut registry = Registry::new();
    registry
        .register("sync_order", |_: Context, v: Value| async move { Ok(v) })
        .register("call", |_: Context, v: Value| async move { Ok(v) })
        .debounce(
            Debounce::new("order-updates", Duration::from_secs(10))
                .key_from_input("/order")
                .workflow("sync_order"),
        )
        .start_rate(StartRate::new("provider", 1, Duration::from_secs(2)).workflow("call"));
    registry
}

async fn call(
    api: &ControlApi,
    path: &str,
    body: Option<Value>,
    idempotency_key: Option<&str>,
) -> (StatusCode, Value) {
    let method = if body.is_some() { "POST" } else { "GET" };
    let headers: Vec<(&str, &str)> = idempotency_key
        .map(|k| ("idempotency-key", k))
        .into_iter()
        .collect();
    common::call_keyed(api, method, path, body, &headers).await
}

#[tokio::test]
async fn a_start_that_joins_a_gathering_run_answers_200_with_it_and_says_when_it_begins() {
    let env = TestEnv::builder(registry()).tenant("acme").build();
    let api = common::keyed_api(&env);
    let start = |rev: u32| json!({"workflow": "sync_order", "input": {"order": "o-1", "rev": rev}});
    let (status, first) = call(&api, "/runs", Some(start(1)), None).await;
    assert_eq!(status, StatusCode::CREATED, "{first}");
    assert_eq!(first["status"], "queued");
    env.advance(Duration::from_secs(4)).await;
    let (status, joined) = call(&api, "/runs", Some(start(2)), None).await;
    assert_eq!(status, StatusCode::OK, "{joined}");
    assert_eq!(joined["id"], first["id"]);
    let queued = &joined["queued"];
    assert_eq!(queued["debounce"], "order-updates");
    assert_eq!(queued["key"], "o-1");
    assert_eq!(queued["starts"], 2);
    assert_eq!(
        queued["next_at"], "2026-01-01T00:00:14.000Z",
        "a period after the last"
    );
    assert!(
        queued.get("limit").is_none() && queued.get("position").is_none(),
        "{queued}"
    );

    let (_, refused) = call(&api, "/runs", Some(start(3)), Some("retry-1")).await;
    assert_eq!(refused["error"]["code"], "invalid_input", "{refused}");

    env.advance(Duration::from_secs(10)).await;
    let id = first["id"].as_str().unwrap();
    let (_, done) = call(&api, &format!("/runs/{id}"), None, None).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["output"], json!({"order": "o-1", "rev": 2}));
    assert!(done.get("queued").is_none());
}

#[tokio::test]
async fn a_start_over_a_start_rate_answers_queued_with_its_turn() {
    let env = TestEnv::builder(registry()).tenant("acme").build();
    let api = common::keyed_api(&env);
    let (status, now) = call(
        &api,
        "/runs",
        Some(json!({"workflow": "call", "input": 1})),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    assert_ne!(now["status"], "queued", "its turn was now: {now}");
    let (status, later) = call(
        &api,
        "/runs",
        Some(json!({"workflow": "call", "input": 2})),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(later["status"], "queued", "{later}");
    assert_eq!(
        later["queued"],
        json!({"limit": "provider", "key": "", "next_at": "2026-01-01T00:00:02.000Z"})
    );
}

/// The answer to a queued start carries what queued it (a response extension the Lambda
/// start function counts per limit), and says whether the start joined.
#[tokio::test]
async fn a_queued_start_s_answer_says_what_queued_it() {
    use tower::ServiceExt;
    let env = TestEnv::builder(registry()).tenant("acme").build();
    let api = common::keyed_api(&env);
    let start = |body: Value| {
        http::Request::builder()
            .method("POST")
            .uri("/runs")
            .header("authorization", "Bearer k")
            .header("content-type", "application/json")
            .body(axum::body::Body::from(body.to_string()))
            .unwrap()
    };
    let order = json!({"workflow": "sync_order", "input": {"order": "o-9"}});
    let first = api
        .clone()
        .router()
        .oneshot(start(order.clone()))
        .await
        .unwrap();
    assert_eq!(
        first.extensions().get::<siesta_api::StartQueued>(),
        Some(&siesta_api::StartQueued {
            by: "order-updates".into(),
            joined: false
        })
    );
    let joined = api.clone().router().oneshot(start(order)).await.unwrap();
    assert!(
        joined
            .extensions()
            .get::<siesta_api::StartQueued>()
            .unwrap()
            .joined
    );
    let now = api
        .clone()
        .router()
        .oneshot(start(json!({"workflow": "call", "input": 1})))
        .await
        .unwrap();
    assert_eq!(
        now.extensions().get::<siesta_api::StartQueued>(),
        None,
        "its turn was now: not queued"
    );
}
