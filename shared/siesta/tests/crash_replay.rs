//! Replay after a simulated crash after *each* journal write: the result is the same
//! and every counted side effect happened exactly once.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

mod support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use siesta::*;
use siesta_testing::{LEASE_TTL, TestEnv};
use support::{create, output, world};

/// Side effects, counted; the payment provider dedupes by idempotency key.
#[derive(Default)]
struct Effects {
    create: AtomicU32,
    request: AtomicU32,
    label: AtomicU32,
    notify: AtomicU32,
    charges: Mutex<HashMap<String, u32>>,
}

fn registry(fx: Arc<Effects>) -> Registry {
    let mut reg = Registry::new();
    reg.register("everything", move |ctx: Context, input: serde_json::Value| {
        let fx = fx.clone();
        async move {
            let amount = input["amount"].as_u64().unwrap_or(0);
            let order: String = ctx
                .step("create_order", { let fx = fx.clone(); move |_| async move { fx.create.fetch_add(1, Ordering::SeqCst); Ok("order-1".to_owned()) } })
                .await?;
            let charge_fx = fx.clone();
            let lookup_fx = fx.clone();
            let receipt: String = ctx
                .tool_call("charge", &json!({"order": order, "amount": amount}), move |s| async move {
                    let key = s.idempotency_key().unwrap().to_string();
                    *charge_fx.charges.lock().unwrap().entry(key.clone()).or_insert(0) += 1;
                    Ok(format!("receipt-{}", &key[5..13]))
                })
                .lookup(move |key| async move {
                    let seen = lookup_fx.charges.lock().unwrap().contains_key(key.as_str());
                    Ok(seen.then(|| format!("receipt-{}", &key.as_str()[5..13])))
                })
                .await?;
            let payment = ctx.create_callback::<serde_json::Value>("payment").timeout(Duration::from_secs(3600)).await?;
            let url = payment.url();
            ctx.step("request_payment", { let fx = fx.clone(); move |_| async move { fx.request.fetch_add(1, Ordering::SeqCst); Ok(url.len()) } }).await?;
            let paid = payment.wait().await?;
            ctx.sleep(Duration::from_secs(10)).await?;
            let label: String = ctx
                .run_in_child_context("ship", {
                    let fx = fx.clone();
                    move |child| async move { child.step("label", move |_| async move { fx.label.fetch_add(1, Ordering::SeqCst); Ok("LBL".to_owned()) }).await }
                })
                .await?;
            let notified = ctx
                .map("notify", vec![1u32, 2, 3], {
                    let fx = fx.clone();
                    move |ctx, n, _| {
                        let fx = fx.clone();
                        async move { ctx.step("send", move |_| async move { fx.notify.fetch_add(1, Ordering::SeqCst); Ok(n * 10) }).await }
                    }
                })
                .max_concurrency(1)
                .await?
                .values()?;
            let approval: String = ctx.wait_for_event("approval").timeout(Duration::from_secs(86400)).await?;
            Ok(json!({"order": order, "receipt": receipt, "paid": paid, "label": label, "notified": notified, "approval": approval}))
        }
    });
    reg
}

/// Drive the run to the end: restart after a crash, complete callbacks, pass time.
async fn drive(w: &TestEnv, id: &RunId) -> Run {
    for _ in 0..60 {
        if w.probe().is_dead() {
            w.restart();
            // The dead process's lease must lapse before anyone else may claim.
            w.advance(LEASE_TTL + Duration::from_secs(1)).await;
            continue;
        }
        w.run_until_idle().await;
        if w.probe().is_dead() {
            continue;
        }
        let run = w.run(id).await;
        if run.status.is_finished() || run.status == RunStatus::Parked {
            return run;
        }
        for cb in w.open_callbacks(id).await {
            let _ = w
                .engine()
                .complete_callback(
                    &cb,
                    None,
                    Ok(json!({"status": "COMPLETED"})),
                    Some(DeliveryId(format!("whk-{cb}"))),
                )
                .await;
        }
        if !w.probe().is_dead() {
            w.advance(Duration::from_secs(10)).await;
        }
    }
    panic!("run did not finish")
}

async fn scenario(crash_after: Option<i64>) -> (serde_json::Value, Arc<Effects>, u64) {
    let fx = Arc::new(Effects::default());
    let w = world(registry(fx.clone()));
    // The same run id every time, so the idempotency key (and the receipt) is the same.
    let id = w
        .engine()
        .start(
            w.tenant(),
            "everything",
            json!({"amount": 42}),
            Some(RunId::from("run-crash")),
        )
        .await
        .unwrap()
        .id;
    // The approval arrives before the run is anywhere near its wait point.
    w.engine()
        .deliver_event(
            w.tenant(),
            &id,
            "approval",
            json!("ok"),
            Some(DeliveryId::from("approval-1")),
        )
        .await
        .unwrap();
    if let Some(n) = crash_after {
        w.probe().crash_after(n);
    }
    let run = drive(&w, &id).await;
    assert_eq!(
        run.status,
        RunStatus::Completed,
        "crash after write {crash_after:?}: {:?}",
        run.error
    );
    (
        output(&run),
        fx,
        w.probe().checkpoints.load(Ordering::SeqCst),
    )
}

fn assert_once(fx: &Effects, label: &str) {
    assert_eq!(fx.create.load(Ordering::SeqCst), 1, "{label}: create_order");
    assert_eq!(
        fx.request.load(Ordering::SeqCst),
        1,
        "{label}: request_payment"
    );
    assert_eq!(fx.label.load(Ordering::SeqCst), 1, "{label}: label");
    assert_eq!(
        fx.notify.load(Ordering::SeqCst),
        3,
        "{label}: notify (three items)"
    );
    let charges = fx.charges.lock().unwrap();
    assert_eq!(charges.len(), 1, "{label}: one idempotency key");
    assert_eq!(charges.values().sum::<u32>(), 1, "{label}: charged once");
}

#[tokio::test]
async fn crash_after_each_journal_write_gives_the_same_result_and_side_effects_once() {
    let (expected, fx, writes) = scenario(None).await;
    assert_once(&fx, "no crash");
    assert!(
        writes >= 15,
        "the scenario makes many checkpoints ({writes})"
    );
    for n in 1..=writes as i64 {
        let (output, fx, _) = scenario(Some(n)).await;
        assert_eq!(output, expected, "crash after write {n}");
        assert_once(&fx, &format!("crash after write {n}"));
    }
}

#[tokio::test]
async fn tool_call_found_running_without_a_lookup_is_marked_unknown_and_parks_the_run() {
    let calls = Arc::new(AtomicU32::new(0));
    let mut reg = Registry::new();
    let c = calls.clone();
    reg.register("charge", move |ctx: Context, _: serde_json::Value| {
        let c = c.clone();
        async move {
            ctx.tool_call("charge", &json!({"amount": 5}), move |_| async move {
                c.fetch_add(1, Ordering::SeqCst);
                Ok(())
            })
            .await
        }
    });
    let w = world(reg);
    let id = create(&w, "charge", json!(null)).await;
    // Die right after `running` is recorded, before the outcome is.
    w.probe().crash_after(1);
    w.run_until_idle().await;
    assert!(w.probe().is_dead());
    w.restart();
    w.advance(LEASE_TTL + Duration::from_secs(1)).await;
    let run = w.run(&id).await;
    assert_eq!(run.status, RunStatus::Parked);
    assert_eq!(run.error.as_ref().unwrap().kind, "UnknownSideEffect");
    assert!(run.error.unwrap().message.contains("idem_"));
    assert!(calls.load(Ordering::SeqCst) <= 1, "never blindly repeated");
    let key = w
        .replay_input(&id)
        .await
        .journal
        .iter()
        .find_map(|e| match &e.state {
            EntryState::Unknown { key, .. } => Some(key.clone()),
            _ => None,
        });
    let record = w
        .embedded()
        .backend()
        .store
        .get_tool_call(w.tenant(), &key.unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.status, ToolCallStatus::Unknown);
}

#[tokio::test]
async fn at_most_once_step_is_not_rerun_after_a_crash_but_at_least_once_is() {
    // The process dies after the call but before its result is recorded.
    // At most once: `started` (write 1) precedes the call, the result (write 2) is lost.
    // At least once: nothing precedes the call, the result (write 1) is lost.
    for (at_most_once, lost_write, expected_calls, expected_status) in [
        (true, 2, 1, RunStatus::Failed),
        (false, 1, 2, RunStatus::Completed),
    ] {
        let calls = Arc::new(AtomicU32::new(0));
        let mut reg = Registry::new();
        let c = calls.clone();
        reg.register("once", move |ctx: Context, _: serde_json::Value| {
            let c = c.clone();
            async move {
                let step = ctx
                    .step("send_email", move |_| async move {
                        c.fetch_add(1, Ordering::SeqCst);
                        Ok(())
                    })
                    .retry(RetryStrategy::none());
                if at_most_once {
                    step.at_most_once().await
                } else {
                    step.await
                }
            }
        });
        let w = world(reg);
        let id = create(&w, "once", json!(null)).await;
        w.probe().crash_before(lost_write);
        w.run_until_idle().await;
        assert!(w.probe().is_dead());
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        w.restart();
        w.advance(LEASE_TTL + Duration::from_secs(1)).await;
        let run = w.run(&id).await;
        assert_eq!(
            run.status, expected_status,
            "at_most_once={at_most_once}: {:?}",
            run.error
        );
        assert_eq!(
            calls.load(Ordering::SeqCst),
            expected_calls,
            "at_most_once={at_most_once}"
        );
        if at_most_once {
            assert!(run.error.unwrap().message.contains("interrupted"));
        }
    }
}
