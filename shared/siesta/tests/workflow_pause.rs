//! Pausing a whole workflow (issue 47): its runs are held by a bulk pause, a start
//! meanwhile is created paused (or refused, as the pause says), its schedule's ticks
//! follow the pause, and the resume lets every one of them go on. No sleeps: the clock
//! is set, the sweep and the worker run.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

use chrono::DateTime;
use serde_json::{Value, json};
use siesta::ports::{PausedStarts, RunFilter};
use siesta::*;
use siesta_testing::TestEnv;

fn at(rfc3339: &str) -> Timestamp {
    Timestamp(
        DateTime::parse_from_rfc3339(rfc3339)
            .unwrap()
            .timestamp_millis(),
    )
}

/// `slow` waits for the event `done`; `nightly` starts `quick` at 02:00.
fn env() -> TestEnv {
    let mut reg = Registry::new();
    reg.register("slow", |ctx: Context, _: Value| async move {
        let done: Value = ctx.wait_for_event("done").await?;
        Ok::<_, Error>(done)
    });
    reg.register("quick", |_: Context, input: Value| async move {
        Ok::<_, Error>(input)
    });
    reg.schedule(Schedule::new("nightly", "quick", "0 2 * * *"))
        .unwrap();
    TestEnv::builder(reg)
        .tenant("default")
        .start_at(at("2026-01-01T00:00:00Z"))
        .build()
}

/// How long a workflow's bulk pause or resume waits before it lists runs: every
/// process's read of the pause expired.
const SETTLE: std::time::Duration = std::time::Duration::from_millis(PAUSE_CACHE_MS as u64 + 1_000);

/// Set the clock and let the sweep and the worker do what is due.
async fn at_time(env: &TestEnv, t: &str) {
    env.clock().set(at(t));
    env.run_until_idle().await;
}

async fn runs_of(env: &TestEnv, workflow: &str) -> Vec<Run> {
    let filter = RunFilter {
        workflow: Some(workflow.to_owned()),
        ..RunFilter::default()
    };
    env.backend()
        .store
        .list_runs(env.tenant(), &filter, None, 1000)
        .await
        .unwrap()
        .runs
}

#[tokio::test]
async fn a_paused_workflow_holds_its_runs_queues_its_starts_and_resumes_them_all() {
    let env = env();
    let waiting = env.start("slow", json!(null)).await;
    assert_eq!(env.status(&waiting).await, RunStatus::Waiting);

    let paused = env
        .engine()
        .pause_workflow(env.tenant(), "slow", PausedStarts::Queue, "ops")
        .await
        .unwrap();
    assert!(paused.pause.paused);
    assert_eq!(paused.job.action, BulkAction::Pause);
    env.run_until_idle().await;
    assert_eq!(
        env.status(&waiting).await,
        RunStatus::Waiting,
        "the bulk pause lists runs once every process has read the pause"
    );
    env.advance(SETTLE).await;
    assert_eq!(
        env.status(&waiting).await,
        RunStatus::Paused,
        "the bulk pause held the run that waited"
    );

    let queued = env.start("slow", json!(null)).await;
    let held = env.run(&queued).await;
    assert_eq!(held.status, RunStatus::Paused, "a start meanwhile is held");
    assert_eq!(held.due_at, None);
    let timeline = env.timeline(&queued).await;
    let by = timeline
        .iter()
        .find(|e| e.event_type == EventType::RunPaused)
        .map(|e| e.details["PausedBy"].clone());
    assert_eq!(by, Some(json!("ops (workflow slow paused)")));
    env.deliver_event(&waiting, "done", "a").await;
    assert_eq!(
        env.status(&waiting).await,
        RunStatus::Paused,
        "nothing runs"
    );

    let resumed = env
        .engine()
        .resume_workflow(env.tenant(), "slow", "ops")
        .await
        .unwrap();
    assert!(!resumed.pause.paused);
    env.advance(SETTLE).await;
    assert_eq!(env.status(&waiting).await, RunStatus::Completed);
    assert_eq!(env.status(&queued).await, RunStatus::Waiting, "begun");
    let job = env
        .engine()
        .action_job(env.tenant(), &resumed.job.id)
        .await
        .unwrap();
    assert_eq!((job.matched, job.done), (2, 2), "{job:?}");
}

#[tokio::test]
async fn a_workflow_paused_to_refuse_starts_refuses_them_and_skips_its_schedules_ticks() {
    let env = env();
    // The sweep has seen the schedule: its 02:00 tick is due at 02:00.
    at_time(&env, "2026-01-01T01:00:00Z").await;
    env.engine()
        .pause_workflow(env.tenant(), "quick", PausedStarts::Refuse, "ops")
        .await
        .unwrap();
    let refused = env
        .engine()
        .start(env.tenant(), "quick", json!(1), None)
        .await
        .unwrap_err();
    assert!(
        matches!(refused, EngineError::WorkflowPaused(ref w) if w == "quick"),
        "{refused:?}"
    );
    at_time(&env, "2026-01-01T02:00:30Z").await;
    assert!(
        runs_of(&env, "quick").await.is_empty(),
        "the 02:00 tick was skipped"
    );

    env.engine()
        .resume_workflow(env.tenant(), "quick", "ops")
        .await
        .unwrap();
    at_time(&env, "2026-01-02T02:00:30Z").await;
    let runs = runs_of(&env, "quick").await;
    assert_eq!(runs.len(), 1, "the next tick fires");
    assert_eq!(runs[0].status, RunStatus::Completed);
}

#[tokio::test]
async fn a_paused_workflow_queues_its_schedules_tick_as_a_paused_run() {
    let env = env();
    at_time(&env, "2026-01-01T01:00:00Z").await;
    env.engine()
        .pause_workflow(env.tenant(), "quick", PausedStarts::Queue, "ops")
        .await
        .unwrap();
    at_time(&env, "2026-01-01T02:00:30Z").await;
    let runs = runs_of(&env, "quick").await;
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].status, RunStatus::Paused, "the tick's run is held");
    env.engine()
        .resume_workflow(env.tenant(), "quick", "ops")
        .await
        .unwrap();
    env.advance(SETTLE).await;
    assert_eq!(env.status(&runs[0].id).await, RunStatus::Completed);
}

#[tokio::test]
async fn a_resume_cancels_the_pause_still_listing_and_a_retried_start_is_not_refused() {
    let env = env();
    let existing = RunId::from("order-7");
    env.engine()
        .start(env.tenant(), "slow", json!(null), Some(existing.clone()))
        .await
        .unwrap();
    let paused = env
        .engine()
        .pause_workflow(env.tenant(), "slow", PausedStarts::Refuse, "ops")
        .await
        .unwrap();
    let retried = env
        .engine()
        .start(env.tenant(), "slow", json!(null), Some(existing.clone()))
        .await
        .unwrap_err();
    assert!(
        matches!(retried, EngineError::AlreadyExists),
        "a retried start finds its run, as unpaused: {retried:?}"
    );
    env.engine()
        .resume_workflow(env.tenant(), "slow", "ops")
        .await
        .unwrap();
    let pause_job = env
        .engine()
        .action_job(env.tenant(), &paused.job.id)
        .await
        .unwrap();
    assert_eq!(
        pause_job.status,
        ActionJobStatus::Cancelled,
        "not left to undo the resume"
    );
    env.advance(SETTLE).await;
    assert_eq!(
        env.status(&existing).await,
        RunStatus::Waiting,
        "never paused"
    );
}
