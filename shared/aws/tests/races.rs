//! Leases and fencing through DynamoDB: two step handlers racing on one run — one
//! advances it, the other backs off without writing — and a zombie whose lease was
//! taken over writes nothing.
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
use siesta::ports::{Backend, WakeReason, WakeUp};
use siesta::*;
use tokio::sync::oneshot;

const LEASE_TTL: Duration = Duration::from_secs(30);
/// How long a test waits for something that should happen at once.
const PATIENCE: Duration = Duration::from_secs(60);

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
        seq_hint: None,
    }
}

fn fresh_tenant() -> TenantId {
    TenantId(format!("races-{}", uuid::Uuid::new_v4().simple()))
}

/// A step body's gate: the first attempt to enter says so and blocks until released;
/// any later attempt passes at once (and is counted, so a second execution shows).
type Gate = Arc<std::sync::Mutex<Option<(oneshot::Sender<()>, oneshot::Receiver<()>)>>>;

fn gate() -> (Gate, oneshot::Receiver<()>, oneshot::Sender<()>) {
    let (entered_tx, entered_rx) = oneshot::channel();
    let (release_tx, release_rx) = oneshot::channel();
    (
        Arc::new(std::sync::Mutex::new(Some((entered_tx, release_rx)))),
        entered_rx,
        release_tx,
    )
}

/// Passes the gate: blocks the first caller until released. Returns whether this caller
/// was the first.
async fn pass(gate: &Gate) -> bool {
    let first = gate.lock().unwrap().take();
    match first {
        Some((entered, release)) => {
            let _ = entered.send(());
            let _ = release.await;
            true
        }
        None => false,
    }
}

/// One step whose body blocks at `gate`, counted in `effects`.
fn gated_registry(gate: Option<Gate>, effects: Arc<AtomicU32>) -> Registry {
    let mut reg = Registry::new();
    reg.register("once", move |ctx: Context, _: serde_json::Value| {
        let (gate, effects) = (gate.clone(), effects.clone());
        async move {
            ctx.step("effect", move |_| async move {
                effects.fetch_add(1, Ordering::SeqCst);
                if let Some(gate) = &gate {
                    pass(gate).await;
                }
                Ok(())
            })
            .await
        }
    });
    reg
}

fn event_types(timeline: &[TimelineEvent]) -> Vec<EventType> {
    timeline.iter().map(|e| e.event_type).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_step_handlers_racing_on_one_run_one_advances_the_other_backs_off() {
    let Some(env) = support::emulators().await else {
        return;
    };
    let backend = env.backend(5).await.backend();
    let clock = Arc::new(ManualClock::default());

    // What one writer alone leaves behind: the baseline each race must match.
    let solo_effects = Arc::new(AtomicU32::new(0));
    let solo = engine(
        &backend,
        &clock,
        gated_registry(None, solo_effects.clone()),
        "solo",
    );
    let tenant = fresh_tenant();
    let run = solo
        .start(&tenant, "once", json!(null), None)
        .await
        .unwrap();
    assert_eq!(
        solo.handle_wakeup(&wake(&tenant, &run)).await.unwrap(),
        WakeOutcome::Advanced(RunStatus::Completed)
    );
    let solo_run = backend
        .store
        .get_run(&tenant, &run.id)
        .await
        .unwrap()
        .unwrap();
    let solo_timeline = event_types(
        &backend
            .store
            .timeline(&tenant, &run.id, 0, 1000)
            .await
            .unwrap(),
    );
    assert_eq!(solo_effects.load(Ordering::SeqCst), 1);
    assert_eq!(solo_run.epoch, FencingEpoch(1));

    for round in 0..10 {
        let effects = Arc::new(AtomicU32::new(0));
        let (gate, entered, release) = gate();
        let reg = gated_registry(Some(gate), effects.clone());
        let a = engine(&backend, &clock, reg.clone(), "step-a");
        let b = engine(&backend, &clock, reg, "step-b");
        let tenant = fresh_tenant();
        let run = a.start(&tenant, "once", json!(null), None).await.unwrap();
        let (wa, wb) = (wake(&tenant, &run), wake(&tenant, &run));
        let ta = tokio::spawn(async move { a.handle_wakeup(&wa).await });
        let tb = tokio::spawn(async move { b.handle_wakeup(&wb).await });

        // One handler is now inside the step, holding the lease; the other must give up
        // while it is still held.
        tokio::time::timeout(PATIENCE, entered)
            .await
            .unwrap_or_else(|_| panic!("round {round}: no handler entered the step"))
            .unwrap();
        let waited = tokio::time::timeout(PATIENCE, async {
            while !ta.is_finished() && !tb.is_finished() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await;
        assert!(
            waited.is_ok(),
            "round {round}: the other handler did not back off while the step was held"
        );
        let (loser, winner, winner_owner) = if ta.is_finished() {
            (ta, tb, "step-b#")
        } else {
            (tb, ta, "step-a#")
        };
        let backed_off = loser.await.unwrap().unwrap();
        assert_eq!(backed_off, WakeOutcome::Busy, "round {round}");
        let held = backend
            .store
            .get_run(&tenant, &run.id)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(held.status, RunStatus::Running, "round {round}: {held:?}");
        assert_eq!(held.epoch, FencingEpoch(1), "round {round}: one claim");
        let holder = held.lease.as_ref().expect("leased").owner.clone();
        assert!(
            holder.starts_with(winner_owner),
            "round {round}: the lease is the winner's: {holder}"
        );

        release.send(()).unwrap();
        let advanced = tokio::time::timeout(PATIENCE, winner)
            .await
            .expect("the winner finishes")
            .unwrap()
            .unwrap();
        assert_eq!(
            advanced,
            WakeOutcome::Advanced(RunStatus::Completed),
            "round {round}"
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
        assert_eq!(after.epoch, FencingEpoch(1), "round {round}: one claim");
        assert_eq!(
            after.version, solo_run.version,
            "round {round}: as many writes as one writer alone makes"
        );
        let timeline = backend
            .store
            .timeline(&tenant, &run.id, 0, 1000)
            .await
            .unwrap();
        assert_eq!(
            event_types(&timeline),
            solo_timeline,
            "round {round}: one writer's timeline"
        );
        assert_eq!(after.timeline_seq, timeline.len() as u64);
        let history = backend
            .store
            .load_replay_input(&tenant, &run.id)
            .await
            .unwrap();
        assert_eq!(
            history.journal.len(),
            1,
            "round {round}: one step journaled"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn zombie_with_a_stale_fencing_epoch_writes_nothing_on_dynamodb() {
    let Some(env) = support::emulators().await else {
        return;
    };
    let backend = env.backend(5).await.backend();
    let clock = Arc::new(ManualClock::default());
    let (gate, entered, release) = gate();
    let mut reg = Registry::new();
    reg.register("slow", move |ctx: Context, _: serde_json::Value| {
        let gate = gate.clone();
        async move {
            let who: String = ctx
                .step("work", move |_| async move {
                    Ok(if pass(&gate).await {
                        "zombie".to_owned()
                    } else {
                        "successor".to_owned()
                    })
                })
                .await?;
            ctx.step("after", |_| async { Ok(()) }).await?;
            Ok(who)
        }
    });
    let zombie = engine(&backend, &clock, reg.clone(), "zombie");
    let successor = engine(&backend, &clock, reg, "successor");
    let tenant = fresh_tenant();
    let run = zombie
        .start(&tenant, "slow", json!(null), None)
        .await
        .unwrap();
    let w = wake(&tenant, &run);
    let zw = w.clone();
    let zombie_task = tokio::spawn(async move { zombie.handle_wakeup(&zw).await });
    tokio::time::timeout(PATIENCE, entered)
        .await
        .expect("the zombie enters the step")
        .unwrap();
    let held = backend
        .store
        .get_run(&tenant, &run.id)
        .await
        .unwrap()
        .unwrap();
    let zombie_epoch = held.epoch;
    assert!(held.lease.as_ref().unwrap().owner.starts_with("zombie#"));

    // The zombie's lease lapses (its renewals, on real time, cannot keep up with the
    // clock's jump); the successor takes over and finishes.
    clock.advance(LEASE_TTL + Duration::from_secs(1));
    let outcome = successor.handle_wakeup(&w).await.unwrap();
    assert_eq!(outcome, WakeOutcome::Advanced(RunStatus::Completed));
    let finished = backend
        .store
        .get_run(&tenant, &run.id)
        .await
        .unwrap()
        .unwrap();
    assert!(finished.epoch > zombie_epoch, "{finished:?}");
    let timeline = backend
        .store
        .timeline(&tenant, &run.id, 0, 1000)
        .await
        .unwrap();
    let history = backend
        .store
        .load_replay_input(&tenant, &run.id)
        .await
        .unwrap();
    assert_eq!(history.journal.len(), 2, "both steps journaled");

    release.send(()).unwrap();
    let outcome = tokio::time::timeout(PATIENCE, zombie_task)
        .await
        .expect("the zombie stops")
        .unwrap()
        .unwrap();
    assert!(matches!(outcome, WakeOutcome::Aborted(_)), "{outcome:?}");

    let after = backend
        .store
        .get_run(&tenant, &run.id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(after.version, finished.version, "no write to the run");
    assert_eq!(after, finished, "the zombie changed nothing");
    assert_eq!(after.output, Some(Payload::Inline(json!("successor"))));
    assert_eq!(
        backend
            .store
            .timeline(&tenant, &run.id, 0, 1000)
            .await
            .unwrap(),
        timeline,
        "no timeline event"
    );
    let history_after = backend
        .store
        .load_replay_input(&tenant, &run.id)
        .await
        .unwrap();
    assert_eq!(history_after.journal, history.journal, "no journal entry");
    assert_eq!(history_after.deliveries.len(), history.deliveries.len());
}
