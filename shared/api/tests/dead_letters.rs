//! Dead letters through the router (`oneshot`), on the embedded backend with a manual
//! clock: runs whose wake-ups were dead-lettered are listed page by page (raw cursors in
//! URLs, RFC 3339 times), redriven one with `If-Match` and then all at once, and
//! complete; another tenant sees none of them; a run not parked for a dead letter is 404;
//! a run resumed with `POST /runs/{id}/resume` stays resumed through sweeps, and a
//! webhook then completes it.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use axum::Router;
use http::{Method, StatusCode};
use serde_json::{Value, json};
use siesta::*;
use siesta_api::{ApiKeys, ControlApi};
use siesta_testing::TestEnv;
use tower::ServiceExt;

/// Dead-lettered runs in the test.
const RUNS: usize = 25;

fn registry() -> Registry {
    let mut reg = Registry::new();
    reg.register("quick", |ctx: Context, n: u32| async move {
        let m = ctx.step("add", move |_| async move { Ok(n + 1) }).await?;
        Ok(m)
    });
    reg.register("await_payment", |ctx: Context, _: Value| async move {
        let payment = ctx
            .create_callback::<Value>("payment")
            .timeout(Duration::from_secs(3600))
            .await?;
        payment.wait().await
    });
    reg
}

/// Ops' token names the tenant `ops`, the other one another tenant.
fn router(w: &TestEnv) -> Router {
    ControlApi::new(w.engine())
        .authenticate(ApiKeys::new(HashMap::from([
            ("ops-token".to_owned(), TenantId::from("ops")),
            ("other-token".to_owned(), TenantId::from("other")),
        ])))
        .router()
}

async fn call(
    router: &Router,
    token: &str,
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
) -> (StatusCode, http::HeaderMap, Value) {
    let mut request = http::Request::builder()
        .method(method)
        .uri(path)
        .header("authorization", format!("Bearer {token}"));
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    let response = router
        .clone()
        .oneshot(request.body(axum::body::Body::empty()).unwrap())
        .await
        .unwrap();
    let (status, headers) = (response.status(), response.headers().clone());
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    (status, headers, serde_json::from_slice(&bytes).unwrap())
}

/// Every page of `GET /dead-letters`, following the cursor as given.
async fn list_all(router: &Router, token: &str, limit: usize) -> (Vec<Value>, usize) {
    let (mut all, mut pages) = (Vec::new(), 0);
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("/dead-letters?limit={limit}&cursor={c}"),
            None => format!("/dead-letters?limit={limit}"),
        };
        let (status, _, body) = call(router, token, Method::GET, &path, &[]).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        pages += 1;
        let page = body["dead_letters"].as_array().unwrap();
        assert!(page.len() <= limit);
        all.extend(page.iter().cloned());
        match body["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => return (all, pages),
        }
    }
}

/// Receive every wake-up without acknowledging one until the queue has dead-lettered
/// them all (5 receives each), then let the sweep park their runs (`runs` of them).
async fn dead_letter_everything(w: &TestEnv, runs: usize) {
    let queue = w.engine().backend().queue.clone();
    for _ in 0..10 {
        let mut got = 0;
        loop {
            let page = queue.receive(10, Duration::from_secs(1)).await.unwrap();
            if page.is_empty() {
                break;
            }
            got += page.len();
        }
        w.clock().advance(Duration::from_secs(2));
        if got == 0 {
            break;
        }
    }
    let report = w.engine().sweep(1000).await.unwrap();
    assert_eq!(
        (report.dead_letters, report.parked_dead_letters),
        (runs, runs),
        "{report:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_are_listed_with_cursors_and_redriven_one_then_all() {
    let w = TestEnv::builder(registry()).tenant("ops").build();
    let router = router(&w);
    let mut ids = BTreeSet::new();
    for n in 0..RUNS {
        ids.insert(w.create("quick", n as u32, None).await.unwrap().to_string());
    }
    dead_letter_everything(&w, RUNS).await;
    // A healthy run, completed: not a dead letter.
    let healthy = w.start("quick", 100u32).await;
    w.run_until_idle().await;
    assert_eq!(w.run(&healthy).await.status, RunStatus::Completed);

    let (letters, pages) = list_all(&router, "ops-token", 10).await;
    assert!(pages >= 3, "paged: {pages}");
    let listed: BTreeSet<String> = letters
        .iter()
        .map(|l| l["run_id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(listed, ids, "every dead letter, each once");
    assert_eq!(letters.len(), RUNS);
    for letter in &letters {
        assert_eq!(letter["workflow"], "quick");
        assert!(
            letter["reason"]
                .as_str()
                .unwrap()
                .contains("dead-letter queue"),
            "{letter}"
        );
        let at = letter["parked_at"].as_str().unwrap();
        assert!(
            at.len() == 24 && at.as_bytes()[10] == b'T' && at.ends_with('Z'),
            "RFC 3339 in UTC: {at}"
        );
    }
    let (other, _) = list_all(&router, "other-token", 10).await;
    assert!(
        other.is_empty(),
        "another tenant's dead letters are not yours"
    );

    // One, with a stale If-Match, then the right one.
    let first = &letters[0];
    let id = first["run_id"].as_str().unwrap();
    let path = format!("/dead-letters/{id}/redrive");
    let stale = format!("\"{}\"", first["version"].as_u64().unwrap() + 7);
    let (status, _, body) = call(
        &router,
        "ops-token",
        Method::POST,
        &path,
        &[("if-match", &stale)],
    )
    .await;
    assert_eq!(status, StatusCode::PRECONDITION_FAILED, "{body}");
    let (status, _, body) = call(&router, "other-token", Method::POST, &path, &[]).await;
    assert_eq!(
        status,
        StatusCode::NOT_FOUND,
        "not another tenant's: {body}"
    );
    let version = format!("\"{}\"", first["version"]);
    let (status, headers, body) = call(
        &router,
        "ops-token",
        Method::POST,
        &path,
        &[("if-match", &version)],
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body["status"], "pending");
    assert!(headers.contains_key("etag"));
    let (status, _, body) = call(&router, "ops-token", Method::POST, &path, &[]).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "redriven once: {body}");
    assert_eq!(body["error"]["code"], "not_found");
    let healthy_path = format!("/dead-letters/{healthy}/redrive");
    let (status, _, _) = call(&router, "ops-token", Method::POST, &healthy_path, &[]).await;
    assert_eq!(
        status,
        StatusCode::NOT_FOUND,
        "a completed run is no dead letter"
    );

    w.run_until_idle().await;
    assert_eq!(
        w.run(&RunId::from(id)).await.status,
        RunStatus::Completed,
        "the redriven run completes"
    );
    let (rest, _) = list_all(&router, "ops-token", 50).await;
    assert_eq!(rest.len(), RUNS - 1);

    // All the others at once.
    let (status, _, body) = call(
        &router,
        "ops-token",
        Method::POST,
        "/dead-letters/redrive",
        &[],
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body["redriven"], json!(RUNS - 1));
    w.run_until_idle().await;
    for id in &ids {
        assert_eq!(
            w.run(&RunId::from(id.as_str())).await.status,
            RunStatus::Completed
        );
    }
    let (none, _) = list_all(&router, "ops-token", 50).await;
    assert!(none.is_empty());
    let (status, _, body) = call(
        &router,
        "ops-token",
        Method::POST,
        "/dead-letters/redrive",
        &[],
    )
    .await;
    assert_eq!(
        (status, &body["redriven"]),
        (StatusCode::ACCEPTED, &json!(0))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_run_stays_resumed_through_sweeps_and_a_webhook_completes_it() {
    let w = TestEnv::builder(registry()).tenant("ops").build();
    let router = router(&w);
    let id = w
        .create("await_payment", Value::Null, None)
        .await
        .unwrap()
        .to_string();
    dead_letter_everything(&w, 1).await;
    let run_path = format!("/runs/{id}");
    let (_, _, parked) = call(&router, "ops-token", Method::GET, &run_path, &[]).await;
    assert_eq!(parked["status"], "parked", "{parked}");

    let (status, _, body) = call(
        &router,
        "ops-token",
        Method::POST,
        &format!("{run_path}/resume"),
        &[],
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    w.run_until_idle().await;
    // Each sweep past the five minutes a dead letter being handled stays hidden: one
    // handled but not deleted would be back by then.
    for _ in 0..3 {
        w.clock().advance(Duration::from_secs(301));
        let report = w.engine().sweep(1000).await.unwrap();
        assert_eq!(report.parked_dead_letters, 0, "{report:?}");
        w.run_until_idle().await;
    }
    let (_, _, waiting) = call(&router, "ops-token", Method::GET, &run_path, &[]).await;
    assert_eq!(waiting["status"], "waiting", "{waiting}");
    let hook = waiting["waits"][0]["url"].as_str().unwrap();
    let hook = &hook[hook.find("/hooks/").expect("a webhook URL")..];

    // The webhook: public, its token is the credential.
    let response = router
        .clone()
        .oneshot(
            http::Request::post(hook)
                .header("content-type", "application/json")
                .header("webhook-id", "msg_1")
                .body(axum::body::Body::from(r#"{"paid":true}"#))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    w.run_until_idle().await;
    let run = w.run(&RunId::from(id.as_str())).await;
    assert_eq!(run.status, RunStatus::Completed, "{:?}", run.error);
    assert_eq!(run.output, Some(Payload::Inline(json!({"paid": true}))));
}
