//! The replay check: a run's journal replayed on other code, with no side effect and no
//! write, names the position and both operation kinds where the code left the journal,
//! and passes code that only adds work after it.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use siesta::ports::*;
use siesta::*;
use support::world;

/// The scenario of a support agent: a model call, then an approval that waits for days.
fn v1() -> Registry {
    let mut reg = Registry::new();
    reg.register("agent", |ctx: Context, _: Value| async move {
        ctx.step("llm", |_| async { Ok(1) }).await?;
        let approved: bool = ctx.wait_for_event("approval").await?;
        Ok(json!(approved))
    });
    reg
}

/// v1 with a `triage` step inserted before the model call.
fn inserted_step() -> Registry {
    let mut reg = Registry::new();
    reg.register("agent", |ctx: Context, _: Value| async move {
        ctx.step("triage", |_| async { Ok(0) }).await?;
        ctx.step("llm", |_| async { Ok(1) }).await?;
        let approved: bool = ctx.wait_for_event("approval").await?;
        Ok(json!(approved))
    });
    reg
}

/// v1 with a `notify` step appended after the approval.
fn appended_step() -> Registry {
    let mut reg = Registry::new();
    reg.register("agent", |ctx: Context, _: Value| async move {
        ctx.step("llm", |_| async { Ok(1) }).await?;
        let approved: bool = ctx.wait_for_event("approval").await?;
        ctx.step("notify", |_| async { Ok(2) }).await?;
        Ok(json!(approved))
    });
    reg
}

/// Counts sends, around the test environment's queue.
struct CountingQueue {
    sends: AtomicU64,
}

#[async_trait::async_trait]
impl SendHook for CountingQueue {
    async fn send(
        &self,
        queue: &dyn WakeQueue,
        wake: &WakeUp,
        delay: Duration,
    ) -> Result<(), StoreError> {
        self.sends.fetch_add(1, Ordering::SeqCst);
        queue.send(wake, delay).await
    }
}

#[tokio::test]
async fn an_inserted_step_diverges_at_its_position_naming_both_kinds() {
    let w = world(v1());
    let id = w.start("agent", json!(null)).await;
    assert_eq!(w.status(&id).await, RunStatus::Waiting);

    let (engine, _) = w.engine_with(inserted_step(), w.config().clone());
    let check = engine.check_replay(w.tenant(), &id).await.unwrap();
    let ReplayCheck::Diverged(divergence) = check else {
        panic!("an inserted step must diverge: {check:?}");
    };
    assert_eq!(divergence.position, Position::from("triage#0"));
    assert_eq!(divergence.journal_kind, Some(OperationKind::Step));
    assert_eq!(divergence.code_kind, Some(OperationKind::Step));
    assert!(
        divergence.message.contains("llm#0"),
        "{}",
        divergence.message
    );
}

#[tokio::test]
async fn an_inserted_wait_diverges_naming_the_step_the_journal_holds() {
    let w = world(v1());
    let id = w.start("agent", json!(null)).await;
    let mut reg = Registry::new();
    reg.register("agent", |ctx: Context, _: Value| async move {
        ctx.sleep(Duration::from_secs(1)).await?;
        ctx.step("llm", |_| async { Ok(1) }).await?;
        Ok(json!(null))
    });
    let (engine, _) = w.engine_with(reg, w.config().clone());
    match engine.check_replay(w.tenant(), &id).await.unwrap() {
        ReplayCheck::Diverged(d) => {
            assert_eq!(d.journal_kind, Some(OperationKind::Step));
            assert_eq!(d.code_kind, Some(OperationKind::Wait));
        }
        clean => panic!("an inserted wait must diverge: {clean:?}"),
    }
}

#[tokio::test]
async fn an_appended_step_replays_cleanly() {
    let w = world(v1());
    let id = w.start("agent", json!(null)).await;
    let (engine, _) = w.engine_with(appended_step(), w.config().clone());
    assert_eq!(
        engine.check_replay(w.tenant(), &id).await.unwrap(),
        ReplayCheck::Clean { replayed: 2 }
    );
}

#[tokio::test]
async fn the_same_code_replays_a_finished_run_whole_and_code_missing_an_operation_does_not() {
    let w = world(v1());
    let id = w.start("agent", json!(null)).await;
    w.deliver_event(&id, "approval", true).await;
    assert_eq!(w.status(&id).await, RunStatus::Completed);
    assert_eq!(
        w.engine().check_replay(w.tenant(), &id).await.unwrap(),
        ReplayCheck::Clean { replayed: 2 }
    );

    let mut reg = Registry::new();
    reg.register("agent", |ctx: Context, _: Value| async move {
        ctx.step("llm", |_| async { Ok(1) }).await?;
        Ok(json!(true))
    });
    let (engine, _) = w.engine_with(reg, w.config().clone());
    match engine.check_replay(w.tenant(), &id).await.unwrap() {
        ReplayCheck::Diverged(d) => {
            assert_eq!(d.position, Position::from("approval#0"));
            assert_eq!(d.journal_kind, Some(OperationKind::Event));
            assert_eq!(d.code_kind, None);
        }
        clean => panic!("a removed wait must diverge: {clean:?}"),
    }
}

#[tokio::test]
async fn the_check_writes_nothing_sends_nothing_and_runs_no_step() {
    let w = world(v1());
    let id = w.start("agent", json!(null)).await;
    // A delivery the run has not consumed yet: replaying it would mean a checkpoint.
    w.engine()
        .deliver_event(w.tenant(), &id, "approval", json!(true), None)
        .await
        .unwrap();
    w.clock().advance(Duration::from_secs(3600));
    let before_run = w.run(&id).await;
    let before = w.replay_input(&id).await;
    let before_timeline = w.timeline(&id).await;

    let ran = Arc::new(AtomicU64::new(0));
    let counter = ran.clone();
    let mut reg = Registry::new();
    reg.register("agent", move |ctx: Context, _: Value| {
        let counter = counter.clone();
        async move {
            ctx.step("llm", |_| async { Ok(1) }).await?;
            let approved: bool = ctx.wait_for_event("approval").await?;
            ctx.step("notify", move |_| async move {
                counter.fetch_add(1, Ordering::SeqCst);
                Ok(2)
            })
            .await?;
            ctx.sleep(Duration::from_secs(60)).await?;
            Ok(json!(approved))
        }
    });
    let base = w.backend();
    let probe = probe::ProbeStore::new(base.store.clone());
    let queue = Arc::new(HookedSends::new(
        base.queue.clone(),
        CountingQueue {
            sends: AtomicU64::new(0),
        },
    ));
    let engine = Engine::new(
        Backend {
            store: probe.clone(),
            artifacts: base.artifacts.clone(),
            queue: queue.clone(),
            streams: base.streams.clone(),
            schedules: base.schedules.clone(),
        },
        w.clock().clone(),
        reg,
        w.config().clone(),
    );
    let check = engine.check_replay(w.tenant(), &id).await.unwrap();
    assert!(check.is_clean(), "{check:?}");

    assert_eq!(probe.counts().1, 0, "the check wrote to the store");
    assert_eq!(
        queue.sends.load(Ordering::SeqCst),
        0,
        "the check sent a wake-up"
    );
    assert_eq!(ran.load(Ordering::SeqCst), 0, "the check ran a step");
    let after_run = w.run(&id).await;
    assert_eq!(after_run.version, before_run.version);
    assert_eq!(after_run.timeline_seq, before_run.timeline_seq);
    assert_eq!(after_run.status, before_run.status);
    assert_eq!(w.replay_input(&id).await.journal, before.journal);
    assert_eq!(w.timeline(&id).await.len(), before_timeline.len());

    // The run is where it was: its own build takes the delivery and finishes it.
    w.run_until_idle().await;
    assert_eq!(w.status(&id).await, RunStatus::Completed);
}

#[tokio::test]
async fn an_exported_run_is_checked_without_the_store() {
    let w = world(v1());
    let id = w.start("agent", json!(null)).await;
    let run = w.run(&id).await;
    let input = w.replay_input(&id).await;
    let (inserted, _) = w.engine_with(inserted_step(), w.config().clone());
    let (appended, _) = w.engine_with(appended_step(), w.config().clone());
    assert!(
        !inserted
            .check_replay_input(run.clone(), input.clone())
            .await
            .unwrap()
            .is_clean()
    );
    assert!(
        appended
            .check_replay_input(run, input)
            .await
            .unwrap()
            .is_clean()
    );
}

#[tokio::test]
async fn an_export_carries_offloaded_values_inline_so_it_replays_on_an_empty_store() {
    let registry = || {
        let mut reg = Registry::new();
        reg.register("big", |ctx: Context, _: Value| async move {
            let text: String = ctx
                .step("draft", |_| async { Ok("x".repeat(4096)) })
                .await?;
            let approved: bool = ctx.wait_for_event("approval").await?;
            Ok(json!({"len": text.len(), "approved": approved}))
        });
        reg
    };
    let small = EngineConfig {
        inline_limit: 256,
        ..siesta_testing::default_engine_config()
    };
    let w = siesta_testing::TestEnv::builder(registry())
        .tenant("acme")
        .engine_config(small)
        .build();
    let id = w.start("big", json!(null)).await;
    let draft = w.entry(&id, "draft#0").await.unwrap();
    assert!(
        matches!(
            draft.state,
            EntryState::Succeeded {
                value: Payload::Artifact(_),
                ..
            }
        ),
        "the step's result is offloaded: {:?}",
        draft.state
    );

    let export = w.engine().export_run(w.tenant(), &id).await.unwrap();
    let document = serde_json::to_string(&export).unwrap();
    let export: RunExport = serde_json::from_str(&document).unwrap();
    assert!(matches!(
        &export.journal.iter().find(|e| e.position.as_str() == "draft#0").unwrap().state,
        EntryState::Succeeded { value: Payload::Inline(v), .. } if v.as_str().unwrap().len() == 4096
    ));

    // Another store, which has none of the run's artifacts.
    let elsewhere = world(registry());
    let (run, input) = export.into_parts();
    assert_eq!(
        elsewhere
            .engine()
            .check_replay_input(run, input)
            .await
            .unwrap(),
        ReplayCheck::Clean { replayed: 2 }
    );
}
