//! Runs in flight across a deploy that changed an operation's shape: a run suspended in
//! `wait_for_callback` by a build from before `wait_for_callback` became a context of its
//! own (its callback was journaled at the operation's own position) parks as
//! non-deterministic under the new build, and what docs/deploys.md tells an operator to
//! do about it works: put the old build back, resume, let it finish.

mod support;

use serde_json::{Value, json};
use siesta::*;
use support::{output, world};

/// The journal shape of `wait_for_callback("approval", …)` before the WaitForCallback
/// context: the callback at `approval#0` itself. (The old build's submitter step, under
/// `approval#0/`, is left out: it does not change where replay stops.)
fn old_build() -> Registry {
    let mut reg = Registry::new();
    reg.register("approve", |ctx: Context, _: Value| async move {
        let cb = ctx.create_callback::<String>("approval").await?;
        Ok(json!(cb.wait().await?))
    });
    reg
}

/// The same workflow on the build with the WaitForCallback context.
fn new_build() -> Registry {
    let mut reg = Registry::new();
    reg.register("approve", |ctx: Context, _: Value| async move {
        let answer: String = ctx
            .wait_for_callback("approval", |_id, _url, _step| async { Ok(()) })
            .await?;
        Ok(json!(answer))
    });
    reg
}

#[tokio::test]
async fn a_run_inside_wait_for_callback_across_the_deploy_parks_and_finishes_on_the_old_build() {
    let w = world(old_build());
    let id = w.start("approve", json!(null)).await;
    w.run_until_idle().await;
    assert_eq!(w.status(&id).await, RunStatus::Waiting);
    let callback = w.callback(&id, "approval").await;

    // The deploy. The webhook is still accepted (the callback is open), and wakes the run.
    w.deploy(new_build());
    w.complete_callback(&callback, "yes").await;
    let parked = w.run(&id).await;
    assert_eq!(parked.status, RunStatus::Parked);
    let error = parked.error.unwrap();
    assert_eq!(error.kind, "NonDeterminism");
    assert!(
        error.message.contains("approval#0"),
        "the message names the position: {}",
        error.message
    );

    // Resuming on the new build parks it again: the journal cannot change.
    w.resume(&id).await;
    assert_eq!(w.status(&id).await, RunStatus::Parked);

    // The operator puts the old build back (for these runs), resumes, and it finishes
    // with the outcome delivered while it was parked.
    w.deploy(old_build());
    w.resume(&id).await;
    let run = w.run(&id).await;
    assert_eq!(run.status, RunStatus::Completed, "{:?}", run.error);
    assert_eq!(output(&run), json!("yes"));
}
