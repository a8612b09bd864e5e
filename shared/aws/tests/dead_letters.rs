//! Dead letters and crash loops on SQS and DynamoDB (the emulators): a dead letter is
//! handled once and parks its run only while it is the run's latest wake-up (one its
//! progress has overtaken parks nothing), so a resumed run stays resumed; every dead letter is seen however many there are; a
//! worker killed while it holds a batch costs a receive only to what it was handling;
//! every wake-up carries its tenant as `MessageGroupId` (the fair-queue key).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use siesta::ports::*;
use siesta::*;

/// Receptions before a wake-up is dead-lettered, in these tests.
const MAX_RECEIVES: u32 = 2;
/// The lease, hence the worker's visibility timeout: short, so a killed worker's
/// wake-up comes back soon.
const LEASE_TTL: Duration = Duration::from_secs(2);

fn registry() -> Registry {
    let mut reg = Registry::new();
    reg.register("nap", |ctx: Context, _: serde_json::Value| async move {
        ctx.sleep(Duration::from_secs(3600)).await?;
        Ok("rested")
    });
    reg.register(
        "await_payment",
        |ctx: Context, _: serde_json::Value| async move {
            let payment = ctx
                .create_callback::<serde_json::Value>("payment")
                .timeout(Duration::from_secs(3600))
                .await?;
            payment.wait().await
        },
    );
    reg.register("hang", |ctx: Context, _: serde_json::Value| async move {
        ctx.step("forever", |_| {
            std::future::pending::<Result<(), StepError>>()
        })
        .await?;
        Ok(())
    });
    reg.register("quick", |ctx: Context, _: serde_json::Value| async move {
        ctx.step("work", |_| async { Ok(1) }).await?;
        Ok(2)
    });
    reg
}

fn engine(backend: Backend) -> Engine {
    Engine::new(
        backend,
        Arc::new(SystemClock),
        registry(),
        EngineConfig {
            lease_ttl: LEASE_TTL,
            ..EngineConfig::default()
        },
    )
}

fn fresh_tenant() -> TenantId {
    TenantId(format!("dead-letters-{}", uuid::Uuid::new_v4().simple()))
}

async fn run(engine: &Engine, tenant: &TenantId, id: &RunId) -> Run {
    engine.get_run(tenant, id).await.unwrap()
}

/// Wait until every one of `ids` has completed, polling every 50 ms, or `limit` has
/// passed; whether they did is for the caller to check.
async fn all_completed_within(engine: &Engine, tenant: &TenantId, ids: &[RunId], limit: Duration) {
    let _ = tokio::time::timeout(limit, async {
        loop {
            let mut done = true;
            for id in ids {
                done &= run(engine, tenant, id).await.status == RunStatus::Completed;
            }
            if done {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
}

/// Handle dead letters until at least `handled` have been, or 20 tries 250 ms apart
/// have passed (SQS moves a message to the dead-letter queue a moment after its last
/// receive); what was handled.
async fn handle_dead_letters_until(engine: &Engine, handled: usize) -> DeadLetterReport {
    let mut report = DeadLetterReport::default();
    for _ in 0..20 {
        let more = engine.handle_dead_letters(100).await.unwrap();
        report.handled += more.handled;
        report.parked += more.parked;
        if report.handled >= handled {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    report
}

/// Messages left in the dead-letter queue, visible or hidden: a handled dead letter is
/// deleted, not merely hidden until it comes back.
async fn dead_letters_left(env: &support::Emulators, names: &siesta_aws::ResourceNames) -> u64 {
    use aws_sdk_sqs::types::QueueAttributeName::{
        ApproximateNumberOfMessages, ApproximateNumberOfMessagesNotVisible,
    };
    let attributes = aws_sdk_sqs::Client::new(&env.sdk)
        .get_queue_attributes()
        .queue_url(&names.dead_letter_queue_url)
        .attribute_names(ApproximateNumberOfMessages)
        .attribute_names(ApproximateNumberOfMessagesNotVisible)
        .send()
        .await
        .unwrap()
        .attributes
        .unwrap_or_default();
    [
        ApproximateNumberOfMessages,
        ApproximateNumberOfMessagesNotVisible,
    ]
    .iter()
    .map(|a| attributes.get(a).map_or(0, |n| n.parse::<u64>().unwrap()))
    .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_aws_twenty_five_dead_letters_are_each_handled_once() {
    let Some(env) = support::emulators().await else {
        return;
    };
    let names = env.names(MAX_RECEIVES).await;
    let engine = engine(siesta_aws::AwsBackend::new(&env.sdk, names.clone()).backend());
    let tenant = fresh_tenant();
    let mut ids = Vec::new();
    for _ in 0..25 {
        ids.push(
            engine
                .start(&tenant, "nap", json!(null), None)
                .await
                .unwrap()
                .id,
        );
    }
    siesta_aws::testing::fail_all_until_dead_lettered(&engine.backend().queue, MAX_RECEIVES).await;

    // The dead-letter move may lag a moment on a real queue.
    let report = handle_dead_letters_until(&engine, ids.len()).await;
    assert_eq!((report.handled, report.parked), (25, 25), "{report:?}");
    for id in &ids {
        assert_eq!(run(&engine, &tenant, id).await.status, RunStatus::Parked);
    }
    let again = engine.handle_dead_letters(100).await.unwrap();
    assert_eq!(again.handled, 0, "each once: {again:?}");
    assert_eq!(dead_letters_left(&env, &names).await, 0, "each deleted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_aws_a_resumed_run_stays_resumed_through_sweeps_and_a_webhook_completes_it() {
    let Some(env) = support::emulators().await else {
        return;
    };
    let names = env.names(MAX_RECEIVES).await;
    let engine = engine(siesta_aws::AwsBackend::new(&env.sdk, names.clone()).backend());
    let tenant = fresh_tenant();
    let id = engine
        .start(&tenant, "await_payment", json!(null), None)
        .await
        .unwrap()
        .id;
    siesta_aws::testing::fail_all_until_dead_lettered(&engine.backend().queue, MAX_RECEIVES).await;
    let mut parked = 0;
    for _ in 0..20 {
        parked += engine.handle_dead_letters(100).await.unwrap().parked;
        if parked > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(parked, 1);
    assert_eq!(run(&engine, &tenant, &id).await.status, RunStatus::Parked);

    // The handled dead letter is gone, not hidden until it comes back to park the
    // run again.
    assert_eq!(dead_letters_left(&env, &names).await, 0);

    engine.resume(&tenant, &id, None).await.unwrap();
    engine.run_until_idle(20).await.unwrap();
    for _ in 0..3 {
        let report = engine.handle_dead_letters(100).await.unwrap();
        assert_eq!(report.parked, 0, "{report:?}");
        engine.run_until_idle(20).await.unwrap();
    }
    let waiting = run(&engine, &tenant, &id).await;
    assert_eq!(waiting.status, RunStatus::Waiting, "{:?}", waiting.error);

    // The webhook: the callback completed by its id, as `POST /hooks/{token}` does.
    let callback_id = support::waiting_callback(&*engine.backend().store, &tenant, &id)
        .await
        .expect("the run waits on its callback");
    engine
        .complete_callback(&callback_id, None, Ok(json!({"paid": true})), None)
        .await
        .unwrap();
    for _ in 0..20 {
        engine.run_until_idle(20).await.unwrap();
        if run(&engine, &tenant, &id).await.status.is_finished() {
            break;
        }
    }
    let done = run(&engine, &tenant, &id).await;
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_aws_a_dead_letter_the_runs_progress_has_overtaken_parks_nothing() {
    let Some(env) = support::emulators().await else {
        return;
    };
    let engine = engine(env.backend(MAX_RECEIVES).await.backend());
    let tenant = fresh_tenant();
    let id = engine
        .start(&tenant, "await_payment", json!(null), None)
        .await
        .unwrap()
        .id;
    // The run moves on (here: handled directly) while its start wake-up is received
    // and never acknowledged until SQS gives up on it.
    let wake = WakeUp::new(tenant.clone(), id.clone(), WakeReason::Started);
    engine.handle_wakeup(&wake).await.unwrap();
    let before = run(&engine, &tenant, &id).await;
    assert_eq!(before.status, RunStatus::Waiting, "{:?}", before.error);
    siesta_aws::testing::fail_all_until_dead_lettered(&engine.backend().queue, MAX_RECEIVES).await;

    // The dead-letter move may lag a moment on a real queue.
    let report = handle_dead_letters_until(&engine, 1).await;
    assert_eq!((report.handled, report.parked), (1, 0), "{report:?}");
    assert_eq!(run(&engine, &tenant, &id).await, before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_aws_five_kills_in_a_row_of_a_worker_holding_a_batch_park_no_healthy_run() {
    let Some(env) = support::emulators().await else {
        return;
    };
    let engine = engine(env.backend(5).await.backend());
    let tenant = fresh_tenant();
    let hang = engine
        .start(&tenant, "hang", json!(null), None)
        .await
        .unwrap()
        .id;
    let mut healthy = Vec::new();
    for _ in 0..9 {
        healthy.push(
            engine
                .start(&tenant, "quick", json!(null), None)
                .await
                .unwrap()
                .id,
        );
    }
    for _ in 0..5 {
        let worker = tokio::spawn({
            let engine = engine.clone();
            async move { engine.work_queue_once(10).await }
        });
        // Until the healthy runs it holds have finished (a guard, not a measurement).
        all_completed_within(&engine, &tenant, &healthy, Duration::from_secs(5)).await;
        worker.abort();
        let _ = worker.await;
        // Past the visibility timeout and the lease.
        tokio::time::sleep(LEASE_TTL + Duration::from_millis(500)).await;
    }
    // What is left: healthy runs a receive may have missed are handled now; the
    // hanging run's wake-up, received five times, goes to the dead-letter queue.
    let leftover = tokio::spawn({
        let engine = engine.clone();
        async move { engine.run_until_idle(5).await }
    });
    all_completed_within(&engine, &tenant, &healthy, Duration::from_secs(5)).await;
    leftover.abort();
    let report = handle_dead_letters_until(&engine, 1).await;
    for id in &healthy {
        let r = run(&engine, &tenant, id).await;
        assert_eq!(r.status, RunStatus::Completed, "{:?}", r.error);
    }
    assert!(report.handled <= 1, "only the run at fault: {report:?}");
    let hang_status = run(&engine, &tenant, &hang).await.status;
    assert!(
        matches!(hang_status, RunStatus::Parked | RunStatus::Running),
        "{hang_status}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_aws_every_wake_up_carries_its_tenant_as_message_group_id() {
    let Some(env) = support::emulators().await else {
        return;
    };
    let names = env.names(5).await;
    let backend = siesta_aws::AwsBackend::new(&env.sdk, names.clone()).backend();
    let tenant = fresh_tenant();
    let wake = WakeUp::new(tenant.clone(), RunId::generate(), WakeReason::Started);
    backend.queue.send(&wake, Duration::ZERO).await.unwrap();
    let sqs = aws_sdk_sqs::Client::new(&env.sdk);
    let got = sqs
        .receive_message()
        .queue_url(&names.queue_url)
        .message_system_attribute_names(
            aws_sdk_sqs::types::MessageSystemAttributeName::MessageGroupId,
        )
        .wait_time_seconds(2)
        .send()
        .await
        .unwrap();
    let message = got.messages().first().expect("the wake-up");
    let group = message
        .attributes()
        .and_then(|a| a.get(&aws_sdk_sqs::types::MessageSystemAttributeName::MessageGroupId));
    assert_eq!(group.map(String::as_str), Some(tenant.as_str()));
}
