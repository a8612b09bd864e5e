//! What a run removed by its retention leaves: nothing a child still needs (a child's
//! large input is its own, so it outlives a parent removed first), nothing a run
//! started again under its id (an `Idempotency-Key` replayed after the retention)
//! trips over (it starts children of its own, takes only their outcomes, and does not
//! keep the first one's children from going), and nothing a late delivery stores.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

mod support;

use std::time::Duration;

use serde_json::json;
use sha2::{Digest, Sha256};
use siesta::context::child_run_id;
use siesta::ports::artifact_location;
use siesta::retention::{RetentionPolicy, RetentionRules};
use siesta::*;
use siesta_testing::TestEnv;
use support::{output, world};

const HOUR: Duration = Duration::from_secs(3600);
const DAY: Duration = Duration::from_secs(86_400);

/// A parent handing its child a value over the inline limit; the child waits for `go`
/// and answers with the parent's input.
fn registry() -> Registry {
    let mut reg = Registry::new();
    reg.register("parent", |ctx: Context, tag: String| async move {
        let pad = "x".repeat(40 * 1024);
        let answer: String = ctx
            .invoke("child", "child", json!({"tag": tag, "pad": pad}))
            .await?;
        Ok(answer)
    });
    reg.register(
        "child",
        |ctx: Context, input: serde_json::Value| async move {
            ctx.wait_for_event::<serde_json::Value>("go").await?;
            Ok(input["tag"].as_str().unwrap_or_default().to_owned())
        },
    );
    reg
}

/// Remove every finished run an hour past its finish.
async fn reap(w: &TestEnv) {
    let rules = RetentionRules::new(RetentionPolicy::keep_for(Some(HOUR)));
    while w.engine().reap(&rules, 100).await.unwrap().more {}
}

async fn exists(w: &TestEnv, id: &RunId) -> bool {
    w.backend()
        .store
        .get_run(w.tenant(), id)
        .await
        .unwrap()
        .is_some()
}

/// Cancel `parent` (its children go on) and remove it at its retention.
async fn cancel_and_remove(w: &TestEnv, parent: &RunId) {
    w.cancel(parent).await;
    w.advance(2 * HOUR).await;
    reap(w).await;
    assert!(!exists(w, parent).await, "the parent was not removed");
}

/// Start `parent` under `id`, work until idle; the child it started.
async fn parent_with_child(w: &TestEnv, id: &RunId, tag: &str) -> RunId {
    let started = w
        .create("parent", json!(tag), Some(id.clone()))
        .await
        .unwrap();
    assert_eq!(&started, id);
    w.run_until_idle().await;
    let child = child_run_id(&w.run(id).await, &Position::from("child#0"));
    assert_eq!(w.status(&child).await, RunStatus::Waiting);
    child
}

#[tokio::test]
async fn a_childs_large_input_is_stored_under_the_child_and_outlives_its_removed_parent() {
    let w = world(registry());
    let parent = RunId::generate();
    let child = parent_with_child(&w, &parent, "first").await;
    let Payload::Artifact(input) = w.run(&child).await.input else {
        panic!("the child's input is not offloaded");
    };
    assert!(
        input
            .location
            .starts_with(&artifact_location(w.tenant(), &child, "")),
        "the child's input is stored at {}, not under the child",
        input.location
    );

    // A cancelled parent does not cancel its child, and goes at its retention.
    cancel_and_remove(&w, &parent).await;

    // The child, still waiting, is untouched: its input is still there to replay.
    assert_eq!(w.status(&child).await, RunStatus::Waiting);
    w.deliver_event(&child, "go", json!(null)).await;
    assert_eq!(output(&w.run(&child).await), json!("first"));
}

#[tokio::test]
async fn a_run_started_again_under_a_removed_parents_id_has_children_of_its_own() {
    let w = world(registry());
    let parent = RunId::generate();
    let first_child = parent_with_child(&w, &parent, "first").await;
    cancel_and_remove(&w, &parent).await;

    // The same id again (an `Idempotency-Key` replayed after the first run went).
    let second_child = parent_with_child(&w, &parent, "second").await;
    assert_ne!(second_child, first_child, "the new run named the old child");
    assert_eq!(w.status(&parent).await, RunStatus::Waiting);

    // The first parent's child finishes: its outcome comes to the id, not to the run.
    w.deliver_event(&first_child, "go", json!(null)).await;
    assert_eq!(output(&w.run(&first_child).await), json!("first"));
    assert_eq!(
        w.status(&parent).await,
        RunStatus::Waiting,
        "the new run took the old child's outcome"
    );
    assert!(
        w.replay_input(&parent).await.deliveries.is_empty(),
        "the old child's outcome was delivered to the new run"
    );

    // Nor does the new run keep the old child from going at its retention.
    w.advance(2 * HOUR).await;
    reap(&w).await;
    assert!(
        !exists(&w, &first_child).await,
        "the old child was kept for a parent that is not its own"
    );
    assert!(exists(&w, &parent).await && exists(&w, &second_child).await);

    w.deliver_event(&second_child, "go", json!(null)).await;
    assert_eq!(output(&w.run(&parent).await), json!("second"));
}

#[tokio::test]
async fn a_large_message_to_a_run_that_is_not_there_is_refused_before_it_is_stored() {
    let w = world(registry());
    let gone = RunId::generate();
    let value = json!({"pad": "m".repeat(40 * 1024)});
    let refused = w
        .engine()
        .inject_message(w.tenant(), &gone, value.clone(), None)
        .await;
    assert!(matches!(refused, Err(EngineError::NotFound)), "{refused:?}");
    let bytes = serde_json::to_vec(&value).unwrap();
    let sha256 = hex::encode(Sha256::digest(&bytes));
    let never_stored = ArtifactRef {
        location: artifact_location(w.tenant(), &gone, &sha256),
        sha256,
        size: bytes.len() as u64,
        media_type: "application/json".to_owned(),
    };
    assert!(
        w.backend().artifacts.get(&never_stored).await.is_err(),
        "the message was stored under a run that is not there"
    );
}

#[tokio::test]
async fn a_finished_child_of_a_parent_kept_a_year_is_not_looked_at_daily_and_goes_after_it() {
    let w = world(registry());
    let rules = RetentionRules::new(
        RetentionPolicy::keep_for(Some(HOUR)).with_workflow("parent", Some(365 * DAY)),
    );
    w.engine().rearm_reaping(&rules).await.unwrap();
    let parent = RunId::generate();
    let child = parent_with_child(&w, &parent, "kept").await;
    w.deliver_event(&child, "go", json!(null)).await;
    assert_eq!(output(&w.run(&parent).await), json!("kept"));
    let pass = |after: Duration| {
        let w = &w;
        let rules = &rules;
        async move {
            w.clock().advance(after);
            w.engine().reap(rules, 100).await.unwrap()
        }
    };

    // The child's hour passes with its parent there: put back, and not looked at again
    // until the parent's year is up.
    let first = pass(2 * HOUR).await;
    assert_eq!((first.removed.len(), first.put_back), (0, 1), "{first:?}");
    let later = pass(200 * DAY).await;
    assert_eq!((later.removed.len(), later.put_back), (0, 0), "{later:?}");

    // A year on the parent goes, and the child after it.
    let mut removed = pass(170 * DAY).await.removed;
    removed.extend(pass(2 * DAY).await.removed);
    assert_eq!(removed.len(), 2, "{removed:?}");
    assert!(!exists(&w, &parent).await && !exists(&w, &child).await);
}
