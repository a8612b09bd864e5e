//! Pinned on AWS: two builds of one app on one table and queue. Build B's step function
//! takes every wake-up (it is the alias now); a wake-up for a run started on build A is
//! forwarded — a Lambda `Invoke` of A's version, here a stub Invoke endpoint that runs
//! build A's step handler — and the run finishes on A's code. B's own runs run on B. An
//! invoke that fails leaves the record failed (SQS redelivers it) and loses nothing; a
//! forward interrupted while A's version is mid-step (the forwarding invocation dies,
//! the record comes back) loses nothing and makes no side effect twice.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde_json::{Value, json};
use siesta::{Context, Engine, Payload, Registry, RunId, RunStatus, TenantId};
use siesta_lambda::Settings;
use siesta_step::Forwarder;

const BUILD_A: &str = "shop@1.0.0+aaaa";
const BUILD_B: &str = "shop@1.0.1+bbbb";

/// `approval` as build A has it: draft, wait for the approval.
fn build_a() -> Registry {
    let mut reg = Registry::new();
    reg.register("approval", |ctx: Context, _: Value| async move {
        let draft: String = ctx
            .step("draft", |_| async { Ok("draft".to_owned()) })
            .await?;
        let approved: bool = ctx.wait_for_event("approval").await?;
        Ok(json!({"build": "a", "draft": draft, "approved": approved}))
    });
    reg
}

/// Build B: a `triage` step inserted before the draft — A's journals do not replay on it.
fn build_b() -> Registry {
    let mut reg = Registry::new();
    reg.register("approval", |ctx: Context, _: Value| async move {
        ctx.step("triage", |_| async { Ok(1u32) }).await?;
        let draft: String = ctx
            .step("draft", |_| async { Ok("draft".to_owned()) })
            .await?;
        let approved: bool = ctx.wait_for_event("approval").await?;
        Ok(json!({"build": "b", "draft": draft, "approved": approved}))
    });
    reg
}

fn deadline() -> u64 {
    siesta_lambda::now_ms() as u64 + 60_000
}

/// A stub of Lambda's Invoke API serving build A's step version. As on Lambda, an
/// invocation runs to its end even when its caller goes away: each runs in a task of
/// its own, kept in `running`.
#[derive(Clone)]
struct StubLambda {
    engine: Engine,
    fail: Arc<AtomicBool>,
    /// Answer that the version does not exist (it was deleted).
    gone: Arc<AtomicBool>,
    invokes: Arc<AtomicUsize>,
    running: Arc<Mutex<Vec<tokio::task::JoinHandle<()>>>>,
}

impl StubLambda {
    /// Wait until every invocation started so far has ended.
    async fn settled(&self) {
        let running: Vec<_> = std::mem::take(&mut *self.running.lock().unwrap());
        for task in running {
            task.await.unwrap();
        }
    }
}

async fn invoke(
    State(stub): State<StubLambda>,
    body: axum::body::Bytes,
) -> axum::response::Response {
    stub.invokes.fetch_add(1, Ordering::SeqCst);
    if stub.gone.load(Ordering::SeqCst) {
        return (
            StatusCode::NOT_FOUND,
            [("x-amzn-errortype", "ResourceNotFoundException")],
            r#"{"Type":"User","Message":"Function not found: shop-step:1"}"#,
        )
            .into_response();
    }
    if stub.fail.load(Ordering::SeqCst) {
        return (
            StatusCode::TOO_MANY_REQUESTS,
            [("x-amzn-errortype", "TooManyRequestsException")],
            r#"{"message":"Rate exceeded"}"#,
        )
            .into_response();
    }
    let event: SqsEvent = serde_json::from_slice(&body).expect("an SQS event");
    assert!(
        event.records.iter().all(siesta_step::forward::is_forwarded),
        "forwarded records are marked"
    );
    let (tx, rx) = tokio::sync::oneshot::channel::<SqsBatchResponse>();
    let engine = stub.engine.clone();
    stub.running.lock().unwrap().push(tokio::spawn(async move {
        let response =
            siesta_step::handle(&engine, event, deadline(), Duration::from_secs(2)).await;
        // The caller may be gone (the forwarding invocation died): the work stands.
        let _ = tx.send(response);
    }));
    match rx.await {
        Ok(response) => axum::Json(response).into_response(),
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

struct Deployment {
    a: Engine,
    b: Engine,
    forwarder: Forwarder,
    builds: siesta_aws::builds::BuildRegistry,
    stub: StubLambda,
    sqs: aws_sdk_sqs::Client,
    queue_url: String,
    tenant: TenantId,
}

async fn deployment() -> Option<Deployment> {
    deployment_with(true).await
}

/// A deployment; `a_registered`: whether build A's version registered itself.
async fn deployment_with(a_registered: bool) -> Option<Deployment> {
    deployment_of(build_a(), a_registered).await
}

/// A deployment whose build A has `a_code`.
async fn deployment_of(a_code: Registry, a_registered: bool) -> Option<Deployment> {
    let env = siesta_aws::testing::emulators()
        .await?
        .with_own_table()
        .await;
    let names = env.names(5).await;
    let settings = |build: &str| Settings {
        resources: names.clone(),
        tenant_claim: "tenant".into(),
        callback_base_url: "https://a1b2c3d4e5.execute-api.us-east-1.amazonaws.com".into(),
        lease_ttl: Duration::from_secs(30),
        safety_margin: Duration::from_secs(2),
        retention: siesta::RetentionPolicy::keep_for(Some(Duration::from_secs(86_400))),
        reap_page: 100,
        sweep_page: 100,
        webhook_sources: "[]".into(),
        webhook_sources_parameter: None,
        build_id: build.into(),
        quotas: siesta::Quotas::default(),
        quotas_parameter: None,
        limits: siesta::LimitOverrides::default(),
        disabled_schedules: Default::default(),
    };
    let a = settings(BUILD_A).engine(&env.sdk, a_code).await;
    let b = settings(BUILD_B).engine(&env.sdk, build_b()).await;
    let stub = StubLambda {
        engine: a.clone(),
        fail: Arc::default(),
        gone: Arc::default(),
        invokes: Arc::default(),
        running: Arc::default(),
    };
    let app = axum::Router::new()
        .route(
            "/2015-03-31/functions/{name}/invocations",
            axum::routing::post(invoke),
        )
        .with_state(stub.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });

    // What AWS_ENDPOINT_URL_LAMBDA does, for this client only.
    let lambda_sdk = env
        .sdk
        .to_builder()
        .endpoint_url(format!("http://{addr}"))
        .build();
    let builds = siesta_aws::builds::BuildRegistry::from_sdk(&env.sdk, names.table.clone());
    // Build A's version registered itself when it started cold.
    if a_registered {
        builds
            .register(BUILD_A, "shop-step:1", siesta_lambda::now_ms())
            .await
            .unwrap();
    }
    Some(Deployment {
        a,
        b,
        forwarder: Forwarder::new(&lambda_sdk, builds.clone()),
        builds,
        stub,
        sqs: aws_sdk_sqs::Client::new(&env.sdk),
        queue_url: names.queue_url,
        tenant: TenantId::from("acme"),
    })
}

impl Deployment {
    /// Receive what is on the queue and hand it to `engine`'s step function (forwarding
    /// with this deployment's forwarder), deleting what it did not report failed, as
    /// the event source mapping does.
    async fn step(&self, engine: &Engine) -> SqsBatchResponse {
        self.step_records(engine).await.0
    }

    /// [`Deployment::step`], and how many records it received.
    async fn step_records(&self, engine: &Engine) -> (SqsBatchResponse, usize) {
        let out = self
            .sqs
            .receive_message()
            .queue_url(&self.queue_url)
            .max_number_of_messages(10)
            .wait_time_seconds(1)
            .visibility_timeout(1)
            .send()
            .await
            .unwrap();
        let records: Vec<Value> = out
            .messages()
            .iter()
            .map(|m| {
                json!({
                    "messageId": m.message_id().unwrap(),
                    "receiptHandle": m.receipt_handle().unwrap(),
                    "body": m.body().unwrap(),
                    "attributes": {"ApproximateReceiveCount": "1"},
                    "messageAttributes": {},
                    "eventSource": "aws:sqs",
                })
            })
            .collect();
        let event: SqsEvent = serde_json::from_value(json!({ "Records": records })).unwrap();
        let response = siesta_step::handle_forwarding(
            engine,
            Some(&self.forwarder),
            event,
            deadline(),
            Duration::from_secs(2),
        )
        .await;
        for m in out.messages() {
            let id = m.message_id().unwrap();
            if !response
                .batch_item_failures
                .iter()
                .any(|f| f.item_identifier == id)
            {
                self.sqs
                    .delete_message()
                    .queue_url(&self.queue_url)
                    .receipt_handle(m.receipt_handle().unwrap())
                    .send()
                    .await
                    .unwrap();
            }
        }
        (response, out.messages().len())
    }

    async fn status(&self, run: &RunId) -> RunStatus {
        self.b.get_run(&self.tenant, run).await.unwrap().status
    }

    /// Step `engine` through the queue until `run` reaches `status`; every failure
    /// reported on the way is returned.
    async fn step_until(&self, engine: &Engine, run: &RunId, status: RunStatus) -> usize {
        let mut failures = 0;
        for _ in 0..40 {
            failures += self.step(engine).await.batch_item_failures.len();
            if self.status(run).await == status {
                return failures;
            }
        }
        panic!("run {run} never reached {status}");
    }

    async fn output(&self, run: &RunId) -> Value {
        match self.b.get_run(&self.tenant, run).await.unwrap().output {
            Some(Payload::Inline(v)) => v,
            other => panic!("no inline output: {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_of_build_a_is_forwarded_by_build_b_to_as_version_and_finishes_on_as_code() {
    let Some(d) = deployment().await else {
        return;
    };
    let run_a =
        d.a.start(&d.tenant, "approval", json!(null), None)
            .await
            .unwrap()
            .id;
    d.step_until(&d.a, &run_a, RunStatus::Waiting).await;

    // B is deployed: its step function takes every wake-up from now on.
    let run_b =
        d.b.start(&d.tenant, "approval", json!(null), None)
            .await
            .unwrap()
            .id;
    assert_eq!(
        d.step_until(&d.b, &run_b, RunStatus::Waiting).await,
        0,
        "B's own run needs no forward"
    );
    assert_eq!(d.stub.invokes.load(Ordering::SeqCst), 0);

    d.b.deliver_event(&d.tenant, &run_a, "approval", json!(true), None)
        .await
        .unwrap();
    assert_eq!(d.step_until(&d.b, &run_a, RunStatus::Completed).await, 0);
    assert_eq!(
        d.output(&run_a).await,
        json!({"build": "a", "draft": "draft", "approved": true}),
        "finished on the code it started on"
    );
    assert!(d.stub.invokes.load(Ordering::SeqCst) >= 1);

    d.b.deliver_event(&d.tenant, &run_b, "approval", json!(true), None)
        .await
        .unwrap();
    let before = d.stub.invokes.load(Ordering::SeqCst);
    d.step_until(&d.b, &run_b, RunStatus::Completed).await;
    assert_eq!(
        d.output(&run_b).await,
        json!({"build": "b", "draft": "draft", "approved": true})
    );
    assert_eq!(
        d.stub.invokes.load(Ordering::SeqCst),
        before,
        "B's run ran on B"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_forward_leaves_the_wake_up_failed_for_sqs_to_redeliver_and_loses_nothing() {
    let Some(d) = deployment().await else {
        return;
    };
    let run =
        d.a.start(&d.tenant, "approval", json!(null), None)
            .await
            .unwrap()
            .id;
    d.step_until(&d.a, &run, RunStatus::Waiting).await;
    d.b.deliver_event(&d.tenant, &run, "approval", json!(true), None)
        .await
        .unwrap();

    d.stub.fail.store(true, Ordering::SeqCst);
    let mut failed = 0;
    while failed == 0 {
        failed = d.step(&d.b).await.batch_item_failures.len();
    }
    assert_eq!(failed, 1, "the forwarded record is reported failed");
    assert_eq!(d.status(&run).await, RunStatus::Waiting, "nothing written");

    // The invoke works again: the redelivered wake-up finishes the run on A.
    d.stub.fail.store(false, Ordering::SeqCst);
    d.step_until(&d.b, &run, RunStatus::Completed).await;
    assert_eq!(
        d.output(&run).await,
        json!({"build": "a", "draft": "draft", "approved": true})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wake_up_for_a_build_no_version_serves_is_reported_handled_and_changes_nothing() {
    let Some(d) = deployment_with(false).await else {
        return;
    };
    let run =
        d.a.start(&d.tenant, "approval", json!(null), None)
            .await
            .unwrap()
            .id;
    d.step_until(&d.a, &run, RunStatus::Waiting).await;
    d.b.deliver_event(&d.tenant, &run, "approval", json!(true), None)
        .await
        .unwrap();
    let before = d.b.get_run(&d.tenant, &run).await.unwrap();

    let response = d.step(&d.b).await;
    assert!(response.batch_item_failures.is_empty(), "{response:?}");
    assert_eq!(
        d.stub.invokes.load(Ordering::SeqCst),
        0,
        "nothing to invoke"
    );
    let after = d.b.get_run(&d.tenant, &run).await.unwrap();
    assert_eq!(after.status, RunStatus::Waiting);
    assert_eq!(after.version, before.version, "nothing written");
    assert_eq!(after.inbox_seq, 1, "the approval is still recorded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wake_up_for_a_build_whose_version_was_deleted_is_unserved_and_unregisters_it() {
    let Some(d) = deployment().await else {
        return;
    };
    let run =
        d.a.start(&d.tenant, "approval", json!(null), None)
            .await
            .unwrap()
            .id;
    d.step_until(&d.a, &run, RunStatus::Waiting).await;
    d.b.deliver_event(&d.tenant, &run, "approval", json!(true), None)
        .await
        .unwrap();
    let before = d.b.get_run(&d.tenant, &run).await.unwrap();

    // A's version was deleted by hand, its registry item left behind.
    d.stub.gone.store(true, Ordering::SeqCst);
    let response = d.step(&d.b).await;
    assert!(
        response.batch_item_failures.is_empty(),
        "reported handled, as for any build no version serves: {response:?}"
    );
    assert_eq!(d.stub.invokes.load(Ordering::SeqCst), 1);
    assert_eq!(
        d.builds.step_version(BUILD_A).await.unwrap(),
        None,
        "the build is no longer deployed"
    );
    let after = d.b.get_run(&d.tenant, &run).await.unwrap();
    assert_eq!(after.status, RunStatus::Waiting);
    assert_eq!(after.version, before.version, "nothing written");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forwarded_wake_up_whose_run_is_another_builds_here_too_is_never_forwarded_again() {
    let Some(d) = deployment().await else {
        return;
    };
    let run =
        d.a.start(&d.tenant, "approval", json!(null), None)
            .await
            .unwrap()
            .id;
    d.step_until(&d.a, &run, RunStatus::Waiting).await;
    let wake = siesta::ports::WakeUp::new(
        d.tenant.clone(),
        run.clone(),
        siesta::ports::WakeReason::Delivery,
    );
    let event: SqsEvent = serde_json::from_value(json!({"Records": [{
        "messageId": "m-1",
        "receiptHandle": "r-1",
        "body": serde_json::to_string(&wake).unwrap(),
        "attributes": {"ApproximateReceiveCount": "1"},
        "messageAttributes": {siesta_step::forward::FORWARDED: {"stringValue": "true", "dataType": "String"}},
        "eventSource": "aws:sqs",
    }]}))
    .unwrap();
    let response = siesta_step::handle_forwarding(
        &d.b,
        Some(&d.forwarder),
        event,
        deadline(),
        Duration::from_secs(2),
    )
    .await;
    assert!(response.batch_item_failures.is_empty(), "{response:?}");
    assert_eq!(d.stub.invokes.load(Ordering::SeqCst), 0, "no ping-pong");
    assert_eq!(d.status(&run).await, RunStatus::Waiting);
}

/// A side effect after the approval, held mid-step until the test lifts it.
#[derive(Clone)]
struct Charge {
    /// How many times the charge was made.
    calls: Arc<AtomicUsize>,
    /// Told when a charge starts.
    started: Arc<tokio::sync::Notify>,
    /// Set to let charges finish.
    release: Arc<tokio::sync::watch::Sender<bool>>,
}

impl Charge {
    fn new() -> Self {
        Charge {
            calls: Arc::default(),
            started: Arc::default(),
            release: Arc::new(tokio::sync::watch::channel(false).0),
        }
    }

    /// Build A, charging after the approval.
    fn build_a(&self) -> Registry {
        let mut reg = Registry::new();
        let charge = self.clone();
        reg.register("approval", move |ctx: Context, _: Value| {
            let charge = charge.clone();
            async move {
                let draft: String = ctx
                    .step("draft", |_| async { Ok("draft".to_owned()) })
                    .await?;
                let approved: bool = ctx.wait_for_event("approval").await?;
                let calls: usize = ctx
                    .step("charge", move |_| async move {
                        charge.started.notify_one();
                        let _ = charge.release.subscribe().wait_for(|go| *go).await;
                        Ok(charge.calls.fetch_add(1, Ordering::SeqCst) + 1)
                    })
                    .await?;
                Ok(json!({"build": "a", "draft": draft, "approved": approved, "charges": calls}))
            }
        });
        reg
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forward_interrupted_while_as_version_is_mid_step_loses_nothing_and_charges_once() {
    let charge = Charge::new();
    let Some(d) = deployment_of(charge.build_a(), true).await else {
        return;
    };
    let run =
        d.a.start(&d.tenant, "approval", json!(null), None)
            .await
            .unwrap()
            .id;
    d.step_until(&d.a, &run, RunStatus::Waiting).await;
    d.b.deliver_event(&d.tenant, &run, "approval", json!(true), None)
        .await
        .unwrap();

    // B forwards the wake-up; while A's version is inside the charge, the forwarding
    // invocation dies (its future dropped: the Invoke was sent, no answer awaited, the
    // record neither deleted nor reported).
    let forwarding = async {
        loop {
            d.step(&d.b).await;
        }
    };
    tokio::select! {
        _ = forwarding => unreachable!(),
        _ = charge.started.notified() => {}
    }
    assert_eq!(d.stub.invokes.load(Ordering::SeqCst), 1);
    assert_eq!(charge.calls.load(Ordering::SeqCst), 0, "held mid-step");

    // SQS redelivers the record (its visibility timeout passed) while A still holds the
    // run: B sees the lease and leaves it to its holder.
    let mut received = 0;
    for _ in 0..20 {
        let (response, records) = d.step_records(&d.b).await;
        assert!(
            response.batch_item_failures.is_empty(),
            "the holder finishes the run: {response:?}"
        );
        received += records;
        if received > 0 {
            break;
        }
    }
    assert!(received > 0, "the record came back");

    // The charge finishes, once; the run completes on A's code with the approval.
    charge.release.send_replace(true);
    d.stub.settled().await;
    assert_eq!(d.status(&run).await, RunStatus::Completed);
    assert_eq!(
        d.output(&run).await,
        json!({"build": "a", "draft": "draft", "approved": true, "charges": 1})
    );
    // Whatever is still queued for the run is handled without a second charge.
    for _ in 0..3 {
        let response = d.step(&d.b).await;
        assert!(response.batch_item_failures.is_empty(), "{response:?}");
    }
    d.stub.settled().await;
    assert_eq!(charge.calls.load(Ordering::SeqCst), 1, "charged once");
}
