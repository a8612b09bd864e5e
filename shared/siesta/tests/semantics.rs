//! Exact operation semantics, measured against AWS Lambda durable functions: callback
//! deadlines, replay-consistent values, condition check errors, child-context errors,
//! validation of batch options, and writes over DynamoDB's transaction limits.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

mod support;

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::json;
use siesta::context::{CompletionConfig, ConditionCheck};
use siesta::*;
use siesta_testing::TestEnv;
use support::{output, world};

/// A callback of 3 s while the workflow sleeps 6 s, then awaits the callback.
fn callback_during_a_wait() -> Registry {
    let mut reg = Registry::new();
    reg.register(
        "approval",
        |ctx: Context, _: serde_json::Value| async move {
            let cb = ctx
                .create_callback::<u32>("approval")
                .timeout(Duration::from_secs(3))
                .await?;
            ctx.wait("pause", Duration::from_secs(6)).await?;
            match cb.wait().await {
                Ok(v) => Ok(json!({"value": v})),
                Err(e) => Ok(json!({"kind": e.kind().as_str()})),
            }
        },
    );
    reg
}

#[tokio::test]
async fn a_callback_completed_after_its_deadline_is_refused_and_times_out_at_the_deadline() {
    let w = world(callback_during_a_wait());
    let t0 = w.now();
    let id = w.start("approval", json!(null)).await;
    w.run_until_idle().await;
    let cb = w.open_callbacks(&id).await.pop().unwrap();

    // At the deadline the run is woken (it sleeps until 6 s) and the callback times out.
    w.advance(Duration::from_secs(3)).await;
    let timed_out: Vec<TimelineEvent> = w
        .timeline(&id)
        .await
        .into_iter()
        .filter(|e| e.event_type == EventType::CallbackTimedOut)
        .collect();
    assert_eq!(timed_out.len(), 1, "CallbackTimedOut is recorded at 3 s");
    assert_eq!(timed_out[0].at, t0.plus(Duration::from_secs(3)));
    assert_eq!(
        w.callback_record(&cb).await.status,
        CallbackStatus::TimedOut
    );
    assert_eq!(w.run(&id).await.status, RunStatus::Waiting);

    // A success sent at 4 s is refused, and nothing is recorded.
    w.clock().advance(Duration::from_secs(1));
    let before = w.timeline(&id).await.len();
    let late = w
        .engine()
        .complete_callback(&cb, None, Ok(json!(7)), None)
        .await;
    assert!(
        matches!(late, Err(EngineError::Gone(_))),
        "late success: {late:?}"
    );
    let late = w.engine().heartbeat_callback(&cb, None).await;
    assert!(
        matches!(late, Err(EngineError::Gone(_))),
        "late heartbeat: {late:?}"
    );
    assert_eq!(w.timeline(&id).await.len(), before);
    assert!(w.replay_input(&id).await.deliveries.is_empty());

    // Awaiting it later raises the timeout.
    w.advance(Duration::from_secs(2)).await;
    let run = w.run(&id).await;
    assert_eq!(output(&run), json!({"kind": "CallbackTimedOut"}));
}

#[tokio::test]
async fn a_heartbeat_or_outcome_after_the_heartbeat_deadline_is_refused_by_the_store() {
    let mut reg = Registry::new();
    reg.register("beats", |ctx: Context, _: serde_json::Value| async move {
        let cb = ctx
            .create_callback::<u32>("job")
            .heartbeat_timeout(Duration::from_secs(2))
            .await?;
        ctx.wait("pause", Duration::from_secs(6)).await?;
        match cb.wait().await {
            Ok(v) => Ok(json!({"value": v})),
            Err(e) => Ok(json!({"kind": e.kind().as_str(), "message": e.to_string()})),
        }
    });
    let w = world(reg);
    let id = w.start("beats", json!(null)).await;
    w.run_until_idle().await;
    let cb = w.open_callbacks(&id).await.pop().unwrap();
    // In time at 1.5 s, and at 3 s only because that heartbeat moved the deadline to
    // 3.5 s; the second moves it to 5 s. The clock moves without working the run:
    // nothing has recorded a timeout.
    for step in [1500, 1500] {
        w.clock().advance(Duration::from_millis(step));
        w.engine().heartbeat_callback(&cb, None).await.unwrap();
    }
    w.clock().advance(Duration::from_millis(2000));
    assert_eq!(w.callback_record(&cb).await.status, CallbackStatus::Open);
    let before = w.timeline(&id).await.len();
    let late = w.engine().heartbeat_callback(&cb, None).await;
    assert!(
        matches!(late, Err(EngineError::Gone(_))),
        "late heartbeat: {late:?}"
    );
    let late = w
        .engine()
        .complete_callback(&cb, None, Ok(json!(7)), None)
        .await;
    assert!(
        matches!(late, Err(EngineError::Gone(_))),
        "late success: {late:?}"
    );
    assert_eq!(w.timeline(&id).await.len(), before, "nothing is recorded");
    // The run, worked, times the callback out for its heartbeat.
    w.drive(&id).await;
    let run = w.run(&id).await;
    assert_eq!(output(&run)["kind"], "CallbackTimedOut");
    assert!(
        output(&run)["message"]
            .as_str()
            .unwrap()
            .contains("heartbeat timeout")
    );
}

#[tokio::test]
async fn a_callback_completed_before_its_deadline_keeps_its_value_until_awaited() {
    let w = world(callback_during_a_wait());
    let id = w.start("approval", json!(null)).await;
    w.run_until_idle().await;
    let cb = w.open_callbacks(&id).await.pop().unwrap();
    w.clock().advance(Duration::from_secs(2));
    w.engine()
        .complete_callback(&cb, None, Ok(json!(7)), None)
        .await
        .unwrap();
    w.run_until_idle().await;
    // The deadline passes while the workflow still sleeps: the outcome already arrived.
    w.advance(Duration::from_secs(2)).await;
    w.advance(Duration::from_secs(2)).await;
    let run = w.run(&id).await;
    assert_eq!(output(&run), json!({"value": 7}));
    assert!(
        !w.timeline(&id)
            .await
            .iter()
            .any(|e| e.event_type == EventType::CallbackTimedOut)
    );
}

/// Serializes without `cached`: not an exact round trip.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Lossy {
    n: u32,
    #[serde(skip)]
    cached: u32,
}

#[tokio::test]
async fn the_first_execution_sees_the_journaled_value_as_replay_does() {
    let mut reg = Registry::new();
    reg.register("lossy", |ctx: Context, _: serde_json::Value| async move {
        let step: Lossy = ctx
            .step("make", |_| async { Ok(Lossy { n: 1, cached: 7 }) })
            .await?;
        let child: Lossy = ctx
            .run_in_child_context("child", |_| async { Ok(Lossy { n: 2, cached: 7 }) })
            .await?;
        let mapped = ctx
            .map("each", vec![3u32], |_, n, _| async move {
                Ok(Lossy { n, cached: 7 })
            })
            .await?
            .values()?;
        // Journaled by a step: what this pass saw, which is the first execution.
        let seen = json!([step.cached, child.cached, mapped[0].cached]);
        let first: serde_json::Value = ctx.step("seen", move |_| async move { Ok(seen) }).await?;
        ctx.sleep(Duration::from_secs(1)).await?;
        // The same operations, now replayed from the journal.
        Ok(json!({"first": first, "n": [step.n, child.n, mapped[0].n]}))
    });
    let w = world(reg);
    let id = w.start("lossy", json!(null)).await;
    w.run_until_idle().await;
    w.advance(Duration::from_secs(1)).await;
    assert_eq!(
        output(&w.run(&id).await),
        json!({"first": [0, 0, 0], "n": [1, 2, 3]}),
        "values the workflow sees are the decoded journaled ones"
    );
}

#[tokio::test]
async fn a_condition_check_error_is_retried_by_an_opted_in_policy_then_fails_the_operation() {
    let mut reg = Registry::new();
    reg.register("poll", |ctx: Context, _: serde_json::Value| async move {
        let r = ctx
            .wait_for_condition("job", 0u32, |_, _| async move {
                Err::<ConditionCheck<u32>, _>(StepError::retryable("status endpoint down"))
            })
            .retry(RetryStrategy::default())
            .await;
        let e = r.unwrap_err();
        Ok(json!({"kind": e.kind().as_str(), "cause": e.cause().map(|c| c.message.clone())}))
    });
    let w = world(reg);
    let id = w.start("poll", json!(null)).await;
    w.run_until_idle().await;
    for _ in 0..10 {
        if w.run(&id).await.status.is_finished() {
            break;
        }
        w.advance(Duration::from_secs(60)).await;
    }
    let run = w.run(&id).await;
    assert_eq!(
        output(&run),
        json!({"kind": "StepFailed", "cause": "status endpoint down"})
    );
    let failures: Vec<TimelineEvent> = w
        .timeline(&id)
        .await
        .into_iter()
        .filter(|e| {
            e.event_type == EventType::StepFailed && e.sub_type == Some(SubType::WaitForCondition)
        })
        .collect();
    assert_eq!(
        failures.len(),
        6,
        "one per attempt of a step's default policy"
    );
    for f in &failures {
        assert_eq!(f.details["Error"]["message"], "status endpoint down");
    }
}

#[tokio::test]
async fn a_failed_child_context_is_wrapped_and_a_callback_failure_keeps_its_message() {
    let mut reg = Registry::new();
    reg.register("child", |ctx: Context, _: serde_json::Value| async move {
        let child = ctx
            .run_in_child_context("inner", |_| async { Err::<u32, _>(Error::msg("boom")) })
            .await
            .unwrap_err();
        let cb = ctx.create_callback::<u32>("approve").await?;
        let failed = cb.wait().await.unwrap_err();
        Ok(json!({
            "child": {"kind": child.kind().as_str(), "cause": child.cause().map(|c| c.message.clone())},
            "callback": {"kind": failed.kind().as_str(), "message": failed.to_string(),
                         "cause": failed.cause().map(|c| c.kind.clone())},
        }))
    });
    let w = world(reg);
    let id = w.start("child", json!(null)).await;
    w.run_until_idle().await;
    let cb = w.open_callbacks(&id).await.pop().unwrap();
    w.engine()
        .complete_callback(
            &cb,
            None,
            Err(ErrorInfo::new("RejectedError", "not approved", false)),
            None,
        )
        .await
        .unwrap();
    w.run_until_idle().await;
    assert_eq!(
        output(&w.run(&id).await),
        json!({
            "child": {"kind": "ChildFailed", "cause": "boom"},
            "callback": {"kind": "CallbackFailed", "message": "not approved", "cause": "RejectedError"},
        })
    );
}

#[tokio::test]
async fn invalid_batch_options_are_an_error_at_the_call() {
    let mut reg = Registry::new();
    reg.register("bad", |ctx: Context, _: serde_json::Value| async move {
        let mut kinds = Vec::new();
        let each = |_: Context, n: u32, _: usize| async move { Ok(n) };
        let zero = ctx
            .map("zero", vec![1u32, 2], each)
            .max_concurrency(0)
            .await;
        kinds.push(zero.err().map(|e| e.kind().as_str()));
        for config in [
            CompletionConfig {
                min_successful: Some(3),
                ..CompletionConfig::default()
            },
            CompletionConfig {
                tolerated_failure_percentage: Some(-1.0),
                ..CompletionConfig::default()
            },
            CompletionConfig {
                tolerated_failure_percentage: Some(101.0),
                ..CompletionConfig::default()
            },
        ] {
            let r = ctx
                .map("bad_config", vec![1u32, 2], each)
                .completion(config)
                .await;
            kinds.push(r.err().map(|e| e.kind().as_str()));
        }
        let unnamed = ctx
            .map("named", vec![1u32, 2], each)
            .names(["only one"])
            .await;
        kinds.push(unnamed.err().map(|e| e.kind().as_str()));
        Ok(json!(kinds))
    });
    let w = world(reg);
    let id = w.start("bad", json!(null)).await;
    w.run_until_idle().await;
    assert_eq!(
        output(&w.run(&id).await),
        json!([
            "InvalidConfig",
            "InvalidConfig",
            "InvalidConfig",
            "InvalidConfig",
            "InvalidConfig"
        ])
    );
}

/// More open callbacks than one DynamoDB transaction holds.
const MANY: usize = 150;

fn many_callbacks() -> Registry {
    let mut reg = Registry::new();
    reg.register("many", |ctx: Context, finish: bool| async move {
        for i in 0..MANY {
            ctx.create_callback::<u32>(&format!("cb{i}")).await?;
        }
        if finish {
            // A patch marker is a start written with the next checkpoint: the final
            // one, beside the callbacks it closes.
            Ok(json!(ctx.patched("close-all")))
        } else {
            ctx.sleep(Duration::from_secs(3600)).await?;
            Ok(json!("slept"))
        }
    });
    reg
}

async fn assert_all_closed(w: &TestEnv, id: &RunId, ids: &[CallbackId]) {
    assert_eq!(ids.len(), MANY);
    for cb in ids {
        assert_eq!(w.callback_record(cb).await.status, CallbackStatus::Closed);
        let late = w
            .engine()
            .complete_callback(cb, None, Ok(json!(1)), None)
            .await;
        assert!(matches!(late, Err(EngineError::Gone(_))), "{late:?}");
    }
    assert!(w.run(id).await.status.is_finished());
}

#[tokio::test]
async fn finishing_or_cancelling_a_run_with_more_open_callbacks_than_a_transaction_holds() {
    let w = world(many_callbacks());
    let finishes = w.start("many", json!(true)).await;
    let cancelled = w.start("many", json!(false)).await;
    w.run_until_idle().await;
    let ids: Vec<CallbackId> = w
        .replay_input(&finishes)
        .await
        .journal
        .iter()
        .filter_map(|e| e.handle.clone().map(CallbackId))
        .collect();
    assert_eq!(w.run(&finishes).await.status, RunStatus::Completed);
    assert_all_closed(&w, &finishes, &ids).await;

    let open = w.open_callbacks(&cancelled).await;
    w.engine()
        .cancel(w.tenant(), &cancelled, None)
        .await
        .unwrap();
    assert_eq!(w.run(&cancelled).await.status, RunStatus::Cancelled);
    assert_all_closed(&w, &cancelled, &open).await;
}
