//! The operator action on a tool call whose outcome is `unknown`: resolve it as
//! succeeded, failed, or to be made again; and a lookup added after the park is asked
//! on resume.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use serde_json::json;
use siesta::*;
use siesta_testing::TestEnv;
use support::{create, output, world};

const LEASE_TTL: Duration = Duration::from_secs(30);

fn charge(calls: Arc<AtomicU32>, with_lookup: bool) -> Registry {
    let mut reg = Registry::new();
    reg.register("charge", move |ctx: Context, _: serde_json::Value| {
        let c = calls.clone();
        async move {
            let call = ctx.tool_call("charge", &json!({"amount": 5}), move |_| async move {
                c.fetch_add(1, Ordering::SeqCst);
                Ok(json!("charged"))
            });
            let call = if with_lookup {
                call.lookup(|_| async { Ok(Some(json!("found by lookup"))) })
            } else {
                call
            };
            match call.await {
                Ok(v) => Ok(v),
                Err(e) => Ok(json!({"error": e.kind().as_str(), "cause": e.cause().map(|c| c.message.clone())})),
            }
        }
    });
    reg
}

/// A run parked on an unknown tool call: the process died right after `running` was
/// recorded.
async fn parked(calls: &Arc<AtomicU32>) -> (TestEnv, RunId) {
    let w = world(charge(calls.clone(), false));
    let id = create(&w, "charge", json!(null)).await;
    w.probe().crash_after(1);
    w.run_until_idle().await;
    assert!(w.probe().is_dead());
    w.restart();
    w.advance(LEASE_TTL + Duration::from_secs(1)).await;
    assert_eq!(w.status(&id).await, RunStatus::Parked);
    (w, id)
}

fn charge_position() -> Position {
    Position::from("charge#0")
}

#[tokio::test]
async fn an_unknown_tool_call_resolved_as_succeeded_hands_its_value_to_the_workflow() {
    let calls = Arc::new(AtomicU32::new(0));
    let (w, id) = parked(&calls).await;
    let made = calls.load(Ordering::SeqCst);
    let run = w.run(&id).await;
    w.engine()
        .resolve_tool_call(
            w.tenant(),
            &id,
            &charge_position(),
            ToolCallResolution::Succeeded(json!("charged by hand")),
            "ops@acme",
            Some(run.version),
        )
        .await
        .unwrap();
    w.run_until_idle().await;
    let run = w.run(&id).await;
    assert_eq!(output(&run), json!("charged by hand"));
    assert_eq!(calls.load(Ordering::SeqCst), made, "not called again");
    let resolved = w
        .timeline(&id)
        .await
        .into_iter()
        .find(|e| {
            e.event_type == EventType::ToolCallRecorded && e.details["ResolvedBy"] == "ops@acme"
        })
        .expect("the resolution is in the timeline with who made it");
    assert_eq!(resolved.details["Resolution"], "succeeded");
    assert_eq!(resolved.id.as_deref(), Some("charge#0"));
    let entry = w.entry(&id, "charge#0").await.unwrap();
    assert!(
        matches!(entry.state, EntryState::Succeeded { .. }),
        "journaled as {:?}",
        entry.state
    );
}

#[tokio::test]
async fn an_unknown_tool_call_resolved_as_failed_fails_the_call_in_the_workflow() {
    let calls = Arc::new(AtomicU32::new(0));
    let (w, id) = parked(&calls).await;
    w.engine()
        .resolve_tool_call(
            w.tenant(),
            &id,
            &charge_position(),
            ToolCallResolution::Failed(ErrorInfo::new("Declined", "the bank refused", false)),
            "ops@acme",
            None,
        )
        .await
        .unwrap();
    w.run_until_idle().await;
    assert_eq!(
        output(&w.run(&id).await),
        json!({"error": "StepFailed", "cause": "the bank refused"})
    );
}

#[tokio::test]
async fn an_unknown_tool_call_resolved_for_retry_is_made_again() {
    let calls = Arc::new(AtomicU32::new(0));
    let (w, id) = parked(&calls).await;
    let made = calls.load(Ordering::SeqCst);
    w.engine()
        .resolve_tool_call(
            w.tenant(),
            &id,
            &charge_position(),
            ToolCallResolution::Retry,
            "ops@acme",
            None,
        )
        .await
        .unwrap();
    w.run_until_idle().await;
    assert_eq!(output(&w.run(&id).await), json!("charged"));
    assert_eq!(calls.load(Ordering::SeqCst), made + 1);
}

#[tokio::test]
async fn resolving_needs_a_parked_unknown_call_and_the_current_version() {
    let calls = Arc::new(AtomicU32::new(0));
    let (w, id) = parked(&calls).await;
    let run = w.run(&id).await;
    let stale = w
        .engine()
        .resolve_tool_call(
            w.tenant(),
            &id,
            &charge_position(),
            ToolCallResolution::Retry,
            "ops",
            Some(run.version - 1),
        )
        .await;
    assert!(
        matches!(stale, Err(EngineError::VersionMismatch { .. })),
        "{stale:?}"
    );
    let nowhere = w
        .engine()
        .resolve_tool_call(
            w.tenant(),
            &id,
            &Position::from("nothing#0"),
            ToolCallResolution::Retry,
            "ops",
            None,
        )
        .await;
    assert!(matches!(nowhere, Err(EngineError::NotFound)), "{nowhere:?}");
    assert_eq!(w.run(&id).await, run, "refused resolutions change nothing");
    w.engine()
        .resolve_tool_call(
            w.tenant(),
            &id,
            &charge_position(),
            ToolCallResolution::Retry,
            "ops",
            None,
        )
        .await
        .unwrap();
    w.run_until_idle().await;
    let again = w
        .engine()
        .resolve_tool_call(
            w.tenant(),
            &id,
            &charge_position(),
            ToolCallResolution::Retry,
            "ops",
            None,
        )
        .await;
    assert!(
        matches!(again, Err(EngineError::AlreadyFinished(_))),
        "{again:?}"
    );
}

#[tokio::test]
async fn a_lookup_added_after_the_park_is_asked_on_resume() {
    let calls = Arc::new(AtomicU32::new(0));
    let (w, id) = parked(&calls).await;
    let made = calls.load(Ordering::SeqCst);
    w.deploy(charge(calls.clone(), true));
    w.resume(&id).await;
    assert_eq!(output(&w.run(&id).await), json!("found by lookup"));
    assert_eq!(
        calls.load(Ordering::SeqCst),
        made,
        "the lookup answered; no call"
    );
}
