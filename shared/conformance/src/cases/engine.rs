//! The engine on the backend: what only shows when a workflow runs on it.

use std::future::IntoFuture;
use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::json;
use siesta::*;

use crate::Harness;

/// How long the race's timer runs (real time on a backend with the system clock).
const TICK: Duration = Duration::from_secs(1);

fn boxed<T: Send + 'static>(
    f: impl std::future::Future<Output = Result<T, Error>> + Send + 'static,
) -> BoxFuture<'static, Result<T, Error>> {
    Box::pin(f)
}

/// Two rounds of `race(timer, wait_for_event("ping"))`; with `written`, the first
/// round has a third future first that holds the run's writer when the timer falls
/// due, so the timer's and the event's checkpoints are written together.
fn racing() -> Registry {
    let mut reg = Registry::new();
    reg.register("racing", |ctx: Context, written: bool| async move {
        let mut got = Vec::new();
        for i in 0..2u32 {
            let mut futures = Vec::new();
            if written && i == 0 {
                let alarm = ctx.wait("alarm", TICK);
                let step = ctx.step("busy", move |_| async move { Ok(i) });
                let never = ctx.wait_for_event::<String>("never");
                futures.push(boxed(async move {
                    alarm.await?;
                    step.await?;
                    never.await
                }));
            }
            let tick = ctx.sleep(TICK);
            futures.push(boxed(async move {
                tick.await?;
                Ok("tick".to_owned())
            }));
            futures.push(boxed(ctx.wait_for_event::<String>("ping").into_future()));
            got.push(ctx.race("ping or tick", futures).await?);
        }
        Ok(json!(got))
    });
    reg
}

/// A `wait_for_event` that lost a race to a timer takes no delivery (the shape of
/// vercel/workflow#4264): the event sent as the timer falls due goes to the next
/// round's wait in the same wake-up, and the loser's entry still waits, its checkpoint
/// written before the race decided or not.
pub async fn a_wait_a_race_dropped_takes_no_delivery(h: Harness) {
    for written in [false, true] {
        let tenant = TenantId(format!("conformance-{}", uuid::Uuid::new_v4()));
        let config = EngineConfig {
            owner: format!("conformance-{}", uuid::Uuid::new_v4()),
            ..EngineConfig::default()
        };
        let engine = Engine::new(h.backend.clone(), h.clock.clone(), racing(), config);
        let run = engine
            .start(&tenant, "racing", json!(written), None)
            .await
            .expect("start");
        engine.run_until_idle(50).await.expect("work the queue");
        // The event arrives as the timer falls due: the timer wins the first round.
        h.advance(TICK).await;
        engine
            .deliver_event(&tenant, &run.id, "ping", json!("hello"), None)
            .await
            .expect("deliver");
        engine.run_until_idle(50).await.expect("work the queue");
        let finished = h
            .backend
            .store
            .get_run(&tenant, &run.id)
            .await
            .expect("read the run")
            .expect("the run exists");
        assert_eq!(
            (finished.status, finished.error.clone()),
            (RunStatus::Completed, None),
            "written={written}: the next round's wait took the event in the same wake-up"
        );
        assert_eq!(
            finished.output,
            Some(Payload::Inline(json!(["tick", "hello"]))),
            "written={written}"
        );
        let history = h
            .backend
            .store
            .load_replay_input(&tenant, &run.id)
            .await
            .expect("read the history");
        let loser = history
            .journal
            .iter()
            .find(|e| e.position.0 == "ping#0")
            .expect("the first round's wait is journaled");
        assert!(
            matches!(loser.state, EntryState::Waiting(_)) && loser.consumed.is_empty(),
            "written={written}: the dropped wait took nothing: {loser:?}"
        );
    }
}
