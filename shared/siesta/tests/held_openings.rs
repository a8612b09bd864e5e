//! A wait's opening is held for the run's next checkpoint: a `sleep` or a callback the
//! run then waits on costs one checkpoint with the suspension, not two; and nothing
//! that could hand a held callback's id to the outside world (a step's closure, a
//! stream publish, a child run) runs before the callback is durable. A wait's ending
//! (a callback answered, a timer passed, an event taken) outside a combinator is held
//! the same way: a resumed wait and the next wait are one checkpoint.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

mod support;

use std::future::IntoFuture;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use serde_json::json;
use siesta::context::{ConditionCheck, branch, child_run_id};
use siesta::*;
use siesta_testing::{LEASE_TTL, TestEnv};
use support::{create, output, world};

fn checkpoints(w: &TestEnv) -> u64 {
    w.probe().checkpoints.load(Ordering::SeqCst)
}

fn event_types(timeline: &[TimelineEvent]) -> Vec<EventType> {
    timeline.iter().map(|e| e.event_type).collect()
}

/// The callback whose id ends the URL a step or a stream was handed.
fn callback_of(url: &str) -> CallbackId {
    CallbackId(url.rsplit('/').next().unwrap().to_owned())
}

/// The run store a step's closure reads, as a provider's call-back would.
type StoreSlot = Arc<std::sync::Mutex<Option<Arc<dyn siesta::ports::RunStore>>>>;

fn registry(closure_runs: Arc<AtomicU32>, slot: StoreSlot) -> Registry {
    let mut reg = Registry::new();
    reg.register("sleeper", |ctx: Context, _: serde_json::Value| async move {
        ctx.sleep(Duration::from_secs(60)).await?;
        Ok(json!("rested"))
    });
    reg.register("hook", |ctx: Context, _: serde_json::Value| async move {
        let cb = ctx
            .create_callback::<serde_json::Value>("approval")
            .timeout(Duration::from_secs(600))
            .await?;
        cb.wait().await
    });
    reg.register("event", |ctx: Context, _: serde_json::Value| async move {
        let v: serde_json::Value = ctx
            .wait_for_event("go")
            .timeout(Duration::from_secs(300))
            .await?;
        Ok(v)
    });
    reg.register(
        "unawaited",
        |ctx: Context, _: serde_json::Value| async move {
            // Created, never awaited: its deadline still wakes the run to time it out.
            let _cb = ctx
                .create_callback::<serde_json::Value>("forgotten")
                .timeout(Duration::from_secs(300))
                .await?;
            ctx.sleep(Duration::from_secs(3600)).await?;
            Ok(json!("done"))
        },
    );
    reg.register(
        "opened_then_done",
        |ctx: Context, _: serde_json::Value| async move {
            // Created, handed nowhere, never awaited: the run ends first.
            let _cb = ctx.create_callback::<serde_json::Value>("approval").await?;
            Ok(json!("done"))
        },
    );
    reg.register(
        "zero_sleep",
        |ctx: Context, _: serde_json::Value| async move {
            ctx.sleep(Duration::ZERO).await?;
            Ok(json!("done"))
        },
    );
    let runs = closure_runs.clone();
    let step_slot = slot.clone();
    reg.register(
        "hook_then_step",
        move |ctx: Context, _: serde_json::Value| {
            let runs = runs.clone();
            let slot = step_slot.clone();
            async move {
                let cb = ctx.create_callback::<serde_json::Value>("payment").await?;
                let url = cb.url();
                let seen: bool = ctx
                    .step("send_link", move |_| async move {
                        runs.fetch_add(1, Ordering::SeqCst);
                        // What a provider handed the URL would find: the callback is stored.
                        let store = slot.lock().unwrap().clone().unwrap();
                        let found = store.get_callback(&callback_of(&url)).await.unwrap();
                        Ok(found.is_some_and(|c| c.status == CallbackStatus::Open))
                    })
                    .await?;
                let paid = cb.wait().await?;
                Ok(json!({"seen": seen, "paid": paid}))
            }
        },
    );
    let condition_slot = slot.clone();
    reg.register(
        "hook_then_condition",
        move |ctx: Context, _: serde_json::Value| {
            let slot = condition_slot.clone();
            async move {
                let cb = ctx.create_callback::<serde_json::Value>("payment").await?;
                let id = cb.id().clone();
                let seen: bool = ctx
                    .wait_for_condition("stored", false, move |_, _| async move {
                        let store = slot.lock().unwrap().clone().unwrap();
                        let found = store.get_callback(&id).await.unwrap();
                        Ok(ConditionCheck::Done(found.is_some()))
                    })
                    .await?;
                let paid = cb.wait().await?;
                Ok(json!({"seen": seen, "paid": paid}))
            }
        },
    );
    let submitter_slot = slot.clone();
    reg.register("submitted", move |ctx: Context, _: serde_json::Value| {
        let slot = submitter_slot.clone();
        async move {
            let paid: serde_json::Value = ctx
                .wait_for_callback("payment", move |id, _url, _| async move {
                    let store = slot.lock().unwrap().clone().unwrap();
                    match store.get_callback(&id).await.unwrap() {
                        Some(_) => Ok(()),
                        None => Err(StepError::fatal(
                            "the submitter was handed an unstored callback",
                        )),
                    }
                })
                .await?;
            Ok(paid)
        }
    });
    let branch_slot = slot.clone();
    reg.register("hook_beside_step", move |ctx: Context, run: String| {
        let slot = branch_slot.clone();
        async move {
            let out = ctx
                .parallel(
                    "both",
                    vec![
                        branch(|ctx: Context| async move {
                            let cb = ctx.create_callback::<serde_json::Value>("approval").await?;
                            cb.wait().await
                        }),
                        branch(move |ctx: Context| async move {
                            ctx.step("look", move |_| async move {
                                // The other branch's callback, opened before this step.
                                let store = slot.lock().unwrap().clone().unwrap();
                                let journal = store
                                    .load_journal(
                                        &TenantId::from("acme"),
                                        &RunId::from(run.as_str()),
                                    )
                                    .await
                                    .unwrap();
                                Ok(json!(
                                    journal.iter().any(|e| e.kind == OperationKind::Callback)
                                ))
                            })
                            .await
                        }),
                    ],
                )
                .await?;
            out.values()
        }
    });
    reg.register(
        "hook_then_publish",
        |ctx: Context, _: serde_json::Value| async move {
            let cb = ctx.create_callback::<serde_json::Value>("payment").await?;
            ctx.stream("links").publish(&cb.url()).await?;
            cb.wait().await
        },
    );
    reg.register(
        "hook_then_child",
        |ctx: Context, _: serde_json::Value| async move {
            let cb = ctx.create_callback::<serde_json::Value>("payment").await?;
            let _: serde_json::Value = ctx.invoke("notify", "echo", cb.url()).await?;
            cb.wait().await
        },
    );
    reg.register(
        "approve_then_sleep",
        |ctx: Context, _: serde_json::Value| async move {
            let cb = ctx
                .create_callback::<serde_json::Value>("approval")
                .timeout(Duration::from_secs(600))
                .await?;
            let answer = cb.wait().await?;
            ctx.sleep(Duration::from_secs(60)).await?;
            Ok(answer)
        },
    );
    reg.register(
        "two_naps",
        |ctx: Context, _: serde_json::Value| async move {
            ctx.sleep(Duration::from_secs(60)).await?;
            ctx.sleep(Duration::from_secs(60)).await?;
            Ok(json!("rested twice"))
        },
    );
    reg.register(
        "event_then_nap",
        |ctx: Context, _: serde_json::Value| async move {
            let v: serde_json::Value = ctx.wait_for_event("go").await?;
            ctx.sleep(Duration::from_secs(60)).await?;
            Ok(v)
        },
    );
    let act_runs = closure_runs.clone();
    reg.register(
        "event_then_step",
        move |ctx: Context, _: serde_json::Value| {
            let runs = act_runs.clone();
            async move {
                let v: serde_json::Value = ctx.wait_for_event("go").await?;
                let acted = v.clone();
                ctx.step("act", move |_| async move {
                    runs.fetch_add(1, Ordering::SeqCst);
                    Ok(acted)
                })
                .await
            }
        },
    );
    reg.register(
        "approve_then_child",
        |ctx: Context, _: serde_json::Value| async move {
            let cb = ctx.create_callback::<serde_json::Value>("approval").await?;
            let answer = cb.wait().await?;
            ctx.run_in_child_context("nap", |c: Context| async move {
                c.sleep(Duration::from_secs(60)).await
            })
            .await?;
            Ok(answer)
        },
    );
    reg.register(
        "approve_then_race",
        |ctx: Context, _: serde_json::Value| async move {
            let cb = ctx.create_callback::<serde_json::Value>("approval").await?;
            let answer = cb.wait().await?;
            let nap = ctx.wait("nap", Duration::from_secs(60));
            let go = ctx.wait_for_event::<serde_json::Value>("go");
            let first: serde_json::Value = ctx
                .race(
                    "nap or go",
                    vec![
                        Box::pin(async move { nap.await.map(|()| json!("nap")) })
                            as siesta::context::DurableFuture<serde_json::Value>,
                        Box::pin(go.into_future()),
                    ],
                )
                .await?;
            Ok(json!({"answer": answer, "first": first}))
        },
    );
    let ending_slot = slot.clone();
    let look_runs = closure_runs.clone();
    reg.register(
        "approve_then_step",
        move |ctx: Context, _: serde_json::Value| {
            let slot = ending_slot.clone();
            let runs = look_runs.clone();
            async move {
                let run = ctx.run_id().to_string();
                let cb = ctx.create_callback::<serde_json::Value>("approval").await?;
                let answer = cb.wait().await?;
                let seen: bool = ctx
                    .step("look", move |_| async move {
                        runs.fetch_add(1, Ordering::SeqCst);
                        // Whether the callback's ending is stored yet.
                        let store = slot.lock().unwrap().clone().unwrap();
                        let journal = store
                            .load_journal(&TenantId::from("acme"), &RunId::from(run.as_str()))
                            .await
                            .unwrap();
                        Ok(journal.iter().any(|e| {
                            e.name == "approval" && matches!(e.state, EntryState::Succeeded { .. })
                        }))
                    })
                    .await?;
                Ok(json!({"answer": answer, "seen": seen}))
            }
        },
    );
    reg.register("echo", |_ctx: Context, url: String| async move {
        Ok(json!(url))
    });
    reg.register(
        "branches",
        |ctx: Context, _: serde_json::Value| async move {
            let out = ctx
                .parallel(
                    "both",
                    vec![
                        branch(|ctx: Context| async move {
                            ctx.sleep(Duration::from_secs(60)).await?;
                            Ok(json!("slept"))
                        }),
                        branch(|ctx: Context| async move {
                            ctx.step("work", |_| async { Ok(json!("worked")) }).await
                        }),
                    ],
                )
                .await?;
            out.values()
        },
    );
    reg
}

fn env() -> (TestEnv, Arc<AtomicU32>) {
    let runs = Arc::new(AtomicU32::new(0));
    let slot = StoreSlot::default();
    let w = world(registry(runs.clone(), slot.clone()));
    *slot.lock().unwrap() = Some(w.backend().store.clone());
    (w, runs)
}

/// Start `workflow` and run it until it waits: the wait's opening and the suspension
/// are written in one checkpoint, and the run stored is waiting, due `due_in` from now
/// (its timer, or its callback's or event's deadline).
async fn waiting_after_one_checkpoint(w: &TestEnv, workflow: &str, due_in: Duration) -> RunId {
    let id = create(w, workflow, json!(null)).await;
    let before = checkpoints(w);
    w.run_until_idle().await;
    waits_after_one_checkpoint_since(w, &id, before, due_in).await;
    id
}

/// One checkpoint was written since `before` (a wait's opening, with the last wait's
/// ending if it was held, and the suspension), and the run stored is waiting, due
/// `due_in` from now.
async fn waits_after_one_checkpoint_since(w: &TestEnv, id: &RunId, before: u64, due_in: Duration) {
    assert_eq!(
        checkpoints(w) - before,
        1,
        "what was held went with the suspension"
    );
    let run = w.run(id).await;
    assert_eq!(run.status, RunStatus::Waiting);
    assert_eq!(
        run.due_at,
        Some(w.now().plus(due_in)),
        "the written run is due when its wait ends"
    );
}

#[tokio::test]
async fn a_sleep_and_the_suspension_after_it_are_one_checkpoint() {
    let (w, _) = env();
    let id = waiting_after_one_checkpoint(&w, "sleeper", Duration::from_secs(60)).await;
    assert_eq!(
        event_types(&w.timeline(&id).await),
        [
            EventType::ExecutionStarted,
            EventType::WaitStarted,
            EventType::InvocationCompleted
        ]
    );
    w.advance(Duration::from_secs(60)).await;
    assert_eq!(output(&w.run(&id).await), json!("rested"));
}

#[tokio::test]
async fn a_callback_and_the_suspension_waiting_on_it_are_one_checkpoint() {
    let (w, _) = env();
    let id = waiting_after_one_checkpoint(&w, "hook", Duration::from_secs(600)).await;
    let deadline = w.now().plus(Duration::from_secs(600));
    let cb = w.callback(&id, "approval").await;
    let record = w
        .backend()
        .store
        .get_callback(&cb)
        .await
        .unwrap()
        .expect("the callback record was written with the suspension");
    assert_eq!(record.status, CallbackStatus::Open);
    assert_eq!(record.deadline, Some(deadline));
    assert_eq!(
        event_types(&w.timeline(&id).await),
        [
            EventType::ExecutionStarted,
            EventType::CallbackStarted,
            EventType::InvocationCompleted
        ]
    );
    w.complete_callback(&cb, json!("yes")).await;
    w.run_until_idle().await;
    assert_eq!(output(&w.run(&id).await), json!("yes"));
}

#[tokio::test]
async fn an_event_wait_and_the_suspension_are_one_checkpoint_and_it_still_times_out() {
    let (w, _) = env();
    let id = waiting_after_one_checkpoint(&w, "event", Duration::from_secs(300)).await;
    w.advance(Duration::from_secs(300)).await;
    let run = w.run(&id).await;
    assert_eq!(run.status, RunStatus::Failed, "{:?}", run.error);
}

#[tokio::test]
async fn a_held_callback_nobody_awaits_still_times_out_at_its_deadline() {
    let (w, _) = env();
    // Due at the callback's deadline, before the hour's sleep.
    let id = waiting_after_one_checkpoint(&w, "unawaited", Duration::from_secs(300)).await;
    w.advance(Duration::from_secs(300)).await;
    let types = event_types(&w.timeline(&id).await);
    assert!(types.contains(&EventType::CallbackTimedOut), "{types:?}");
    w.advance(Duration::from_secs(3600)).await;
    assert_eq!(output(&w.run(&id).await), json!("done"));
}

#[tokio::test]
async fn a_zero_length_sleep_opens_and_ends_as_before() {
    let (w, _) = env();
    let id = w.start("zero_sleep", json!(null)).await;
    assert_eq!(output(&w.run(&id).await), json!("done"));
    assert_eq!(
        event_types(&w.timeline(&id).await),
        [
            EventType::ExecutionStarted,
            EventType::WaitStarted,
            EventType::WaitSucceeded,
            EventType::ExecutionSucceeded,
            EventType::InvocationCompleted
        ]
    );
}

#[tokio::test]
async fn a_held_callback_is_stored_before_the_next_steps_closure_runs() {
    let (w, runs) = env();
    let id = w.start("hook_then_step", json!(null)).await;
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let cb = w.callback(&id, "payment").await;
    w.complete_callback(&cb, json!(42)).await;
    w.run_until_idle().await;
    assert_eq!(output(&w.run(&id).await), json!({"seen": true, "paid": 42}));
}

#[tokio::test]
async fn a_step_after_a_held_callback_never_runs_when_the_callback_was_not_stored() {
    let (w, runs) = env();
    let id = create(&w, "hook_then_step", json!(null)).await;
    // The checkpoint that would store the callback fails: the closure must not run.
    w.crash_before_write(1);
    w.run_until_idle().await;
    assert!(w.has_crashed());
    assert_eq!(
        runs.load(Ordering::SeqCst),
        0,
        "the closure ran with an unstored id"
    );
    w.restart();
    w.advance(LEASE_TTL + Duration::from_secs(1)).await;
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let cb = w.callback(&id, "payment").await;
    w.complete_callback(&cb, json!(7)).await;
    w.run_until_idle().await;
    assert_eq!(output(&w.run(&id).await), json!({"seen": true, "paid": 7}));
    assert_eq!(
        count_of(&w, &id, EventType::CallbackStarted).await,
        1,
        "the lost opening was made again once"
    );
}

#[tokio::test]
async fn a_stream_publish_after_a_held_callback_waits_until_it_is_stored() {
    let (w, _) = env();
    let id = create(&w, "hook_then_publish", json!(null)).await;
    w.crash_before_write(1);
    w.run_until_idle().await;
    assert!(w.has_crashed());
    w.restart();
    assert!(
        w.stream_data(&id, "links").await.is_empty(),
        "a URL was published whose callback was never stored"
    );
    w.advance(LEASE_TTL + Duration::from_secs(1)).await;
    let links = w.stream_data(&id, "links").await;
    assert_eq!(links.len(), 1);
    let cb = callback_of(links[0].as_str().unwrap());
    let record = w.backend().store.get_callback(&cb).await.unwrap();
    assert!(record.is_some(), "the published URL's callback is stored");
    w.complete_callback(&cb, json!("ok")).await;
    w.run_until_idle().await;
    assert_eq!(output(&w.run(&id).await), json!("ok"));
}

#[tokio::test]
async fn a_child_run_handed_a_held_callbacks_url_starts_with_it_stored() {
    let (w, _) = env();
    let id = create(&w, "hook_then_child", json!(null)).await;
    w.crash_before_write(1);
    w.run_until_idle().await;
    assert!(w.has_crashed());
    w.restart();
    let child = child_run_id(&w.run(&id).await, &Position::from("notify#0"));
    assert!(
        w.backend()
            .store
            .get_run(w.tenant(), &child)
            .await
            .unwrap()
            .is_none(),
        "a child was started with a callback never stored"
    );
    w.advance(LEASE_TTL + Duration::from_secs(1)).await;
    let url: String = w.output(&child).await;
    let cb = callback_of(&url);
    assert!(w.backend().store.get_callback(&cb).await.unwrap().is_some());
    w.complete_callback(&cb, json!("fine")).await;
    w.run_until_idle().await;
    assert_eq!(output(&w.run(&id).await), json!("fine"));
}

#[tokio::test]
async fn a_branch_sleeping_beside_a_branch_stepping_keeps_the_timeline_in_order() {
    let (w, _) = env();
    let id = w.start("branches", json!(null)).await;
    let timeline = w.timeline(&id).await;
    let at = |t: EventType| timeline.iter().position(|e| e.event_type == t).unwrap();
    assert!(at(EventType::WaitStarted) < at(EventType::StepSucceeded));
    let seqs: Vec<u64> = timeline.iter().map(|e| e.seq).collect();
    assert!(seqs.windows(2).all(|p| p[0] < p[1]), "{seqs:?}");
    w.advance(Duration::from_secs(60)).await;
    assert_eq!(output(&w.run(&id).await), json!(["slept", "worked"]));
}

#[tokio::test]
async fn a_held_callback_is_stored_before_a_conditions_check_runs() {
    let (w, _) = env();
    let id = w.start("hook_then_condition", json!(null)).await;
    let cb = w.callback(&id, "payment").await;
    w.complete_callback(&cb, json!(1)).await;
    w.run_until_idle().await;
    assert_eq!(output(&w.run(&id).await), json!({"seen": true, "paid": 1}));
}

#[tokio::test]
async fn wait_for_callbacks_submitter_is_handed_a_stored_callback() {
    let (w, _) = env();
    let id = w.start("submitted", json!(null)).await;
    assert_eq!(
        w.status(&id).await,
        RunStatus::Waiting,
        "{:?}",
        w.run(&id).await.error
    );
    let cb = w.callback(&id, "payment").await;
    w.complete_callback(&cb, json!("paid")).await;
    w.run_until_idle().await;
    assert_eq!(output(&w.run(&id).await), json!("paid"));
}

#[tokio::test]
async fn a_branchs_held_callback_is_stored_before_a_sibling_branchs_step_runs() {
    let (w, _) = env();
    let id = w
        .create(
            "hook_beside_step",
            json!("beside-1"),
            Some(RunId::from("beside-1")),
        )
        .await
        .unwrap();
    w.run_until_idle().await;
    let timeline = w.timeline(&id).await;
    let at = |t: EventType| timeline.iter().position(|e| e.event_type == t).unwrap();
    assert!(at(EventType::CallbackStarted) < at(EventType::StepSucceeded));
    let cb = w.callback(&id, "approval").await;
    w.complete_callback(&cb, json!("ok")).await;
    w.run_until_idle().await;
    assert_eq!(output(&w.run(&id).await), json!(["ok", true]));
}

/// Start `workflow` and run it until it waits on its callback `approval`: the run and
/// the callback.
async fn waiting_for_approval(w: &TestEnv, workflow: &str) -> (RunId, CallbackId) {
    let id = create(w, workflow, json!(null)).await;
    w.run_until_idle().await;
    let cb = w.callback(&id, "approval").await;
    (id, cb)
}

/// Answer `cb` "yes" and let the resume die before its first write; then restart, the
/// dead engine's lease still live.
async fn answered_in_a_crash(w: &TestEnv, cb: &CallbackId) {
    w.crash_before_write(1);
    w.complete_callback(cb, json!("yes")).await;
    assert!(w.has_crashed());
    w.restart();
}

/// How many events of `event_type` the run's timeline holds.
async fn count_of(w: &TestEnv, id: &RunId, event_type: EventType) -> usize {
    w.timeline(id)
        .await
        .iter()
        .filter(|e| e.event_type == event_type)
        .count()
}

/// The delivery that ended the callback at `position`, from the journal.
async fn consumed_by(w: &TestEnv, id: &RunId, position: &str) -> Vec<DeliveryId> {
    w.entry(id, position)
        .await
        .expect("the callback's entry")
        .consumed
}

#[tokio::test]
async fn a_callbacks_ending_and_the_next_wait_are_one_checkpoint() {
    let (w, _) = env();
    let id = waiting_after_one_checkpoint(&w, "approve_then_sleep", Duration::from_secs(600)).await;
    let cb = w.callback(&id, "approval").await;
    let before = checkpoints(&w);
    // Delivered, then the run is resumed until it waits again.
    w.complete_callback(&cb, json!("yes")).await;
    waits_after_one_checkpoint_since(&w, &id, before, Duration::from_secs(60)).await;
    let types = event_types(&w.timeline(&id).await);
    assert_eq!(
        types[types.len() - 3..],
        [
            EventType::CallbackSucceeded,
            EventType::WaitStarted,
            EventType::InvocationCompleted
        ],
        "{types:?}"
    );
    assert_eq!(consumed_by(&w, &id, "approval#0").await.len(), 1);
    w.advance(Duration::from_secs(60)).await;
    assert_eq!(output(&w.run(&id).await), json!("yes"));
}

#[tokio::test]
async fn a_held_ending_goes_with_the_next_steps_checkpoint_and_its_closure_runs_first() {
    let (w, runs) = env();
    let (id, cb) = waiting_for_approval(&w, "approve_then_step").await;
    let before = checkpoints(&w);
    w.complete_callback(&cb, json!("yes")).await;
    assert_eq!(
        output(&w.run(&id).await),
        json!({"answer": "yes", "seen": false}),
        "the closure ran before the ending was stored"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    // The step's outcome with the callback's ending, then the run's end: two
    // checkpoints (three when the ending was written before the closure).
    assert_eq!(checkpoints(&w) - before, 2);
    let types = from_the_callbacks_end(&w, &id).await;
    assert_eq!(
        types[..3],
        [
            EventType::CallbackSucceeded,
            EventType::StepStarted,
            EventType::StepSucceeded
        ],
        "{types:?}"
    );
    assert_eq!(consumed_by(&w, &id, "approval#0").await.len(), 1);
}

#[tokio::test]
async fn a_held_ending_lost_with_the_steps_checkpoint_is_taken_again_and_the_step_runs_again() {
    let (w, runs) = env();
    let (id, cb) = waiting_for_approval(&w, "approve_then_step").await;
    // The step's closure runs; the checkpoint carrying its outcome and the callback's
    // ending never lands.
    answered_in_a_crash(&w, &cb).await;
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    w.advance(LEASE_TTL + Duration::from_secs(1)).await;
    assert_eq!(
        runs.load(Ordering::SeqCst),
        2,
        "the step ran again, as after any crash before its outcome was stored"
    );
    assert_eq!(
        output(&w.run(&id).await),
        json!({"answer": "yes", "seen": false}),
        "the replay took the same answer"
    );
    assert_eq!(consumed_by(&w, &id, "approval#0").await.len(), 1);
    assert_eq!(count_of(&w, &id, EventType::CallbackSucceeded).await, 1);
}

#[tokio::test]
async fn a_held_ending_lost_in_a_crash_is_taken_again_from_the_same_delivery() {
    let (w, _) = env();
    let (id, cb) = waiting_for_approval(&w, "approve_then_sleep").await;
    // The checkpoint that would carry the ending (with the sleep's opening) never
    // lands: the resume after the delivery dies before it.
    answered_in_a_crash(&w, &cb).await;
    let waiting = w
        .entry(&id, "approval#0")
        .await
        .expect("the callback's entry");
    assert!(
        matches!(waiting.state, EntryState::Waiting(_)),
        "nothing of the ending was stored: {:?}",
        waiting.state
    );
    w.advance(LEASE_TTL + Duration::from_secs(1)).await;
    let consumed = consumed_by(&w, &id, "approval#0").await;
    assert_eq!(consumed.len(), 1, "the replay took the one delivery again");
    assert_eq!(
        count_of(&w, &id, EventType::CallbackSucceeded).await,
        1,
        "the callback ended once in the timeline"
    );
    w.advance(Duration::from_secs(60)).await;
    assert_eq!(output(&w.run(&id).await), json!("yes"));
}

#[tokio::test]
async fn a_timers_ending_and_the_next_sleep_are_one_checkpoint() {
    let (w, _) = env();
    let id = waiting_after_one_checkpoint(&w, "two_naps", Duration::from_secs(60)).await;
    let before = checkpoints(&w);
    w.advance(Duration::from_secs(60)).await;
    // The first nap's end went with the second's opening.
    waits_after_one_checkpoint_since(&w, &id, before, Duration::from_secs(60)).await;
    w.advance(Duration::from_secs(60)).await;
    assert_eq!(output(&w.run(&id).await), json!("rested twice"));
}

#[tokio::test]
async fn an_events_ending_and_the_next_sleep_are_one_checkpoint() {
    let (w, _) = env();
    let id = create(&w, "event_then_nap", json!(null)).await;
    w.run_until_idle().await;
    let before = checkpoints(&w);
    w.deliver_event(&id, "go", "now").await;
    // The event's taking went with the nap's opening.
    waits_after_one_checkpoint_since(&w, &id, before, Duration::from_secs(60)).await;
    let taken = w
        .journal(&id)
        .await
        .into_iter()
        .find(|e| e.name == "go")
        .expect("the event wait's entry");
    assert!(
        matches!(taken.state, EntryState::Succeeded { .. }),
        "{:?}",
        taken.state
    );
    assert_eq!(taken.consumed.len(), 1);
    w.advance(Duration::from_secs(60)).await;
    assert_eq!(output(&w.run(&id).await), json!("now"));
}

/// The run's timeline from the first `CallbackSucceeded` on, as event types.
async fn from_the_callbacks_end(w: &TestEnv, id: &RunId) -> Vec<EventType> {
    let types = event_types(&w.timeline(id).await);
    let at = types
        .iter()
        .position(|t| *t == EventType::CallbackSucceeded)
        .expect("the callback ended");
    types[at..].to_vec()
}

#[tokio::test]
async fn a_context_entered_after_a_held_ending_starts_after_it_in_the_timeline() {
    let (w, _) = env();
    let (id, cb) = waiting_for_approval(&w, "approve_then_child").await;
    let before = checkpoints(&w);
    w.complete_callback(&cb, json!("yes")).await;
    waits_after_one_checkpoint_since(&w, &id, before, Duration::from_secs(60)).await;
    assert_eq!(
        from_the_callbacks_end(&w, &id).await,
        [
            EventType::CallbackSucceeded,
            EventType::ContextStarted,
            EventType::WaitStarted,
            EventType::InvocationCompleted
        ],
        "in the order the workflow did them"
    );
    let timeline = w.timeline(&id).await;
    assert!(
        timeline.windows(2).all(|p| p[0].at <= p[1].at),
        "no event is older than the one before it"
    );
    w.advance(Duration::from_secs(60)).await;
    assert_eq!(output(&w.run(&id).await), json!("yes"));
}

#[tokio::test]
async fn a_combinator_created_after_a_held_ending_starts_after_it_in_the_timeline() {
    let (w, _) = env();
    let (id, cb) = waiting_for_approval(&w, "approve_then_race").await;
    w.complete_callback(&cb, json!("yes")).await;
    let types = from_the_callbacks_end(&w, &id).await;
    let started = types
        .iter()
        .position(|t| *t == EventType::ContextStarted)
        .expect("the race started");
    assert!(started > 0, "{types:?}");
    w.deliver_event(&id, "go", "now").await;
    assert_eq!(
        output(&w.run(&id).await),
        json!({"answer": "yes", "first": "now"})
    );
}

#[tokio::test]
async fn a_callbacks_ending_and_the_runs_end_are_one_checkpoint() {
    let (w, _) = env();
    let (id, cb) = waiting_for_approval(&w, "hook").await;
    let before = checkpoints(&w);
    w.complete_callback(&cb, json!("yes")).await;
    assert_eq!(output(&w.run(&id).await), json!("yes"));
    assert_eq!(
        checkpoints(&w) - before,
        1,
        "the held ending went with the final checkpoint"
    );
    let record = w.callback_record(&cb).await;
    assert_eq!(
        record.status,
        CallbackStatus::Completed,
        "the answered callback is not closed again by the run's end"
    );
    assert_eq!(consumed_by(&w, &id, "approval#0").await.len(), 1);
    let types = from_the_callbacks_end(&w, &id).await;
    assert_eq!(
        types,
        [
            EventType::CallbackSucceeded,
            EventType::ExecutionSucceeded,
            EventType::InvocationCompleted
        ]
    );
}

#[tokio::test]
async fn a_held_callback_the_run_ends_without_is_closed() {
    let (w, _) = env();
    let id = create(&w, "opened_then_done", json!(null)).await;
    w.run_until_idle().await;
    assert_eq!(output(&w.run(&id).await), json!("done"));
    let cb = w.callback(&id, "approval").await;
    let record = w.callback_record(&cb).await;
    assert_eq!(record.status, CallbackStatus::Closed);
}

#[tokio::test]
async fn a_step_acting_on_a_held_event_acts_on_the_same_one_after_a_crash() {
    let (w, runs) = env();
    let id = create(&w, "event_then_step", json!(null)).await;
    w.run_until_idle().await;
    // The step acts on the first event; the checkpoint carrying its outcome and the
    // event's taking never lands.
    w.crash_before_write(1);
    w.deliver_event(&id, "go", "first").await;
    assert!(w.has_crashed());
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    w.restart();
    // A second event of the same name comes before the replay.
    w.deliver_event(&id, "go", "second").await;
    w.advance(LEASE_TTL + Duration::from_secs(1)).await;
    assert_eq!(
        output(&w.run(&id).await),
        json!("first"),
        "the replay took the event the step acted on"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    let taken = consumed_by(&w, &id, "go#0").await;
    assert_eq!(taken.len(), 1);
    let history = w
        .backend()
        .store
        .load_replay_input(w.tenant(), &id)
        .await
        .unwrap();
    let first = history
        .deliveries
        .iter()
        .find(|d| matches!(&d.body, DeliveryBody::Event { value: Payload::Inline(v), .. } if *v == json!("first")))
        .expect("the first event is stored");
    assert_eq!(taken[0], first.id);
}
