//! Restart from a step on the backend (docs/operations.md): what a restart writes —
//! a finished run made unfinished again, its journal from the point on superseded and
//! kept readable — and what the replay that follows does with it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use serde_json::{Value, json};
use siesta::*;

use crate::Harness;

/// What the workflows' side effects did, counted outside the engine.
#[derive(Default)]
struct Effects {
    fetched: AtomicUsize,
    searched: AtomicUsize,
    notified: AtomicUsize,
    /// The notify receiver answers a 4xx until it is fixed.
    fixed: AtomicBool,
}

impl Effects {
    fn counts(&self) -> [usize; 3] {
        [
            self.fetched.load(Ordering::SeqCst),
            self.searched.load(Ordering::SeqCst),
            self.notified.load(Ordering::SeqCst),
        ]
    }
}

/// `three_steps`: two steps, then a tool call that fails for good (a 4xx) until the
/// receiver is fixed. With `renamed`, the first step has another name: the code
/// before the tool call changed.
fn three_steps(effects: Arc<Effects>, renamed: bool) -> Registry {
    let mut reg = Registry::new();
    reg.register("three_steps", move |ctx: Context, _: Value| {
        let effects = effects.clone();
        async move {
            let e = effects.clone();
            let first = if renamed {
                "fetch_issue_v2"
            } else {
                "fetch_issue"
            };
            ctx.step(first, move |_| async move {
                e.fetched.fetch_add(1, Ordering::SeqCst);
                Ok(1u32)
            })
            .await?;
            let e = effects.clone();
            ctx.step("search", move |_| async move {
                e.searched.fetch_add(1, Ordering::SeqCst);
                Ok(2u32)
            })
            .await?;
            let e = effects.clone();
            ctx.tool_call("notify_team", &json!({"to": "team"}), move |_| async move {
                e.notified.fetch_add(1, Ordering::SeqCst);
                if e.fixed.load(Ordering::SeqCst) {
                    Ok(json!("notified"))
                } else {
                    Err(StepError::from_http_status(400, "the receiver said 400"))
                }
            })
            .await
        }
    });
    reg
}

fn engine(h: &Harness, registry: Registry) -> Engine {
    let config = EngineConfig {
        owner: format!("conformance-{}", uuid::Uuid::new_v4()),
        ..EngineConfig::default()
    };
    Engine::new(h.backend.clone(), h.clock.clone(), registry, config)
}

async fn run(h: &Harness, tenant: &TenantId, id: &RunId) -> Run {
    h.backend
        .store
        .get_run(tenant, id)
        .await
        .expect("read the run")
        .expect("the run exists")
}

/// A run of `three_steps` that failed for good at its tool call.
async fn failed_run(h: &Harness, engine: &Engine, tenant: &TenantId) -> Run {
    let started = engine
        .start(tenant, "three_steps", json!(null), None)
        .await
        .expect("start");
    engine.run_until_idle(50).await.expect("work the queue");
    let failed = run(h, tenant, &started.id).await;
    assert_eq!(failed.status, RunStatus::Failed, "{:?}", failed.error);
    failed
}

async fn restarted_events(h: &Harness, tenant: &TenantId, id: &RunId) -> Vec<TimelineEvent> {
    h.backend
        .store
        .timeline(tenant, id, 0, 1000)
        .await
        .expect("read the timeline")
        .into_iter()
        .filter(|e| e.event_type == EventType::RunRestarted)
        .collect()
}

/// A run whose third operation failed for good restarts from it, in place, after the
/// fix: it completes without running the first two again, is unfinished again on the
/// tenant's count while it runs, and its failed entry stays readable, superseded.
pub async fn a_run_restarted_in_place_from_its_failed_step_does_not_repeat_the_steps_before(
    h: Harness,
) {
    let tenant = TenantId(format!("conformance-{}", uuid::Uuid::new_v4()));
    let effects = Arc::new(Effects::default());
    let engine = engine(&h, three_steps(effects.clone(), false));
    let failed = failed_run(&h, &engine, &tenant).await;
    assert_eq!(effects.counts(), [1, 1, 1]);
    let unfinished = h
        .backend
        .store
        .unfinished_runs(&tenant)
        .await
        .expect("count");

    effects.fixed.store(true, Ordering::SeqCst);
    let restarted = engine
        .restart(&tenant, &failed.id, RestartRequest::default(), None, "ops")
        .await
        .expect("restart");
    assert_eq!(restarted.from, Some(Position::from("notify_team#0")));
    assert_eq!(restarted.superseded, 1);
    assert_eq!(
        restarted.replayed, 2,
        "the two steps before replayed to check it"
    );
    assert_eq!(restarted.run.id, failed.id, "in place: the same run");
    assert_eq!(
        h.backend
            .store
            .unfinished_runs(&tenant)
            .await
            .expect("count"),
        unfinished + 1,
        "unfinished again"
    );
    engine.run_until_idle(50).await.expect("work the queue");
    let done = run(&h, &tenant, &failed.id).await;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(done.output, Some(Payload::Inline(json!("notified"))));
    assert_eq!(
        effects.counts(),
        [1, 1, 2],
        "only the failed call ran again"
    );
    assert_eq!(
        h.backend
            .store
            .unfinished_runs(&tenant)
            .await
            .expect("count"),
        unfinished,
        "finished again"
    );

    let journal = h
        .backend
        .store
        .load_replay_input(&tenant, &failed.id)
        .await
        .expect("read the journal")
        .journal;
    let archived = journal
        .iter()
        .find(|e| e.position == archived_position(&Position::from("notify_team#0"), 1))
        .expect("the failed call is kept, superseded");
    assert_eq!(archived.superseded, Some(1));
    assert!(
        matches!(archived.state, EntryState::Failed { .. }),
        "{archived:?}"
    );
    let events = restarted_events(&h, &tenant, &failed.id).await;
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].details["RestartedBy"], json!("ops"));
    assert_eq!(events[0].details["From"], json!("notify_team#0"));
}

/// The same restart as a new run: the fork completes without running the steps before
/// the point, the failed run stays failed, and each names the other.
pub async fn a_run_restarted_as_new_forks_and_links_both_ways(h: Harness) {
    let tenant = TenantId(format!("conformance-{}", uuid::Uuid::new_v4()));
    let effects = Arc::new(Effects::default());
    let engine = engine(&h, three_steps(effects.clone(), false));
    let failed = failed_run(&h, &engine, &tenant).await;
    effects.fixed.store(true, Ordering::SeqCst);
    let request = RestartRequest {
        as_new: true,
        token: Some("job-1".to_owned()),
        ..RestartRequest::default()
    };
    let forked = engine
        .restart(&tenant, &failed.id, request.clone(), None, "ops")
        .await
        .expect("restart as new");
    assert_ne!(forked.run.id, failed.id);
    engine.run_until_idle(50).await.expect("work the queue");
    let fork = run(&h, &tenant, &forked.run.id).await;
    assert_eq!(fork.status, RunStatus::Completed, "{:?}", fork.error);
    assert_eq!(effects.counts(), [1, 1, 2]);
    assert_eq!(
        fork.restart.as_ref().and_then(|m| m.forked_from.clone()),
        Some(failed.id.clone())
    );
    let source = run(&h, &tenant, &failed.id).await;
    assert_eq!(
        source.status,
        RunStatus::Failed,
        "the source is left as it was"
    );
    assert_eq!(
        source.restart.as_ref().and_then(|m| m.fork.clone()),
        Some(fork.id.clone())
    );
    assert_eq!(
        restarted_events(&h, &tenant, &failed.id).await[0].details["Fork"],
        json!(fork.id.0)
    );

    let again = engine
        .restart(&tenant, &failed.id, request, None, "ops")
        .await
        .expect("asked again");
    assert!(again.already, "the same token: done already");
    assert_eq!(again.run.id, fork.id, "no second fork");
}

/// A restart whose journal before the point does not replay on the code now serving
/// is refused, naming where, and changes nothing.
pub async fn a_restart_is_refused_where_the_code_before_the_point_changed(h: Harness) {
    let tenant = TenantId(format!("conformance-{}", uuid::Uuid::new_v4()));
    let effects = Arc::new(Effects::default());
    let engine = engine(&h, three_steps(effects.clone(), false));
    let failed = failed_run(&h, &engine, &tenant).await;
    let changed = self::engine(&h, three_steps(effects.clone(), true));
    let refused = changed
        .restart(&tenant, &failed.id, RestartRequest::default(), None, "ops")
        .await
        .expect_err("refused");
    match refused {
        EngineError::Diverged(d) => assert_eq!(d.position, Position::from("fetch_issue_v2#0")),
        other => panic!("expected a divergence, got {other:?}"),
    }
    let after = run(&h, &tenant, &failed.id).await;
    assert_eq!(
        (after.status, after.version),
        (failed.status, failed.version)
    );
    assert!(restarted_events(&h, &tenant, &failed.id).await.is_empty());
}

/// A restart from before a tool call that succeeded does not make the call again (the
/// same call takes its recorded outcome), unless the restart asks to repeat it.
pub async fn a_restart_before_a_succeeded_tool_call_does_not_repeat_it(h: Harness) {
    let tenant = TenantId(format!("conformance-{}", uuid::Uuid::new_v4()));
    let effects = Arc::new(Effects::default());
    effects.fixed.store(true, Ordering::SeqCst);
    let engine = engine(&h, three_steps(effects.clone(), false));
    let started = engine
        .start(&tenant, "three_steps", json!(null), None)
        .await
        .expect("start");
    engine.run_until_idle(50).await.expect("work the queue");
    assert_eq!(
        run(&h, &tenant, &started.id).await.status,
        RunStatus::Completed
    );
    assert_eq!(effects.counts(), [1, 1, 1]);

    let from_search = RestartRequest {
        from: Some(Position::from("search#0")),
        ..RestartRequest::default()
    };
    let restarted = engine
        .restart(&tenant, &started.id, from_search.clone(), None, "ops")
        .await
        .expect("restart");
    assert_eq!(restarted.superseded, 2);
    engine.run_until_idle(50).await.expect("work the queue");
    let done = run(&h, &tenant, &started.id).await;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(done.output, Some(Payload::Inline(json!("notified"))));
    assert_eq!(
        effects.counts(),
        [1, 2, 1],
        "the step ran again, the call did not"
    );

    let repeat = RestartRequest {
        repeat_tool_calls: true,
        ..from_search
    };
    engine
        .restart(&tenant, &started.id, repeat, None, "ops")
        .await
        .expect("restart repeating");
    engine.run_until_idle(50).await.expect("work the queue");
    assert_eq!(
        run(&h, &tenant, &started.id).await.status,
        RunStatus::Completed
    );
    assert_eq!(
        effects.counts(),
        [1, 3, 2],
        "asked to: the call was made again"
    );
}
