//! Bulk actions by filter (issue 47): a durable job acts on every run a filter
//! matches and on no other, counts what it did (matched = done + skipped + failed),
//! goes on after the process acting on it dies without acting on a run twice, stops
//! when cancelled, and is paced by its rate on the clock.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use siesta::*;
use siesta_testing::{LEASE_TTL, TestEnv};
use support::world;

/// `waiter` and `bystander`: each waits for the event `go`.
fn waiting() -> Registry {
    let mut reg = Registry::new();
    for name in ["waiter", "bystander"] {
        reg.register(name, |ctx: Context, _: Value| async move {
            let go: Value = ctx.wait_for_event("go").await?;
            Ok(go)
        });
    }
    reg
}

/// `n` runs of `workflow`, each waiting.
async fn waiting_runs(w: &TestEnv, workflow: &str, n: usize) -> Vec<RunId> {
    let mut runs = Vec::new();
    for _ in 0..n {
        runs.push(w.start(workflow, json!(null)).await);
    }
    for run in &runs {
        assert_eq!(w.status(run).await, RunStatus::Waiting);
    }
    runs
}

/// Start a job of `action` on `filter` at `rate` as the operator `ops`.
async fn start(w: &TestEnv, action: BulkAction, filter: ActionFilter, rate: u32) -> ActionJob {
    w.engine()
        .start_action_job(
            w.tenant(),
            ActionRequest {
                action,
                filter,
                restart: RestartOptions::default(),
                rate: Some(rate),
            },
            "ops",
        )
        .await
        .unwrap()
}

/// The job as stored now (read past the engine, which may have died).
async fn job(w: &TestEnv, id: &str) -> ActionJob {
    w.backend()
        .store
        .get_action_job(w.tenant(), id)
        .await
        .unwrap()
        .unwrap()
}

/// Let the clock run, a fifth of a second at a time, until the job has finished.
async fn until_finished(w: &TestEnv, id: &str) -> ActionJob {
    for _ in 0..600 {
        let job = job(w, id).await;
        if job.status.is_finished() {
            return job;
        }
        w.advance(Duration::from_millis(200)).await;
    }
    panic!("the job did not finish: {:?}", job(w, id).await);
}

/// How many times the run's timeline says it was cancelled.
async fn cancellations(w: &TestEnv, run: &RunId) -> usize {
    w.timeline(run)
        .await
        .iter()
        .filter(|e| e.event_type == EventType::ExecutionCancelled)
        .count()
}

fn waiting_of(workflow: &str) -> ActionFilter {
    ActionFilter {
        workflow: Some(workflow.into()),
        status: Some(RunStatus::Waiting),
        ..ActionFilter::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_cancel_cancels_the_runs_its_filter_matches_and_leaves_the_others_alone() {
    let w = world(waiting());
    let targets = waiting_runs(&w, "waiter", 7).await;
    let others = waiting_runs(&w, "bystander", 3).await;
    let started = start(&w, BulkAction::Cancel, waiting_of("waiter"), 10).await;
    assert_eq!(started.status, ActionJobStatus::Running);
    assert_eq!(started.by, "ops");

    let done = until_finished(&w, &started.id).await;
    assert_eq!(done.status, ActionJobStatus::Done, "{done:?}");
    assert_eq!(
        (done.matched, done.done, done.skipped, done.failed),
        (7, 7, 0, 0)
    );
    for run in &targets {
        assert_eq!(w.status(run).await, RunStatus::Cancelled);
        assert_eq!(cancellations(&w, run).await, 1);
        let timeline = w.timeline(run).await;
        let cancelled = timeline
            .iter()
            .find(|e| e.event_type == EventType::ExecutionCancelled)
            .unwrap();
        assert_eq!(
            cancelled.details["CancelledBy"],
            json!("ops"),
            "the job's caller"
        );
    }
    for run in &others {
        assert_eq!(
            w.status(run).await,
            RunStatus::Waiting,
            "not matched: left alone"
        );
    }
    let listed = w.engine().action_jobs(w.tenant(), 10).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].id, started.id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_adds_up_and_a_run_already_in_the_state_asked_for_is_skipped_with_why() {
    let w = world(waiting());
    let runs = waiting_runs(&w, "waiter", 6).await;
    for run in &runs[..2] {
        w.cancel(run).await;
    }
    let filter = ActionFilter {
        workflow: Some("waiter".into()),
        ..ActionFilter::default()
    };
    let started = start(&w, BulkAction::Cancel, filter, 50).await;
    let done = until_finished(&w, &started.id).await;
    assert_eq!(done.matched, 6);
    assert_eq!(done.matched, done.done + done.skipped + done.failed);
    assert_eq!((done.done, done.skipped, done.failed), (4, 2, 0));
    let mut skipped: Vec<&RunId> = done.skipped_sample.iter().map(|n| &n.run_id).collect();
    skipped.sort();
    let mut expected: Vec<&RunId> = runs[..2].iter().collect();
    expected.sort();
    assert_eq!(skipped, expected);
    assert!(
        done.skipped_sample
            .iter()
            .all(|n| n.why == "already cancelled"),
        "{:?}",
        done.skipped_sample
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_pause_says_who_paused_each_run_and_a_bulk_resume_resumes_them() {
    let w = world(waiting());
    let runs = waiting_runs(&w, "waiter", 3).await;
    let paused = start(&w, BulkAction::Pause, waiting_of("waiter"), 50).await;
    let paused = until_finished(&w, &paused.id).await;
    assert_eq!((paused.done, paused.skipped), (3, 0));
    for run in &runs {
        assert_eq!(w.status(run).await, RunStatus::Paused);
        let timeline = w.timeline(run).await;
        let event = timeline
            .iter()
            .find(|e| e.event_type == EventType::RunPaused)
            .unwrap();
        assert_eq!(event.details["PausedBy"], json!("ops"), "the job's caller");
    }
    let filter = ActionFilter {
        status: Some(RunStatus::Paused),
        ..ActionFilter::default()
    };
    let resumed = start(&w, BulkAction::Resume, filter, 50).await;
    let resumed = until_finished(&w, &resumed.id).await;
    assert_eq!((resumed.done, resumed.skipped, resumed.failed), (3, 0, 0));
    for run in &runs {
        assert_eq!(w.status(run).await, RunStatus::Waiting, "back to its wait");
        let timeline = w.timeline(run).await;
        let resumed = timeline
            .iter()
            .find(|e| e.event_type == EventType::RunResumed)
            .unwrap();
        assert_eq!(resumed.details["ResolvedBy"], json!("ops"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_cut_short_by_a_crash_is_finished_by_the_sweep_without_acting_on_a_run_twice() {
    let w = world(waiting());
    let runs = waiting_runs(&w, "waiter", 10).await;
    // The process dies right after the fourth run's cancel is written, in the middle
    // of the job's first slice (its 10 runs: a second's at 50), before its progress.
    w.crash_after_writes(4);
    // By workflow alone: the runs cancelled before the crash are listed again (with a
    // status filter they would have left it) and must be recognised.
    let filter = ActionFilter {
        workflow: Some("waiter".into()),
        ..ActionFilter::default()
    };
    let started = start(&w, BulkAction::Cancel, filter, 50).await;
    w.run_until_idle().await;
    assert!(w.has_crashed());
    let stalled = job(&w, &started.id).await;
    assert_eq!(stalled.status, ActionJobStatus::Running);
    assert_eq!(stalled.matched, 0, "the slice's progress was never written");

    // A new process; the sweep finds the job stalled once the dead one's hold lapses.
    w.restart();
    w.advance(LEASE_TTL).await;
    let done = job(&w, &started.id).await;
    assert!(done.status.is_finished(), "taken over at once: {done:?}");
    assert_eq!(done.status, ActionJobStatus::Done);
    assert_eq!(done.matched, 10);
    assert_eq!(
        (done.done, done.skipped, done.failed),
        (6, 4, 0),
        "the four the dead process cancelled are recognised: {:?}",
        done.skipped_sample
    );
    for run in &runs {
        assert_eq!(w.status(run).await, RunStatus::Cancelled);
        assert_eq!(cancellations(&w, run).await, 1, "cancelled once");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_job_acts_on_no_more_runs() {
    let w = world(waiting());
    let runs = waiting_runs(&w, "waiter", 10).await;
    // One run a second: one per slice.
    let started = start(&w, BulkAction::Cancel, waiting_of("waiter"), 1).await;
    w.run_until_idle().await;
    assert_eq!(job(&w, &started.id).await.done, 1);
    let cancelled = w
        .engine()
        .cancel_action_job(w.tenant(), &started.id, "ops")
        .await
        .unwrap();
    assert_eq!(cancelled.status, ActionJobStatus::Cancelled);
    assert_eq!(cancelled.cancelled_by.as_deref(), Some("ops"));
    w.advance(Duration::from_secs(30)).await;
    let after = job(&w, &started.id).await;
    assert_eq!(after.status, ActionJobStatus::Cancelled);
    assert_eq!(
        (after.matched, after.done),
        (1, 1),
        "nothing after the cancel"
    );
    let mut still_waiting = 0;
    for run in &runs {
        if w.status(run).await == RunStatus::Waiting {
            still_waiting += 1;
        }
    }
    assert_eq!(
        still_waiting, 9,
        "the run acted on stays cancelled, the rest wait"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_cancelled_in_the_middle_of_a_slice_stops_within_ten_runs() {
    let w = world(waiting());
    let runs = waiting_runs(&w, "waiter", 25).await;
    // One slice would take all 25; its first run's cancel is held before its write.
    let (reached, release) = w.probe().pause_before_next_checkpoint();
    let started = start(&w, BulkAction::Cancel, waiting_of("waiter"), 50).await;
    let worker = {
        let engine = w.engine();
        tokio::spawn(async move { engine.run_until_idle(10).await })
    };
    reached.await.unwrap();
    w.engine()
        .cancel_action_job(w.tenant(), &started.id, "ops")
        .await
        .unwrap();
    release.send(()).unwrap();
    worker.await.unwrap().unwrap();
    let after = job(&w, &started.id).await;
    assert_eq!(after.status, ActionJobStatus::Cancelled);
    assert_eq!(
        (after.matched, after.done),
        (10, 10),
        "the slice read the job again after ten runs and stopped"
    );
    let mut cancelled = 0;
    for run in &runs {
        if w.status(run).await == RunStatus::Cancelled {
            cancelled += 1;
        }
    }
    assert_eq!(cancelled, 10, "the rest wait");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_is_paced_by_its_rate_on_the_clock() {
    let w = world(waiting());
    waiting_runs(&w, "waiter", 10).await;
    // 4 a second: slices of a second's runs, a second apart.
    let started = start(&w, BulkAction::Cancel, waiting_of("waiter"), 4).await;
    w.run_until_idle().await;
    assert_eq!(
        job(&w, &started.id).await.done,
        4,
        "the first slice at once"
    );
    w.advance(Duration::from_millis(999)).await;
    assert_eq!(
        job(&w, &started.id).await.done,
        4,
        "nothing before its time"
    );
    w.advance(Duration::from_millis(1)).await;
    assert_eq!(
        job(&w, &started.id).await.done,
        8,
        "the next a second later"
    );
    w.advance(Duration::from_millis(500)).await;
    assert_eq!(job(&w, &started.id).await.done, 8);
    w.advance(Duration::from_millis(500)).await;
    let last = job(&w, &started.id).await;
    assert_eq!(last.done, 10);
    // The last slice acted on 2: half a second later the listing's end is found.
    let done = until_finished(&w, &started.id).await;
    assert_eq!((done.status, done.done), (ActionJobStatus::Done, 10));
    assert!(done.updated_at.millis() - started.created_at.millis() >= 2_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wake_up_a_moment_early_takes_its_slice_and_one_long_before_does_nothing() {
    let w = world(waiting());
    waiting_runs(&w, "waiter", 3).await;
    // One run a second: after the first slice the next is due a second later.
    let started = start(&w, BulkAction::Cancel, waiting_of("waiter"), 1).await;
    w.run_until_idle().await;
    assert_eq!(job(&w, &started.id).await.done, 1);
    let wake = siesta::ports::WakeUp::new(
        w.tenant().clone(),
        RunId(started.id.clone()),
        siesta::ports::WakeReason::Action,
    );
    // Another process's queue hands it out 50 ms early by this clock: taken.
    w.clock().advance(Duration::from_millis(950));
    w.engine().handle_wakeup(&wake).await.unwrap();
    assert_eq!(job(&w, &started.id).await.done, 2);
    // A duplicate long before the next slice's time: nothing.
    w.engine().handle_wakeup(&wake).await.unwrap();
    assert_eq!(job(&w, &started.id).await.done, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filter_that_names_nothing_or_contradicts_itself_is_refused() {
    let w = world(waiting());
    let refused = |filter: ActionFilter| {
        let w = &w;
        async move {
            w.engine()
                .start_action_job(
                    w.tenant(),
                    ActionRequest {
                        action: BulkAction::Cancel,
                        filter,
                        restart: RestartOptions::default(),
                        rate: None,
                    },
                    "ops",
                )
                .await
        }
    };
    assert!(matches!(
        refused(ActionFilter::default()).await,
        Err(EngineError::InvalidInput(_))
    ));
    let contradiction = ActionFilter {
        status: Some(RunStatus::Waiting),
        failed_after: Some(Timestamp(0)),
        ..ActionFilter::default()
    };
    assert!(matches!(
        refused(contradiction).await,
        Err(EngineError::InvalidInput(_))
    ));
}

/// `notify`: a first step, then a second that fails for good until `fixed`; counts
/// the first step's executions.
fn notifying(fixed: Arc<AtomicBool>, first: Arc<AtomicUsize>) -> Registry {
    let mut reg = Registry::new();
    reg.register("notify", move |ctx: Context, _: Value| {
        let (fixed, first) = (fixed.clone(), first.clone());
        async move {
            ctx.step("prepare", move |_| async move {
                first.fetch_add(1, Ordering::SeqCst);
                Ok(1)
            })
            .await?;
            let sent: bool = ctx
                .step("send", move |_| async move {
                    if fixed.load(Ordering::SeqCst) {
                        Ok(true)
                    } else {
                        Err(StepError::fatal("the receiver answered 400"))
                    }
                })
                .await?;
            Ok(sent)
        }
    });
    reg
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_restart_after_the_fix_completes_each_failed_run_once_without_repeating_what_succeeded()
 {
    let (fixed, first) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicUsize::new(0)),
    );
    let w = world(notifying(fixed.clone(), first.clone()));
    let mut runs = Vec::new();
    for _ in 0..4 {
        let run = w.start("notify", json!(null)).await;
        assert_eq!(w.status(&run).await, RunStatus::Failed);
        runs.push(run);
    }
    assert_eq!(first.load(Ordering::SeqCst), 4);
    fixed.store(true, Ordering::SeqCst);
    // By workflow alone, so the restarted runs are listed again by a slice done
    // twice: the job's token answers them as done, not restarted again.
    let filter = ActionFilter {
        workflow: Some("notify".into()),
        ..ActionFilter::default()
    };
    w.crash_after_writes(2);
    let started = start(&w, BulkAction::Restart, filter, 50).await;
    w.run_until_idle().await;
    assert!(w.has_crashed());
    w.restart();
    w.advance(LEASE_TTL).await;
    let done = until_finished(&w, &started.id).await;
    assert_eq!(done.status, ActionJobStatus::Done);
    assert_eq!(
        (done.matched, done.done, done.skipped, done.failed),
        (4, 4, 0, 0),
        "{:?} {:?}",
        done.skipped_sample,
        done.failures
    );
    for run in &runs {
        // One restarted by the dead process waits for its wake-up's redelivery.
        assert_eq!(w.drive(run).await.status, RunStatus::Completed);
        let restarts = w
            .timeline(run)
            .await
            .iter()
            .filter(|e| e.event_type == EventType::RunRestarted)
            .count();
        assert_eq!(restarts, 1, "restarted once");
    }
    assert_eq!(
        first.load(Ordering::SeqCst),
        4,
        "the first step is not repeated"
    );
}

/// `agent`: a step, then the event `approval`; `appended` adds a step after the wait
/// (a change that replays).
fn agent(appended: bool) -> Registry {
    let mut reg = Registry::new();
    reg.register("agent", move |ctx: Context, _: Value| async move {
        ctx.step("llm", |_| async { Ok(1) }).await?;
        let approved: bool = ctx.wait_for_event("approval").await?;
        if appended {
            ctx.step("notify", |_| async { Ok(2) }).await?;
        }
        Ok(json!({"approved": approved}))
    });
    reg
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_upgrade_moves_the_runs_of_a_build_and_skips_those_on_the_new_one_already() {
    let w = world(agent(false));
    let mut runs = Vec::new();
    for _ in 0..3 {
        runs.push(w.start("agent", json!(null)).await);
    }
    let old = w.run(&runs[0]).await.build_id.unwrap();
    let config = EngineConfig {
        build_id: "app@2".to_owned(),
        owner: "engine-app@2".to_owned(),
        ..w.config().clone()
    };
    let (new, _) = w.engine_with(agent(true), config);
    let by_build = ActionFilter {
        build: Some(old.clone()),
        ..ActionFilter::default()
    };
    let request = |filter: ActionFilter| ActionRequest {
        action: BulkAction::Upgrade,
        filter,
        restart: RestartOptions::default(),
        rate: Some(50),
    };
    // Started on the new build, the job is its: the old build's engine, which takes
    // its wake-up first, leaves it alone, and the new one acts.
    let job = new
        .start_action_job(w.tenant(), request(by_build), "ops")
        .await
        .unwrap();
    assert_eq!(job.build.as_deref(), Some("app@2"));
    let wake = siesta::ports::WakeUp::new(
        w.tenant().clone(),
        RunId(job.id.clone()),
        siesta::ports::WakeReason::Action,
    );
    assert_eq!(
        w.engine().handle_wakeup(&wake).await.unwrap(),
        WakeOutcome::OtherBuild {
            build_id: "app@2".into()
        }
    );
    assert_eq!(
        new.action_job(w.tenant(), &job.id).await.unwrap().matched,
        0
    );
    new.run_until_idle(50).await.unwrap();
    let moved = new.action_job(w.tenant(), &job.id).await.unwrap();
    assert_eq!(moved.status, ActionJobStatus::Done);
    assert_eq!((moved.matched, moved.done, moved.skipped), (3, 3, 0));
    for run in &runs {
        let run = w.run(run).await;
        assert_eq!(run.build_id.as_deref(), Some("app@2"));
        let timeline = w.timeline(&run.id).await;
        let upgraded = timeline
            .iter()
            .find(|e| e.event_type == EventType::RunUpgraded)
            .unwrap();
        assert_eq!(upgraded.details["UpgradedBy"], json!("ops"));
    }

    let by_workflow = ActionFilter {
        workflow: Some("agent".into()),
        ..ActionFilter::default()
    };
    let again = new
        .start_action_job(w.tenant(), request(by_workflow), "ops")
        .await
        .unwrap();
    new.run_until_idle(50).await.unwrap();
    let again = new.action_job(w.tenant(), &again.id).await.unwrap();
    assert_eq!((again.matched, again.done, again.skipped), (3, 0, 3));
    assert!(
        again
            .skipped_sample
            .iter()
            .all(|n| n.why == "already on build app@2"),
        "{:?}",
        again.skipped_sample
    );
}

/// `nap`: an hour's sleep.
fn napping() -> Registry {
    let mut reg = Registry::new();
    reg.register("nap", |ctx: Context, _: Value| async move {
        ctx.sleep(Duration::from_secs(3600)).await?;
        Ok("rested")
    });
    reg
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_redrive_resumes_the_runs_dead_letters_parked() {
    let w = world(napping());
    let mut runs = Vec::new();
    for _ in 0..3 {
        runs.push(w.create("nap", json!(null), None).await.unwrap());
    }
    // Their wake-ups fail until the queue dead-letters them (five receives).
    for _ in 0..10 {
        let got = w
            .engine()
            .backend()
            .queue
            .receive(10, Duration::from_secs(1))
            .await
            .unwrap();
        w.clock().advance(Duration::from_secs(2));
        if got.is_empty() {
            break;
        }
    }
    w.run_until_idle().await;
    for run in &runs {
        assert_eq!(w.error(run).await.kind, "DeadLettered");
    }
    let filter = ActionFilter {
        dead_lettered: true,
        ..ActionFilter::default()
    };
    let started = start(&w, BulkAction::Redrive, filter, 50).await;
    let done = until_finished(&w, &started.id).await;
    assert_eq!((done.matched, done.done, done.skipped), (3, 3, 0));
    for run in &runs {
        assert_eq!(w.status(run).await, RunStatus::Waiting, "napping again");
        let timeline = w.timeline(run).await;
        let resumed = timeline
            .iter()
            .find(|e| e.event_type == EventType::RunResumed)
            .unwrap();
        assert_eq!(resumed.details["ResolvedBy"], json!("ops"));
    }
}
