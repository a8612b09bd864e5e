//! Leases and fencing through DynamoDB: two step handlers racing on one run — one
//! advances it, the other backs off — and a zombie whose lease was taken over writes
//! nothing.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use serde_json::json;
use siesta::ports::{Backend, WakeReason, WakeUp};
use siesta::*;

const LEASE_TTL: Duration = Duration::from_secs(30);

fn engine(backend: &Backend, clock: &Arc<ManualClock>, registry: Registry, owner: &str) -> Engine {
    Engine::new(
        backend.clone(),
        clock.clone(),
        registry,
        EngineConfig {
            owner: owner.into(),
            lease_ttl: LEASE_TTL,
            ..EngineConfig::default()
        },
    )
}

fn wake(tenant: &TenantId, run: &Run) -> WakeUp {
    WakeUp {
        tenant: tenant.clone(),
        run_id: run.id.clone(),
        reason: WakeReason::Started,
        epoch_hint: 0,
    }
}

fn tenant() -> TenantId {
    TenantId(format!("races-{}", uuid::Uuid::new_v4().simple()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_step_handlers_racing_on_one_run_one_advances_the_other_backs_off() {
    let Some(env) = support::emulators().await else {
        return;
    };
    let backend = env.backend(5).await.backend();
    let clock = Arc::new(ManualClock::default());
    for round in 0..10 {
        let effects = Arc::new(AtomicU32::new(0));
        let mut reg = Registry::new();
        let e = effects.clone();
        reg.register("once", move |ctx: Context, _: serde_json::Value| {
            let e = e.clone();
            async move {
                ctx.step("effect", move |_| async move {
                    e.fetch_add(1, Ordering::SeqCst);
                    // Hold the lease a moment, so the other handler meets it.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    Ok(())
                })
                .await
            }
        });
        let a = engine(&backend, &clock, reg.clone(), "step-a");
        let b = engine(&backend, &clock, reg, "step-b");
        let tenant = tenant();
        let run = a.start(&tenant, "once", json!(null), None).await.unwrap();
        let (wa, wb) = (wake(&tenant, &run), wake(&tenant, &run));
        let (ra, rb) = tokio::join!(
            tokio::spawn(async move { a.handle_wakeup(&wa).await }),
            tokio::spawn(async move { b.handle_wakeup(&wb).await })
        );
        let outcomes = [ra.unwrap().unwrap(), rb.unwrap().unwrap()];
        let advanced = outcomes
            .iter()
            .filter(|o| matches!(o, WakeOutcome::Advanced(RunStatus::Completed)))
            .count();
        let backed_off = outcomes
            .iter()
            .filter(|o| matches!(o, WakeOutcome::Busy | WakeOutcome::NothingToDo))
            .count();
        assert_eq!(
            (advanced, backed_off),
            (1, 1),
            "round {round}: {outcomes:?}"
        );
        assert_eq!(
            effects.load(Ordering::SeqCst),
            1,
            "round {round}: the step ran once"
        );
        let after = backend
            .store
            .get_run(&tenant, &run.id)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(after.status, RunStatus::Completed);
        assert_eq!(
            after.epoch,
            FencingEpoch(1),
            "round {round}: one claim succeeded"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_zombie_with_a_stale_fencing_epoch_writes_nothing_on_dynamodb() {
    let Some(env) = support::emulators().await else {
        return;
    };
    let backend = env.backend(5).await.backend();
    let clock = Arc::new(ManualClock::default());
    let (entered_tx, entered_rx) = tokio::sync::oneshot::channel::<()>();
    let (release_tx, release_rx) = tokio::sync::oneshot::channel::<()>();
    let gate = Arc::new(std::sync::Mutex::new(Some((entered_tx, release_rx))));
    let mut reg = Registry::new();
    reg.register("slow", move |ctx: Context, _: serde_json::Value| {
        let g = gate.clone();
        async move {
            let who: String = ctx
                .step("work", move |_| async move {
                    let first = g.lock().unwrap().take();
                    match first {
                        Some((entered, release)) => {
                            let _ = entered.send(());
                            let _ = release.await;
                            Ok("zombie".to_owned())
                        }
                        None => Ok("successor".to_owned()),
                    }
                })
                .await?;
            Ok(who)
        }
    });
    let zombie = engine(&backend, &clock, reg.clone(), "zombie");
    let successor = engine(&backend, &clock, reg, "successor");
    let tenant = tenant();
    let run = zombie
        .start(&tenant, "slow", json!(null), None)
        .await
        .unwrap();
    let w = wake(&tenant, &run);
    let zw = w.clone();
    let zombie_task = tokio::spawn(async move { zombie.handle_wakeup(&zw).await });
    entered_rx.await.unwrap();

    // The zombie's lease lapses (its renewals cannot keep up with a stopped clock's
    // jump); the successor takes over and finishes.
    clock.advance(LEASE_TTL + Duration::from_secs(1));
    let outcome = successor.handle_wakeup(&w).await.unwrap();
    assert_eq!(outcome, WakeOutcome::Advanced(RunStatus::Completed));
    let finished = backend
        .store
        .get_run(&tenant, &run.id)
        .await
        .unwrap()
        .unwrap();
    let timeline = backend
        .store
        .timeline(&tenant, &run.id, 0, 1000)
        .await
        .unwrap();
    let history = backend.store.load_history(&tenant, &run.id).await.unwrap();

    release_tx.send(()).unwrap();
    let outcome = zombie_task.await.unwrap().unwrap();
    assert!(matches!(outcome, WakeOutcome::Aborted(_)), "{outcome:?}");
    let after = backend
        .store
        .get_run(&tenant, &run.id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(after, finished, "the zombie changed nothing");
    assert_eq!(after.output, Some(Payload::Inline(json!("successor"))));
    assert_eq!(
        backend
            .store
            .timeline(&tenant, &run.id, 0, 1000)
            .await
            .unwrap(),
        timeline
    );
    assert_eq!(
        backend
            .store
            .load_history(&tenant, &run.id)
            .await
            .unwrap()
            .journal
            .len(),
        history.journal.len()
    );
}
