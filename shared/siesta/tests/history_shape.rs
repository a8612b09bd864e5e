//! The shape of a run's timeline for every operation kind, as a table of expected
//! event sequences (the form of AWS's own history requirement files): event type,
//! sub-type, operation id, parent id and name, in order. Execution and invocation
//! events are left out; Siesta's own events (deliveries, tool calls) stay in.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use serde_json::json;
use siesta::context::{ConditionCheck, WaitStrategy, branch};
use siesta::*;
use siesta_testing::TestEnv;
use support::world;

/// One expected event: type, sub-type, id, parent id, name.
type Row = (
    &'static str,
    Option<&'static str>,
    Option<&'static str>,
    Option<&'static str>,
    Option<&'static str>,
);

/// One recorded event, in the same terms as a [`Row`].
type Event = (
    String,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
);

/// The run's timeline as rows, without execution and invocation events.
async fn shape(w: &TestEnv, id: &RunId) -> Vec<Event> {
    w.timeline(id)
        .await
        .into_iter()
        .filter(|e| {
            !matches!(
                e.event_type,
                EventType::ExecutionStarted
                    | EventType::ExecutionSucceeded
                    | EventType::ExecutionFailed
                    | EventType::InvocationCompleted
            )
        })
        .map(|e| {
            (
                format!("{:?}", e.event_type),
                e.sub_type.map(|s| format!("{s:?}")),
                e.id,
                e.parent_id,
                e.name,
            )
        })
        .collect()
}

fn expected(rows: &[Row]) -> Vec<Event> {
    rows.iter()
        .map(|(t, s, id, p, n)| {
            (
                t.to_string(),
                s.map(str::to_owned),
                id.map(str::to_owned),
                p.map(str::to_owned),
                n.map(str::to_owned),
            )
        })
        .collect()
}

/// Register `f` as workflow `name`, run it to its end (delivering what `deliver` sends
/// while it waits), and compare its timeline with `rows`.
async fn assert_shape<F, Fut>(name: &str, f: F, rows: &[Row])
where
    F: Fn(Context) -> Fut + Send + Sync + Clone + 'static,
    Fut: std::future::Future<Output = Result<serde_json::Value, Error>> + Send + 'static,
{
    let mut reg = Registry::new();
    reg.register(name, move |ctx: Context, _: serde_json::Value| {
        f.clone()(ctx)
    });
    reg.register("double", |ctx: Context, n: u32| async move {
        ctx.step("compute", move |_| async move { Ok(n * 2) }).await
    });
    let w = world(reg);
    let id = w.start(name, json!(null)).await;
    for _ in 0..8 {
        let run = w.drive(&id).await;
        if run.status.is_finished() {
            break;
        }
        // Waiting on something only the test delivers: a callback or an event.
        if let Some(cb) = w.open_callbacks(&id).await.first() {
            w.complete_callback(cb, json!("ok")).await;
        } else {
            w.deliver_event(&id, "approval", json!(true)).await;
        }
    }
    assert_eq!(w.status(&id).await, RunStatus::Completed, "{name}");
    assert_eq!(
        shape(&w, &id).await,
        expected(rows),
        "the timeline of {name}"
    );
}

const STEP: Option<&str> = Some("Step");

#[tokio::test]
async fn a_step_shows_started_then_succeeded() {
    assert_shape(
        "step",
        |ctx| async move {
            ctx.step("charge", |_| async { Ok(1) }).await?;
            Ok(json!(null))
        },
        &[
            ("StepStarted", STEP, Some("charge#0"), None, Some("charge")),
            (
                "StepSucceeded",
                STEP,
                Some("charge#0"),
                None,
                Some("charge"),
            ),
        ],
    )
    .await;
}

#[tokio::test]
async fn a_retried_step_shows_every_attempt_started() {
    let calls = Arc::new(AtomicU32::new(0));
    assert_shape(
        "retried",
        move |ctx| {
            let calls = calls.clone();
            async move {
                ctx.step("charge", move |_| async move {
                    if calls.fetch_add(1, Ordering::SeqCst) == 0 {
                        Err(StepError::retryable("503"))
                    } else {
                        Ok(1)
                    }
                })
                .retry(RetryStrategy::fixed(3, Duration::from_secs(1)))
                .await?;
                Ok(json!(null))
            }
        },
        &[
            ("StepStarted", STEP, Some("charge#0"), None, Some("charge")),
            ("StepFailed", STEP, Some("charge#0"), None, Some("charge")),
            ("StepStarted", STEP, Some("charge#0"), None, Some("charge")),
            (
                "StepSucceeded",
                STEP,
                Some("charge#0"),
                None,
                Some("charge"),
            ),
        ],
    )
    .await;
}

#[tokio::test]
async fn a_wait_shows_started_then_succeeded() {
    assert_shape(
        "wait",
        |ctx| async move {
            ctx.wait("pause", Duration::from_secs(5)).await?;
            Ok(json!(null))
        },
        &[
            (
                "WaitStarted",
                Some("Wait"),
                Some("pause#0"),
                None,
                Some("pause"),
            ),
            (
                "WaitSucceeded",
                Some("Wait"),
                Some("pause#0"),
                None,
                Some("pause"),
            ),
        ],
    )
    .await;
}

#[tokio::test]
async fn a_callback_shows_started_delivered_succeeded() {
    assert_shape(
        "callback",
        |ctx| async move {
            let cb = ctx.create_callback::<String>("approval").await?;
            cb.wait().await?;
            Ok(json!(null))
        },
        &[
            (
                "CallbackStarted",
                Some("Callback"),
                Some("approval#0"),
                None,
                Some("approval"),
            ),
            ("CallbackDelivered", None, None, None, None),
            (
                "CallbackSucceeded",
                Some("Callback"),
                Some("approval#0"),
                None,
                Some("approval"),
            ),
        ],
    )
    .await;
}

#[tokio::test]
async fn wait_for_callback_is_a_context_with_the_callback_and_submitter_under_it() {
    let p = Some("approval#0");
    assert_shape(
        "wait_for_callback",
        |ctx| async move {
            ctx.wait_for_callback::<String, _, _>("approval", |_, _, _| async { Ok(()) })
                .await?;
            Ok(json!(null))
        },
        &[
            (
                "ContextStarted",
                Some("WaitForCallback"),
                p,
                None,
                Some("approval"),
            ),
            (
                "CallbackStarted",
                Some("Callback"),
                Some("approval#0/approval#0"),
                p,
                Some("approval"),
            ),
            (
                "StepStarted",
                STEP,
                Some("approval#0/submit#0"),
                p,
                Some("submit"),
            ),
            (
                "StepSucceeded",
                STEP,
                Some("approval#0/submit#0"),
                p,
                Some("submit"),
            ),
            ("CallbackDelivered", None, None, None, None),
            (
                "CallbackSucceeded",
                Some("Callback"),
                Some("approval#0/approval#0"),
                p,
                Some("approval"),
            ),
            (
                "ContextSucceeded",
                Some("WaitForCallback"),
                p,
                None,
                Some("approval"),
            ),
        ],
    )
    .await;
}

#[tokio::test]
async fn wait_for_condition_records_each_poll_that_continues_as_a_succeeded_check() {
    let c = Some("WaitForCondition");
    assert_shape(
        "condition",
        |ctx| async move {
            ctx.wait_for_condition("job", 0u32, |n, _| async move {
                Ok(if n >= 1 {
                    ConditionCheck::Done(n)
                } else {
                    ConditionCheck::Continue(n + 1)
                })
            })
            .strategy(WaitStrategy {
                initial_delay: Duration::from_secs(1),
                max_delay: Duration::from_secs(1),
                multiplier: 1.0,
                max_attempts: 5,
            })
            .await?;
            Ok(json!(null))
        },
        &[
            ("StepStarted", c, Some("job#0"), None, Some("job")),
            ("StepSucceeded", c, Some("job#0"), None, Some("job")),
            ("StepStarted", c, Some("job#0"), None, Some("job")),
            ("StepSucceeded", c, Some("job#0"), None, Some("job")),
        ],
    )
    .await;
}

/// AWS records a check that says "not yet" as a succeeded attempt carrying the state
/// it produced and the delay before the next check; a check that throws stays a
/// failure (`semantics.rs`).
#[tokio::test]
async fn a_condition_poll_that_continues_carries_its_state_and_the_next_delay() {
    let mut reg = Registry::new();
    reg.register("poll", |ctx: Context, _: serde_json::Value| async move {
        ctx.wait_for_condition("job", 0u32, |n, _| async move {
            Ok(if n >= 2 {
                ConditionCheck::Done(n)
            } else {
                ConditionCheck::Continue(n + 1)
            })
        })
        .strategy(WaitStrategy {
            initial_delay: Duration::from_secs(2),
            max_delay: Duration::from_secs(10),
            multiplier: 2.0,
            max_attempts: 5,
        })
        .await
    });
    let w = world(reg);
    let id = w.start("poll", json!(null)).await;
    for _ in 0..8 {
        if w.drive(&id).await.status.is_finished() {
            break;
        }
    }
    assert_eq!(w.status(&id).await, RunStatus::Completed);
    let ends: Vec<serde_json::Value> = w
        .timeline(&id)
        .await
        .into_iter()
        .filter(|e| e.sub_type == Some(SubType::WaitForCondition))
        .filter(|e| e.event_type != EventType::StepStarted)
        .map(|e| {
            assert_eq!(e.event_type, EventType::StepSucceeded, "{e:?}");
            let mut d = e.details;
            d.as_object_mut().unwrap().remove("NextAttemptAt");
            d
        })
        .collect();
    assert_eq!(
        ends,
        vec![
            json!({"Attempt": 1, "State": 1, "NextAttemptDelayMs": 2000, "Retrying": true}),
            json!({"Attempt": 2, "State": 2, "NextAttemptDelayMs": 4000, "Retrying": true}),
            json!({"Attempt": 3, "Result": 2}),
        ]
    );
}

/// AWS's history of a check that raises: its attempt started, then `StepFailed` with
/// the check's error and nothing about a next attempt; the operation is over (the
/// check is not called again, though it would now say done) and, uncaught, the run
/// fails with that error.
#[tokio::test]
async fn a_condition_check_that_errors_is_one_failed_attempt_with_its_error_and_no_retry() {
    let c = Some("WaitForCondition");
    let job = |ctx: Context| async move {
        let checks = Arc::new(AtomicU32::new(0));
        ctx.wait_for_condition("job", 0u32, move |n, _| async move {
            if checks.fetch_add(1, Ordering::SeqCst) == 0 {
                Err(StepError::retryable("status endpoint down"))
            } else {
                Ok(ConditionCheck::Done(n))
            }
        })
        .await
    };
    // Caught: the workflow goes on and the timeline shows one failed check.
    assert_shape(
        "caught",
        move |ctx| async move {
            let _ = job(ctx).await;
            Ok(json!(null))
        },
        &[
            ("StepStarted", c, Some("job#0"), None, Some("job")),
            ("StepFailed", c, Some("job#0"), None, Some("job")),
        ],
    )
    .await;
    // Uncaught: the same failed check, with its error, then the run fails with it.
    let mut reg = Registry::new();
    reg.register("uncaught", move |ctx: Context, _: serde_json::Value| {
        job(ctx)
    });
    let w = world(reg);
    let id = w.start("uncaught", json!(null)).await;
    for _ in 0..4 {
        if w.drive(&id).await.status.is_finished() {
            break;
        }
    }
    assert_eq!(w.status(&id).await, RunStatus::Failed);
    let timeline = w.timeline(&id).await;
    let failed: Vec<&TimelineEvent> = timeline
        .iter()
        .filter(|e| e.event_type == EventType::StepFailed)
        .collect();
    assert_eq!(failed.len(), 1, "{timeline:#?}");
    assert_eq!(
        failed[0].details,
        json!({"Attempt": 1, "Error": {
            "kind": "retryable", "message": "status endpoint down", "retryable": true
        }}),
        "the check's error, no Retrying, no next attempt"
    );
    let end = timeline
        .iter()
        .find(|e| e.event_type == EventType::ExecutionFailed)
        .unwrap();
    assert_eq!(
        end.details["Error"]["cause"]["message"],
        json!("status endpoint down")
    );
}

#[tokio::test]
async fn an_event_wait_shows_started_delivered_succeeded() {
    let e = Some("WaitForEvent");
    assert_shape(
        "event",
        |ctx| async move {
            ctx.wait_for_event::<bool>("approval").await?;
            Ok(json!(null))
        },
        &[
            ("WaitStarted", e, Some("approval#0"), None, Some("approval")),
            ("EventDelivered", None, None, None, Some("approval")),
            (
                "WaitSucceeded",
                e,
                Some("approval#0"),
                None,
                Some("approval"),
            ),
        ],
    )
    .await;
}

#[tokio::test]
async fn a_child_context_wraps_its_operations() {
    let c = Some("RunInChildContext");
    let p = Some("checkout#0");
    assert_shape(
        "child",
        |ctx| async move {
            ctx.run_in_child_context("checkout", |child| async move {
                child.step("price", |_| async { Ok(5) }).await
            })
            .await?;
            Ok(json!(null))
        },
        &[
            ("ContextStarted", c, p, None, Some("checkout")),
            (
                "StepStarted",
                STEP,
                Some("checkout#0/price#0"),
                p,
                Some("price"),
            ),
            (
                "StepSucceeded",
                STEP,
                Some("checkout#0/price#0"),
                p,
                Some("price"),
            ),
            ("ContextSucceeded", c, p, None, Some("checkout")),
        ],
    )
    .await;
}

#[tokio::test]
async fn a_parallel_wraps_each_branch() {
    let (par, br) = (Some("Parallel"), Some("ParallelBranch"));
    let p = Some("fan#0");
    let (b0, b1) = (Some("fan#0/branch#0"), Some("fan#0/branch#1"));
    assert_shape(
        "parallel",
        |ctx| async move {
            ctx.parallel(
                "fan",
                vec![
                    branch(|c: Context| async move { c.step("a", |_| async { Ok(1) }).await }),
                    branch(|c: Context| async move { c.step("b", |_| async { Ok(2) }).await }),
                ],
            )
            .max_concurrency(1)
            .await?;
            Ok(json!(null))
        },
        &[
            ("ContextStarted", par, p, None, Some("fan")),
            ("ContextStarted", br, b0, p, Some("branch")),
            (
                "StepStarted",
                STEP,
                Some("fan#0/branch#0/a#0"),
                b0,
                Some("a"),
            ),
            (
                "StepSucceeded",
                STEP,
                Some("fan#0/branch#0/a#0"),
                b0,
                Some("a"),
            ),
            ("ContextSucceeded", br, b0, p, Some("branch")),
            ("ContextStarted", br, b1, p, Some("branch")),
            (
                "StepStarted",
                STEP,
                Some("fan#0/branch#1/b#0"),
                b1,
                Some("b"),
            ),
            (
                "StepSucceeded",
                STEP,
                Some("fan#0/branch#1/b#0"),
                b1,
                Some("b"),
            ),
            ("ContextSucceeded", br, b1, p, Some("branch")),
            ("ContextSucceeded", par, p, None, Some("fan")),
        ],
    )
    .await;
}

#[tokio::test]
async fn a_map_wraps_each_iteration() {
    let (map, it) = (Some("Map"), Some("MapIteration"));
    let p = Some("each#0");
    let i0 = Some("each#0/iteration#0");
    assert_shape(
        "map",
        |ctx| async move {
            ctx.map("each", vec![1u32], |c: Context, n, _| async move {
                c.step("square", move |_| async move { Ok(n * n) }).await
            })
            .await?;
            Ok(json!(null))
        },
        &[
            ("ContextStarted", map, p, None, Some("each")),
            ("ContextStarted", it, i0, p, Some("iteration")),
            (
                "StepStarted",
                STEP,
                Some("each#0/iteration#0/square#0"),
                i0,
                Some("square"),
            ),
            (
                "StepSucceeded",
                STEP,
                Some("each#0/iteration#0/square#0"),
                i0,
                Some("square"),
            ),
            ("ContextSucceeded", it, i0, p, Some("iteration")),
            ("ContextSucceeded", map, p, None, Some("each")),
        ],
    )
    .await;
}

#[tokio::test]
async fn an_invoke_carries_its_name_and_parent() {
    let (c, inv) = (Some("RunInChildContext"), Some("ChainedInvoke"));
    let p = Some("outer#0");
    assert_shape(
        "invoke",
        |ctx| async move {
            ctx.run_in_child_context("outer", |child| async move {
                child.invoke::<u32, _>("double_it", "double", 2u32).await
            })
            .await?;
            Ok(json!(null))
        },
        &[
            ("ContextStarted", c, p, None, Some("outer")),
            (
                "ChainedInvokeStarted",
                inv,
                Some("outer#0/double_it#0"),
                p,
                Some("double_it"),
            ),
            (
                "ChainedInvokeSucceeded",
                inv,
                Some("outer#0/double_it#0"),
                p,
                Some("double_it"),
            ),
            ("ContextSucceeded", c, p, None, Some("outer")),
        ],
    )
    .await;
}

#[tokio::test]
async fn a_tool_call_records_its_start_before_calling() {
    let t = Some("ToolCall");
    assert_shape(
        "tool",
        |ctx| async move {
            ctx.tool_call("charge", &json!({"amount": 5}), |_| async { Ok(1) })
                .await?;
            Ok(json!(null))
        },
        &[
            ("StepStarted", t, Some("charge#0"), None, Some("charge")),
            ("StepSucceeded", t, Some("charge#0"), None, Some("charge")),
        ],
    )
    .await;
}

#[tokio::test]
async fn named_branches_and_items_carry_their_names() {
    let (par, br) = (Some("Parallel"), Some("ParallelBranch"));
    let (map, it) = (Some("Map"), Some("MapIteration"));
    assert_shape(
        "named",
        |ctx| async move {
            ctx.parallel(
                "fan",
                vec![
                    branch(|_: Context| async { Ok(1) }),
                    branch(|_: Context| async { Ok(2) }),
                ],
            )
            .names(["charge", "ship"])
            .max_concurrency(1)
            .await?;
            ctx.map(
                "each",
                vec!["a", "b"],
                |_: Context, s: &str, _| async move { Ok(s.len()) },
            )
            .names(["item-a", "item-b"])
            .max_concurrency(1)
            .await?;
            Ok(json!(null))
        },
        &[
            ("ContextStarted", par, Some("fan#0"), None, Some("fan")),
            (
                "ContextStarted",
                br,
                Some("fan#0/charge#0"),
                Some("fan#0"),
                Some("charge"),
            ),
            (
                "ContextSucceeded",
                br,
                Some("fan#0/charge#0"),
                Some("fan#0"),
                Some("charge"),
            ),
            (
                "ContextStarted",
                br,
                Some("fan#0/ship#0"),
                Some("fan#0"),
                Some("ship"),
            ),
            (
                "ContextSucceeded",
                br,
                Some("fan#0/ship#0"),
                Some("fan#0"),
                Some("ship"),
            ),
            ("ContextSucceeded", par, Some("fan#0"), None, Some("fan")),
            ("ContextStarted", map, Some("each#0"), None, Some("each")),
            (
                "ContextStarted",
                it,
                Some("each#0/item-a#0"),
                Some("each#0"),
                Some("item-a"),
            ),
            (
                "ContextSucceeded",
                it,
                Some("each#0/item-a#0"),
                Some("each#0"),
                Some("item-a"),
            ),
            (
                "ContextStarted",
                it,
                Some("each#0/item-b#0"),
                Some("each#0"),
                Some("item-b"),
            ),
            (
                "ContextSucceeded",
                it,
                Some("each#0/item-b#0"),
                Some("each#0"),
                Some("item-b"),
            ),
            ("ContextSucceeded", map, Some("each#0"), None, Some("each")),
        ],
    )
    .await;
}

/// A combinator over two steps, inside a child context so the nesting shows: the
/// combinator is a context of its own (AWS: `RunInChildContext`), started before the
/// futures run; the futures are its siblings (created before it, under the same parent),
/// not its children.
async fn combinator_shape(rule: &'static str, name: &'static str, rows: &[Row]) {
    assert_shape(
        rule,
        move |ctx| async move {
            ctx.run_in_child_context("checkout", move |ctx| async move {
                let a = std::future::IntoFuture::into_future(ctx.step("a", |_| async { Ok(1) }));
                let b = std::future::IntoFuture::into_future(ctx.step("b", |_| async { Ok(2) }));
                let futures = [a, b];
                match rule {
                    "join_all" => {
                        ctx.join_all(name, futures).await?;
                    }
                    "try_join_all" => {
                        ctx.try_join_all(name, futures).await?;
                    }
                    "select_ok" => {
                        ctx.select_ok(name, futures).await?;
                    }
                    _ => {
                        ctx.race(name, futures).await?;
                    }
                }
                Ok(json!(null))
            })
            .await
        },
        rows,
    )
    .await;
}

#[tokio::test]
async fn join_all_and_try_join_all_are_contexts_beside_the_futures_they_wait_for() {
    let c = Some("RunInChildContext");
    let (p, all) = (Some("checkout#0"), Some("checkout#0/all#0"));
    let (a, b) = (Some("checkout#0/a#0"), Some("checkout#0/b#0"));
    let rows = [
        ("ContextStarted", c, p, None, Some("checkout")),
        ("ContextStarted", c, all, p, Some("all")),
        ("StepStarted", STEP, a, p, Some("a")),
        ("StepSucceeded", STEP, a, p, Some("a")),
        ("StepStarted", STEP, b, p, Some("b")),
        ("StepSucceeded", STEP, b, p, Some("b")),
        ("ContextSucceeded", c, all, p, Some("all")),
        ("ContextSucceeded", c, p, None, Some("checkout")),
    ];
    combinator_shape("join_all", "all", &rows).await;
    combinator_shape("try_join_all", "all", &rows).await;
}

#[tokio::test]
async fn race_and_select_ok_end_at_the_winner_and_never_start_a_loser_not_yet_polled() {
    let c = Some("RunInChildContext");
    let (p, first) = (Some("checkout#0"), Some("checkout#0/first#0"));
    let a = Some("checkout#0/a#0");
    let rows = [
        ("ContextStarted", c, p, None, Some("checkout")),
        ("ContextStarted", c, first, p, Some("first")),
        ("StepStarted", STEP, a, p, Some("a")),
        ("StepSucceeded", STEP, a, p, Some("a")),
        ("ContextSucceeded", c, first, p, Some("first")),
        ("ContextSucceeded", c, p, None, Some("checkout")),
    ];
    combinator_shape("race", "first", &rows).await;
    combinator_shape("select_ok", "first", &rows).await;
}
