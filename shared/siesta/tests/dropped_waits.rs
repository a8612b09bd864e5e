//! A wait that a combinator or a batch dropped takes no delivery (vercel/workflow#4264):
//! a `wait_for_event` that lost a race to a timer, in a loop, must leave the next event
//! to the wait live then — in the same wake-up, in the journal, with and without the
//! replay cache — and the same holds for callback outcomes and drained messages.
//!
//! Two shapes per combinator: the loser takes the delivery and is dropped before its
//! checkpoint is written ("in memory"), and the loser's checkpoint is written in a
//! coalesced checkpoint with the winner's before the combinator decides ("written": a
//! third future holds the writer when the timer and the event are both ready).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

mod support;

use std::future::IntoFuture;
use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::{Value, json};
use siesta::context::DurableFuture;
use siesta::context::{CompletionConfig, StepSemantics, branch};
use siesta::*;
use siesta_testing::{TestEnv, default_engine_config};

fn boxed<T: Send + 'static>(
    f: impl std::future::Future<Output = Result<T, Error>> + Send + 'static,
) -> BoxFuture<'static, Result<T, Error>> {
    Box::pin(f)
}

const TICK: Duration = Duration::from_secs(10);

/// The harness with the replay cache on (continuations) or off (a replay per wake-up).
fn world(registry: Registry, cache: bool) -> TestEnv {
    let mut config = default_engine_config();
    if !cache {
        config.replay_cache_entries = 0;
    }
    TestEnv::builder(registry)
        .tenant("acme")
        .engine_config(config)
        .build()
}

/// A future that never settles, but first writes a timer's end when it falls due (at
/// the tick) and then a step: it holds the run's writer while the timer and the event
/// of the same round queue up, so their checkpoints are written together.
fn busy(ctx: &Context, i: u32) -> BoxFuture<'static, Result<String, Error>> {
    let alarm = ctx.wait("alarm", TICK);
    let step = ctx.step("busy", move |_| async move { Ok(i) });
    let never = ctx.wait_for_event::<String>("never");
    boxed(async move {
        alarm.await?;
        step.await?;
        never.await
    })
}

fn tick(ctx: &Context) -> BoxFuture<'static, Result<String, Error>> {
    let tick = ctx.sleep(TICK);
    boxed(async move {
        tick.await?;
        Ok("tick".to_owned())
    })
}

/// One round of the loop: the event "ping" against a timer, by `combinator`, the timer
/// first in order (it wins when both are ready); with `written`, a third future first
/// in the first round. `try_join_all` fails by the timer in the first round only, so
/// the second returns the event.
async fn round(ctx: &Context, i: u32, combinator: &str, written: bool) -> Result<String, Error> {
    let written = written && i == 0;
    let mut futures = Vec::new();
    if written {
        futures.push(busy(ctx, i));
    }
    match combinator {
        "race" | "select_ok" => {
            futures.push(tick(ctx));
            futures.push(boxed(ctx.wait_for_event::<String>("ping").into_future()));
            if combinator == "race" {
                ctx.race("ping or tick", futures).await
            } else {
                ctx.select_ok("ping or tick", futures).await
            }
        }
        "try_join_all" => {
            // The timer fails the join: the event wait is dropped with it.
            if i == 0 {
                let t = tick(ctx);
                futures.push(boxed(async move {
                    t.await?;
                    Err(Error::new(ErrorKind::StepFailed, "tick", None))
                }));
            }
            futures.push(boxed(ctx.wait_for_event::<String>("ping").into_future()));
            match ctx.try_join_all("ping and tick", futures).await {
                Ok(values) => Ok(values.last().cloned().unwrap_or_default()),
                Err(e) if e.kind() == ErrorKind::CombinatorFailed => Ok("tick".to_owned()),
                Err(e) => Err(e),
            }
        }
        "parallel" => {
            let mut branches = Vec::new();
            if written {
                branches.push(branch(move |c: Context| busy(&c, i)));
            }
            branches.push(branch(|c: Context| tick(&c)));
            branches.push(branch(|c: Context| async move {
                c.wait_for_event::<String>("ping").await
            }));
            let r = ctx
                .parallel("ping or tick", branches)
                .completion(CompletionConfig::first_successful())
                .await?;
            Ok(r.items
                .into_iter()
                .find_map(|item| match item.outcome {
                    context::BatchOutcome::Succeeded(v) => Some(v),
                    _ => None,
                })
                .unwrap_or_default())
        }
        other => unreachable!("no combinator {other}"),
    }
}

fn looping() -> Registry {
    let mut reg = Registry::new();
    reg.register(
        "loop",
        |ctx: Context, (combinator, written): (String, bool)| async move {
            let mut got = Vec::new();
            for i in 0..2 {
                got.push(round(&ctx, i, &combinator, written).await?);
            }
            Ok(json!(got))
        },
    );
    reg
}

/// The journal entries that consumed `delivery`.
async fn takers(w: &TestEnv, id: &RunId, delivery: &DeliveryId) -> Vec<JournalEntry> {
    w.journal(id)
        .await
        .into_iter()
        .filter(|e| e.consumed.contains(delivery))
        .collect()
}

/// The event's delivery id, from its `EventDelivered` timeline event.
async fn delivered(w: &TestEnv, id: &RunId) -> DeliveryId {
    let event = w
        .timeline(id)
        .await
        .into_iter()
        .find(|e| e.event_type == EventType::EventDelivered)
        .expect("the event was delivered");
    DeliveryId(event.details["DeliveryId"].as_str().unwrap().to_owned())
}

#[tokio::test]
async fn an_event_a_dropped_wait_took_goes_to_the_wait_live_then_for_every_combinator() {
    for combinator in ["race", "select_ok", "try_join_all", "parallel"] {
        for written in [false, true] {
            for cache in [true, false] {
                let case = format!("{combinator} written={written} cache={cache}");
                let w = world(looping(), cache);
                let id = w.start("loop", json!([combinator, written])).await;
                w.run_until_idle().await;
                // The event arrives as the tick falls due: the tick wins the first
                // round, and the second round's wait takes the event in this wake-up.
                w.clock().advance(TICK);
                w.deliver_event(&id, "ping", "hello").await;
                let run = w.run(&id).await;
                assert_eq!(run.error, None, "{case}");
                let delivery = delivered(&w, &id).await;
                let takers = takers(&w, &id, &delivery).await;
                assert_eq!(takers.len(), 1, "{case}: one wait took the event");
                assert!(
                    matches!(takers[0].state, EntryState::Succeeded { .. }),
                    "{case}: {:?}",
                    takers[0]
                );
                let ping0 = w.journal(&id).await.into_iter().find(|e| {
                    e.name == "ping" && e.position.0.ends_with("ping#0") && e.consumed.is_empty()
                });
                if combinator == "parallel" {
                    // Branches finish in any order: the event goes to one round.
                    if run.status != RunStatus::Completed {
                        w.advance(TICK).await;
                    }
                    let out: Vec<String> = w.output(&id).await;
                    assert_eq!(
                        out.iter().filter(|v| *v == "hello").count(),
                        1,
                        "{case}: {out:?}"
                    );
                    continue;
                }
                assert_eq!(run.status, RunStatus::Completed, "{case}");
                assert_eq!(
                    w.output::<Value>(&id).await,
                    json!(["tick", "hello"]),
                    "{case}"
                );
                let loser = ping0.unwrap_or_else(|| panic!("{case}: the loser's entry"));
                assert!(
                    matches!(loser.state, EntryState::Waiting(_)),
                    "{case}: the dropped wait took nothing: {:?}",
                    loser.state
                );
            }
        }
    }
}

#[tokio::test]
async fn a_dropped_wait_takes_none_of_the_events_sent_later_and_the_run_replays_cleanly() {
    for cache in [true, false] {
        let w = world(looping(), cache);
        let id = w.start("loop", json!(["race", true])).await;
        w.run_until_idle().await;
        // The first round is lost to the tick before any event; the next event goes
        // to the second round's wait, not to the first round's dropped one.
        w.advance(TICK).await;
        w.deliver_event(&id, "ping", "hello").await;
        assert_eq!(w.status(&id).await, RunStatus::Completed, "cache={cache}");
        assert_eq!(w.output::<Value>(&id).await, json!(["tick", "hello"]));
        let delivery = delivered(&w, &id).await;
        let takers = takers(&w, &id, &delivery).await;
        assert_eq!(takers.len(), 1);
        assert_eq!(takers[0].position.0, "ping#1");
    }
}

fn callbacks() -> Registry {
    let mut reg = Registry::new();
    reg.register("callbacks", |ctx: Context, written: bool| async move {
        let mut got = Vec::new();
        for i in 0..2 {
            let mut futures = Vec::new();
            if written {
                futures.push(busy(&ctx, i));
            }
            futures.push(tick(&ctx));
            let approval = ctx.create_callback::<String>("approval").await?;
            futures.push(boxed(approval.wait()));
            got.push(ctx.race("approval or tick", futures).await?);
        }
        Ok(json!(got))
    });
    reg
}

async fn callback_at(w: &TestEnv, id: &RunId, position: &str) -> CallbackId {
    let entry = w.entry(id, position).await.expect("the callback exists");
    CallbackId::from(entry.handle.expect("a callback has its id").as_str())
}

#[tokio::test]
async fn a_callback_outcome_a_dropped_wait_took_is_given_back_and_the_live_callback_still_completes()
 {
    for written in [false, true] {
        for cache in [true, false] {
            let case = format!("written={written} cache={cache}");
            let w = world(callbacks(), cache);
            let id = w.start("callbacks", json!(written)).await;
            w.run_until_idle().await;
            let first = callback_at(&w, &id, "approval#0").await;
            // The outcome arrives as the tick falls due: the tick wins the round.
            w.clock().advance(TICK);
            w.complete_callback(&first, "late").await;
            let run = w.run(&id).await;
            assert_eq!(run.error, None, "{case}");
            let loser = w.entry(&id, "approval#0").await.unwrap();
            assert!(
                matches!(loser.state, EntryState::Waiting(_)) && loser.consumed.is_empty(),
                "{case}: the dropped wait took nothing: {loser:?}"
            );
            let second = callback_at(&w, &id, "approval#1").await;
            w.complete_callback(&second, "yes").await;
            assert_eq!(w.status(&id).await, RunStatus::Completed, "{case}");
            assert_eq!(
                w.output::<Value>(&id).await,
                json!(["tick", "yes"]),
                "{case}"
            );
        }
    }
}

fn messages() -> Registry {
    let mut reg = Registry::new();
    reg.register("messages", |ctx: Context, _: Value| async move {
        // A step that fails once and retries at the tick: its second attempt drains
        // the message at its boundary, then loses the race to the tick.
        let read = ctx
            .step("read", |s| async move {
                if s.attempt() < 2 {
                    Err(StepError::new("NotYet", "first attempt", true))
                } else {
                    Ok("read".to_owned())
                }
            })
            .semantics(StepSemantics::AtMostOncePerRetry)
            .retry(RetryStrategy::fixed(3, TICK));
        let futures = vec![busy(&ctx, 0), tick(&ctx), boxed(read.into_future())];
        let winner = ctx.race("read or tick", futures).await?;
        ctx.step("after", |_| async { Ok(()) }).await?;
        let seen: Vec<String> = ctx.messages()?;
        // What the workflow saw, journaled; then compared with what a replay sees.
        let recorded = seen.clone();
        let first = ctx
            .step("seen", move |_| async move { Ok(recorded) })
            .await?;
        ctx.wait_for_event::<bool>("go").await?;
        Ok(json!({"winner": winner, "first": first, "replayed": seen}))
    });
    reg
}

#[tokio::test]
async fn messages_a_dropped_step_drained_reach_the_workflow_the_same_on_first_run_and_on_replay() {
    for cache in [true, false] {
        let w = world(messages(), cache);
        let id = w.start("messages", json!(null)).await;
        w.run_until_idle().await;
        w.clock().advance(TICK);
        w.inject_message(&id, "m1").await;
        w.deliver_event(&id, "go", true).await;
        let run = w.run(&id).await;
        assert_eq!(run.error, None, "cache={cache}");
        assert_eq!(run.status, RunStatus::Completed, "cache={cache}");
        assert_eq!(
            w.output::<Value>(&id).await,
            json!({"winner": "tick", "first": ["m1"], "replayed": ["m1"]}),
            "cache={cache}"
        );
    }
}

/// The loop of issue 44 (the plain shape of vercel/workflow#4264): each round races a
/// wait for "msg" against a timer, both built lazily inside `async` blocks — the wait
/// first in order (the issue's shape), or, with `timer_first`, the timer, whose later
/// rounds are long: when the timer is found fired, the event's future is not polled
/// before the race decides.
fn lazy_loop() -> Registry {
    let mut reg = Registry::new();
    reg.register("lazy", |ctx: Context, timer_first: bool| async move {
        let (mut got, mut timeouts) = (Vec::new(), 0);
        for i in 0..3 {
            let (c1, c2) = (ctx.clone(), ctx.clone());
            let d = if timer_first && i > 0 {
                TICK * 100
            } else {
                TICK
            };
            let ev: DurableFuture<Option<String>> =
                Box::pin(
                    async move { c1.wait_for_event_unchecked::<String>("msg").await.map(Some) },
                );
            let nap: DurableFuture<Option<String>> =
                Box::pin(async move { c2.wait("nap", d).await.map(|_| None) });
            let futures = if timer_first { [nap, ev] } else { [ev, nap] };
            match ctx.race("r", futures).await? {
                Some(m) => got.push(m),
                None => timeouts += 1,
            }
        }
        Ok(json!({"got": got, "timeouts": timeouts}))
    });
    reg
}

#[tokio::test]
async fn a_wait_built_lazily_that_lost_a_race_takes_no_event_sent_in_a_later_wake_up() {
    for cache in [true, false] {
        for restart in [false, true] {
            let case = format!("cache={cache} restart={restart}");
            let w = world(lazy_loop(), cache);
            let id = w.start("lazy", json!(false)).await;
            w.run_until_idle().await;
            // The timer wins the first round in a wake-up of its own.
            w.advance(TICK).await;
            if restart {
                w.restart();
            }
            w.deliver_event(&id, "msg", "first").await;
            w.run_until_idle().await;
            w.deliver_event(&id, "msg", "second").await;
            let run = w.run(&id).await;
            assert_eq!(
                (run.status, run.error),
                (RunStatus::Completed, None),
                "{case}"
            );
            assert_eq!(
                w.output::<Value>(&id).await,
                json!({"got": ["first", "second"], "timeouts": 1}),
                "{case}"
            );
            // Each event went to the wait live when it came, the first round's took none.
            let journal = w.journal(&id).await;
            let consumed = |position: &str| {
                journal
                    .iter()
                    .find(|e| e.position.0 == position)
                    .map(|e| e.consumed.len())
            };
            assert_eq!(consumed("msg#0"), Some(0), "{case}");
            assert_eq!(consumed("msg#1"), Some(1), "{case}");
            assert_eq!(consumed("msg#2"), Some(1), "{case}");
            // The decided race records what its futures created, for replay to skip.
            let first = journal.iter().find(|e| e.position.0 == "r#0").unwrap();
            let minted: Vec<&str> = first.minted.iter().map(|m| m.position.0.as_str()).collect();
            assert_eq!(minted, ["msg#0", "nap#0"], "{case}");
        }
    }
}

#[tokio::test]
async fn a_race_decided_in_a_later_invocation_counts_what_its_futures_created_before() {
    for cache in [true, false] {
        let w = world(lazy_loop(), cache);
        let id = w.start("lazy", json!(true)).await;
        w.run_until_idle().await;
        // The timer's end is written, and the engine dies before the race's decision:
        // a new one decides the first round from the journal (the timer found fired at
        // once), the event's future, created lazily by the first engine, unpolled.
        w.clock().advance(TICK);
        w.crash_after_writes(1);
        w.run_until_idle().await;
        assert!(w.has_crashed(), "cache={cache}");
        let nap = w.entry(&id, "nap#0").await.unwrap();
        assert!(matches!(nap.state, EntryState::Succeeded { .. }), "{nap:?}");
        assert!(
            w.entry(&id, "r#0")
                .await
                .is_none_or(|r| !r.state.is_finished())
        );
        w.restart();
        // The dead engine's lease runs out, and the run is woken again.
        w.advance(siesta_testing::LEASE_TTL).await;
        w.deliver_event(&id, "msg", "first").await;
        w.run_until_idle().await;
        w.deliver_event(&id, "msg", "second").await;
        let run = w.run(&id).await;
        assert_eq!(
            (run.status, run.error),
            (RunStatus::Completed, None),
            "cache={cache}"
        );
        assert_eq!(
            w.output::<Value>(&id).await,
            json!({"got": ["first", "second"], "timeouts": 1}),
            "cache={cache}"
        );
        let journal = w.journal(&id).await;
        let first = journal.iter().find(|e| e.position.0 == "r#0").unwrap();
        let minted: Vec<&str> = first.minted.iter().map(|m| m.position.0.as_str()).collect();
        assert_eq!(minted, ["nap#0", "msg#0"], "cache={cache}");
        let msg0 = journal.iter().find(|e| e.position.0 == "msg#0").unwrap();
        assert_eq!(msg0.within, Some(Position("r#0".into())), "cache={cache}");
        assert!(msg0.consumed.is_empty(), "cache={cache}: {msg0:?}");
    }
}
