//! Combinators over durable futures (AWS Rust SDK: `join_all`, `try_join_all`,
//! `select_ok`, `race`): what each returns, that what it decided is journaled and
//! replayed rather than decided again, and what happens to the losers.

mod support;

use std::future::IntoFuture;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::{Value, json};
use siesta::ports::DeliverOutcome;
use siesta::*;
use support::world;

fn boxed<T: Send + 'static>(
    f: impl std::future::Future<Output = Result<T, Error>> + Send + 'static,
) -> BoxFuture<'static, Result<T, Error>> {
    Box::pin(f)
}

fn outcome_json(o: &Result<u32, Error>) -> Value {
    match o {
        Ok(v) => json!({"ok": v}),
        Err(e) => {
            json!({"err": e.kind().as_str(), "message": e.to_string(), "cause": e.cause().map(|c| c.message.clone())})
        }
    }
}

#[tokio::test]
async fn join_all_collects_every_outcome_in_order_the_same_on_first_run_and_on_replay() {
    let calls = Arc::new(AtomicU32::new(0));
    let mut reg = Registry::new();
    let counted = calls.clone();
    reg.register("gather", move |ctx: Context, _: Value| {
        let calls = counted.clone();
        async move {
            let slow = ctx.wait("pause", Duration::from_secs(5));
            let calls_a = calls.clone();
            let a = ctx.step("a", move |_| async move {
                calls_a.fetch_add(1, Ordering::SeqCst);
                Ok(1u32)
            });
            let b = ctx.step("b", |_| async {
                Err::<u32, _>(StepError::new("Declined", "no", false))
            });
            let c = boxed(async move {
                slow.await?;
                Ok(3u32)
            });
            let outcomes = ctx
                .join_all("all", [a.into_future(), b.into_future(), c])
                .await?;
            let first: Vec<Value> = outcomes.iter().map(outcome_json).collect();
            // A later wait makes the run replay the combinator from its journal.
            ctx.wait_for_event::<bool>("go").await?;
            Ok(json!(first))
        }
    });
    let w = world(reg);
    let id = w.start("gather", json!(null)).await;
    w.drive(&id).await;
    assert_eq!(w.status(&id).await, RunStatus::Waiting);
    w.deliver_event(&id, "go", json!(true)).await;
    let out: Value = w.output(&id).await;
    assert_eq!(out[0], json!({"ok": 1}));
    assert_eq!(out[1]["err"], "StepFailed");
    assert_eq!(out[1]["cause"], "no");
    assert_eq!(out[2], json!({"ok": 3}));
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "replay did not run the step again"
    );
    let entry = w.entry(&id, "all#0").await.unwrap();
    assert!(
        matches!(entry.state, EntryState::Succeeded { .. }),
        "{:?}",
        entry.state
    );
}

#[tokio::test]
async fn try_join_all_returns_every_value_in_order_or_fails_at_the_first_failure_without_waiting_for_the_rest()
 {
    let mut reg = Registry::new();
    reg.register("all_ok", |ctx: Context, _: Value| async move {
        let a = ctx.step("a", |_| async { Ok(1u32) }).into_future();
        let b = ctx.step("b", |_| async { Ok(2u32) }).into_future();
        ctx.try_join_all("both", [a, b]).await
    });
    reg.register("one_fails", |ctx: Context, _: Value| async move {
        let a = ctx.step("a", |_| async { Ok(1u32) }).into_future();
        let b = ctx
            .step("b", |_| async {
                Err::<u32, _>(StepError::new("Declined", "no", false))
            })
            .into_future();
        let wait = ctx.wait("a day", Duration::from_secs(86_400));
        let c = boxed(async move {
            wait.await?;
            Ok(3u32)
        });
        match ctx.try_join_all("all", [a, b, c]).await {
            Ok(v) => Ok(json!(v)),
            Err(e) => {
                Ok(json!({"err": e.kind().as_str(), "cause": e.cause().map(|c| c.kind.clone())}))
            }
        }
    });
    reg.register("none", |ctx: Context, _: Value| async move {
        let none: Vec<BoxFuture<'static, Result<u32, Error>>> = Vec::new();
        ctx.try_join_all("nothing", none).await
    });
    let w = world(reg);
    let run = w.execute("all_ok", json!(null)).await;
    assert_eq!(run.status, RunStatus::Completed);
    assert_eq!(w.output::<Vec<u32>>(&run.id).await, [1, 2]);

    let id = w.start("one_fails", json!(null)).await;
    let started = w.now();
    w.run_until_idle().await;
    assert_eq!(
        w.status(&id).await,
        RunStatus::Completed,
        "no timer was waited for"
    );
    assert_eq!(w.now(), started);
    assert_eq!(
        w.output::<Value>(&id).await,
        json!({"err": "CombinatorFailed", "cause": "StepFailed"})
    );

    let run = w.execute("none", json!(null)).await;
    assert_eq!(w.output::<Vec<u32>>(&run.id).await, Vec::<u32>::new());
}

/// Two callbacks raced; the workflow then waits for an event, so that it replays with
/// both callbacks completed.
fn two_callbacks(rule: &'static str) -> Registry {
    let mut reg = Registry::new();
    reg.register("pick", move |ctx: Context, _: Value| async move {
        let a = ctx.create_callback::<String>("a").await?;
        let b = ctx.create_callback::<String>("b").await?;
        let futures = [a.wait(), b.wait()];
        let first = match rule {
            "race" => ctx.race("first", futures).await?,
            _ => ctx.select_ok("first ok", futures).await?,
        };
        ctx.wait_for_event::<bool>("go").await?;
        Ok(json!(first))
    });
    reg
}

#[tokio::test]
async fn a_races_winner_is_journaled_and_replay_returns_it_even_when_an_earlier_future_has_finished_since()
 {
    let w = world(two_callbacks("race"));
    let id = w.start("pick", json!(null)).await;
    w.drive(&id).await;
    let (a, b) = (w.callback(&id, "a").await, w.callback(&id, "b").await);
    w.complete_callback(&b, "from b").await;
    // Decided: b won. Now a finishes too; the loser's delivery is accepted, never read.
    assert!(
        matches!(
            w.complete_callback(&a, "from a").await,
            DeliverOutcome::Accepted(_)
        ),
        "the loser's delivery is accepted"
    );
    w.deliver_event(&id, "go", json!(true)).await;
    assert_eq!(w.output::<String>(&id).await, "from b");
    let ended = w
        .timeline(&id)
        .await
        .into_iter()
        .find(|e| e.event_type == EventType::ContextSucceeded && e.id.as_deref() == Some("first#0"))
        .expect("the race's end is in the timeline");
    assert_eq!(ended.details["Winner"], 1);
    assert_eq!(ended.details["Combinator"], "race");
    let loser = w.entry(&id, "a#0").await.unwrap();
    assert!(
        matches!(loser.state, EntryState::Waiting(_)),
        "the loser was never read: {:?}",
        loser.state
    );
}

#[tokio::test]
async fn a_race_won_by_a_failure_fails_with_that_failure_as_its_cause() {
    let w = world(two_callbacks("race"));
    let id = w.start("pick", json!(null)).await;
    w.drive(&id).await;
    let b = w.callback(&id, "b").await;
    w.fail_callback(&b, ErrorInfo::new("Rejected", "not approved", false))
        .await;
    let run = w.drive(&id).await;
    assert_eq!(run.status, RunStatus::Failed);
    let error = run.error.unwrap();
    assert_eq!(error.kind, "CombinatorFailed");
    assert_eq!(error.cause.as_ref().unwrap().message, "not approved");
}

#[tokio::test]
async fn select_ok_skips_failures_and_its_winner_is_replayed() {
    let w = world(two_callbacks("select_ok"));
    let id = w.start("pick", json!(null)).await;
    w.drive(&id).await;
    let (a, b) = (w.callback(&id, "a").await, w.callback(&id, "b").await);
    w.fail_callback(&a, ErrorInfo::new("Rejected", "not a", false))
        .await;
    assert_eq!(
        w.status(&id).await,
        RunStatus::Waiting,
        "a failure does not settle it"
    );
    w.complete_callback(&b, "from b").await;
    w.deliver_event(&id, "go", json!(true)).await;
    assert_eq!(w.output::<String>(&id).await, "from b");
}

#[tokio::test]
async fn select_ok_fails_once_every_future_failed_naming_each_error() {
    let w = world(two_callbacks("select_ok"));
    let id = w.start("pick", json!(null)).await;
    w.drive(&id).await;
    let (a, b) = (w.callback(&id, "a").await, w.callback(&id, "b").await);
    w.fail_callback(&a, ErrorInfo::new("Rejected", "not a", false))
        .await;
    w.fail_callback(&b, ErrorInfo::new("Rejected", "not b", false))
        .await;
    let run = w.drive(&id).await;
    assert_eq!(run.status, RunStatus::Failed);
    let error = run.error.unwrap();
    assert_eq!(error.kind, "CombinatorFailed");
    assert!(
        error.message.contains("not a") && error.message.contains("not b"),
        "{}",
        error.message
    );
}

#[tokio::test]
async fn a_race_or_select_ok_of_nothing_fails_at_once() {
    let mut reg = Registry::new();
    reg.register("empty", |ctx: Context, _: Value| async move {
        let none: Vec<BoxFuture<'static, Result<u32, Error>>> = Vec::new();
        let race = ctx.race("r", none).await.unwrap_err();
        let none: Vec<BoxFuture<'static, Result<u32, Error>>> = Vec::new();
        let select = ctx.select_ok("s", none).await.unwrap_err();
        Ok(json!([race.kind().as_str(), select.kind().as_str()]))
    });
    let w = world(reg);
    let run = w.execute("empty", json!(null)).await;
    assert_eq!(
        w.output::<Value>(&run.id).await,
        json!(["CombinatorFailed", "CombinatorFailed"])
    );
}

#[tokio::test]
async fn a_losing_timer_is_dropped_the_run_does_not_wait_for_it_and_a_losing_callback_closes_with_the_run()
 {
    let mut reg = Registry::new();
    reg.register("approve", |ctx: Context, _: Value| async move {
        let approval = ctx.create_callback::<String>("approval").await?;
        let timeout = ctx.wait("timeout", Duration::from_secs(3600));
        let timed_out = boxed(async move {
            timeout.await?;
            Ok("timed out".to_owned())
        });
        let answer = ctx
            .race("approval or timeout", [boxed(approval.wait()), timed_out])
            .await?;
        Ok(json!(answer))
    });
    // The callback wins: the hour-long timer is dropped and the run ends at once.
    let w = world(reg.clone());
    let id = w.start("approve", json!(null)).await;
    w.run_until_idle().await;
    let started = w.now();
    let approval = w.callback(&id, "approval").await;
    w.complete_callback(&approval, "yes").await;
    assert_eq!(w.status(&id).await, RunStatus::Completed);
    assert_eq!(
        w.now(),
        started,
        "no time passed: the timer was not waited for"
    );
    assert_eq!(w.output::<String>(&id).await, "yes");
    let timeline = w.timeline(&id).await;
    assert!(
        !timeline
            .iter()
            .any(|e| e.id.as_deref() == Some("timeout#0")
                && e.event_type == EventType::WaitSucceeded),
        "the losing timer never fired"
    );

    // The timer wins: the losing callback stays open until the run ends, then is gone.
    let w = world(reg);
    let id = w.start("approve", json!(null)).await;
    w.run_until_idle().await;
    let approval = w.callback(&id, "approval").await;
    let run = w.drive(&id).await;
    assert_eq!(run.status, RunStatus::Completed);
    assert_eq!(w.output::<String>(&id).await, "timed out");
    let late = w
        .engine()
        .complete_callback(&approval, Some(w.tenant()), Ok(json!("too late")), None)
        .await;
    assert!(
        matches!(late, Err(EngineError::Gone(_) | EngineError::NotFound)),
        "{late:?}"
    );
}
