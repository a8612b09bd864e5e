//! `siesta runs resolve` end to end: a run parked on a tool call whose outcome is
//! unknown (its process died inside the call), the API served on a socket, and the
//! CLI's request resolving it for each outcome; the run then finishes with what the
//! operator said, and the timeline says who said it.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use siesta::*;
use siesta_api::{ApiKeys, ControlApi};
use siesta_cli::runs::{Outcome, Remote};
use siesta_testing::{LEASE_TTL, TestEnv};

fn registry(calls: Arc<AtomicU32>) -> Registry {
    let mut reg = Registry::new();
    reg.register("charge", move |ctx: Context, _: Value| {
        let calls = calls.clone();
        async move {
            let charged = ctx
                .tool_call("charge", &json!({"order": "o-1"}), move |_| async move {
                    calls.fetch_add(1, Ordering::SeqCst);
                    Ok(json!("charged by the call"))
                })
                .await;
            Ok(match charged {
                Ok(v) => json!({"charged": v}),
                Err(e) => json!({"failed": e.cause().map(|c| c.message.clone())}),
            })
        }
    });
    reg
}

/// A parked run of the dev tenant, and the URL of the API serving it (dev: no keys).
async fn parked() -> (TestEnv, RunId, Arc<AtomicU32>, String) {
    let calls = Arc::new(AtomicU32::new(0));
    let w = TestEnv::builder(registry(calls.clone()))
        .tenant("default")
        .build();
    let id = w.create("charge", json!(null), None).await.unwrap();
    w.crash_after_writes(1);
    w.run_until_idle().await;
    assert!(w.has_crashed(), "the engine died inside the tool call");
    w.restart();
    w.advance(LEASE_TTL + Duration::from_secs(1)).await;
    assert_eq!(w.status(&id).await, RunStatus::Parked);
    let router = ControlApi::new(w.engine())
        .authenticate(ApiKeys::default())
        .router();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(siesta_api::server::serve(
        listener,
        router,
        Default::default(),
    ));
    (w, id, calls, url)
}

#[tokio::test]
async fn runs_resolve_resolves_an_unknown_tool_call_for_each_outcome() {
    let cases = [
        (
            Outcome::succeeded(r#""charged by hand""#).unwrap(),
            json!({"charged": "charged by hand"}),
            0,
        ),
        (
            Outcome::Failed("the bank refused".into()),
            json!({"failed": "the bank refused"}),
            0,
        ),
        (Outcome::Retry, json!({"charged": "charged by the call"}), 1),
    ];
    for (outcome, output, extra_calls) in cases {
        let (w, id, calls, url) = parked().await;
        let before = calls.load(Ordering::SeqCst);
        let version = w.run(&id).await.version;
        let remote = Remote {
            url,
            api_key: None,
            json: true,
        };
        // A stale version is refused and changes nothing.
        let stale = remote
            .resolve(id.as_str(), "charge#0", outcome.clone(), Some(version + 1))
            .await
            .unwrap_err();
        assert!(stale.to_string().starts_with("412"), "{stale}");
        remote
            .resolve(id.as_str(), "charge#0", outcome, Some(version))
            .await
            .unwrap();
        w.run_until_idle().await;
        assert_eq!(w.output::<Value>(&id).await, output);
        assert_eq!(calls.load(Ordering::SeqCst), before + extra_calls);
        assert!(
            w.timeline(&id)
                .await
                .iter()
                .any(|e| e.event_type == EventType::ToolCallRecorded
                    && e.details["ResolvedBy"] == "dev"),
            "who resolved it is in the timeline"
        );
    }
}
