//! Panics in user code: a step's panic is a failed attempt retried by its policy; a
//! panic in the workflow body parks the run; neither stops the engine serving others.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use siesta::*;
use siesta_testing::TestEnv;

/// Panics on its first `panics` attempts, then answers the attempt number.
fn flaky(panics: u32, attempts: Arc<AtomicU32>) -> Registry {
    let mut registry = Registry::new();
    registry.register("flaky", move |ctx: Context, _: ()| {
        let attempts = attempts.clone();
        async move {
            ctx.step("call", move |s| async move {
                attempts.fetch_add(1, Ordering::SeqCst);
                if s.attempt() <= panics {
                    panic!("attempt {} blew up", s.attempt());
                }
                Ok(s.attempt())
            })
            .retry(RetryStrategy::fixed(3, Duration::from_secs(1)))
            .await
        }
    });
    registry.register("steady", |ctx: Context, n: u32| async move {
        ctx.step("double", move |_| async move { Ok(n * 2) }).await
    });
    registry.register("broken", |ctx: Context, _: ()| async move {
        ctx.step("before", |_| async { Ok(1) }).await?;
        let empty: Vec<u32> = Vec::new();
        #[allow(clippy::indexing_slicing)]
        let n = empty[0];
        Ok::<_, Error>(n)
    });
    registry
}

#[tokio::test]
async fn a_panicking_step_is_a_failed_attempt_retried_by_its_policy() {
    let attempts = Arc::new(AtomicU32::new(0));
    let env = TestEnv::new(flaky(2, attempts.clone()));
    let run = env.execute("flaky", ()).await;
    assert_eq!(run.status, RunStatus::Completed, "{:?}", run.error);
    assert_eq!(env.output::<u32>(&run.id).await, 3);
    assert_eq!(attempts.load(Ordering::SeqCst), 3);
    let failures: Vec<serde_json::Value> = env
        .timeline(&run.id)
        .await
        .into_iter()
        .filter(|e| e.event_type == EventType::StepFailed)
        .map(|e| e.details["Error"].clone())
        .collect();
    assert_eq!(failures.len(), 2, "{failures:?}");
    assert_eq!(failures[0]["kind"], PANICKED);
    assert!(
        failures[0]["message"]
            .as_str()
            .unwrap()
            .contains("attempt 1 blew up"),
        "{failures:?}"
    );
}

#[tokio::test]
async fn a_step_that_always_panics_fails_with_the_panic_as_its_cause() {
    let env = TestEnv::new(flaky(u32::MAX, Arc::default()));
    let run = env.execute("flaky", ()).await;
    assert_eq!(run.status, RunStatus::Failed);
    let error = run.error.unwrap();
    assert_eq!(error.kind, ErrorKind::StepFailed.as_str());
    assert!(error.message.contains("after 3 attempt(s)"), "{error}");
    assert!(error.message.contains("attempt 3 blew up"), "{error}");
}

#[tokio::test]
async fn a_panic_in_the_workflow_body_parks_the_run_and_the_engine_serves_the_next() {
    let env = TestEnv::new(flaky(0, Arc::default()));
    let broken = env.start("broken", ()).await;
    let steady = env.start("steady", 21).await;

    let run = env.run(&broken).await;
    assert_eq!(run.status, RunStatus::Parked);
    let error = run.error.unwrap();
    assert_eq!(error.kind, PANICKED);
    assert!(error.message.contains("index out of bounds"), "{error}");
    assert_eq!(
        env.timeline(&broken).await.last().unwrap().event_type,
        EventType::InvocationCompleted
    );
    assert_eq!(env.output::<u32>(&steady).await, 42);

    // Fixed code resumes the run from its journal: `before` is not run again.
    let mut fixed = Registry::new();
    let befores = Arc::new(AtomicU32::new(0));
    let seen = befores.clone();
    fixed.register("broken", move |ctx: Context, _: ()| {
        let seen = seen.clone();
        async move {
            let n: u32 = ctx
                .step("before", move |_| async move {
                    seen.fetch_add(1, Ordering::SeqCst);
                    Ok(1)
                })
                .await?;
            Ok::<_, Error>(n + 1)
        }
    });
    env.deploy(fixed);
    env.resume(&broken).await;
    assert_eq!(env.output::<u32>(&broken).await, 2);
    assert_eq!(befores.load(Ordering::SeqCst), 0);
}
