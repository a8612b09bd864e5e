//! The harness as a user sees it: long waits skipped, deliveries, retries, crashes.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use serde_json::json;
use siesta::{Context, Error, ErrorKind, EventType, Registry, RetryStrategy, RunStatus, StepError};
use siesta_testing::{LEASE_TTL, TestEnv};

const THREE_DAYS: Duration = Duration::from_secs(3 * 24 * 3600);
const ONE_HOUR: Duration = Duration::from_secs(3600);

/// Waits up to three days for an approval, then sleeps an hour, then says who approved.
async fn approval(ctx: Context, name: String) -> Result<String, Error> {
    let asked: String = ctx
        .step("ask", move |_| async move { Ok(format!("asked {name}")) })
        .await?;
    let approver: String = ctx.wait_for_event("approval").timeout(THREE_DAYS).await?;
    ctx.sleep(ONE_HOUR).await?;
    Ok(format!("{asked}; approved by {approver}"))
}

fn registry() -> Registry {
    let mut registry = Registry::new();
    registry.register("approval", approval);
    registry
}

#[tokio::test]
async fn a_three_day_event_wait_and_a_one_hour_sleep_complete_without_waiting() {
    let env = TestEnv::new(registry());
    let started = env.now();

    let id = env.start("approval", "Ada").await;
    assert_eq!(env.status(&id).await, RunStatus::Waiting);
    // Two days pass with nothing to do; the approval arrives on the third.
    env.advance(Duration::from_secs(2 * 24 * 3600)).await;
    assert_eq!(env.status(&id).await, RunStatus::Waiting);
    env.deliver_event(&id, "approval", "Grace").await;
    assert_eq!(
        env.status(&id).await,
        RunStatus::Waiting,
        "now in its one-hour sleep"
    );
    let run = env.drive(&id).await;

    assert_eq!(run.status, RunStatus::Completed, "{:?}", run.error);
    assert_eq!(
        env.output::<String>(&id).await,
        "asked Ada; approved by Grace"
    );
    let elapsed = started.until(env.now());
    assert_eq!(
        elapsed,
        Duration::from_secs(2 * 24 * 3600) + ONE_HOUR,
        "the clock moved by the skipped time, exactly"
    );
    let kinds: Vec<EventType> = env
        .timeline(&id)
        .await
        .into_iter()
        .map(|e| e.event_type)
        .collect();
    assert!(kinds.contains(&EventType::WaitSucceeded), "{kinds:?}");
    assert_eq!(kinds.last(), Some(&EventType::InvocationCompleted));
    assert!(kinds.contains(&EventType::ExecutionSucceeded), "{kinds:?}");
}

#[tokio::test]
async fn drive_stops_at_an_event_wait_even_with_a_timeout_and_times_it_out_only_when_asked() {
    let env = TestEnv::new(registry());
    // The obvious test — start, drive, deliver the approval — finds the wait open.
    let run = env.execute("approval", "Ada").await;
    assert_eq!(run.status, RunStatus::Waiting);
    assert_eq!(
        env.now(),
        run.created_at,
        "no time was skipped towards the deadline"
    );
    // Letting it time out is said in so many words.
    let run = env.drive_through_timeouts(&run.id).await;
    assert_eq!(run.status, RunStatus::Failed);
    assert_eq!(run.error.unwrap().kind, ErrorKind::EventTimedOut.as_str());
    assert_eq!(
        env.now(),
        env.run(&run.id).await.created_at.plus(THREE_DAYS)
    );
}

#[tokio::test]
async fn drive_stops_at_a_wait_only_a_delivery_can_end() {
    let mut registry = Registry::new();
    registry.register("forever", |ctx: Context, _: ()| async move {
        ctx.wait_for_event::<String>("go").await
    });
    let env = TestEnv::new(registry);
    let before = env.now();
    let run = env.execute("forever", ()).await;
    assert_eq!(run.status, RunStatus::Waiting);
    assert_eq!(env.now(), before, "no time was skipped for nothing");
    env.deliver_event(&run.id, "go", "now").await;
    assert_eq!(env.output::<String>(&run.id).await, "now");
}

#[tokio::test]
async fn step_retries_are_skipped_over_and_counted() {
    let attempts = Arc::new(AtomicU32::new(0));
    let seen = attempts.clone();
    let mut registry = Registry::new();
    registry.register("flaky", move |ctx: Context, _: ()| {
        let seen = seen.clone();
        async move {
            ctx.step("call", move |s| async move {
                seen.fetch_add(1, Ordering::SeqCst);
                if s.attempt() < 3 {
                    Err(StepError::retryable("503 from upstream"))
                } else {
                    Ok(s.attempt())
                }
            })
            .retry(RetryStrategy::exponential(5))
            .await
        }
    });
    let env = TestEnv::new(registry);
    let run = env.execute("flaky", ()).await;
    assert_eq!(run.status, RunStatus::Completed, "{:?}", run.error);
    assert_eq!(env.output::<u32>(&run.id).await, 3);
    assert_eq!(attempts.load(Ordering::SeqCst), 3);
    let failed = env
        .timeline(&run.id)
        .await
        .into_iter()
        .filter(|e| e.event_type == EventType::StepFailed)
        .count();
    assert_eq!(failed, 2);
}

#[tokio::test]
async fn callbacks_and_messages_reach_the_run() {
    let mut registry = Registry::new();
    registry.register("pay", |ctx: Context, _: ()| async move {
        let payment = ctx
            .create_callback::<String>("payment")
            .timeout(ONE_HOUR)
            .await?;
        let url = payment.url();
        ctx.step("request", move |_| async move { Ok(url) }).await?;
        let paid = payment.wait().await?;
        ctx.step("after", |_| async { Ok(()) }).await?;
        let notes: Vec<String> = ctx.messages()?;
        Ok::<_, Error>(json!({"paid": paid, "notes": notes}))
    });
    let env = TestEnv::new(registry);
    let id = env.start("pay", ()).await;
    assert_eq!(env.status(&id).await, RunStatus::Waiting);
    let callback = env.callback(&id, "payment").await;
    assert_eq!(env.open_callbacks(&id).await, vec![callback.clone()]);
    env.inject_message(&id, "first note").await;
    env.complete_callback(&callback, "tx-1").await;
    assert_eq!(
        env.output::<serde_json::Value>(&id).await,
        json!({"paid": "tx-1", "notes": ["first note"]})
    );
    assert!(env.open_callbacks(&id).await.is_empty());
}

#[tokio::test]
async fn an_unknown_workflow_is_refused_with_the_engines_error() {
    let env = TestEnv::new(registry());
    let err = env.try_start("nope", (), None).await.unwrap_err();
    assert!(err.to_string().contains("unknown workflow 'nope'"), "{err}");
    let err = env.try_start("approval", 42, None).await.unwrap_err();
    assert!(err.to_string().starts_with("invalid input"), "{err}");
}

/// Counts every real execution of its two steps.
fn counted(effects: Arc<AtomicU32>) -> Registry {
    let mut registry = Registry::new();
    registry.register("two", move |ctx: Context, _: ()| {
        let effects = effects.clone();
        async move {
            let fx = effects.clone();
            let a: u32 = ctx
                .step("a", move |_| async move {
                    fx.fetch_add(1, Ordering::SeqCst);
                    Ok(1)
                })
                .await?;
            let b: u32 = ctx
                .step("b", move |_| async move {
                    effects.fetch_add(1, Ordering::SeqCst);
                    Ok(2)
                })
                .await?;
            Ok::<_, Error>(a + b)
        }
    });
    registry
}

#[tokio::test]
async fn a_crash_between_journal_writes_is_replayed_by_a_restarted_engine() {
    let effects = Arc::new(AtomicU32::new(0));
    let env = TestEnv::new(counted(effects.clone()));
    env.crash_after_writes(1);
    let id = env.start("two", ()).await;
    assert!(env.has_crashed());
    assert_eq!(
        env.status(&id).await,
        RunStatus::Running,
        "held by the dead engine"
    );
    assert_eq!(
        effects.load(Ordering::SeqCst),
        1,
        "step a ran and was journaled"
    );

    env.restart();
    let before = env.now();
    let run = env.drive(&id).await;
    assert_eq!(run.status, RunStatus::Completed, "{:?}", run.error);
    assert_eq!(env.output::<u32>(&id).await, 3);
    assert_eq!(
        effects.load(Ordering::SeqCst),
        2,
        "step a was replayed from the journal, not run again"
    );
    assert!(
        before.until(env.now()) <= LEASE_TTL,
        "only the lease was waited out"
    );
}

#[tokio::test]
async fn new_code_that_no_longer_matches_the_journal_parks_the_run() {
    let mut v1 = Registry::new();
    v1.register("flow", |ctx: Context, _: ()| async move {
        ctx.step("a", |_| async { Ok(1) }).await?;
        ctx.sleep(ONE_HOUR).await?;
        Ok::<_, Error>(1)
    });
    let mut v2 = Registry::new();
    v2.register("flow", |ctx: Context, _: ()| async move {
        ctx.sleep(ONE_HOUR).await?;
        Ok::<_, Error>(2)
    });
    let env = TestEnv::new(v1);
    let id = env.start("flow", ()).await;
    env.deploy(v2);
    let run = env.drive(&id).await;
    assert_eq!(run.status, RunStatus::Parked);
    assert_eq!(env.error(&id).await.kind, "NonDeterminism");
}
