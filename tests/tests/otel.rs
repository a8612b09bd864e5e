//! The `order` example's trace on the emulators, through the Lambda roles' handlers: the
//! start function starts it, the step function works its wake-ups (the first
//! invocation's process dies in the middle of its `request_payment` tool call), the
//! sweep wakes it once the dead invocation's lease has run out (the run parks: the
//! call's outcome is unknown), the start function takes the operator's retry of the
//! call, and the webhook function its payment through the callback's URL. One trace,
//! derived from the run; a `durable_execution` span per wake-up under the run's root
//! (the one root of the trace, sent by the invocation that finished the run); a
//! `durable_operation` span per attempt that ran and per wait that ended, each under a
//! wake-up; none again for an operation replayed after the crash; each handler's spans
//! at the collector when it returns (a frozen container sends nothing); no span carries
//! the callback's token. Its own test binary: the subscriber is the process's.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

#[path = "../../shared/lambda/tests/common/mod.rs"]
mod common;

use std::sync::Arc;
use std::time::Duration;

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use base64::Engine as _;
use lambda_http::{Body, Request, Response};
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use serde_json::{Value, json};
use siesta::probe::ProbeStore;
use siesta::telemetry::{root_span_id_for, trace_id_for};
use siesta::{Engine, EngineConfig, RunId, RunStatus, TenantId};
use siesta_lambda::Settings;

mod support;
use support::{fixture, http_event};

const TENANT: &str = "default";

/// The operator's `POST /runs/{id}/operations/{position}/resolve` with `body`, as API
/// Gateway sends it (the start fixture's request, another route).
fn resolve_event(run_id: &str, position: &str, body: &Value) -> Request {
    let mut event: Value =
        serde_json::from_str(&fixture("http-api-v2-start-order.json").replace("TENANT", TENANT))
            .unwrap();
    let path = format!("/runs/{run_id}/operations/{position}/resolve");
    event["routeKey"] = json!("POST /runs/{id}/operations/{position}/resolve");
    event["rawPath"] = json!(path);
    event["requestContext"]["http"]["path"] = json!(path);
    event["requestContext"]["routeKey"] = event["routeKey"].clone();
    event["headers"]
        .as_object_mut()
        .unwrap()
        .retain(|k, _| k != "idempotency-key" && k != "content-length");
    event["body"] = json!(body.to_string());
    lambda_http::request::from_str(&event.to_string()).expect("an HTTP API v2 event")
}

fn json_of(response: Response<Body>) -> (u16, Value) {
    let status = response.status().as_u16();
    let body = match response.body() {
        Body::Text(t) => serde_json::from_str(t).unwrap_or(Value::Null),
        Body::Binary(b) => serde_json::from_slice(b).unwrap_or(Value::Null),
        _ => Value::Null,
    };
    (status, body)
}

/// The functions of one deployment over a table and queue pair of their own.
struct Stack {
    engine: Engine,
    start: siesta_start::Start,
    webhook: siesta_webhook_fn::Webhook,
    settings: Settings,
    sqs: aws_sdk_sqs::Client,
}

async fn stack(lease_ttl: Duration) -> Option<Stack> {
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
        webhook_sources: "[]".into(),
        webhook_sources_parameter: None,
        build_id: "otel-test@1".into(),
        quotas: siesta::Quotas::default(),
        quotas_parameter: None,
        limits: siesta::LimitOverrides::default(),
        disabled_schedules: Default::default(),
    };
    let engine = settings
        .engine(&env.sdk, siesta_workflows::registry())
        .await;
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
    })
}

impl Stack {
    /// Receive what is on the queue now, as the event source mapping does, as one SQS
    /// event built on the fixture's record; the messages are deleted at once (the
    /// mapping deletes what an invocation handled; a dead invocation's wake-up is the
    /// sweep's to send again, which this test waits for rather than the visibility
    /// timeout).
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
        let mut records = Vec::new();
        for m in out.messages() {
            let mut r = template["Records"][0].clone();
            r["messageId"] = json!(m.message_id().unwrap());
            r["receiptHandle"] = json!(m.receipt_handle().unwrap());
            r["body"] = json!(m.body().unwrap());
            records.push(r);
            self.sqs
                .delete_message()
                .queue_url(&self.settings.resources.queue_url)
                .receipt_handle(m.receipt_handle().unwrap())
                .send()
                .await
                .unwrap();
        }
        serde_json::from_value(json!({ "Records": records })).unwrap()
    }

    /// One step function invocation on what is on the queue, by `engine`.
    async fn step(&self, engine: &Engine) -> SqsBatchResponse {
        let event = self.sqs_event().await;
        assert!(!event.records.is_empty(), "a wake-up on the queue");
        let deadline = siesta_lambda::now_ms() as u64 + 60_000;
        siesta_step::handle(engine, event, deadline, self.settings.safety_margin).await
    }

    /// Step function invocations until the run is `status`.
    async fn step_until(&self, run_id: &RunId, status: RunStatus) {
        for _ in 0..20 {
            let response = self.step(&self.engine).await;
            assert!(response.batch_item_failures.is_empty(), "{response:?}");
            let run = self
                .engine
                .get_run(&TenantId::from(TENANT), run_id)
                .await
                .unwrap();
            if run.status == status {
                return;
            }
        }
        panic!("run {run_id} never became {status}")
    }

    /// An engine on the same tables whose process dies right after its `writes`-th
    /// journal write from now: the write is kept, every later storage call fails.
    fn dying_engine(&self, writes: i64) -> (Engine, Arc<ProbeStore>) {
        let mut backend = self.engine.backend().clone();
        let probe = ProbeStore::new(backend.store.clone());
        probe.crash_after(writes);
        backend.store = probe.clone();
        let config = EngineConfig {
            owner: "dying-container".into(),
            ..self.engine.config().clone()
        };
        let engine = Engine::new(
            backend,
            self.engine.clock().clone(),
            self.engine.registry().clone(),
            config,
        );
        (engine, probe)
    }
}

fn named<'a>(spans: &'a [Span], name: &str) -> Vec<&'a Span> {
    spans.iter().filter(|s| s.name == name).collect()
}

/// Whether any of the span's names or attribute strings contains `needle`.
fn mentions(span: &Span, needle: &str) -> bool {
    span.name.contains(needle)
        || span.attributes.iter().any(|a| {
            matches!(
                a.value.as_ref().and_then(|v| v.value.as_ref()),
                Some(AnyValue::StringValue(s)) if s.contains(needle)
            )
        })
        || span.events.iter().any(|e| {
            e.name.contains(needle)
                || e.attributes.iter().any(|a| {
                    matches!(
                        a.value.as_ref().and_then(|v| v.value.as_ref()),
                        Some(AnyValue::StringValue(s)) if s.contains(needle)
                    )
                })
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_order_example_through_the_lambda_handlers_a_crash_a_retry_and_a_callback_is_one_trace()
{
    let received = common::global_receiver();
    let Some(s) = stack(Duration::from_millis(1500)).await else {
        return;
    };
    let sent = || received.lock().unwrap().clone();

    // The start function.
    let (status, started) = json_of(
        s.start
            .handle(http_event(
                "http-api-v2-start-order.json",
                &[("TENANT", TENANT)],
            ))
            .await,
    );
    assert_eq!(status, 201, "{started}");
    let id = RunId::from(started["id"].as_str().unwrap());
    let tenant = TenantId::from(TENANT);
    let trace_id = trace_id_for(&tenant, &id).to_vec();
    let linked = |name: &str| {
        sent()
            .into_iter()
            .any(|s| s.name == name && s.links.iter().any(|l| l.trace_id == trace_id))
    };
    assert!(
        linked("POST /runs"),
        "the start request's span, linked to the run, was sent before the handler returned"
    );

    // The first step invocation dies with its second journal write: create_order's
    // outcome, then the payment callback's creation together with request_payment's
    // start (a tool call records its attempt before running it; the callback's opening,
    // held, goes with that write).
    let (dying, probe) = s.dying_engine(2);
    s.step(&dying).await;
    assert!(probe.is_dead(), "the invocation's process died mid-run");
    let executions = |spans: &[Span]| {
        spans
            .iter()
            .filter(|s| s.trace_id == trace_id && s.name == "durable_execution")
            .count()
    };
    assert_eq!(
        executions(&sent()),
        1,
        "the dead invocation's wake-up was sent before its handler returned"
    );

    // The sweep wakes the run once the dead invocation's lease has run out.
    let scheduled: Value = serde_json::from_str(&fixture("eventbridge-scheduled.json")).unwrap();
    tokio::time::sleep(Duration::from_millis(1800)).await;
    let counts = siesta_sweep::handle(&s.engine, &scheduled, 100)
        .await
        .unwrap();
    assert_eq!(counts["expired_leases"], 1, "{counts}");
    s.step_until(&id, RunStatus::Parked).await;
    let after_crash = executions(&sent());
    assert!(after_crash >= 2, "sent before the handler returned");

    // The operator retries the call through the start function.
    let (status, resolved) = json_of(
        s.start
            .handle(resolve_event(
                id.as_str(),
                "request_payment%230",
                &json!({"outcome": "retry"}),
            ))
            .await,
    );
    assert!((200..300).contains(&status), "{status} {resolved}");
    s.step_until(&id, RunStatus::Waiting).await;
    assert!(executions(&sent()) > after_crash);

    // The payment provider calls the callback's URL; the webhook function takes it.
    let run = s.engine.get_run(&tenant, &id).await.unwrap();
    let input = s
        .engine
        .backend()
        .store
        .load_replay_input(&tenant, &id)
        .await
        .unwrap();
    let token = input
        .journal
        .iter()
        .find_map(|e| match &e.state {
            siesta::EntryState::Waiting(siesta::Wait {
                kind: siesta::WaitKind::Callback { callback_id, .. },
                ..
            }) if e.name == "payment" => Some(callback_id.to_string()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("{run:?} waits on its payment callback"));
    let paid = json!({"status": "COMPLETED", "transaction_id": "txn_otel"});
    let body = base64::engine::general_purpose::STANDARD.encode(paid.to_string());
    let (status, ack) = json_of(
        s.webhook
            .handle(http_event(
                "function-url-webhook-token.json",
                &[("TOKEN", &token), ("BODY_BASE64", &body)],
            ))
            .await,
    );
    assert_eq!(status, 200, "{ack}");
    assert!(
        linked("POST /hooks/{token}"),
        "the delivery's span, linked to the run it woke, was sent before the handler returned"
    );
    s.step_until(&id, RunStatus::Completed).await;

    // Nothing is flushed here: every handler sent its own spans before it returned.
    let all = sent();
    let root = root_span_id_for(&tenant, &id).to_vec();
    let spans: Vec<Span> = all
        .iter()
        .filter(|s| s.trace_id == trace_id)
        .cloned()
        .collect();
    let executions = named(&spans, "durable_execution");
    assert!(
        executions.len() >= 4,
        "before the crash, after it, after the retry, after the payment: {executions:#?}"
    );
    for e in &executions {
        assert_eq!(
            e.parent_span_id, root,
            "every wake-up under the run's root: {e:?}"
        );
    }
    // The run's root is emitted once it ended: one tree, every parent in the trace.
    let roots: Vec<_> = spans
        .iter()
        .filter(|s| s.parent_span_id.is_empty())
        .collect();
    assert_eq!(roots.len(), 1, "exactly one root: {roots:#?}");
    assert_eq!(roots[0].name, "durable_run");
    assert_eq!(roots[0].span_id, root);
    for s in spans.iter().filter(|s| !s.parent_span_id.is_empty()) {
        assert!(
            spans.iter().any(|p| p.span_id == s.parent_span_id),
            "its parent is in the trace: {s:?}"
        );
    }
    let mut operations: Vec<(String, Option<String>, String, String)> = Vec::new();
    for o in named(&spans, "durable_operation") {
        assert!(
            executions.iter().any(|e| e.span_id == o.parent_span_id),
            "an operation's parent is a wake-up of the run: {o:?}"
        );
        assert_eq!(common::attribute(o, "isReplay").as_deref(), Some("false"));
        operations.push((
            common::attribute(o, "operationId").unwrap_or_default(),
            common::attribute(o, "attempt"),
            common::attribute(o, "kind").unwrap_or_default(),
            common::attribute(o, "outcome").unwrap_or_default(),
        ));
    }
    operations.sort();
    let expected: Vec<(String, Option<String>, String, String)> = [
        ("create_order#0", Some("1"), "step", "succeeded"),
        ("payment#0", None, "callback", "succeeded"),
        // Attempt 1 was recorded but never ran (the crash); the retry is attempt 2.
        ("request_payment#0", Some("2"), "tool_call", "succeeded"),
        ("ship#0", Some("1"), "step", "succeeded"),
    ]
    .into_iter()
    .map(|(p, a, k, o)| (p.into(), a.map(Into::into), k.into(), o.into()))
    .collect();
    assert_eq!(
        operations, expected,
        "one span per attempt that ran and per wait, none for a replayed operation"
    );
    let leaks: Vec<&Span> = all.iter().filter(|s| mentions(s, &token)).collect();
    assert!(
        leaks.is_empty(),
        "spans carry the callback's token: {leaks:#?}"
    );
}
