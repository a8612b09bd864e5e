//! Every durable operation, driven through the engine on the embedded backend.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use serde_json::json;
use siesta::context::{
    BatchOutcome, CompletionConfig, CompletionReason, ConditionCheck, WaitStrategy, branch,
};
use siesta::*;
use siesta_testing::TestEnv;
use support::{create, output, world};

fn counter() -> Arc<AtomicU32> {
    Arc::new(AtomicU32::new(0))
}

#[tokio::test]
async fn step_result_is_journaled_and_replayed_without_running_again() {
    let calls = counter();
    let mut reg = Registry::new();
    let c = calls.clone();
    reg.register(
        "two_steps",
        move |ctx: Context, input: serde_json::Value| {
            let c = c.clone();
            async move {
                let a: u32 = ctx
                    .step("first", {
                        let c = c.clone();
                        move |_| async move { Ok(c.fetch_add(1, Ordering::SeqCst) + 1) }
                    })
                    .await?;
                ctx.sleep(Duration::from_secs(5)).await?;
                let b: u32 = ctx
                    .step("second", move |_| async move {
                        Ok(c.fetch_add(1, Ordering::SeqCst) + 10)
                    })
                    .await?;
                Ok(json!({"a": a, "b": b, "input": input}))
            }
        },
    );
    let w = world(reg);
    let id = create(&w, "two_steps", json!({"x": 1})).await;
    w.run_until_idle().await;
    assert_eq!(w.run(&id).await.status, RunStatus::Waiting);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    w.advance(Duration::from_secs(5)).await;
    let run = w.run(&id).await;
    assert_eq!(run.status, RunStatus::Completed);
    assert_eq!(output(&run), json!({"a": 1, "b": 11, "input": {"x": 1}}));
    assert_eq!(
        calls.load(Ordering::SeqCst),
        2,
        "the first step ran once even though the workflow replayed"
    );
}

#[tokio::test]
async fn retryable_failure_retries_on_a_durable_timer_then_succeeds() {
    let attempts = counter();
    let mut reg = Registry::new();
    let a = attempts.clone();
    reg.register("flaky", move |ctx: Context, _: serde_json::Value| {
        let a = a.clone();
        async move {
            let v: String = ctx
                .step("call", move |s| async move {
                    a.fetch_add(1, Ordering::SeqCst);
                    if s.attempt() < 3 {
                        Err(StepError::from_http_status(503, "unavailable"))
                    } else {
                        Ok(format!("ok on {}", s.attempt()))
                    }
                })
                .retry(RetryStrategy::fixed(5, Duration::from_secs(10)))
                .await?;
            Ok(v)
        }
    });
    let w = world(reg);
    let id = create(&w, "flaky", json!(null)).await;
    w.run_until_idle().await;
    let run = w.run(&id).await;
    assert_eq!(
        run.status,
        RunStatus::Waiting,
        "backoff is a durable timer, not a sleep"
    );
    assert_eq!(
        run.due_at,
        Some(w.clock().now().plus(Duration::from_secs(10)))
    );
    assert_eq!(attempts.load(Ordering::SeqCst), 1);
    w.advance(Duration::from_secs(9)).await;
    assert_eq!(attempts.load(Ordering::SeqCst), 1, "not before the delay");
    w.advance(Duration::from_secs(1)).await;
    assert_eq!(attempts.load(Ordering::SeqCst), 2);
    w.advance(Duration::from_secs(10)).await;
    let run = w.run(&id).await;
    assert_eq!(output(&run), json!("ok on 3"));
    let failed = w
        .timeline(&id)
        .await
        .iter()
        .filter(|e| e.event_type == EventType::StepFailed)
        .count();
    assert_eq!(failed, 2);
}

#[tokio::test]
async fn fatal_error_is_not_retried_and_the_workflow_can_catch_it() {
    let attempts = counter();
    let mut reg = Registry::new();
    let a = attempts.clone();
    reg.register("fatal", move |ctx: Context, _: serde_json::Value| {
        let a = a.clone();
        async move {
            let r: Result<(), Error> = ctx
                .step("validate", move |_| async move {
                    a.fetch_add(1, Ordering::SeqCst);
                    Err(StepError::fatal("amount must be positive"))
                })
                .await;
            let e = r.unwrap_err();
            assert_eq!(e.kind(), ErrorKind::StepFailed);
            Ok(json!({"caught": e.cause().unwrap().message}))
        }
    });
    let w = world(reg);
    let id = create(&w, "fatal", json!(null)).await;
    w.run_until_idle().await;
    assert_eq!(
        output(&w.run(&id).await),
        json!({"caught": "amount must be positive"})
    );
    assert_eq!(attempts.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn exhausted_retries_fail_the_run_or_park_it_when_asked() {
    let mut reg = Registry::new();
    reg.register("exhaust", |ctx: Context, park: bool| async move {
        let step = ctx
            .step("always_fails", |_| async {
                Err::<(), _>(StepError::timeout("slow"))
            })
            .retry(RetryStrategy::fixed(2, Duration::from_secs(1)));
        if park {
            step.park_on_exhaustion().await
        } else {
            step.await
        }
    });
    let w = world(reg);
    let failing = create(&w, "exhaust", json!(false)).await;
    let parking = create(&w, "exhaust", json!(true)).await;
    w.run_until_idle().await;
    w.advance(Duration::from_secs(1)).await;
    let run = w.run(&failing).await;
    assert_eq!(run.status, RunStatus::Failed);
    assert_eq!(run.error.unwrap().kind, "StepFailed");
    let run = w.run(&parking).await;
    assert_eq!(run.status, RunStatus::Parked);
    assert_eq!(run.error.unwrap().kind, "RetriesExhausted");
    assert!(
        w.timeline(&parking)
            .await
            .iter()
            .any(|e| e.event_type == EventType::RunParked)
    );
}

#[tokio::test]
async fn named_error_kinds_are_the_only_ones_retried_when_listed() {
    let attempts = counter();
    let mut reg = Registry::new();
    let a = attempts.clone();
    reg.register("kinds", move |ctx: Context, _: serde_json::Value| {
        let a = a.clone();
        async move {
            ctx.step("x", move |s| async move {
                a.fetch_add(1, Ordering::SeqCst);
                // A retryable error of a kind that is not listed: not retried.
                if s.attempt() == 1 {
                    Err::<(), _>(StepError::new("rate_limited", "slow down", false))
                } else {
                    Err(StepError::timeout("t"))
                }
            })
            .retry(RetryStrategy::fixed(5, Duration::from_secs(1)).retry_on_kinds(["rate_limited"]))
            .await
        }
    });
    let w = world(reg);
    let id = create(&w, "kinds", json!(null)).await;
    w.run_until_idle().await;
    w.advance(Duration::from_secs(1)).await;
    assert_eq!(w.run(&id).await.status, RunStatus::Failed);
    assert_eq!(attempts.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn callback_succeeds_from_outside_and_is_single_use() {
    let mut reg = Registry::new();
    reg.register("pay", |ctx: Context, _: serde_json::Value| async move {
        let cb = ctx
            .create_callback::<serde_json::Value>("payment")
            .timeout(Duration::from_secs(3600))
            .await?;
        let url = cb.url();
        let event = cb.wait().await?;
        Ok(json!({"event": event, "url_prefix": url.starts_with("http://hooks.test/hooks/cb_")}))
    });
    let w = world(reg);
    let id = create(&w, "pay", json!(null)).await;
    w.run_until_idle().await;
    assert_eq!(w.run(&id).await.status, RunStatus::Waiting);
    let cb = w.open_callbacks(&id).await.pop().unwrap();
    assert!(
        cb.as_str().len() >= 3 + 32,
        "at least 128 bits of randomness"
    );
    let first = w
        .engine()
        .complete_callback(
            &cb,
            None,
            Ok(json!({"status": "COMPLETED"})),
            Some(DeliveryId::from("whk_1")),
        )
        .await
        .unwrap();
    assert!(matches!(first, ports::DeliverOutcome::Accepted(_)));
    w.run_until_idle().await;
    let run = w.run(&id).await;
    assert_eq!(
        output(&run),
        json!({"event": {"status": "COMPLETED"}, "url_prefix": true})
    );
    let again = w
        .engine()
        .complete_callback(
            &cb,
            None,
            Ok(json!({"status": "FAILED"})),
            Some(DeliveryId::from("whk_2")),
        )
        .await;
    assert!(matches!(again, Err(EngineError::Gone(_))), "{again:?}");
    let duplicate = w
        .engine()
        .complete_callback(
            &cb,
            None,
            Ok(json!({"status": "COMPLETED"})),
            Some(DeliveryId::from("whk_1")),
        )
        .await
        .unwrap();
    assert_eq!(
        duplicate,
        ports::DeliverOutcome::Duplicate,
        "the same delivery again is acknowledged, not refused"
    );
}

#[tokio::test]
async fn callback_failure_and_timeout_surface_as_errors_the_workflow_can_catch() {
    let mut reg = Registry::new();
    reg.register("cb", |ctx: Context, _: serde_json::Value| async move {
        let cb = ctx
            .create_callback::<u32>("job")
            .timeout(Duration::from_secs(60))
            .await?;
        match cb.wait().await {
            Ok(v) => Ok(json!({"ok": v})),
            Err(e) => Ok(json!({"kind": e.kind().as_str()})),
        }
    });
    let w = world(reg);
    let failed = create(&w, "cb", json!(null)).await;
    let timed_out = create(&w, "cb", json!(null)).await;
    w.run_until_idle().await;
    let cb = w.open_callbacks(&failed).await.pop().unwrap();
    w.engine()
        .complete_callback(
            &cb,
            None,
            Err(ErrorInfo::new("declined", "card declined", false)),
            None,
        )
        .await
        .unwrap();
    w.run_until_idle().await;
    assert_eq!(
        output(&w.run(&failed).await),
        json!({"kind": "CallbackFailed"})
    );
    w.advance(Duration::from_secs(60)).await;
    assert_eq!(
        output(&w.run(&timed_out).await),
        json!({"kind": "CallbackTimedOut"})
    );
    let late = w.open_callbacks(&timed_out).await;
    assert!(late.is_empty());
}

#[tokio::test]
async fn callback_heartbeat_timeout_fires_without_heartbeats_and_heartbeats_hold_it_off() {
    let mut reg = Registry::new();
    reg.register("hb", |ctx: Context, _: serde_json::Value| async move {
        let cb = ctx
            .create_callback::<String>("long_job")
            .timeout(Duration::from_secs(3600))
            .heartbeat_timeout(Duration::from_secs(60))
            .await?;
        match cb.wait().await {
            Ok(v) => Ok(v),
            Err(e) => Ok(format!("{:?}", e.kind())),
        }
    });
    let w = world(reg);
    let kept_alive = create(&w, "hb", json!(null)).await;
    let abandoned = create(&w, "hb", json!(null)).await;
    w.run_until_idle().await;
    let cb = w.open_callbacks(&kept_alive).await.pop().unwrap();
    for _ in 0..3 {
        w.advance(Duration::from_secs(40)).await;
        w.engine().heartbeat_callback(&cb, None).await.unwrap();
        w.run_until_idle().await;
    }
    assert_eq!(output(&w.run(&abandoned).await), json!("CallbackTimedOut"));
    assert_eq!(
        w.run(&kept_alive).await.status,
        RunStatus::Waiting,
        "120 s in, but heartbeats every 40 s"
    );
    w.engine()
        .complete_callback(&cb, None, Ok(json!("done")), None)
        .await
        .unwrap();
    w.run_until_idle().await;
    assert_eq!(output(&w.run(&kept_alive).await), json!("done"));
}

#[tokio::test]
async fn wait_for_callback_hands_the_url_to_the_submitter_once() {
    let submitted = counter();
    let mut reg = Registry::new();
    let s = submitted.clone();
    reg.register("wfc", move |ctx: Context, _: serde_json::Value| {
        let s = s.clone();
        async move {
            let v: String = ctx
                .wait_for_callback("approval", move |id, url, _| async move {
                    assert!(url.ends_with(id.as_str()));
                    s.fetch_add(1, Ordering::SeqCst);
                    Ok(())
                })
                .timeout(Duration::from_secs(600))
                .await?;
            Ok(v)
        }
    });
    let w = world(reg);
    let id = create(&w, "wfc", json!(null)).await;
    w.run_until_idle().await;
    let cb = w.open_callbacks(&id).await.pop().unwrap();
    w.engine()
        .complete_callback(&cb, None, Ok(json!("approved")), None)
        .await
        .unwrap();
    w.run_until_idle().await;
    assert_eq!(output(&w.run(&id).await), json!("approved"));
    assert_eq!(submitted.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn event_that_arrives_early_is_kept_and_each_event_is_consumed_once() {
    let mut reg = Registry::new();
    reg.register("approve", |ctx: Context, _: serde_json::Value| async move {
        ctx.sleep(Duration::from_secs(30)).await?;
        let first: String = ctx
            .wait_for_event("approval")
            .timeout(Duration::from_secs(3 * 86400))
            .await?;
        let second: String = ctx
            .wait_for_event("approval")
            .timeout(Duration::from_secs(3 * 86400))
            .await?;
        Ok(vec![first, second])
    });
    let w = world(reg);
    let id = create(&w, "approve", json!(null)).await;
    w.run_until_idle().await;
    // Before the run reaches its wait point.
    w.engine()
        .deliver_event(
            w.tenant(),
            &id,
            "approval",
            json!("alice"),
            Some(DeliveryId::from("e1")),
        )
        .await
        .unwrap();
    let dup = w
        .engine()
        .deliver_event(
            w.tenant(),
            &id,
            "approval",
            json!("alice"),
            Some(DeliveryId::from("e1")),
        )
        .await
        .unwrap();
    assert_eq!(dup, ports::DeliverOutcome::Duplicate);
    w.run_until_idle().await;
    w.advance(Duration::from_secs(30)).await;
    assert_eq!(
        w.run(&id).await.status,
        RunStatus::Waiting,
        "the early event satisfied only the first wait"
    );
    w.engine()
        .deliver_event(w.tenant(), &id, "approval", json!("bob"), None)
        .await
        .unwrap();
    w.run_until_idle().await;
    assert_eq!(output(&w.run(&id).await), json!(["alice", "bob"]));
}

#[tokio::test]
async fn event_wait_times_out_after_its_deadline_even_when_the_sweep_wakes_it() {
    let mut reg = Registry::new();
    reg.register("approve", |ctx: Context, _: serde_json::Value| async move {
        let r: Result<bool, Error> = ctx
            .wait_for_event("approval")
            .timeout(Duration::from_secs(3 * 86400))
            .await;
        Ok(r.map_err(|e| e.kind().as_str().to_owned()).err())
    });
    let w = world(reg);
    let id = create(&w, "approve", json!(null)).await;
    w.run_until_idle().await;
    let run = w.run(&id).await;
    assert_eq!(
        run.due_at,
        Some(w.clock().now().plus(Duration::from_secs(3 * 86400))),
        "a long deadline waits in the due index"
    );
    w.advance(Duration::from_secs(86400)).await;
    assert_eq!(w.run(&id).await.status, RunStatus::Waiting);
    w.advance(Duration::from_secs(2 * 86400)).await;
    assert_eq!(output(&w.run(&id).await), json!("EventTimedOut"));
}

#[tokio::test]
async fn wait_for_condition_threads_state_across_polls() {
    let mut reg = Registry::new();
    reg.register("poll", |ctx: Context, _: serde_json::Value| async move {
        let polls: u32 = ctx
            .wait_for_condition("job_done", 0u32, |n, _| async move {
                let n = n + 1;
                Ok(if n >= 4 {
                    ConditionCheck::Done(n)
                } else {
                    ConditionCheck::Continue(n)
                })
            })
            .strategy(WaitStrategy {
                initial_delay: Duration::from_secs(10),
                max_delay: Duration::from_secs(10),
                multiplier: 1.0,
                max_attempts: 10,
            })
            .await?;
        Ok(polls)
    });
    let w = world(reg);
    let id = create(&w, "poll", json!(null)).await;
    w.run_until_idle().await;
    for _ in 0..3 {
        assert_eq!(w.run(&id).await.status, RunStatus::Waiting);
        w.advance(Duration::from_secs(10)).await;
    }
    assert_eq!(output(&w.run(&id).await), json!(4));
}

#[tokio::test]
async fn wait_for_condition_gives_up_after_max_attempts() {
    let mut reg = Registry::new();
    reg.register("poll", |ctx: Context, _: serde_json::Value| async move {
        let r = ctx
            .wait_for_condition("never", (), |s, _| async move {
                Ok(ConditionCheck::Continue(s))
            })
            .strategy(WaitStrategy {
                initial_delay: Duration::from_secs(1),
                max_delay: Duration::from_secs(1),
                multiplier: 1.0,
                max_attempts: 3,
            })
            .await;
        Ok(r.unwrap_err().kind().as_str().to_owned())
    });
    let w = world(reg);
    let id = create(&w, "poll", json!(null)).await;
    w.run_until_idle().await;
    w.advance(Duration::from_secs(1)).await;
    w.advance(Duration::from_secs(1)).await;
    assert_eq!(output(&w.run(&id).await), json!("ConditionNotMet"));
}

/// A check that fails on its first call and would say "done" on any later one.
fn fails_once_then_done(checks: Arc<AtomicU32>) -> impl Fn() -> ConditionFuture + Send + Sync {
    move || {
        let checks = checks.clone();
        Box::pin(async move {
            if checks.fetch_add(1, Ordering::SeqCst) == 0 {
                Err(StepError::retryable("status endpoint down"))
            } else {
                Ok(ConditionCheck::Done(1))
            }
        })
    }
}

type ConditionFuture = std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<ConditionCheck<u32>, StepError>> + Send>,
>;

/// AWS's requirement: a check that raises fails the operation at once (no retry,
/// however retryable its error); not caught, the run fails with that error.
#[tokio::test]
async fn a_condition_check_that_errors_fails_the_run_at_once_when_not_caught() {
    let checks = counter();
    let check = Arc::new(fails_once_then_done(checks.clone()));
    let mut reg = Registry::new();
    reg.register("poll", move |ctx: Context, _: serde_json::Value| {
        let check = check.clone();
        async move {
            let n: u32 = ctx
                .wait_for_condition("job", 0u32, move |_, _| check())
                .await?;
            Ok(n)
        }
    });
    let w = world(reg);
    let id = create(&w, "poll", json!(null)).await;
    w.run_until_idle().await;
    w.advance(Duration::from_secs(600)).await;
    let run = w.run(&id).await;
    assert_eq!(run.status, RunStatus::Failed);
    let error = run.error.unwrap();
    assert_eq!(error.kind, "StepFailed");
    let cause = error.cause.unwrap();
    assert_eq!(
        (cause.kind.as_str(), cause.message.as_str()),
        ("retryable", "status endpoint down"),
        "the run fails with the check's own error"
    );
    assert_eq!(checks.load(Ordering::SeqCst), 1, "the check ran once");
}

/// Caught, the check's error is the workflow's to handle: it goes on with it.
#[tokio::test]
async fn a_condition_check_that_errors_hands_the_workflow_its_error_to_go_on_with() {
    let checks = counter();
    let check = Arc::new(fails_once_then_done(checks.clone()));
    let mut reg = Registry::new();
    reg.register("poll", move |ctx: Context, _: serde_json::Value| {
        let check = check.clone();
        async move {
            let polled = ctx
                .wait_for_condition("job", 0u32, move |_, _| check())
                .await;
            let caught = match polled {
                Ok(n) => return Ok(json!({"done": n})),
                Err(e) => e.cause().map(|c| c.message.clone()),
            };
            let fallback: u32 = ctx.step("fallback", |_| async { Ok(7) }).await?;
            Ok(json!({"caught": caught, "fallback": fallback}))
        }
    });
    let w = world(reg);
    let id = create(&w, "poll", json!(null)).await;
    w.run_until_idle().await;
    w.advance(Duration::from_secs(600)).await;
    let run = w.run(&id).await;
    assert_eq!(
        output(&run),
        json!({"caught": "status endpoint down", "fallback": 7})
    );
    assert_eq!(checks.load(Ordering::SeqCst), 1);
}

/// Retrying a check that errors is opt-in: with a retry strategy the failed check is
/// a failed attempt, retried on a durable timer, and the next check's "done" wins.
#[tokio::test]
async fn a_condition_with_a_retry_strategy_retries_a_check_that_errors() {
    let checks = counter();
    let check = Arc::new(fails_once_then_done(checks.clone()));
    let mut reg = Registry::new();
    reg.register("poll", move |ctx: Context, _: serde_json::Value| {
        let check = check.clone();
        async move {
            let n: u32 = ctx
                .wait_for_condition("job", 0u32, move |_, _| check())
                .retry(RetryStrategy::fixed(3, Duration::from_secs(5)))
                .await?;
            Ok(n)
        }
    });
    let w = world(reg);
    let id = create(&w, "poll", json!(null)).await;
    w.run_until_idle().await;
    assert_eq!(w.run(&id).await.status, RunStatus::Waiting);
    w.advance(Duration::from_secs(5)).await;
    assert_eq!(output(&w.run(&id).await), json!(1));
    assert_eq!(checks.load(Ordering::SeqCst), 2);
    let failed: Vec<serde_json::Value> = w
        .timeline(&id)
        .await
        .into_iter()
        .filter(|e| e.event_type == EventType::StepFailed)
        .map(|e| e.details["Retrying"].clone())
        .collect();
    assert_eq!(failed, vec![json!(true)], "one failed check, retried");
}

#[tokio::test]
async fn map_returns_results_in_index_order_and_replay_skips_finished_branches() {
    let runs = counter();
    let mut reg = Registry::new();
    let r = runs.clone();
    reg.register("map", move |ctx: Context, items: Vec<u32>| {
        let r = r.clone();
        async move {
            let result = ctx
                .map("square", items, move |ctx, item, _index| {
                    let r = r.clone();
                    async move {
                        let sq: u32 = ctx
                            .step("compute", move |_| async move {
                                r.fetch_add(1, Ordering::SeqCst);
                                Ok(item * item)
                            })
                            .await?;
                        if item == 3 {
                            ctx.sleep(Duration::from_secs(60)).await?;
                        }
                        Ok(sq)
                    }
                })
                .max_concurrency(2)
                .await?;
            assert_eq!(result.completion_reason, CompletionReason::AllCompleted);
            result.values()
        }
    });
    let w = world(reg);
    let id = create(&w, "map", json!([1, 2, 3, 4, 5])).await;
    w.run_until_idle().await;
    assert_eq!(w.run(&id).await.status, RunStatus::Waiting);
    assert_eq!(runs.load(Ordering::SeqCst), 5);
    w.advance(Duration::from_secs(60)).await;
    assert_eq!(output(&w.run(&id).await), json!([1, 4, 9, 16, 25]));
    assert_eq!(
        runs.load(Ordering::SeqCst),
        5,
        "replay did not re-run finished branches"
    );
}

#[tokio::test]
async fn parallel_completes_at_min_successful_and_reports_unfinished_branches() {
    let mut reg = Registry::new();
    reg.register("race", |ctx: Context, _: serde_json::Value| async move {
        let branches = vec![
            branch(|ctx: Context| async move { ctx.wait_for_event::<String>("never").await }),
            branch(|ctx: Context| async move {
                ctx.step("fast", |_| async { Ok("fast".to_owned()) }).await
            }),
            branch(|ctx: Context| async move {
                ctx.step("also_fast", |_| async { Ok("also".to_owned()) })
                    .await
            }),
        ];
        let r = ctx
            .parallel("first_two", branches)
            .completion(CompletionConfig {
                min_successful: Some(2),
                ..Default::default()
            })
            .await?;
        Ok(json!({
            "reason": format!("{:?}", r.completion_reason),
            "successes": r.success_count(),
            "first_unfinished": matches!(r.items[0].outcome, BatchOutcome::NotCompleted),
        }))
    });
    let w = world(reg);
    let id = create(&w, "race", json!(null)).await;
    w.run_until_idle().await;
    assert_eq!(
        output(&w.run(&id).await),
        json!({"reason": "MinSuccessfulReached", "successes": 2, "first_unfinished": true})
    );
}

#[tokio::test]
async fn parallel_stops_when_failures_exceed_the_tolerance() {
    let mut reg = Registry::new();
    reg.register("tolerance", |ctx: Context, _: serde_json::Value| async move {
        let fail = |name: &'static str| branch(move |ctx: Context| async move { ctx.step(name, |_| async { Err::<u32, _>(StepError::fatal("no")) }).await });
        let ok = branch(|ctx: Context| async move { ctx.step("ok", |_| async { Ok(1u32) }).await });
        let r = ctx
            .parallel("p", vec![fail("a"), fail("b"), ok, fail("c")])
            .max_concurrency(1)
            .completion(CompletionConfig { tolerated_failure_count: Some(1), ..Default::default() })
            .await?;
        Ok(json!({"reason": format!("{:?}", r.completion_reason), "failures": r.failure_count(), "values_err": r.values().is_err()}))
    });
    let w = world(reg);
    let id = create(&w, "tolerance", json!(null)).await;
    w.run_until_idle().await;
    assert_eq!(
        output(&w.run(&id).await),
        json!({"reason": "FailureToleranceExceeded", "failures": 2, "values_err": true})
    );
}

#[tokio::test]
async fn child_context_groups_operations_and_replays_as_one_result() {
    let inner = counter();
    let mut reg = Registry::new();
    let c = inner.clone();
    reg.register("child", move |ctx: Context, _: serde_json::Value| {
        let c = c.clone();
        async move {
            let total: u32 = ctx
                .run_in_child_context("checkout", move |child| async move {
                    let a: u32 = child
                        .step("price", {
                            let c = c.clone();
                            move |_| async move {
                                c.fetch_add(1, Ordering::SeqCst);
                                Ok(5)
                            }
                        })
                        .await?;
                    let b: u32 = child
                        .run_in_child_context("tax", move |grandchild| async move {
                            grandchild
                                .step("rate", move |_| async move {
                                    c.fetch_add(1, Ordering::SeqCst);
                                    Ok(2)
                                })
                                .await
                        })
                        .await?;
                    Ok(a * b)
                })
                .await?;
            ctx.sleep(Duration::from_secs(1)).await?;
            Ok(total)
        }
    });
    let w = world(reg);
    let id = create(&w, "child", json!(null)).await;
    w.run_until_idle().await;
    w.advance(Duration::from_secs(1)).await;
    assert_eq!(output(&w.run(&id).await), json!(10));
    assert_eq!(inner.load(Ordering::SeqCst), 2);
    let positions: Vec<String> = w
        .replay_input(&id)
        .await
        .journal
        .into_iter()
        .map(|e| e.position.0)
        .collect();
    assert!(
        positions.contains(&"checkout#0/tax#0/rate#0".to_owned()),
        "{positions:?}"
    );
}

#[tokio::test]
async fn invoke_starts_a_child_run_and_awaits_its_result() {
    let mut reg = Registry::new();
    reg.register("double", |ctx: Context, n: u32| async move {
        ctx.sleep(Duration::from_secs(5)).await?;
        Ok(n * 2)
    });
    reg.register("fails", |_ctx: Context, _: serde_json::Value| async move {
        Err::<(), _>(Error::msg("child says no"))
    });
    reg.register("parent", |ctx: Context, _: serde_json::Value| async move {
        let d: u32 = ctx.invoke("double_it", "double", 21u32).await?;
        let failed = ctx
            .invoke::<(), _>("failing", "fails", json!(null))
            .await
            .unwrap_err();
        Ok(json!({"double": d, "failed": failed.kind().as_str()}))
    });
    let w = world(reg);
    let id = create(&w, "parent", json!(null)).await;
    w.run_until_idle().await;
    assert_eq!(w.run(&id).await.status, RunStatus::Waiting);
    w.advance(Duration::from_secs(5)).await;
    let run = w.run(&id).await;
    assert_eq!(
        output(&run),
        json!({"double": 42, "failed": "InvokeFailed"})
    );
    let child = siesta::context::child_run_id(&run, &Position::from("double_it#0"));
    let child = w.run(&child).await;
    assert_eq!(child.status, RunStatus::Completed);
    assert_eq!(child.parent.unwrap().run_id, id);
}

#[tokio::test]
async fn large_values_are_stored_by_reference_and_artifacts_round_trip() {
    let mut reg = Registry::new();
    reg.register("big", |ctx: Context, _: serde_json::Value| async move {
        let big: String = ctx
            .step("produce", |_| async { Ok("x".repeat(200_000)) })
            .await?;
        let artifact = ctx
            .put_artifact("report", big.clone().into_bytes(), "text/plain")
            .await?;
        ctx.sleep(Duration::from_secs(1)).await?;
        let back = ctx.get_artifact(&artifact).await?;
        Ok(json!({"len": big.len(), "artifact_len": back.len(), "sha": artifact.sha256}))
    });
    let w = world(reg);
    let id = create(&w, "big", json!(null)).await;
    w.run_until_idle().await;
    w.advance(Duration::from_secs(1)).await;
    let out = output(&w.run(&id).await);
    assert_eq!(out["len"], 200_000);
    assert_eq!(out["artifact_len"], 200_000);
    let history = w.replay_input(&id).await;
    let produce = history
        .journal
        .iter()
        .find(|e| e.name == "produce")
        .unwrap();
    assert!(
        matches!(
            &produce.state,
            EntryState::Succeeded {
                value: Payload::Artifact(_),
                ..
            }
        ),
        "stored by reference"
    );
    for entry in &history.journal {
        assert!(
            serde_json::to_vec(entry).unwrap().len() < 64 * 1024,
            "journal entries stay small"
        );
    }
}

#[tokio::test]
async fn injected_messages_are_drained_at_step_boundaries() {
    let mut reg = Registry::new();
    reg.register("chat", |ctx: Context, _: serde_json::Value| async move {
        let mut seen = Vec::new();
        for i in 0..3u32 {
            ctx.step("turn", move |_| async move { Ok(i) }).await?;
            seen.push(ctx.messages::<String>()?);
            ctx.sleep(Duration::from_secs(10)).await?;
        }
        Ok(seen)
    });
    let w = world(reg);
    let id = create(&w, "chat", json!(null)).await;
    w.run_until_idle().await;
    w.engine()
        .inject_message(w.tenant(), &id, json!("hello"), None)
        .await
        .unwrap();
    w.engine()
        .inject_message(w.tenant(), &id, json!("again"), None)
        .await
        .unwrap();
    w.run_until_idle().await;
    for _ in 0..3 {
        w.advance(Duration::from_secs(10)).await;
    }
    assert_eq!(
        output(&w.run(&id).await),
        json!([[], ["hello", "again"], []])
    );
}

#[tokio::test]
async fn cancelling_a_waiting_run_is_immediate_and_closes_its_callbacks() {
    let mut reg = Registry::new();
    reg.register("wait", |ctx: Context, _: serde_json::Value| async move {
        let cb = ctx.create_callback::<()>("cb").await?;
        cb.wait().await
    });
    let w = world(reg);
    let id = create(&w, "wait", json!(null)).await;
    w.run_until_idle().await;
    let cb = w.open_callbacks(&id).await.pop().unwrap();
    let v = w.run(&id).await.version;
    let stale = w.engine().cancel(w.tenant(), &id, Some(v - 1)).await;
    assert!(matches!(stale, Err(EngineError::VersionMismatch { current }) if current == v));
    let run = w.engine().cancel(w.tenant(), &id, Some(v)).await.unwrap();
    assert_eq!(run.status, RunStatus::Cancelled);
    assert!(matches!(
        w.engine().cancel(w.tenant(), &id, None).await,
        Err(EngineError::AlreadyFinished(RunStatus::Cancelled))
    ));
    assert!(matches!(
        w.engine()
            .complete_callback(&cb, None, Ok(json!(null)), None)
            .await,
        Err(EngineError::Gone(_))
    ));
    assert!(
        w.timeline(&id)
            .await
            .iter()
            .any(|e| e.event_type == EventType::ExecutionCancelled)
    );
}

#[tokio::test]
async fn cancelling_a_running_run_keeps_a_lease_renewed_between_its_read_and_its_write() {
    let mut reg = Registry::new();
    reg.register("wait", |ctx: Context, _: serde_json::Value| async move {
        let cb = ctx.create_callback::<()>("cb").await?;
        cb.wait().await
    });
    let w = world(reg);
    let id = create(&w, "wait", json!(null)).await;
    // Another worker holds the run.
    let now = w.clock().now();
    let store = w.backend().store;
    let claim = siesta::ports::Claim {
        owner: "worker-b".into(),
        now,
        expires_at: now.plus(Duration::from_secs(60)),
    };
    let held = store.claim(w.tenant(), &id, &claim).await.unwrap();
    let (engine, probe) = w.another_engine("operator");
    let (reached, release) = probe.pause_before_next_checkpoint();
    let mut cancel = tokio::spawn({
        let (tenant, id) = (w.tenant().clone(), id.clone());
        async move { engine.cancel(&tenant, &id, Some(held.version)).await }
    });
    tokio::select! {
        held_before_its_write = reached => held_before_its_write.unwrap(),
        ended = &mut cancel => panic!("the cancel ended before its checkpoint: {ended:?}"),
    }
    // The holder renews its lease while the cancel is between its read and its write:
    // the version does not move, so the caller's If-Match still holds.
    let renewed_until = now.plus(Duration::from_secs(120));
    store
        .renew_lease(w.tenant(), &id, held.epoch, renewed_until)
        .await
        .unwrap();
    release.send(()).unwrap();
    let cancelled = cancel.await.unwrap().expect("cancel at the version named");
    assert!(cancelled.cancel_requested);
    let run = w.run(&id).await;
    assert!(run.cancel_requested);
    assert_eq!(
        run.lease.map(|l| (l.owner, l.expires_at)),
        Some(("worker-b".to_owned(), renewed_until)),
        "the renewal stands"
    );
}

#[tokio::test]
async fn cancelling_a_run_whose_callback_was_answered_leaves_the_callback_completed() {
    let mut reg = Registry::new();
    reg.register("wait", |ctx: Context, _: serde_json::Value| async move {
        let cb = ctx.create_callback::<serde_json::Value>("cb").await?;
        cb.wait().await
    });
    let w = world(reg);
    let id = create(&w, "wait", json!(null)).await;
    w.run_until_idle().await;
    let cb = w.open_callbacks(&id).await.pop().unwrap();
    // Answered; the run has not taken the answer in when it is cancelled.
    w.engine()
        .complete_callback(&cb, None, Ok(json!("yes")), None)
        .await
        .unwrap();
    let run = w.engine().cancel(w.tenant(), &id, None).await.unwrap();
    assert_eq!(run.status, RunStatus::Cancelled);
    let record = w.callback_record(&cb).await;
    assert_eq!(record.status, CallbackStatus::Completed);
}

#[tokio::test]
async fn finishing_a_run_leaves_a_callback_answered_but_never_awaited_completed() {
    let mut reg = Registry::new();
    reg.register(
        "unawaited",
        |ctx: Context, _: serde_json::Value| async move {
            let _cb = ctx.create_callback::<serde_json::Value>("cb").await?;
            let go: serde_json::Value = ctx.wait_for_event("go").await?;
            Ok(go)
        },
    );
    let w = world(reg);
    let id = create(&w, "unawaited", json!(null)).await;
    w.run_until_idle().await;
    let cb = w.open_callbacks(&id).await.pop().unwrap();
    w.engine()
        .complete_callback(&cb, None, Ok(json!("yes")), None)
        .await
        .unwrap();
    w.deliver_event(&id, "go", "now").await;
    assert_eq!(w.run(&id).await.status, RunStatus::Completed);
    let record = w.callback_record(&cb).await;
    assert_eq!(record.status, CallbackStatus::Completed);
}

#[tokio::test]
async fn cancelling_a_running_run_is_honoured_at_the_next_step_boundary() {
    let (entered_tx, entered_rx) = tokio::sync::oneshot::channel::<()>();
    let (release_tx, release_rx) = tokio::sync::oneshot::channel::<()>();
    let entered = Arc::new(std::sync::Mutex::new(Some(entered_tx)));
    let release = Arc::new(tokio::sync::Mutex::new(Some(release_rx)));
    let after = counter();
    let mut reg = Registry::new();
    let a = after.clone();
    reg.register("long", move |ctx: Context, _: serde_json::Value| {
        let (entered, release, a) = (entered.clone(), release.clone(), a.clone());
        async move {
            ctx.step("slow", move |_| async move {
                if let Some(tx) = entered.lock().unwrap().take() {
                    let _ = tx.send(());
                }
                if let Some(rx) = release.lock().await.take() {
                    let _ = rx.await;
                }
                Ok(())
            })
            .await?;
            ctx.step("next", move |_| async move {
                a.fetch_add(1, Ordering::SeqCst);
                Ok(())
            })
            .await
        }
    });
    let w = world(reg);
    let id = create(&w, "long", json!(null)).await;
    let engine = w.engine().clone();
    let worker = tokio::spawn(async move { engine.run_until_idle(10).await });
    entered_rx.await.unwrap();
    let run = w.engine().cancel(w.tenant(), &id, None).await.unwrap();
    assert_eq!(
        run.status,
        RunStatus::Running,
        "a running run is cancelled at its next boundary"
    );
    assert!(run.cancel_requested);
    release_tx.send(()).unwrap();
    worker.await.unwrap().unwrap();
    w.run_until_idle().await;
    assert_eq!(w.run(&id).await.status, RunStatus::Cancelled);
    assert_eq!(
        after.load(Ordering::SeqCst),
        0,
        "the step after the boundary never ran"
    );
}

#[tokio::test]
async fn a_wakeup_with_nothing_to_do_costs_one_read_and_no_write() {
    let mut reg = Registry::new();
    reg.register("sleepy", |ctx: Context, _: serde_json::Value| async move {
        ctx.sleep(Duration::from_secs(3600)).await
    });
    let w = world(reg);
    let id = create(&w, "sleepy", json!(null)).await;
    w.run_until_idle().await;
    let (reads, writes) = w.probe().counts();
    let wake = ports::WakeUp {
        tenant: w.tenant().clone(),
        run_id: id.clone(),
        reason: ports::WakeReason::Sweep,
        epoch_hint: 0,
        seq_hint: None,
    };
    assert_eq!(
        w.engine().handle_wakeup(&wake).await.unwrap(),
        WakeOutcome::NothingToDo
    );
    assert_eq!(w.probe().counts(), (reads + 1, writes));
}

#[tokio::test]
async fn timeline_is_gapless_and_speaks_the_durable_history_vocabulary() {
    let mut reg = Registry::new();
    reg.register("t", |ctx: Context, _: serde_json::Value| async move {
        ctx.step("a", |_| async { Ok(1) }).await?;
        let cb = ctx.create_callback::<u32>("cb").await?;
        cb.wait().await
    });
    let w = world(reg);
    let id = create(&w, "t", json!(null)).await;
    w.run_until_idle().await;
    let cb = w.open_callbacks(&id).await.pop().unwrap();
    w.engine()
        .complete_callback(&cb, None, Ok(json!(7)), None)
        .await
        .unwrap();
    w.run_until_idle().await;
    let timeline = w.timeline(&id).await;
    let seqs: Vec<u64> = timeline.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=timeline.len() as u64).collect::<Vec<_>>());
    let types: Vec<EventType> = timeline.iter().map(|e| e.event_type).collect();
    use EventType::*;
    for expected in [
        ExecutionStarted,
        StepStarted,
        StepSucceeded,
        CallbackStarted,
        InvocationCompleted,
        CallbackDelivered,
        CallbackSucceeded,
        ExecutionSucceeded,
    ] {
        assert!(
            types.contains(&expected),
            "{expected:?} missing from {types:?}"
        );
    }
    let json = serde_json::to_value(&timeline[1]).unwrap();
    assert!(
        json.get("EventType").is_some()
            && json.get("Id").is_some()
            && json.get("SubType").is_some(),
        "{json}"
    );
}

#[tokio::test]
async fn a_spent_time_budget_checkpoints_and_continues_in_a_new_invocation() {
    let config = EngineConfig {
        time_budget: Duration::from_secs(5 * 60),
        ..siesta_testing::default_engine_config()
    };
    let w = TestEnv::builder(Registry::new())
        .tenant("acme")
        .engine_config(config)
        .build();
    let clock = w.clock().clone();
    let mut reg = Registry::new();
    reg.register("long", move |ctx: Context, _: serde_json::Value| {
        let clock = clock.clone();
        async move {
            let mut total = 0u32;
            for i in 0..10u32 {
                let clock = clock.clone();
                total += ctx
                    .step("work", move |_| async move {
                        // Each step takes a minute.
                        clock.advance(Duration::from_secs(60));
                        Ok(i)
                    })
                    .await?;
            }
            Ok(total)
        }
    });
    w.deploy(reg);
    let id = create(&w, "long", json!(null)).await;
    w.run_until_idle().await;
    let run = w.run(&id).await;
    assert_eq!(output(&run), json!(45));
    let yields = w
        .timeline(&id)
        .await
        .iter()
        .filter(|e| {
            e.event_type == EventType::InvocationCompleted && e.details["Status"] == "pending"
        })
        .count();
    assert_eq!(
        yields, 1,
        "ten one-minute steps under a five-minute budget yield once"
    );
    let steps = w
        .timeline(&id)
        .await
        .iter()
        .filter(|e| e.event_type == EventType::StepSucceeded)
        .count();
    assert_eq!(steps, 10, "no step ran twice across the continuation");
}

#[tokio::test]
async fn a_failed_tool_call_asks_its_lookup_before_calling_again() {
    let calls = counter();
    let accepted = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let mut reg = Registry::new();
    let (c, acc) = (calls.clone(), accepted.clone());
    reg.register("charge", move |ctx: Context, _: serde_json::Value| {
        let (c, acc, lookup_acc) = (c.clone(), acc.clone(), acc.clone());
        async move {
            ctx.tool_call("charge", &json!({"amount": 5}), move |call| async move {
                c.fetch_add(1, Ordering::SeqCst);
                // The far side acts, but the answer is lost: a timeout.
                acc.lock()
                    .unwrap()
                    .push(call.idempotency_key().unwrap().to_string());
                Err::<String, _>(StepError::timeout("no response"))
            })
            .retry(RetryStrategy::fixed(3, Duration::from_secs(5)))
            .lookup(move |key| async move {
                Ok(lookup_acc
                    .lock()
                    .unwrap()
                    .contains(&key.to_string())
                    .then(|| "charged".to_owned()))
            })
            .await
        }
    });
    let w = world(reg);
    let id = create(&w, "charge", json!(null)).await;
    w.run_until_idle().await;
    w.advance(Duration::from_secs(5)).await;
    assert_eq!(output(&w.run(&id).await), json!("charged"));
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "the retry found the first call had happened"
    );
}
