//! Leases and fencing: a zombie writes nothing, two engines never both advance a run.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use serde_json::json;
use siesta::ports::{WakeReason, WakeUp};
use siesta::*;
use siesta_testing::LEASE_TTL;
use support::{create, gate, output, started, world};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zombie_holder_with_a_stale_fencing_epoch_writes_nothing() {
    let (g, entered_rx, release_tx) = gate();
    let mut reg = Registry::new();
    reg.register("slow", move |ctx: Context, _: serde_json::Value| {
        let g = g.clone();
        async move {
            let who: String = ctx
                .step("work", move |_| async move {
                    Ok(match g.pass().await {
                        true => "zombie",
                        false => "successor",
                    }
                    .to_owned())
                })
                .await?;
            Ok(who)
        }
    });
    let w = world(reg);
    let id = create(&w, "slow", json!(null)).await;
    let wake = started(&w, &id);
    let zombie = w.engine().clone();
    let zombie_wake = wake.clone();
    let zombie_task = tokio::spawn(async move { zombie.handle_wakeup(&zombie_wake).await });
    entered_rx.await.unwrap();
    let zombie_epoch = w.run(&id).await.epoch;

    // The zombie's lease lapses; another engine takes over and finishes the run.
    w.clock().advance(LEASE_TTL + Duration::from_secs(1));
    let (successor, _) = w.another_engine("engine-b");
    assert_eq!(
        successor.handle_wakeup(&wake).await.unwrap(),
        WakeOutcome::Advanced(RunStatus::Completed)
    );
    let after_successor = w.run(&id).await;
    assert!(after_successor.epoch > zombie_epoch);
    let timeline_len = w.timeline(&id).await.len();

    release_tx.send(()).unwrap();
    let outcome = zombie_task.await.unwrap().unwrap();
    assert!(matches!(outcome, WakeOutcome::Aborted(_)), "{outcome:?}");
    let run = w.run(&id).await;
    assert_eq!(run, after_successor, "the zombie changed nothing");
    assert_eq!(output(&run), json!("successor"));
    assert_eq!(w.timeline(&id).await.len(), timeline_len);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_concurrent_engines_never_both_advance_a_run() {
    for _ in 0..20 {
        let effects = Arc::new(AtomicU32::new(0));
        let mut reg = Registry::new();
        let e = effects.clone();
        reg.register("once", move |ctx: Context, _: serde_json::Value| {
            let e = e.clone();
            async move {
                ctx.step("effect", move |_| async move {
                    e.fetch_add(1, Ordering::SeqCst);
                    tokio::task::yield_now().await;
                    Ok(())
                })
                .await
            }
        });
        let w = world(reg);
        let id = create(&w, "once", json!(null)).await;
        let wake = started(&w, &id);
        let (a, _) = w.another_engine("engine-a");
        let (b, _) = w.another_engine("engine-b");
        let (wa, wb) = (wake.clone(), wake.clone());
        let (ra, rb) = tokio::join!(
            tokio::spawn(async move { a.handle_wakeup(&wa).await }),
            tokio::spawn(async move { b.handle_wakeup(&wb).await })
        );
        let outcomes = [ra.unwrap().unwrap(), rb.unwrap().unwrap()];
        let advanced = outcomes
            .iter()
            .filter(|o| matches!(o, WakeOutcome::Advanced(_)))
            .count();
        assert_eq!(advanced, 1, "{outcomes:?}");
        assert_eq!(effects.load(Ordering::SeqCst), 1);
        assert_eq!(w.run(&id).await.status, RunStatus::Completed);
    }
}

#[tokio::test]
async fn duplicate_wakeups_are_harmless() {
    let effects = Arc::new(AtomicU32::new(0));
    let mut reg = Registry::new();
    let e = effects.clone();
    reg.register("once", move |ctx: Context, _: serde_json::Value| {
        let e = e.clone();
        async move {
            ctx.step("effect", move |_| async move {
                e.fetch_add(1, Ordering::SeqCst);
                Ok(())
            })
            .await
        }
    });
    let w = world(reg);
    let id = create(&w, "once", json!(null)).await;
    let wake = WakeUp {
        tenant: w.tenant().clone(),
        run_id: id.clone(),
        reason: WakeReason::Sweep,
        epoch_hint: 0,
        seq_hint: None,
    };
    for _ in 0..5 {
        w.embedded()
            .backend()
            .queue
            .send(&wake, Duration::ZERO)
            .await
            .unwrap();
    }
    w.run_until_idle().await;
    w.engine().sweep(100).await.unwrap();
    w.run_until_idle().await;
    assert_eq!(effects.load(Ordering::SeqCst), 1);
    assert_eq!(w.run(&id).await.status, RunStatus::Completed);
}

#[tokio::test]
async fn a_crashed_holder_is_recovered_by_the_sweep_after_its_lease_expires() {
    let mut reg = Registry::new();
    reg.register("two", |ctx: Context, _: serde_json::Value| async move {
        ctx.step("a", |_| async { Ok(1) }).await?;
        ctx.step("b", |_| async { Ok(2) }).await
    });
    let w = world(reg);
    let id = create(&w, "two", json!(null)).await;
    w.probe().crash_after(1);
    w.run_until_idle().await;
    assert!(w.probe().is_dead());
    w.restart();
    let run = w.run(&id).await;
    assert_eq!(run.status, RunStatus::Running);
    assert_eq!(
        run.due_at,
        run.lease.as_ref().map(|l| l.expires_at),
        "a leased run falls due when its lease expires"
    );
    w.advance(Duration::from_secs(5)).await;
    assert_eq!(
        w.run(&id).await.status,
        RunStatus::Running,
        "not while the lease is live"
    );
    w.advance(LEASE_TTL).await;
    assert_eq!(output(&w.run(&id).await), json!(2));
}

#[tokio::test]
async fn sweep_reports_expired_leases_due_waits_and_lost_wakeups() {
    let mut reg = Registry::new();
    reg.register("sleepy", |ctx: Context, _: serde_json::Value| async move {
        ctx.sleep(Duration::from_secs(60)).await
    });
    reg.register("two", |ctx: Context, _: serde_json::Value| async move {
        ctx.step("a", |_| async { Ok(1) }).await?;
        ctx.step("b", |_| async { Ok(2) }).await
    });
    let w = world(reg);
    let sleeper = create(&w, "sleepy", json!(null)).await;
    w.run_until_idle().await;
    let crashed = create(&w, "two", json!(null)).await;
    w.probe().crash_after(1);
    w.run_until_idle().await;
    w.restart();
    let lost = create(&w, "sleepy", json!(null)).await;
    // Every wake-up is lost without an error: the messages are taken and dropped (the
    // sweep does not re-send one that still waits in the queue), so the sweep finds
    // them once their re-send margin has passed.
    w.clock()
        .advance(LEASE_TTL + Duration::from_secs(60) + EngineConfig::default().resend_margin);
    for m in w
        .embedded()
        .backend()
        .queue
        .receive(100, Duration::from_secs(3600))
        .await
        .unwrap()
    {
        w.embedded().backend().queue.ack(&m.receipt).await.unwrap();
    }
    let report = w.engine().sweep(100).await.unwrap();
    assert_eq!((report.due, report.woken), (3, 3), "{report:?}");
    assert_eq!(
        (report.expired_leases, report.due_waits, report.lost_wakeups),
        (1, 1, 1),
        "{report:?}"
    );
    w.run_until_idle().await;
    assert_eq!(w.run(&sleeper).await.status, RunStatus::Completed);
    assert_eq!(w.run(&crashed).await.status, RunStatus::Completed);
    assert_eq!(
        w.run(&lost).await.status,
        RunStatus::Waiting,
        "now asleep on its own timer"
    );
    let again = w.engine().sweep(100).await.unwrap();
    assert_eq!(again.due, 0, "idempotent: nothing is due any more");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_with_duplicates_advances_each_run_once_and_reports_no_failures() {
    let effects = Arc::new(AtomicU32::new(0));
    let mut reg = Registry::new();
    let e = effects.clone();
    reg.register("once", move |ctx: Context, _: serde_json::Value| {
        let e = e.clone();
        async move {
            ctx.step("effect", move |_| async move {
                e.fetch_add(1, Ordering::SeqCst);
                Ok(())
            })
            .await
        }
    });
    let w = world(reg);
    let a = create(&w, "once", json!(null)).await;
    let b = create(&w, "once", json!(null)).await;
    let wake = |id: &RunId| started(&w, id);
    let batch = [wake(&a), wake(&b), wake(&a), wake(&RunId::from("missing"))];
    let report = w.engine().handle_batch(&batch, None).await;
    assert!(report.failed().is_empty(), "{report:?}");
    assert_eq!(report.outcomes[3], Ok(WakeOutcome::NotFound));
    assert_eq!(effects.load(Ordering::SeqCst), 2);
    assert_eq!(w.run(&a).await.status, RunStatus::Completed);
    assert_eq!(w.run(&b).await.status, RunStatus::Completed);
}

/// A checkpoint written while the holder's renewal is on its way carries the expiry
/// that renewal asks for: one that carried the expiry before it, landing after the
/// renewal's write, would put back a lease already part run out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_during_a_renewal_carries_the_expiry_the_renewal_asks_for() {
    let w = world(Registry::new());
    let (gate, entered_rx, release_tx) = gate();
    let mut reg = Registry::new();
    reg.register("held", move |ctx: Context, _: serde_json::Value| {
        let gate = gate.clone();
        async move {
            ctx.step("a", move |_| async move {
                gate.pass().await;
                Ok(())
            })
            .await?;
            ctx.step("b", |_| async { Ok(()) }).await
        }
    });
    w.deploy(reg.clone());
    let config = EngineConfig {
        owner: "holder".to_owned(),
        lease_ttl: Duration::from_secs(1),
        ..w.config().clone()
    };
    let (holder, probe) = w.engine_with(reg, config);
    let (renewing, let_renewal_go) = probe.pause_before_next_renewal();
    let id = create(&w, "held", json!(null)).await;
    let wake = started(&w, &id);
    let task = tokio::spawn(async move { holder.handle_wakeup(&wake).await });
    entered_rx.await.unwrap();
    let claimed = w.run(&id).await.lease.expect("held").expires_at;
    // The renewal asks for a later expiry than the claim's, and is held before its
    // write.
    w.clock().advance(Duration::from_secs(5));
    renewing.await.unwrap();
    // Step `a` ends: its checkpoint is written while the renewal is still on its way.
    let (checkpointed, let_checkpoint_go) = probe.pause_after_next_checkpoint();
    release_tx.send(()).unwrap();
    checkpointed.await.unwrap();
    let written = w.run(&id).await.lease.expect("held").expires_at;
    assert_eq!(
        written,
        claimed.plus(Duration::from_secs(5)),
        "the checkpoint carries the expiry the renewal asked for"
    );
    let_checkpoint_go.send(()).unwrap();
    let_renewal_go.send(()).unwrap();
    task.await.unwrap().unwrap();
    assert_eq!(w.run(&id).await.status, RunStatus::Completed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewed_lease_is_not_shortened_by_the_next_checkpoint() {
    let w = world(Registry::new());
    let clock = w.clock().clone();
    let (gate, entered_rx, release_tx) = gate();
    let mut reg = Registry::new();
    reg.register("long", move |ctx: Context, _: serde_json::Value| {
        let (clock, gate) = (clock.clone(), gate.clone());
        async move {
            ctx.step("slow", move |_| async move {
                // Longer than the lease: only renewal keeps it.
                clock.advance(Duration::from_secs(1));
                tokio::time::sleep(Duration::from_millis(400)).await;
                Ok(())
            })
            .await?;
            ctx.step("held", move |_| async move {
                gate.pass().await;
                Ok(())
            })
            .await
        }
    });
    w.deploy(reg.clone());
    let config = EngineConfig {
        owner: "holder".to_owned(),
        lease_ttl: Duration::from_millis(300),
        ..w.config().clone()
    };
    let (holder, _) = w.engine_with(reg, config);
    let id = create(&w, "long", json!(null)).await;
    let wake = started(&w, &id);
    let task = tokio::spawn(async move { holder.handle_wakeup(&wake).await });
    entered_rx.await.unwrap();
    let run = w.run(&id).await;
    assert!(
        run.is_leased(w.clock().now()),
        "the checkpoint after `slow` kept the renewed lease: {:?} at {:?}",
        run.lease,
        w.clock().now()
    );
    let (other, _) = w.another_engine("intruder");
    let intruder = WakeUp {
        tenant: w.tenant().clone(),
        run_id: id.clone(),
        reason: WakeReason::Sweep,
        epoch_hint: 0,
        seq_hint: None,
    };
    assert_eq!(
        other.handle_wakeup(&intruder).await.unwrap(),
        WakeOutcome::Busy
    );
    release_tx.send(()).unwrap();
    assert_eq!(
        task.await.unwrap().unwrap(),
        WakeOutcome::Advanced(RunStatus::Completed)
    );
}

/// A run of `patient` (it waits on the event `go`) whose first wake-up is being
/// handled, held right after its suspension is written (`applied` heard); meanwhile `go`
/// is delivered and the delivery's wake-up handled beside it — folded into it
/// (`engine/turns.rs`), it must be `Folded`. `release` lets the first handler go on.
struct Folded {
    w: siesta_testing::TestEnv,
    id: RunId,
    first: tokio::task::JoinHandle<Result<WakeOutcome, EngineError>>,
    release: tokio::sync::oneshot::Sender<()>,
}

async fn fold_a_delivery_into_a_handling(deadline_in: Option<Duration>) -> Folded {
    let mut reg = Registry::new();
    reg.register("patient", |ctx: Context, _: serde_json::Value| async move {
        ctx.wait_for_event::<serde_json::Value>("go").await
    });
    let w = world(reg);
    let id = create(&w, "patient", json!(null)).await;
    let wake = |reason| WakeUp {
        tenant: w.tenant().clone(),
        run_id: id.clone(),
        reason,
        epoch_hint: 0,
        seq_hint: None,
    };
    let engine = w.engine();
    let deadline = deadline_in.map(|d| w.now().plus(d));
    let (applied, release) = w.probe().pause_after_next_checkpoint();
    let first = tokio::spawn({
        let (engine, started) = (engine.clone(), wake(WakeReason::Started));
        async move { engine.handle_wakeup_until(&started, deadline).await }
    });
    applied.await.unwrap();
    assert_eq!(
        w.run(&id).await.status,
        RunStatus::Waiting,
        "the handler's last write: the run waits on `go`"
    );
    engine
        .deliver_event(w.tenant(), &id, "go", json!(7), None)
        .await
        .unwrap();
    assert_eq!(
        engine
            .handle_wakeup(&wake(WakeReason::Delivery))
            .await
            .unwrap(),
        WakeOutcome::Folded,
        "the delivery's wake-up is folded into the handling under way"
    );
    Folded {
        w,
        id,
        first,
        release,
    }
}

/// A wake-up of a run this process is handling is folded into that handling, and the
/// handler handles the run once more when done: a delivery that lands after the
/// handler's last write is taken by that same handler, and its wake-up starts no second
/// invocation beside it (without the turns, it did: `Advanced(Completed)`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wake_up_of_a_run_being_handled_is_folded_and_the_handler_takes_what_arrived_meanwhile() {
    let f = fold_a_delivery_into_a_handling(None).await;
    f.release.send(()).unwrap();
    assert_eq!(
        f.first.await.unwrap().unwrap(),
        WakeOutcome::Advanced(RunStatus::Completed),
        "the handler took the delivery in a pass of its own"
    );
    assert_eq!(output(&f.w.run(&f.id).await), json!(7));
}

/// Past the deadline (a Lambda's remaining time), a handler does not make the pass a
/// folded wake-up asks for: it sends the run a wake-up of its own, which the next
/// handling takes, and reports what its own pass did.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_its_deadline_a_handler_sends_the_folded_wake_ups_on() {
    let f = fold_a_delivery_into_a_handling(Some(Duration::from_secs(60))).await;
    f.w.clock().advance(Duration::from_secs(120));
    f.release.send(()).unwrap();
    assert_eq!(
        f.first.await.unwrap().unwrap(),
        WakeOutcome::Advanced(RunStatus::Waiting),
        "its own pass, as it went"
    );
    assert_eq!(
        f.w.run(&f.id).await.status,
        RunStatus::Waiting,
        "not advanced past the deadline"
    );
    // The delivery's own wake-up was folded and acknowledged; the one the handler sent
    // is what the queue holds now. (The world's queue worker hands each out once.)
    let sent =
        f.w.backend()
            .queue
            .receive(10, Duration::from_secs(60))
            .await
            .unwrap();
    assert!(
        sent.iter()
            .any(|m| m.wake.run_id == f.id && m.wake.reason == WakeReason::Continue),
        "{sent:?}"
    );
    f.w.engine().handle_wakeup(&sent[0].wake).await.unwrap();
    assert_eq!(output(&f.w.run(&f.id).await), json!(7));
}
