//! Step limits: at most N attempts of steps naming a key in flight at once. An attempt
//! over the limit waits durably (its run suspends) and runs when a slot is handed to
//! it; an attempt that crashed gives its slot back when its run's lease ends.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::json;
use siesta::*;
use support::{Gate, create, gate, world};

/// `limited`: one step limited to one attempt in flight on the key `model`; the
/// first attempt to run is held at `gate` until the test lets it go.
fn registry(gate: Gate, attempts: Arc<AtomicUsize>) -> Registry {
    let mut reg = Registry::new();
    reg.register("limited", move |ctx: Context, n: u32| {
        let (gate, attempts) = (gate.clone(), attempts.clone());
        async move {
            let out: u32 = ctx
                .step("call", move |_| async move {
                    attempts.fetch_add(1, Ordering::SeqCst);
                    gate.pass().await;
                    Ok(n * 10)
                })
                .limit("model", 1)
                .await?;
            Ok(out)
        }
    });
    reg
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attempt_over_its_limit_waits_suspended_and_runs_when_the_holder_ends() {
    let (gate, entered, release) = gate();
    let attempts = Arc::new(AtomicUsize::new(0));
    let w = world(registry(gate, attempts.clone()));
    let first = create(&w, "limited", json!(1)).await;
    let engine = w.engine();
    let holder = tokio::spawn(async move { engine.run_until_idle(10).await });
    entered.await.unwrap();

    let second = w.start("limited", json!(2)).await;
    let waiting = w.run(&second).await;
    assert_eq!(waiting.status, RunStatus::Waiting, "suspended, not running");
    let delayed = w
        .timeline(&second)
        .await
        .into_iter()
        .find(|e| e.event_type == EventType::StepDelayed)
        .expect("the wait is in its timeline");
    assert_eq!(delayed.details["Reason"], json!("limit"));
    assert_eq!(delayed.details["Key"], json!("model"));
    assert_eq!(delayed.details["Place"], json!(1), "next in line");
    assert_eq!(
        attempts.load(Ordering::SeqCst),
        1,
        "its attempt has not run"
    );
    assert!(waiting.lease.is_none(), "no invocation holds it");

    release.send(()).unwrap();
    holder.await.unwrap().unwrap();
    w.run_until_idle().await;
    assert_eq!(w.status(&first).await, RunStatus::Completed);
    let done = w.run(&second).await;
    assert_eq!(done.status, RunStatus::Completed, "handed the slot, it ran");
    assert_eq!(support::output(&done), json!(20));
    assert_eq!(attempts.load(Ordering::SeqCst), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_that_crashed_gives_its_slot_back_when_its_lease_ends() {
    let (gate, entered, _never_released) = gate();
    let attempts = Arc::new(AtomicUsize::new(0));
    let w = world(registry(gate, attempts.clone()));
    let crashed = create(&w, "limited", json!(1)).await;
    let engine = w.engine();
    let holder = tokio::spawn(async move { engine.run_until_idle(10).await });
    entered.await.unwrap();
    // The invocation dies mid-attempt: its slot is not given back.
    holder.abort();
    let _ = holder.await;

    let second = w.start("limited", json!(2)).await;
    assert_eq!(w.status(&second).await, RunStatus::Waiting);
    // Past the crashed run's lease, its slot lapses: the sweep wakes it and the
    // waiting run looks again, and both go on (one at a time).
    w.advance(w.config().lease_ttl + Duration::from_secs(1))
        .await;
    assert_eq!(w.status(&second).await, RunStatus::Completed);
    assert_eq!(w.status(&crashed).await, RunStatus::Completed);
    assert_eq!(
        attempts.load(Ordering::SeqCst),
        3,
        "the crashed attempt ran again"
    );
}
