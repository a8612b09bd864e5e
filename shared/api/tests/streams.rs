//! `GET /runs/{id}/streams/{name}` through the router (`oneshot`): JSON long-poll
//! pages and Server-Sent Events, resumable at any offset, ending when the run does.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use http::{Method, StatusCode};
use serde_json::{Value, json};
use siesta::*;
use siesta_api::ControlApi;
use tower::ServiceExt;

mod common;
use common::TenantHeader;

struct World {
    _dir: tempfile::TempDir,
    engine: Engine,
    router: Router,
}

fn registry() -> Registry {
    let mut reg = Registry::new();
    reg.register("talker", |ctx: Context, _: Value| async move {
        ctx.step("llm", |step| async move {
            let tokens = step.stream("tokens");
            for t in ["Hel", "lo"] {
                tokens.publish(t).await?;
            }
            Ok(())
        })
        .await?;
        ctx.wait_for_event::<bool>("go").await?;
        ctx.stream("tokens").publish("!").await?;
        Ok(())
    });
    let attempts = Arc::new(std::sync::atomic::AtomicU32::new(0));
    reg.register("flaky", move |ctx: Context, _: Value| {
        let attempts = attempts.clone();
        async move {
            ctx.step("llm", move |step| async move {
                let n = attempts.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
                let tokens = step.stream("tokens");
                tokens.publish(&format!("try {n}")).await?;
                if n == 1 {
                    return Err(StepError::new("rate_limited", "429", true));
                }
                Ok(())
            })
            .retry(RetryStrategy::fixed(2, Duration::ZERO))
            .await
        }
    });
    reg
}

impl World {
    fn new() -> World {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::default());
        let embedded =
            siesta_embedded::EmbeddedBackend::open(dir.path().join("db"), clock.clone()).unwrap();
        let engine = Engine::new(
            embedded.backend(),
            clock,
            registry(),
            EngineConfig::default(),
        );
        World {
            _dir: dir,
            router: ControlApi::new(engine.clone())
                .authenticate(TenantHeader)
                .router(),
            engine,
        }
    }

    /// A run of `talker` for tenant `acme`, worked until it waits for `go`.
    async fn waiting_run(&self) -> RunId {
        let run = self
            .engine
            .start(&TenantId::from("acme"), "talker", json!(null), None)
            .await
            .unwrap();
        self.settle().await;
        run.id
    }

    async fn go(&self, id: &RunId) {
        self.engine
            .deliver_event(&TenantId::from("acme"), id, "go", json!(true), None)
            .await
            .unwrap();
        self.settle().await;
    }

    async fn settle(&self) {
        self.engine.run_until_idle(100).await.unwrap();
    }

    fn get(
        &self,
        tenant: &str,
        path: &str,
        headers: &[(&str, &str)],
    ) -> http::Request<axum::body::Body> {
        let mut b = http::Request::builder()
            .method(Method::GET)
            .uri(path)
            .header("x-test-tenant", tenant);
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(axum::body::Body::empty()).unwrap()
    }

    /// Status and body as text.
    async fn send(&self, request: http::Request<axum::body::Body>) -> (StatusCode, String, String) {
        let response = self.router.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let content_type = response
            .headers()
            .get("content-type")
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        (
            status,
            content_type,
            String::from_utf8(bytes.to_vec()).unwrap(),
        )
    }

    async fn page(&self, path: &str) -> Value {
        let (status, content_type, body) = self.send(self.get("acme", path, &[])).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(content_type, "application/json");
        serde_json::from_str(&body).unwrap()
    }
}

/// One server-sent event: its id, its name and its data.
#[derive(Debug, Clone, PartialEq)]
struct Sse {
    id: Option<String>,
    event: Option<String>,
    data: Value,
}

fn parse_sse(body: &str) -> Vec<Sse> {
    body.split("\n\n")
        .filter(|block| block.lines().any(|l| l.starts_with("data:")))
        .map(|block| {
            let mut e = Sse {
                id: None,
                event: None,
                data: Value::Null,
            };
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("id:") {
                    e.id = Some(v.trim().to_owned());
                } else if let Some(v) = line.strip_prefix("event:") {
                    e.event = Some(v.trim().to_owned());
                } else if let Some(v) = line.strip_prefix("data:") {
                    e.data = serde_json::from_str(v.trim()).unwrap();
                }
            }
            e
        })
        .collect()
}

#[tokio::test]
async fn json_pages_give_chunks_the_next_offset_and_whether_the_stream_ended() {
    let w = World::new();
    let id = w.waiting_run().await;
    let first = w.page(&format!("/runs/{id}/streams/tokens")).await;
    let kinds: Vec<&str> = first["chunks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, vec!["discard", "data", "data"]);
    assert_eq!(first["chunks"][1]["data"], "Hel");
    assert_eq!(first["chunks"][1]["step"], "llm#0");
    assert_eq!(first["chunks"][1]["attempt"], 1);
    assert_eq!(first["chunks"][1]["offset"], 1);
    assert!(first["chunks"][1]["at"].as_str().unwrap().ends_with('Z'));
    assert_eq!(
        (first["next"].clone(), first["closed"].clone()),
        (json!(3), json!(false))
    );

    let limited = w
        .page(&format!("/runs/{id}/streams/tokens?from=1&limit=1"))
        .await;
    assert_eq!(limited["chunks"].as_array().unwrap().len(), 1);
    assert_eq!(limited["next"], 2);

    w.go(&id).await;
    let rest = w.page(&format!("/runs/{id}/streams/tokens?from=3")).await;
    assert_eq!(rest["chunks"][0]["data"], "!");
    assert!(
        rest["chunks"][0].get("step").is_none(),
        "a body chunk names no step"
    );
    assert_eq!(
        (rest["next"].clone(), rest["closed"].clone()),
        (json!(4), json!(true))
    );
}

#[tokio::test]
async fn events_from_every_offset_give_every_chunk_once_then_end() {
    let w = World::new();
    let id = w.waiting_run().await;
    w.go(&id).await;
    let all = w.page(&format!("/runs/{id}/streams/tokens")).await["chunks"].clone();
    let all = all.as_array().unwrap();
    assert_eq!(all.len(), 4);
    for from in 0..=all.len() {
        // By `?from=`, and by `Last-Event-ID` (the last id received: go on past it).
        let by_query = format!("/runs/{id}/streams/tokens?from={from}");
        let last = from.checked_sub(1).map(|l| l.to_string());
        let mut requests = vec![w.get("acme", &by_query, &[("accept", "text/event-stream")])];
        if let Some(last) = &last {
            requests.push(w.get(
                "acme",
                &format!("/runs/{id}/streams/tokens?from=0"),
                &[("accept", "text/event-stream"), ("last-event-id", last)],
            ));
        }
        for request in requests {
            let reconnect = request.headers().contains_key("last-event-id");
            let (status, content_type, body) = w.send(request).await;
            if reconnect && from == all.len() {
                // Nothing after the last id of an ended stream: stop reconnecting.
                assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
                continue;
            }
            assert_eq!(status, StatusCode::OK);
            assert_eq!(content_type, "text/event-stream");
            let events = parse_sse(&body);
            let (end, chunks) = events.split_last().unwrap();
            assert_eq!(end.event.as_deref(), Some("end"), "{body}");
            assert_eq!(end.data, json!({"next": 4}));
            let ids: Vec<String> = chunks.iter().map(|e| e.id.clone().unwrap()).collect();
            let want: Vec<String> = (from..all.len()).map(|o| o.to_string()).collect();
            assert_eq!(ids, want, "from {from}: each chunk once, in order");
            for e in chunks {
                let offset: usize = e.id.as_deref().unwrap().parse().unwrap();
                assert_eq!(e.data, all[offset], "the event's data is the chunk");
                let named = if all[offset]["kind"] == "data" {
                    None
                } else {
                    all[offset]["kind"].as_str()
                };
                assert_eq!(e.event.as_deref(), named, "data chunks are unnamed events");
            }
        }
    }
}

#[tokio::test]
async fn across_a_retried_attempt_events_from_every_offset_show_the_failed_attempt_voided() {
    let w = World::new();
    let run = w
        .engine
        .start(&TenantId::from("acme"), "flaky", json!(null), None)
        .await
        .unwrap();
    w.settle().await;
    let id = run.id;
    let all = w.page(&format!("/runs/{id}/streams/tokens")).await;
    assert_eq!(all["closed"], true, "the run finished");
    let all = all["chunks"].as_array().unwrap().clone();
    let shape: Vec<(String, Value, Value)> = all
        .iter()
        .map(|c| {
            (
                c["kind"].as_str().unwrap().to_owned(),
                c["data"].clone(),
                c["attempt"].clone(),
            )
        })
        .collect();
    assert_eq!(
        shape,
        vec![
            ("discard".to_owned(), Value::Null, json!(1)),
            ("data".to_owned(), json!("try 1"), json!(1)),
            ("discard".to_owned(), Value::Null, json!(1)),
            ("discard".to_owned(), Value::Null, json!(2)),
            ("data".to_owned(), json!("try 2"), json!(2)),
        ]
    );
    for from in 0..=all.len() {
        let (_, _, body) = w
            .send(w.get(
                "acme",
                &format!("/runs/{id}/streams/tokens?from={from}"),
                &[("accept", "text/event-stream")],
            ))
            .await;
        let events = parse_sse(&body);
        let (end, chunks) = events.split_last().unwrap();
        assert_eq!(end.event.as_deref(), Some("end"));
        let got: Vec<Value> = chunks.iter().map(|e| e.data.clone()).collect();
        assert_eq!(got, all[from..].to_vec(), "from {from}");
    }
}

#[tokio::test]
async fn an_open_event_stream_delivers_what_comes_and_ends_with_the_run() {
    let w = Arc::new(World::new());
    let id = w.waiting_run().await;
    let reader = {
        let (w, id) = (w.clone(), id.clone());
        tokio::spawn(async move {
            let request = w.get(
                "acme",
                &format!("/runs/{id}/streams/tokens"),
                &[("accept", "text/event-stream")],
            );
            w.send(request).await
        })
    };
    // The reader holds the stream open while the run waits; the event ends the run.
    w.go(&id).await;
    let (status, _, body) = tokio::time::timeout(Duration::from_secs(20), reader)
        .await
        .expect("the event stream ended with the run")
        .unwrap();
    assert_eq!(status, StatusCode::OK);
    let events = parse_sse(&body);
    let ids: Vec<Option<String>> = events.iter().map(|e| e.id.clone()).collect();
    assert_eq!(
        ids,
        vec![
            Some("0".into()),
            Some("1".into()),
            Some("2".into()),
            Some("3".into()),
            None
        ]
    );
    assert_eq!(events[3].data["data"], "!");
    assert_eq!(events[4].event.as_deref(), Some("end"));
}

#[tokio::test]
async fn behind_api_gateway_an_event_stream_ends_without_end_when_its_time_is_spent() {
    // GIVEN a waiting run, and a request that carries the time its invocation has left
    let w = World::new();
    let id = w.waiting_run().await;
    let mut request = w.get(
        "acme",
        &format!("/runs/{id}/streams/tokens"),
        &[("accept", "text/event-stream")],
    );
    request
        .extensions_mut()
        .insert(siesta_api::MaxWait(Duration::ZERO));
    // WHEN it reads the stream as events
    let (status, _, body) = w.send(request).await;
    // THEN it gets what is there, and the stream ends open: no `end` event, so the
    // client reconnects from the last id
    assert_eq!(status, StatusCode::OK);
    let events = parse_sse(&body);
    let ids: Vec<Option<String>> = events.iter().map(|e| e.id.clone()).collect();
    assert_eq!(
        ids,
        vec![Some("0".into()), Some("1".into()), Some("2".into())]
    );
    assert!(
        events.iter().all(|e| e.event.as_deref() != Some("end")),
        "{body}"
    );
}

#[tokio::test]
async fn a_long_poll_answers_with_the_next_chunk_as_soon_as_it_is_there() {
    let w = Arc::new(World::new());
    let id = w.waiting_run().await;
    let reader = {
        let (w, id) = (w.clone(), id.clone());
        tokio::spawn(async move {
            w.page(&format!("/runs/{id}/streams/tokens?from=3&wait=60"))
                .await
        })
    };
    w.go(&id).await;
    let page = tokio::time::timeout(Duration::from_secs(20), reader)
        .await
        .expect("answered before its wait ran out")
        .unwrap();
    assert_eq!(page["chunks"][0]["data"], "!");
    assert_eq!(page["chunks"][0]["offset"], 3);
}

#[tokio::test]
async fn a_long_poll_with_nothing_new_answers_an_empty_page_when_its_wait_is_spent() {
    let w = World::new();
    let id = w.waiting_run().await;
    let page = w
        .page(&format!("/runs/{id}/streams/tokens?from=3&wait=0"))
        .await;
    assert_eq!(page, json!({"chunks": [], "next": 3, "closed": false}));
}

#[tokio::test]
async fn another_tenants_run_is_not_found_and_a_bad_name_or_offset_is_refused() {
    let w = World::new();
    let id = w.waiting_run().await;
    let path = format!("/runs/{id}/streams/tokens");
    let (status, _, _) = w.send(w.get("other", &path, &[])).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "JSON");
    let (status, content_type, _) = w
        .send(w.get("other", &path, &[("accept", "text/event-stream")]))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "SSE");
    assert_eq!(
        content_type, "application/json",
        "an error, not an event stream"
    );
    let (status, _, _) = w
        .send(w.get("acme", "/runs/nope/streams/tokens", &[]))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _, body) = w
        .send(w.get("acme", &format!("/runs/{id}/streams/bad%23name"), &[]))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, _, _) = w
        .send(w.get("acme", &path, &[("last-event-id", "x")]))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn the_stream_route_is_in_the_openapi_document() {
    let doc = siesta_api::openapi();
    let doc = serde_json::to_value(&doc).unwrap();
    let op = &doc["paths"]["/runs/{id}/streams/{name}"]["get"];
    assert_eq!(op["operationId"], "getRunStream");
    let content = &op["responses"]["200"]["content"];
    assert!(content.get("application/json").is_some(), "{content}");
    assert!(content.get("text/event-stream").is_some(), "{content}");
}

#[tokio::test]
async fn an_offset_or_wait_past_int64_is_refused_as_the_document_says() {
    let w = World::new();
    let id = w.waiting_run().await;
    for query in ["from=9223372036854775808", "wait=9223372036854775808"] {
        let path = format!("/runs/{id}/streams/tokens?{query}");
        let (status, _, body) = w.send(w.get("acme", &path, &[])).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{query}: {body}");
    }
    let last = format!("/runs/{id}/streams/tokens?from=9223372036854775807");
    assert_eq!(w.page(&last).await["chunks"], json!([]));
}
