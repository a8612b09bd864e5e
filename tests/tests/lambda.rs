//! The four Lambda functions' handlers, driven with events in the exact shapes AWS sends
//! (kept as files in `fixtures/`), against the emulators with resources made from
//! `infra/template.yaml`: real SQS messages are received from the emulator's queue and
//! wrapped into SQS events, as the event source mapping does.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use base64::Engine as _;
use lambda_http::{Body, Response};
use serde_json::{Value, json};
use siesta::{Engine, Registry};
use siesta_api::signature::{Scheme, Secret, sign};
use siesta_lambda::Settings;

mod support;
use support::{fixture, http_event};

const SECRET: &str = "whsec_cHNwLXNlY3JldA==";
const ROTATED: &str = "whsec_cm90YXRlZC1wc3Atc2VjcmV0";

fn json_of(response: Response<Body>) -> (u16, Value) {
    let status = response.status().as_u16();
    let body = match response.body() {
        Body::Text(t) => serde_json::from_str(t).unwrap(),
        Body::Binary(b) => serde_json::from_slice(b).unwrap(),
        _ => Value::Null,
    };
    (status, body)
}

/// A webhook from the `psp` source signed with `secret` (Standard Webhooks), as API
/// Gateway delivers it (base64 body), answered by the webhook function.
async fn signed_webhook(
    webhook: &siesta_webhook_fn::Webhook,
    secret: &str,
    delivery_id: &str,
    body: &Value,
) -> (u16, Value) {
    let body = serde_json::to_vec(body).unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let secret = Secret::parse(Scheme::StandardWebhooks, secret).unwrap();
    let headers = sign(Scheme::StandardWebhooks, &secret, delivery_id, now, &body);
    let header = |name: &str| {
        headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
            .unwrap()
    };
    let encoded = base64::engine::general_purpose::STANDARD.encode(&body);
    let req = http_event(
        "http-api-v2-webhook-source.json",
        &[
            ("WEBHOOK_ID", &header("webhook-id")),
            ("WEBHOOK_TIMESTAMP", &header("webhook-timestamp")),
            ("WEBHOOK_SIGNATURE", &header("webhook-signature")),
            ("BODY_BASE64", &encoded),
        ],
    );
    json_of(webhook.handle(req).await)
}

/// The functions of one deployment over a fresh queue pair.
struct Stack {
    engine: Engine,
    start: siesta_start::Start,
    webhook: siesta_webhook_fn::Webhook,
    settings: Settings,
    sqs: aws_sdk_sqs::Client,
    tenant: String,
}

impl Stack {
    /// What the engine does when the send that follows a write fails: it clears the
    /// run's `resend_after`, so the next sweep sends the wake-up again. The tests drop
    /// the sent message by hand to stand for that lost send; a loss nobody saw (no
    /// failed send) waits out the resend margin instead (the sweep tests cover it).
    async fn send_failed(&self, tenant: &str, run_id: &str) {
        let tenant = siesta::TenantId::from(tenant);
        let run_id = siesta::RunId::from(run_id);
        let run = self.engine.get_run(&tenant, &run_id).await.unwrap();
        let due_at = run.due_at.expect("a run whose wake-up was lost is due");
        self.engine
            .backend()
            .store
            .set_resend_after(&tenant, &run_id, due_at, None)
            .await
            .unwrap();
    }
}

async fn stack(registry: Registry, lease_ttl: Duration) -> Option<Stack> {
    // A table of its own: the sweep reads the global due index, and must not wake the
    // runs of tests running beside this one.
    let env = siesta_aws::testing::emulators()
        .await?
        .with_own_table()
        .await;
    let settings = Settings {
        resources: env.names(5).await,
        tenant_claim: "tenant".into(),
        callback_base_url: "https://a1b2c3d4e5.execute-api.us-east-1.amazonaws.com".into(),
        lease_ttl,
        safety_margin: Duration::from_secs(2),
        retention: siesta::RetentionPolicy::keep_for(Some(Duration::from_secs(86_400))),
        reap_page: 100,
        sweep_page: 100,
        webhook_sources: format!(
            r#"[{{"name": "psp", "scheme": "standard-webhooks", "secrets": ["{SECRET}"], "callback": "/callback_id"}}]"#
        ),
        webhook_sources_parameter: None,
        build_id: "lambda-test@1".into(),
        quotas: siesta::Quotas::default(),
        quotas_parameter: None,
        limits: siesta::LimitOverrides::default(),
        disabled_schedules: Default::default(),
    };
    let engine = settings.engine(&env.sdk, registry).await;
    let webhook =
        siesta_webhook_fn::Webhook::new(engine.clone(), settings.clone(), env.sdk.clone())
            .await
            .expect("webhook sources");
    Some(Stack {
        start: siesta_start::Start::new(engine.clone(), "tenant"),
        webhook,
        engine,
        sqs: aws_sdk_sqs::Client::new(&env.sdk),
        settings,
        // Webhook sources deliver to the tenant `default`.
        tenant: "default".into(),
    })
}

impl Stack {
    async fn api(&self, fixture_name: &str, run_id: &str) -> (u16, Value) {
        let req = http_event(
            fixture_name,
            &[("TENANT", &self.tenant), ("RUN_ID", run_id)],
        );
        json_of(self.start.handle(req).await)
    }

    async fn signed_webhook(&self, delivery_id: &str, body: &Value) -> (u16, Value) {
        signed_webhook(&self.webhook, SECRET, delivery_id, body).await
    }

    /// Receive what is on the queue now, as the event source mapping does, as one SQS
    /// event built on the fixture's record.
    async fn sqs_event(&self) -> SqsEvent {
        let out = self
            .sqs
            .receive_message()
            .queue_url(&self.settings.resources.queue_url)
            .max_number_of_messages(10)
            .wait_time_seconds(1)
            .visibility_timeout(30)
            .send()
            .await
            .unwrap();
        let template: Value = serde_json::from_str(&fixture("sqs-batch.json")).unwrap();
        let records: Vec<Value> = out
            .messages()
            .iter()
            .map(|m| {
                let mut r = template["Records"][0].clone();
                r["messageId"] = json!(m.message_id().unwrap());
                r["receiptHandle"] = json!(m.receipt_handle().unwrap());
                r["body"] = json!(m.body().unwrap());
                r
            })
            .collect();
        serde_json::from_value(json!({ "Records": records })).unwrap()
    }

    /// Invoke the step function on `event`, then delete the messages it did not report
    /// failed, as the event source mapping does.
    async fn step(&self, event: SqsEvent) -> SqsBatchResponse {
        let deadline = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64
            + 60_000;
        let receipts: Vec<(String, String)> = event
            .records
            .iter()
            .map(|r| {
                (
                    r.message_id.clone().unwrap(),
                    r.receipt_handle.clone().unwrap(),
                )
            })
            .collect();
        let response =
            siesta_step::handle(&self.engine, event, deadline, self.settings.safety_margin).await;
        for (id, receipt) in receipts {
            if !response
                .batch_item_failures
                .iter()
                .any(|f| f.item_identifier == id)
            {
                let _ = self
                    .sqs
                    .delete_message()
                    .queue_url(&self.settings.resources.queue_url)
                    .receipt_handle(receipt)
                    .send()
                    .await;
            }
        }
        response
    }

    /// Step through the queue until the run reaches `status`.
    async fn step_until(&self, run_id: &str, status: &str) -> Value {
        for _ in 0..40 {
            let event = self.sqs_event().await;
            if !event.records.is_empty() {
                let response = self.step(event).await;
                assert!(response.batch_item_failures.is_empty(), "{response:?}");
            }
            let (_, run) = self.api("http-api-v2-get-run.json", run_id).await;
            if run["status"] == status {
                return run;
            }
        }
        panic!("run {run_id} never reached {status}")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_order_started_over_http_pauses_a_signed_webhook_and_sqs_complete_it_and_duplicates_change_nothing()
 {
    let Some(s) = stack(siesta_workflows::registry(), Duration::from_secs(30)).await else {
        return;
    };
    let (status, run) = s.api("http-api-v2-start-order.json", "").await;
    assert_eq!(status, 201, "{run}");
    let run_id = run["id"].as_str().unwrap().to_owned();
    let (status, again) = s.api("http-api-v2-start-order.json", "").await;
    assert_eq!(
        (status, again["id"].as_str()),
        (201, Some(run_id.as_str())),
        "Idempotency-Key replay"
    );

    let waiting = s.step_until(&run_id, "waiting").await;
    let callback_id = waiting["waits"][0]["callback_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let paid =
        json!({"callback_id": callback_id, "status": "COMPLETED", "transaction_id": "txn_lambda"});
    let (status, ack) = s.signed_webhook("psp-1", &paid).await;
    assert_eq!((status, &ack["duplicate"]), (200, &json!(false)), "{ack}");
    let (status, ack) = s.signed_webhook("psp-1", &paid).await;
    assert_eq!(
        (status, &ack["duplicate"]),
        (200, &json!(true)),
        "the retry: {ack}"
    );

    // The webhook's wake-up arrives twice in one batch (SQS is at-least-once).
    let mut event = s.sqs_event().await;
    assert!(!event.records.is_empty(), "the webhook sent a wake-up");
    let duplicate = event.records[0].clone();
    event.records.push(duplicate);
    let response = s.step(event).await;
    assert!(response.batch_item_failures.is_empty(), "{response:?}");
    let done = s.step_until(&run_id, "completed").await;
    assert_eq!(done["output"]["transaction_id"], "txn_lambda", "{done}");

    // A late duplicate of the wake-up, delivered again: nothing changes.
    let wake = json!({"tenant": s.tenant, "run_id": run_id, "reason": "delivery"});
    let mut event = s.sqs_event().await;
    let template: Value = serde_json::from_str(&fixture("sqs-batch.json")).unwrap();
    let mut record = template["Records"][0].clone();
    record["messageId"] = json!("late-duplicate");
    record["body"] = json!(wake.to_string());
    event.records.push(serde_json::from_value(record).unwrap());
    let response = s.step(event).await;
    assert!(response.batch_item_failures.is_empty(), "{response:?}");
    let (_, after) = s.api("http-api-v2-get-run.json", &run_id).await;
    assert_eq!(
        after["version"], done["version"],
        "duplicates changed nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_without_the_tenant_claim_is_401() {
    let Some(s) = stack(siesta_workflows::registry(), Duration::from_secs(30)).await else {
        return;
    };
    let (status, body) = json_of(
        s.start
            .handle(http_event("http-api-v2-no-tenant.json", &[]))
            .await,
    );
    assert_eq!(status, 401, "{body}");
    assert_eq!(body["error"]["code"], "unauthorized", "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partial_batch_failure_reports_only_the_failed_message() {
    let Some(s) = stack(siesta_workflows::registry(), Duration::from_secs(30)).await else {
        return;
    };
    let (status, run) = s.api("http-api-v2-start-order.json", "").await;
    assert_eq!(status, 201);
    let mut event = s.sqs_event().await;
    assert_eq!(event.records.len(), 1, "the start's wake-up");
    let template: Value = serde_json::from_str(&fixture("sqs-batch.json")).unwrap();
    let mut poison = template["Records"][0].clone();
    poison["messageId"] = json!("poison-1");
    poison["body"] = json!("not a wake-up");
    event.records.push(serde_json::from_value(poison).unwrap());
    let response = s.step(event).await;
    let failed: Vec<&str> = response
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.as_str())
        .collect();
    assert_eq!(failed, ["poison-1"], "only the bad message is redelivered");
    let (_, after) = s
        .api("http-api-v2-get-run.json", run["id"].as_str().unwrap())
        .await;
    assert_eq!(
        after["status"], "waiting",
        "the good one was handled: {after}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_invocation_killed_mid_run_is_recovered_by_the_sweep_after_its_lease_expires() {
    let first = Arc::new(AtomicBool::new(true));
    let mut registry = siesta_workflows::registry();
    let f = first.clone();
    registry.register("slow", move |ctx: siesta::Context, _: Value| {
        let f = f.clone();
        async move {
            ctx.step("work", move |_| async move {
                if f.swap(false, Ordering::SeqCst) {
                    // The first invocation is killed in here.
                    tokio::time::sleep(Duration::from_secs(30)).await;
                }
                Ok("done".to_owned())
            })
            .await
        }
    });
    let Some(s) = stack(registry, Duration::from_millis(1500)).await else {
        return;
    };
    let tenant = siesta::TenantId::from(s.tenant.as_str());
    let run = s
        .engine
        .start(&tenant, "slow", json!(null), None)
        .await
        .unwrap();
    let event = s.sqs_event().await;
    assert_eq!(event.records.len(), 1);
    let engine = s.engine.clone();
    let invocation = tokio::spawn(async move {
        siesta_step::handle(&engine, event, u64::MAX / 2, Duration::from_secs(2)).await
    });
    while first.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    invocation.abort();
    let _ = invocation.await;
    let held = s.engine.get_run(&tenant, &run.id).await.unwrap();
    assert_eq!(
        held.status,
        siesta::RunStatus::Running,
        "killed while holding the lease"
    );

    // Before the lease expires the sweep leaves it alone; after, it wakes it.
    let scheduled: Value = serde_json::from_str(&fixture("eventbridge-scheduled.json")).unwrap();
    let counts = siesta_sweep::handle(&s.engine, &scheduled, 100)
        .await
        .unwrap();
    assert_eq!(counts["expired_leases"], 0, "{counts}");
    tokio::time::sleep(Duration::from_millis(1800)).await;
    let counts = siesta_sweep::handle(&s.engine, &scheduled, 100)
        .await
        .unwrap();
    assert_eq!(counts["expired_leases"], 1, "{counts}");
    let done = s.step_until(run.id.as_str(), "completed").await;
    assert_eq!(done["output"], "done", "{done}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_sources_come_from_an_ssm_secure_string_and_a_rotated_secret_takes_effect_at_the_next_refresh()
 {
    let Some(env) = siesta_aws::testing::emulators().await else {
        return;
    };
    if std::env::var_os("AWS_ENDPOINT_URL_SSM").is_none() {
        // Not AWS's real SSM beside the emulators' tables and queues.
        assert!(
            !siesta_aws::testing::required(),
            "SIESTA_AWS_TESTS=required but AWS_ENDPOINT_URL_SSM is not set (scripts/emulators env exports it)"
        );
        eprintln!(
            "skipped: AWS_ENDPOINT_URL_SSM is not set; `eval \"$(scripts/emulators env)\"` sets it"
        );
        return;
    }
    let parameter = format!(
        "/siesta/test/{}/webhook-sources",
        uuid::Uuid::new_v4().simple()
    );
    let ssm = aws_sdk_ssm::Client::new(&env.sdk);
    let sources_with = |secret: &str| {
        format!(
            r#"[{{"name": "psp", "scheme": "standard-webhooks", "secrets": ["{secret}"], "callback": "/callback_id"}}]"#
        )
    };
    let put = ssm
        .put_parameter()
        .name(&parameter)
        .r#type(aws_sdk_ssm::types::ParameterType::SecureString)
        .value(sources_with(SECRET))
        .send()
        .await;
    if let Err(e) = put {
        let e = aws_sdk_ssm::error::DisplayErrorContext(e).to_string();
        // A LocalStack started before it served SSM (scripts/emulators starts it with
        // SERVICES=s3,sqs,ssm and exports AWS_ENDPOINT_URL_SSM).
        if e.contains("not enabled") && !siesta_aws::testing::required() {
            eprintln!(
                "skipped: the emulator does not serve SSM; restart it with `scripts/emulators stop && scripts/emulators start` ({})",
                e.lines()
                    .next()
                    .unwrap_or_default()
                    .chars()
                    .take(160)
                    .collect::<String>()
            );
            return;
        }
        panic!("put the parameter: {e}");
    }
    let settings = Settings {
        resources: env.names(5).await,
        tenant_claim: "tenant".into(),
        callback_base_url: "https://a1b2c3d4e5.execute-api.us-east-1.amazonaws.com".into(),
        lease_ttl: Duration::from_secs(30),
        safety_margin: Duration::from_secs(2),
        retention: siesta::RetentionPolicy::keep_for(Some(Duration::from_secs(86_400))),
        reap_page: 100,
        sweep_page: 100,
        webhook_sources: String::new(),
        webhook_sources_parameter: Some(parameter.clone()),
        build_id: "lambda-test@1".into(),
        quotas: siesta::Quotas::default(),
        quotas_parameter: None,
        limits: siesta::LimitOverrides::default(),
        disabled_schedules: Default::default(),
    };
    let sources = settings
        .webhook_sources(&env.sdk)
        .await
        .expect("read from SSM");
    assert_eq!(sources.len(), 1);
    assert_eq!(sources[0].name(), "psp");

    let missing = Settings {
        webhook_sources_parameter: Some("/siesta/test/missing".into()),
        ..settings.clone()
    };
    let err = missing.webhook_sources(&env.sdk).await.unwrap_err();
    assert!(err.to_string().contains("/siesta/test/missing"), "{err}");

    // Quotas come from a parameter the same way (SIESTA_QUOTAS_PARAMETER).
    let quotas_parameter = format!("/siesta/test/{}/quotas", uuid::Uuid::new_v4().simple());
    ssm.put_parameter()
        .name(&quotas_parameter)
        .r#type(aws_sdk_ssm::types::ParameterType::String)
        .value(r#"{"default": {"max_unfinished_runs": 3}, "tenants": {"acme": {"max_input_bytes": 10}}}"#)
        .send()
        .await
        .expect("put the quotas parameter");
    let mut with_quotas = Settings {
        quotas_parameter: Some(quotas_parameter),
        ..settings.clone()
    };
    with_quotas
        .load_quotas(&env.sdk)
        .await
        .expect("quotas from SSM");
    let acme = with_quotas
        .quotas
        .for_tenant(&siesta::TenantId::from("acme"));
    assert_eq!(
        (acme.max_unfinished_runs, acme.max_input_bytes),
        (Some(3), Some(10))
    );

    // The function reads the parameter once, then again once the cache is a second old.
    let engine = settings
        .engine(&env.sdk, siesta_workflows::registry())
        .await;
    let webhook = siesta_webhook_fn::Webhook::new(engine, settings, env.sdk.clone())
        .await
        .expect("sources from SSM")
        .with_refresh(Duration::from_secs(1));
    // A verified delivery for no known callback is 404; a bad signature 401.
    let unknown = json!({"callback_id": "cb_unknown", "status": "COMPLETED"});
    let (status, body) = signed_webhook(&webhook, SECRET, "d-1", &unknown).await;
    assert_eq!(status, 404, "verified with the secret from SSM: {body}");
    let (status, body) = signed_webhook(&webhook, ROTATED, "d-2", &unknown).await;
    assert_eq!(status, 401, "not yet the rotated secret: {body}");

    ssm.put_parameter()
        .name(&parameter)
        .r#type(aws_sdk_ssm::types::ParameterType::SecureString)
        .value(sources_with(ROTATED))
        .overwrite(true)
        .send()
        .await
        .expect("rotate the secret");
    let (status, _) = signed_webhook(&webhook, ROTATED, "d-3", &unknown).await;
    assert_eq!(status, 401, "cached until the refresh");
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let (status, body) = signed_webhook(&webhook, ROTATED, "d-4", &unknown).await;
    assert_eq!(
        status, 404,
        "refreshed: the rotated secret verifies: {body}"
    );
    let (status, _) = signed_webhook(&webhook, SECRET, "d-5", &unknown).await;
    assert_eq!(status, 401, "the old secret no longer does");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn near_its_deadline_the_step_function_checkpoints_and_continues_in_a_new_invocation() {
    let mut registry = siesta_workflows::registry();
    registry.register("long", |ctx: siesta::Context, _: Value| async move {
        let mut done = Vec::new();
        for i in 0..6 {
            let name = format!("part-{i}");
            let part: u32 = ctx
                .step(&name, move |_| async move {
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    Ok(i)
                })
                .await?;
            done.push(part);
        }
        Ok(done)
    });
    let Some(s) = stack(registry, Duration::from_secs(30)).await else {
        return;
    };
    let tenant = siesta::TenantId::from(s.tenant.as_str());
    let run = s
        .engine
        .start(&tenant, "long", json!(null), None)
        .await
        .unwrap();
    // The invocation has 2 s left and a 2 s safety margin: it works for half of what is
    // left (1 s, about three 300 ms steps), then hands over.
    let event = s.sqs_event().await;
    assert_eq!(event.records.len(), 1);
    let deadline = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
        + 2_000;
    let started = std::time::Instant::now();
    let response = siesta_step::handle(&s.engine, event, deadline, Duration::from_secs(2)).await;
    assert!(response.batch_item_failures.is_empty(), "{response:?}");
    assert!(
        started.elapsed() < Duration::from_millis(1_900),
        "stopped before the deadline: {:?}",
        started.elapsed()
    );
    let (_, paused) = s.api("http-api-v2-get-run.json", run.id.as_str()).await;
    assert_ne!(paused["status"], "completed", "{paused}");

    let next = s.sqs_event().await;
    let bodies: Vec<Value> = next
        .records
        .iter()
        .map(|r| serde_json::from_str(r.body.as_deref().unwrap()).unwrap())
        .collect();
    assert!(
        bodies.iter().any(|b| b["reason"] == "continue"),
        "its own continuation: {bodies:?}"
    );
    let response = s.step(next).await;
    assert!(response.batch_item_failures.is_empty(), "{response:?}");
    let done = s.step_until(run.id.as_str(), "completed").await;
    assert_eq!(done["output"], json!([0, 1, 2, 3, 4, 5]), "{done}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_invocation_wakes_each_due_run_once() {
    let Some(s) = stack(siesta_workflows::registry(), Duration::from_secs(30)).await else {
        return;
    };
    let tenant = siesta::TenantId::from(s.tenant.as_str());
    let mut runs = Vec::new();
    for _ in 0..3 {
        let run = s
            .engine
            .start(
                &tenant,
                "order",
                json!({"item": "Lamp", "amount": 20}),
                None,
            )
            .await
            .unwrap();
        runs.push(run.id.to_string());
    }
    // Their start wake-ups are lost: the runs are due, for the sweep to find.
    let lost = s.sqs_event().await;
    assert_eq!(lost.records.len(), 3);
    for r in &lost.records {
        s.sqs
            .delete_message()
            .queue_url(&s.settings.resources.queue_url)
            .receipt_handle(r.receipt_handle.clone().unwrap())
            .send()
            .await
            .unwrap();
    }
    for run in &runs {
        s.send_failed(&s.tenant, run).await;
    }
    let scheduled: Value = serde_json::from_str(&fixture("eventbridge-scheduled.json")).unwrap();
    // Two invocations with pages of 2: the first wakes two, the second (once those
    // were handled) the third; none twice.
    let first = siesta_sweep::handle(&s.engine, &scheduled, 2)
        .await
        .unwrap();
    assert_eq!(
        (&first["woken"], &first["backlog"]),
        (&json!(2), &json!(true)),
        "{first}"
    );
    let event = s.sqs_event().await;
    let mut woken = wake_ids(&event);
    assert_eq!(woken.len(), 2, "{woken:?}");
    let response = s.step(event).await;
    assert!(response.batch_item_failures.is_empty(), "{response:?}");
    // Their next wake-ups (the order moves on) are not the sweep's.
    let _ = s.step(s.sqs_event().await).await;
    let second = siesta_sweep::handle(&s.engine, &scheduled, 2)
        .await
        .unwrap();
    assert_eq!(
        (&second["woken"], &second["backlog"]),
        (&json!(1), &json!(false)),
        "{second}"
    );
    woken.extend(wake_ids(&s.sqs_event().await));
    woken.sort();
    runs.sort();
    assert_eq!(woken, runs, "each due run woken once");
}

fn wake_ids(event: &SqsEvent) -> Vec<String> {
    event
        .records
        .iter()
        .map(|r| {
            let w: Value = serde_json::from_str(r.body.as_deref().unwrap()).unwrap();
            w["run_id"].as_str().unwrap().to_owned()
        })
        .collect()
}

/// The Lambda Runtime API, as far as a function uses it: `next` hands out the events the
/// test queued (holding the request until there is one), `response` and `error` hand
/// back what the function answered.
mod runtime_api {
    use std::sync::Arc;

    use axum::Router;
    use axum::extract::{Path, State};
    use axum::http::{HeaderMap, HeaderValue, StatusCode};
    use axum::routing::{get, post};
    use serde_json::Value;
    use tokio::sync::{Mutex, mpsc};

    #[derive(Clone)]
    struct Stub {
        events: Arc<Mutex<mpsc::UnboundedReceiver<(String, Value)>>>,
        answers: mpsc::UnboundedSender<(String, Result<Value, Value>)>,
    }

    /// One function's Runtime API on a free port.
    pub(crate) struct RuntimeApi {
        pub(crate) addr: std::net::SocketAddr,
        events: mpsc::UnboundedSender<(String, Value)>,
        answers: mpsc::UnboundedReceiver<(String, Result<Value, Value>)>,
        invocations: u32,
    }

    impl RuntimeApi {
        pub(crate) async fn start() -> RuntimeApi {
            let (events, queued) = mpsc::unbounded_channel();
            let (answered, answers) = mpsc::unbounded_channel();
            let stub = Stub {
                events: Arc::new(Mutex::new(queued)),
                answers: answered,
            };
            let app = Router::new()
                .route("/2018-06-01/runtime/invocation/next", get(next))
                .route(
                    "/2018-06-01/runtime/invocation/{id}/response",
                    post(response),
                )
                .route("/2018-06-01/runtime/invocation/{id}/error", post(error))
                .with_state(stub);
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            tokio::spawn(async move { axum::serve(listener, app).await });
            RuntimeApi {
                addr,
                events,
                answers,
                invocations: 0,
            }
        }

        /// Invoke the function with `event`; what it answered (`Err`: what it reported
        /// as the invocation's error).
        pub(crate) async fn invoke(&mut self, event: Value) -> Result<Value, Value> {
            self.invocations += 1;
            let id = format!("request-{}", self.invocations);
            self.events.send((id.clone(), event)).unwrap();
            let (answered, answer) =
                tokio::time::timeout(std::time::Duration::from_secs(60), self.answers.recv())
                    .await
                    .expect("the function answered within a minute")
                    .expect("the stub is running");
            assert_eq!(answered, id, "answers come in order");
            answer
        }
    }

    async fn next(State(stub): State<Stub>) -> (HeaderMap, String) {
        let (id, event) = stub
            .events
            .lock()
            .await
            .recv()
            .await
            .expect("the test is running");
        let deadline = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis()
            + 60_000;
        let mut headers = HeaderMap::new();
        let value = |s: String| HeaderValue::from_str(&s).unwrap();
        headers.insert("lambda-runtime-aws-request-id", value(id));
        headers.insert("lambda-runtime-deadline-ms", value(deadline.to_string()));
        headers.insert(
            "lambda-runtime-invoked-function-arn",
            value("arn:aws:lambda:us-east-1:123456789012:function:e2e".into()),
        );
        headers.insert("content-type", value("application/json".into()));
        (headers, event.to_string())
    }

    async fn response(
        State(stub): State<Stub>,
        Path(id): Path<String>,
        body: String,
    ) -> StatusCode {
        let answer = serde_json::from_str(&body).unwrap_or(Value::String(body));
        let _ = stub.answers.send((id, Ok(answer)));
        StatusCode::ACCEPTED
    }

    async fn error(State(stub): State<Stub>, Path(id): Path<String>, body: String) -> StatusCode {
        let answer = serde_json::from_str(&body).unwrap_or(Value::String(body));
        let _ = stub.answers.send((id, Err(answer)));
        StatusCode::ACCEPTED
    }
}

/// The `siesta` binary (the examples app) this workspace built: beside this test's
/// `deps/` directory. `cargo test --workspace` builds it (the CLI's own tests run it);
/// when a narrower command did not, it is built here.
fn siesta_binary() -> std::path::PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().and_then(|deps| deps.parent()).unwrap();
    let binary = profile_dir.join(format!("siesta{}", std::env::consts::EXE_SUFFIX));
    if !binary.is_file() {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let built = std::process::Command::new(cargo)
            .args(["build", "--offline", "-p", "siesta-cli", "--bin", "siesta"])
            .env("CARGO_TARGET_DIR", profile_dir.parent().unwrap())
            .status()
            .expect("run cargo");
        assert!(built.success(), "building the siesta binary");
    }
    binary
}

/// Kills a function's process when the test ends, however it ends.
struct Function(std::process::Child);

impl Drop for Function {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The `siesta` binary started as a Lambda function would start it — `bootstrap`, no
/// arguments, the role in `SIESTA_ROLE` — on `api`, over `settings`' resources.
fn function(role: &str, api: &runtime_api::RuntimeApi, settings: &Settings) -> Function {
    let child = std::process::Command::new(siesta_binary())
        .env("SIESTA_ROLE", role)
        .env("AWS_LAMBDA_RUNTIME_API", api.addr.to_string())
        .env("AWS_LAMBDA_FUNCTION_NAME", format!("e2e-{role}"))
        .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "256")
        .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
        .env(
            "AWS_LAMBDA_LOG_GROUP_NAME",
            format!("/aws/lambda/e2e-{role}"),
        )
        .env("AWS_LAMBDA_LOG_STREAM_NAME", "e2e")
        .env("SIESTA_TABLE", &settings.resources.table)
        .env("SIESTA_BUCKET", &settings.resources.bucket)
        .env("SIESTA_QUEUE_URL", &settings.resources.queue_url)
        .env("SIESTA_DLQ_URL", &settings.resources.dead_letter_queue_url)
        .env("SIESTA_CALLBACK_BASE_URL", &settings.callback_base_url)
        .env("SIESTA_WEBHOOK_SOURCES", &settings.webhook_sources)
        .env("SIESTA_SAFETY_MARGIN_MS", "2000")
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("start the siesta binary");
    Function(child)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_binary_serves_the_four_roles_an_order_runs_through_all_of_them() {
    let Some(s) = stack(siesta_workflows::registry(), Duration::from_secs(30)).await else {
        return;
    };
    let mut apis = Vec::new();
    for _ in 0..4 {
        apis.push(runtime_api::RuntimeApi::start().await);
    }
    let [mut start_api, mut step_api, mut webhook_api, mut sweep_api] =
        <[_; 4]>::try_from(apis).ok().unwrap();
    let _start = function("start", &start_api, &s.settings);
    let _step = function("step", &step_api, &s.settings);
    let _webhook = function("webhook", &webhook_api, &s.settings);
    let _sweep = function("sweep", &sweep_api, &s.settings);
    let fixture_json = |name: &str, replacements: &[(&str, &str)]| -> Value {
        let mut text = fixture(name);
        for (from, to) in replacements {
            text = text.replace(from, to);
        }
        serde_json::from_str(&text).unwrap()
    };
    let body = |response: &Value| -> Value {
        serde_json::from_str(response["body"].as_str().unwrap_or("null")).unwrap()
    };

    // start: POST /runs through API Gateway's event.
    let started = start_api
        .invoke(fixture_json(
            "http-api-v2-start-order.json",
            &[("TENANT", &s.tenant)],
        ))
        .await
        .expect("the start function answered");
    assert_eq!(started["statusCode"], 201, "{started}");
    let run_id = body(&started)["id"].as_str().unwrap().to_owned();

    // step: the start's wake-up, as the event source mapping hands it over.
    let mut stepped = 0;
    let waiting = loop {
        let event = s.sqs_event().await;
        if !event.records.is_empty() {
            let answer = step_api
                .invoke(serde_json::to_value(&event).unwrap())
                .await
                .expect("the step function answered");
            assert_eq!(answer["batchItemFailures"], json!([]), "{answer}");
            for r in &event.records {
                let _ = s
                    .sqs
                    .delete_message()
                    .queue_url(&s.settings.resources.queue_url)
                    .receipt_handle(r.receipt_handle.clone().unwrap())
                    .send()
                    .await;
            }
            stepped += 1;
        }
        let (_, run) = s.api("http-api-v2-get-run.json", &run_id).await;
        if run["status"] == "waiting" {
            break run;
        }
        assert!(stepped < 20, "the run never waited: {run}");
    };

    // webhook: the payment provider's signed callback.
    let callback_id = waiting["waits"][0]["callback_id"].as_str().unwrap();
    let paid = serde_json::to_vec(
        &json!({"callback_id": callback_id, "status": "COMPLETED", "transaction_id": "txn_roles"}),
    )
    .unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let secret = Secret::parse(Scheme::StandardWebhooks, SECRET).unwrap();
    let headers = sign(Scheme::StandardWebhooks, &secret, "psp-roles", now, &paid);
    let header = |name: &str| {
        headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
            .unwrap()
    };
    let encoded = base64::engine::general_purpose::STANDARD.encode(&paid);
    let acked = webhook_api
        .invoke(fixture_json(
            "http-api-v2-webhook-source.json",
            &[
                ("WEBHOOK_ID", &header("webhook-id")),
                ("WEBHOOK_TIMESTAMP", &header("webhook-timestamp")),
                ("WEBHOOK_SIGNATURE", &header("webhook-signature")),
                ("BODY_BASE64", &encoded),
            ],
        ))
        .await
        .expect("the webhook function answered");
    assert_eq!(acked["statusCode"], 200, "{acked}");

    // The delivery's wake-up is lost; the sweep finds the run due and wakes it again.
    let lost = s.sqs_event().await;
    for r in &lost.records {
        s.sqs
            .delete_message()
            .queue_url(&s.settings.resources.queue_url)
            .receipt_handle(r.receipt_handle.clone().unwrap())
            .send()
            .await
            .unwrap();
    }
    s.send_failed(&s.tenant, &run_id).await;
    let swept = sweep_api
        .invoke(fixture_json("eventbridge-scheduled.json", &[]))
        .await
        .expect("the sweep function answered");
    assert_eq!(swept["woken"], 1, "{swept}");

    let event = s.sqs_event().await;
    assert_eq!(event.records.len(), 1, "the sweep's wake-up");
    let answer = step_api
        .invoke(serde_json::to_value(&event).unwrap())
        .await
        .expect("the step function answered");
    assert_eq!(answer["batchItemFailures"], json!([]), "{answer}");
    let (_, done) = s.api("http-api-v2-get-run.json", &run_id).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["output"]["transaction_id"], "txn_roles", "{done}");
}

/// `GET /builds` through the start function as `siesta_start::run` builds it: a build is
/// deployed while the build registry holds a step version serving it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_builds_on_lambda_says_which_builds_the_registry_still_serves() {
    let mut registry = Registry::new();
    registry.register("approval", |ctx: siesta::Context, _: Value| async move {
        let ok: bool = ctx.wait_for_event("approval").await?;
        Ok(ok)
    });
    let Some(s) = stack(registry.clone(), Duration::from_secs(30)).await else {
        return;
    };
    let sdk = siesta_aws::sdk_config_from_env().await;
    let tenant = siesta::TenantId::from(s.tenant.as_str());
    for build in ["shop@1.0.0+registered", "shop@0.9.0+pruned"] {
        let mut settings = s.settings.clone();
        settings.build_id = build.into();
        let engine = settings.engine(&sdk, registry.clone()).await;
        engine
            .start(&tenant, "approval", json!(null), None)
            .await
            .unwrap();
    }
    let builds =
        siesta_aws::builds::BuildRegistry::from_sdk(&sdk, s.settings.resources.table.clone());
    builds
        .register("shop@1.0.0+registered", "shop-step:4", 1)
        .await
        .unwrap();
    let start = siesta_start::Start::with_deployments(
        s.engine.clone(),
        "tenant",
        siesta_lambda::http::RegistryDeployments(builds),
    );
    let req = http_event(
        "http-api-v2-get-run.json",
        &[
            ("TENANT", &s.tenant),
            ("/runs/RUN_ID", "/builds"),
            ("GET /runs/{id}", "GET /builds"),
        ],
    );
    let (status, body) = json_of(start.handle(req).await);
    assert_eq!(status, 200, "{body}");
    let deployed = |build: &str| {
        body["builds"]
            .as_array()
            .unwrap()
            .iter()
            .find(|b| b["build_id"] == build)
            .unwrap_or_else(|| panic!("{build} in {body}"))["deployed"]
            .clone()
    };
    assert_eq!(deployed("lambda-test@1"), true, "the serving build");
    assert_eq!(deployed("shop@1.0.0+registered"), true);
    assert_eq!(deployed("shop@0.9.0+pruned"), false);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_invocation_reaps_finished_runs_past_their_retention_and_no_waiting_one() {
    let Some(s) = stack(Registry::new(), Duration::from_secs(30)).await else {
        return;
    };
    let mut registry = Registry::new();
    registry.register("quick", |ctx: siesta::Context, _: Value| async move {
        ctx.step("one", |_| async move { Ok(1u32) }).await
    });
    registry.register("waits", |ctx: siesta::Context, _: Value| async move {
        let v: Value = ctx.wait_for_event("never").await?;
        Ok(v)
    });
    // A retention of one second, so that a run finished now is past it in a moment.
    let mut settings = s.settings.clone();
    settings.retention = siesta::RetentionPolicy::keep_for(Some(Duration::from_secs(1)));
    let sdk = siesta_aws::testing::emulators()
        .await
        .expect("emulators")
        .sdk;
    let engine = settings.engine(&sdk, registry).await;
    let tenant = siesta::TenantId::from("reaped");
    let done = engine
        .start(&tenant, "quick", json!(null), None)
        .await
        .unwrap();
    let waiting = engine
        .start(&tenant, "waits", json!(null), None)
        .await
        .unwrap();
    engine.run_until_idle(20).await.unwrap();
    assert_eq!(
        engine.get_run(&tenant, &done.id).await.unwrap().status,
        siesta::RunStatus::Completed
    );
    // The wall clock has to pass the retention: the sweep reads no other.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let reaper = settings
        .aws_backend(&sdk)
        .reaper(settings.retention_rules());
    let far = siesta_lambda::now_ms() + 20_000;
    let counts = siesta_sweep::reap(&reaper, 100, far).await.unwrap();
    assert_eq!(counts["removed"], json!(1), "{counts}");
    assert_eq!(counts["backlog"], json!(false), "{counts}");
    assert!(matches!(
        engine.get_run(&tenant, &done.id).await,
        Err(siesta::EngineError::NotFound)
    ));
    assert_eq!(
        engine.get_run(&tenant, &waiting.id).await.unwrap().status,
        siesta::RunStatus::Waiting
    );
}
