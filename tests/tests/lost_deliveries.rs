//! Every delivery route on the AWS backend (the emulators, through the router), its
//! delivery cut off between its write and its wake-up's send — as when `siesta dev` is
//! killed or a webhook function times out between the two (issue 44). The run takes the
//! delivery within seconds: at once when the request is retried (answered as a
//! duplicate, which sends the wake-up again), and, with no retry at all, at the first
//! sweep past the delivery's short margin (`EngineConfig::delivery_resend_margin`)
//! instead of the general 15 minutes. The clock is a manual one: nothing here sleeps.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use axum::Router;
use http::{Method, StatusCode};
use serde_json::{Value, json};
use siesta::ports::*;
use siesta::*;
use siesta_api::signature::{Scheme, Secret, sign};
use siesta_api::{ApiKeys, ControlApi, SourceConfig, WebhookReceiver, WebhookSource};
use siesta_aws::RequestCounter;
use siesta_aws::testing::Emulators;
use tower::ServiceExt;

const API_KEY: &str = "lost-deliveries-key";
const SECRET: &str = "lost-deliveries-secret";

fn registry() -> Registry {
    let mut reg = Registry::new();
    reg.register("callback", |ctx: Context, _: Value| async move {
        let payment = ctx
            .create_callback::<Value>("payment")
            .timeout(Duration::from_secs(3600))
            .await?;
        payment.wait().await
    });
    reg.register("heartbeat", |ctx: Context, _: Value| async move {
        let job = ctx
            .create_callback::<Value>("job")
            .timeout(Duration::from_secs(3600))
            // Longer than the test's clock moves: its timeout would make the run due.
            .heartbeat_timeout(Duration::from_secs(3000))
            .await?;
        job.wait().await
    });
    reg.register("event", |ctx: Context, _: Value| async move {
        let v: Value = ctx.wait_for_event("go").await?;
        Ok(v)
    });
    // Messages are drained at step boundaries: the run looks at one when it is woken,
    // and sleeps on.
    reg.register("message", |ctx: Context, _: Value| async move {
        ctx.sleep(Duration::from_secs(3600)).await?;
        ctx.step("drain", |_| async { Ok(()) }).await?;
        Ok(json!(ctx.messages::<Value>()?))
    });
    reg.register("parent", |ctx: Context, _: Value| async move {
        let v: Value = ctx.invoke("child", "event", json!(null)).await?;
        Ok(v)
    });
    reg
}

/// SQS, but the next send for each run armed with [`LosesSends::lose_next_for`] vanishes
/// without an error (and without a request), as it does when the process dies between
/// the write and the send.
struct LosesSends {
    inner: Arc<dyn WakeQueue>,
    armed: Mutex<HashSet<RunId>>,
    lost: AtomicUsize,
}

impl LosesSends {
    fn lose_next_for(&self, run: &RunId) {
        self.armed.lock().unwrap().insert(run.clone());
    }

    fn armed(&self) -> usize {
        self.armed.lock().unwrap().len()
    }
}

#[async_trait]
impl WakeQueue for LosesSends {
    async fn send(&self, wake: &WakeUp, delay: Duration) -> Result<(), StoreError> {
        if self.armed.lock().unwrap().remove(&wake.run_id) {
            self.lost.fetch_add(1, Ordering::SeqCst);
            return Ok(());
        }
        self.inner.send(wake, delay).await
    }
    async fn receive(&self, max: usize, v: Duration) -> Result<Vec<ReceivedWakeUp>, StoreError> {
        self.inner.receive(max, v).await
    }
    async fn ack(&self, receipt: &str) -> Result<(), StoreError> {
        self.inner.ack(receipt).await
    }
    async fn extend_visibility(&self, receipt: &str, v: Duration) -> Result<(), StoreError> {
        self.inner.extend_visibility(receipt, v).await
    }
    async fn dead_letters(&self, max: usize, v: Duration) -> Result<Vec<DeadLetter>, StoreError> {
        self.inner.dead_letters(max, v).await
    }
    async fn delete_dead_letter(&self, receipt: &str) -> Result<(), StoreError> {
        self.inner.delete_dead_letter(receipt).await
    }
    async fn holds(
        &self,
        t: &TenantId,
        r: &RunId,
        due: Timestamp,
    ) -> Result<Option<bool>, StoreError> {
        self.inner.holds(t, r, due).await
    }
}

/// Every way a delivery reaches a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    /// `POST /hooks/{token}`.
    HookByToken,
    /// `POST /hooks/sources/{source}`, the body naming a callback.
    SourceCallback,
    /// `POST /hooks/sources/{source}`, the body naming a run: an event.
    SourceEvent,
    /// `POST /runs/{id}/events/{name}`.
    Event,
    /// `POST /runs/{id}/messages`.
    Message,
    /// `POST /callbacks/{id}/succeed`.
    CallbackSucceed,
    /// `POST /callbacks/{id}/fail`.
    CallbackFail,
    /// `POST /callbacks/{id}/heartbeat`.
    Heartbeat,
    /// A child run's outcome, written with the child's last checkpoint.
    ChildOutcome,
}

/// The routes whose retry carries the first request's delivery id (a duplicate).
const RETRIED: [Route; 7] = [
    Route::HookByToken,
    Route::SourceCallback,
    Route::SourceEvent,
    Route::Event,
    Route::Message,
    Route::CallbackSucceed,
    Route::CallbackFail,
];

/// Every route: a heartbeat's retry is a new heartbeat, and a child's outcome has no
/// request to retry.
const ALL: [Route; 9] = [
    Route::HookByToken,
    Route::SourceCallback,
    Route::SourceEvent,
    Route::Event,
    Route::Message,
    Route::CallbackSucceed,
    Route::CallbackFail,
    Route::Heartbeat,
    Route::ChildOutcome,
];

impl Route {
    fn workflow(self) -> &'static str {
        match self {
            Route::HookByToken
            | Route::SourceCallback
            | Route::CallbackSucceed
            | Route::CallbackFail => "callback",
            Route::Heartbeat => "heartbeat",
            Route::SourceEvent | Route::Event => "event",
            Route::Message => "message",
            Route::ChildOutcome => "parent",
        }
    }

    /// Whether taking the delivery finishes the run.
    fn finishes(self) -> bool {
        !matches!(self, Route::Message | Route::Heartbeat)
    }
}

struct World {
    engine: Engine,
    router: Router,
    queue: Arc<LosesSends>,
    counter: RequestCounter,
    clock: Arc<ManualClock>,
    tenant: TenantId,
    callbacks: Mutex<HashMap<RunId, CallbackId>>,
}

impl World {
    async fn new(env: &Emulators) -> World {
        let (aws, counter) = env.counted_backend(5).await;
        let base = aws.backend();
        let queue = Arc::new(LosesSends {
            inner: base.queue.clone(),
            armed: Mutex::default(),
            lost: AtomicUsize::new(0),
        });
        let clock = Arc::new(ManualClock::new(Timestamp(1_800_000_000_000)));
        let engine = Engine::new(
            Backend {
                queue: queue.clone(),
                ..base
            },
            clock.clone(),
            registry(),
            EngineConfig::default(),
        );
        let tenant = TenantId(format!("lost-deliveries-{}", uuid::Uuid::new_v4().simple()));
        let source = |name: &str, correlation: &str, callback: Option<&str>| {
            WebhookSource::from_config(SourceConfig {
                name: name.into(),
                tenant: tenant.to_string(),
                scheme: "github".into(),
                secrets: vec![SECRET.into()],
                correlation: correlation.into(),
                callback: callback.map(str::to_owned),
                event: callback.is_none().then(|| "go".to_owned()),
                tolerance_secs: None,
            })
            .unwrap()
        };
        let router = ControlApi::new(engine.clone())
            .authenticate(ApiKeys::new(HashMap::from([(
                API_KEY.to_owned(),
                tenant.clone(),
            )])))
            .webhooks(
                WebhookReceiver::new(siesta_api::DEFAULT_MAX_BODY).with_sources(vec![
                    source("psp", "", Some("/callback_id")),
                    source("shipper", "/run_id", None),
                ]),
            )
            .router();
        World {
            engine,
            router,
            queue,
            counter,
            clock,
            tenant,
            callbacks: Mutex::default(),
        }
    }

    async fn post(
        &self,
        path: &str,
        headers: &[(String, String)],
        body: &str,
    ) -> (StatusCode, Value) {
        let mut request = http::Request::builder()
            .method(Method::POST)
            .uri(path)
            .header("content-type", "application/json");
        for (name, value) in headers {
            request = request.header(name.as_str(), value.as_str());
        }
        let response = self
            .router
            .clone()
            .oneshot(
                request
                    .body(axum::body::Body::from(body.to_owned()))
                    .unwrap(),
            )
            .await
            .unwrap();
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    }

    /// A run of `route`'s workflow, waiting for the delivery (for a child's outcome,
    /// the parent, its child waiting for its event).
    async fn waiting_run(&self, route: Route) -> RunId {
        let run = self
            .engine
            .start(&self.tenant, route.workflow(), json!(null), None)
            .await
            .unwrap();
        self.engine.run_until_idle(10).await.unwrap();
        assert_eq!(self.run(&run.id).await.status, RunStatus::Waiting);
        run.id
    }

    async fn run(&self, id: &RunId) -> Run {
        self.engine.get_run(&self.tenant, id).await.unwrap()
    }

    /// The callback `id` waits on (remembered: a retry after the run took its outcome
    /// still names it).
    async fn callback(&self, id: &RunId) -> CallbackId {
        if let Some(known) = self.callbacks.lock().unwrap().get(id) {
            return known.clone();
        }
        let store = &*self.engine.backend().store;
        let callback = siesta_aws::testing::waiting_callback(store, &self.tenant, id)
            .await
            .expect("waiting on a callback");
        self.callbacks
            .lock()
            .unwrap()
            .insert(id.clone(), callback.clone());
        callback
    }

    /// The child run `parent` waits for.
    async fn child(&self, parent: &RunId) -> RunId {
        let store = &self.engine.backend().store;
        let history = store.load_replay_input(&self.tenant, parent).await.unwrap();
        history
            .journal
            .iter()
            .find_map(|e| match &e.state {
                EntryState::Waiting(Wait {
                    kind: WaitKind::Child { run_id },
                    ..
                }) => Some(run_id.clone()),
                _ => None,
            })
            .expect("waiting on a child")
    }

    /// Send `route`'s delivery to `run` once; whether it was answered as a duplicate.
    /// A child's outcome is the child's: its event is delivered and it is run to its end.
    async fn deliver(&self, route: Route, run: &RunId) -> bool {
        let bearer = vec![("authorization".to_owned(), format!("Bearer {API_KEY}"))];
        let keyed = |key: &str| {
            let mut h = bearer.clone();
            h.push(("idempotency-key".to_owned(), key.to_owned()));
            h
        };
        let signed = |body: &str| {
            let secret = Secret::parse(Scheme::GitHub, SECRET).unwrap();
            sign(
                Scheme::GitHub,
                &secret,
                &format!("delivery-{run}"),
                0,
                body.as_bytes(),
            )
        };
        let (status, answer) = match route {
            Route::HookByToken => {
                let token = self.callback(run).await;
                self.post(&format!("/hooks/{token}"), &[], r#"{"paid":true}"#)
                    .await
            }
            Route::SourceCallback => {
                let token = self.callback(run).await;
                let body = json!({"callback_id": token.0, "paid": true}).to_string();
                self.post("/hooks/sources/psp", &signed(&body), &body).await
            }
            Route::SourceEvent => {
                let body = json!({"run_id": run.as_str(), "shipped": true}).to_string();
                self.post("/hooks/sources/shipper", &signed(&body), &body)
                    .await
            }
            Route::Event => {
                self.post(&format!("/runs/{run}/events/go"), &keyed("go-1"), "1")
                    .await
            }
            Route::Message => {
                self.post(
                    &format!("/runs/{run}/messages"),
                    &keyed("msg-1"),
                    r#""hello""#,
                )
                .await
            }
            Route::CallbackSucceed => {
                let id = self.callback(run).await;
                self.post(&format!("/callbacks/{id}/succeed"), &keyed("ok-1"), "2")
                    .await
            }
            Route::CallbackFail => {
                let id = self.callback(run).await;
                let body = r#"{"code":"Declined","message":"card declined"}"#;
                self.post(&format!("/callbacks/{id}/fail"), &keyed("no-1"), body)
                    .await
            }
            Route::Heartbeat => {
                let id = self.callback(run).await;
                self.post(&format!("/callbacks/{id}/heartbeat"), &bearer, "")
                    .await
            }
            Route::ChildOutcome => {
                let child = self.child(run).await;
                self.engine
                    .deliver_event(&self.tenant, &child, "go", json!(3), None)
                    .await
                    .unwrap();
                self.engine.run_until_idle(10).await.unwrap();
                assert!(self.run(&child).await.status.is_finished());
                return false;
            }
        };
        assert!(status.is_success(), "{route:?}: {status} {answer}");
        answer["duplicate"].as_bool().unwrap()
    }

    /// Whether `run` has taken in every delivery it holds (and, for a route whose
    /// delivery ends its run, finished).
    async fn took_it(&self, route: Route, run: &RunId) -> bool {
        let run = self.run(run).await;
        run.inbox_seen == run.inbox_seq && (!route.finishes() || run.status.is_finished())
    }

    fn requests(&self, service: &str, operation: &str) -> u64 {
        self.counter.total(service, Some(operation))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_aws_a_delivery_cut_off_before_its_send_is_taken_as_soon_as_its_retry_is_answered_as_a_duplicate()
 {
    let Some(env) = siesta_aws::testing::emulators().await else {
        return;
    };
    let w = World::new(&env).await;
    for route in RETRIED {
        let run = w.waiting_run(route).await;
        w.queue.lose_next_for(&run);
        assert!(!w.deliver(route, &run).await, "{route:?}: the first is new");
        assert_eq!(w.queue.armed(), 0, "{route:?}: its wake-up was lost");
        w.engine.run_until_idle(10).await.unwrap();
        assert!(!w.took_it(route, &run).await, "{route:?}: nothing woke it");

        // The retry: answered as a duplicate, and the run has not looked at its inbox
        // since, so its wake-up goes again. The clock stands still: not the sweep.
        w.counter.reset();
        assert!(w.deliver(route, &run).await, "{route:?}: the retry");
        eprintln!("{route:?}, the retry: {:?}", w.counter.snapshot());
        assert_eq!(w.requests("sqs", "SendMessage"), 1, "{route:?}");
        w.engine.run_until_idle(10).await.unwrap();
        assert!(
            w.took_it(route, &run).await,
            "{route:?}: {:?}",
            w.run(&run).await
        );

        // Retried again once taken: a read, nothing sent.
        w.counter.reset();
        assert!(w.deliver(route, &run).await, "{route:?}: a late retry");
        assert_eq!(w.requests("sqs", "SendMessage"), 0, "{route:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_aws_a_delivery_cut_off_before_its_send_and_never_retried_is_taken_after_the_first_sweep_past_its_margin()
 {
    let Some(env) = siesta_aws::testing::emulators().await else {
        return;
    };
    // The sweep reads the global due index: a table of its own.
    env.in_own_table(|env| async move {
        let w = World::new(&env).await;
        let margin = EngineConfig::default().delivery_resend_margin;
        let mut runs = Vec::new();
        for route in ALL {
            runs.push((route, w.waiting_run(route).await));
        }
        for (route, run) in &runs {
            w.queue.lose_next_for(run);
            assert!(!w.deliver(*route, run).await, "{route:?}");
            assert_eq!(w.queue.armed(), 0, "{route:?}: its wake-up was lost");
        }
        w.engine.run_until_idle(10).await.unwrap();
        for (route, run) in &runs {
            assert!(!w.took_it(*route, run).await, "{route:?}: nothing woke it");
        }

        // Within the margin the sweep takes their wake-ups to be on their way.
        w.clock.advance(margin - Duration::from_secs(1));
        let report = w.engine.sweep(100).await.unwrap();
        assert_eq!(report.woken, 0, "{report:?}");

        // The first sweep past it wakes each, once.
        w.clock.advance(Duration::from_secs(2));
        w.counter.reset();
        let report = w.engine.sweep(100).await.unwrap();
        eprintln!(
            "the sweep past the margin: {report:?}, {:?}",
            w.counter.snapshot()
        );
        assert_eq!(
            (report.woken, report.due_waits),
            (ALL.len(), ALL.len()),
            "{report:?}"
        );
        assert_eq!(w.requests("sqs", "SendMessage"), ALL.len() as u64);
        assert_eq!(w.requests("dynamodb", "UpdateItem"), ALL.len() as u64);
        w.engine.run_until_idle(10).await.unwrap();
        for (route, run) in &runs {
            assert!(
                w.took_it(*route, run).await,
                "{route:?}: {:?}",
                w.run(run).await
            );
        }

        // Taken: no later sweep sends anything for them.
        w.clock.advance(EngineConfig::default().resend_margin * 2);
        w.counter.reset();
        let report = w.engine.sweep(100).await.unwrap();
        assert_eq!(report.woken, 0, "{report:?}");
        assert_eq!(w.requests("sqs", "SendMessage"), 0);
    })
    .await;
}
