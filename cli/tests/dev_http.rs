//! `siesta dev` through real HTTP on an ephemeral port, through the typed client
//! (`siesta-client`). A request is made by hand only where the test is about the raw
//! HTTP — a malformed or oversized body, a header the client does not show, a cursor put
//! into a URL raw — or posts to a URL the API handed out (a callback's public webhook
//! URL, as a provider does); each such place says so.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use siesta::RunStatus;
use siesta_app::dev::{DevOptions, DevServer, start};
use siesta_client::{Client, Error, RunOutcome, RunResult, RunView, StartOptions};

mod common;

async fn server(keys: &str) -> (DevServer, tempfile::TempDir, String) {
    let keys = DevOptions::parse_api_keys(keys).unwrap();
    server_with(|o| o.api_keys = keys, siesta_workflows::registry()).await
}

/// A dev server on an ephemeral port with `registry`, its options (a 200 ms sweep)
/// adjusted by `configure`.
async fn server_with(
    configure: impl FnOnce(&mut DevOptions),
    registry: siesta::Registry,
) -> (DevServer, tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let mut options = DevOptions::new(dir.path().to_owned());
    options.sweep_every = Duration::from_millis(200);
    configure(&mut options);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = start(listener, options, registry).await.unwrap();
    let base = format!("http://{}", server.addr);
    (server, dir, base)
}

/// Starts `workflow` with `input` through the client.
async fn start_run(api: &Client, workflow: &str, input: Value) -> RunView {
    api.start_run(workflow, &input, &StartOptions::default())
        .await
        .unwrap()
}

/// The `EventType`s of a run's timeline, in order.
async fn event_types(api: &Client, id: &str) -> Vec<String> {
    api.full_timeline(id)
        .await
        .unwrap()
        .iter()
        .map(|e| {
            serde_json::to_value(e.event_type)
                .unwrap()
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect()
}

async fn wait_for_status(api: &Client, id: &str, status: RunStatus) -> RunView {
    for _ in 0..200 {
        let view = api.get_run(id).await.unwrap();
        if view.status == status {
            return view;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("run {id} never reached {status}")
}

/// The run's outcome, once it finished (within 10 s).
async fn finished(api: &Client, id: &str) -> RunResult {
    match api.run_result(id, Some(10)).await.unwrap() {
        RunOutcome::Finished(result) => result,
        RunOutcome::Pending(view) => panic!("run {id} did not finish within 10 s: {view:?}"),
    }
}

/// The API's refusal: its status and its error body (`{"error": {"code", ...}}`).
fn refused<T: std::fmt::Debug>(answer: Result<T, Error>) -> (u16, Value) {
    match answer {
        Err(Error::Api { status, body, .. }) => (status.as_u16(), body.unwrap_or_default()),
        other => panic!("the API was to refuse, it answered {other:?}"),
    }
}

/// A webhook to `source` with its signature `headers`, through the client: 200 and the
/// answer, or the refusal's status and error body.
async fn post_source(
    api: &Client,
    source: &str,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
) -> (u16, Value) {
    match api.source_webhook(source, &headers, body).await {
        Ok(received) => (200, serde_json::to_value(received).unwrap()),
        Err(e) => refused::<()>(Err(e)),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn order_pauses_a_webhook_resumes_it_and_the_same_webhook_again_changes_nothing() {
    let (server, _dir, base) = server("").await;
    let api = Client::new(&base);
    let run = start_run(&api, "order", json!({"item": "Lamp", "amount": 20})).await;
    let waiting = wait_for_status(&api, &run.id, RunStatus::Waiting).await;
    // The webhook stays raw HTTP: a provider posts to the callback's public URL, as the
    // run view hands it out.
    let hook = waiting.waits[0].url.clone().unwrap();
    assert!(hook.starts_with(&base), "{hook}");
    let client = reqwest::Client::new();

    let payment = json!({"status": "COMPLETED", "transaction_id": "txn_42"});
    let first = client
        .post(&hook)
        .header("webhook-id", "msg_1")
        .json(&payment)
        .send()
        .await
        .unwrap();
    assert_eq!(first.status(), 200);
    let done = finished(&api, &run.id).await;
    assert_eq!(done.status, RunStatus::Completed, "{done:?}");
    assert_eq!(done.output.unwrap()["transaction_id"], "txn_42");
    let version = api.get_run(&run.id).await.unwrap().version;

    let again = client
        .post(&hook)
        .header("webhook-id", "msg_1")
        .json(&payment)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 200);
    assert_eq!(again.json::<Value>().await.unwrap()["duplicate"], true);
    let other = client
        .post(&hook)
        .header("webhook-id", "msg_2")
        .json(&payment)
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), 410, "a closed callback is gone");
    let after = api.get_run(&run.id).await.unwrap();
    assert_eq!(after.version, version, "neither changed anything");
    server.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_webhooks_get_clear_errors() {
    let (server, _dir, base) = server("").await;
    let api = Client::new(&base);
    let run = start_run(&api, "order", json!({"item": "Lamp", "amount": 20})).await;
    let waiting = wait_for_status(&api, &run.id, RunStatus::Waiting).await;
    let hook = waiting.waits[0].url.clone().unwrap();
    // Raw HTTP: the test is about what no client sends — a body that is not JSON, one
    // over the limit — and a token no callback has.
    let client = reqwest::Client::new();
    let malformed = client.post(&hook).body("{nope").send().await.unwrap();
    assert_eq!(malformed.status(), 400);
    let unknown = client
        .post(format!("{base}/hooks/cb_unknown"))
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(unknown.status(), 404);
    let big = client
        .post(&hook)
        .body(vec![b' '; 1024 * 1024 + 1])
        .send()
        .await
        .unwrap();
    assert_eq!(big.status(), 413);
    let body: Value = big.json().await.unwrap();
    assert_eq!(body["error"]["code"], "payload_too_large");
    let still = api.get_run(&run.id).await.unwrap();
    assert_eq!(still.status, RunStatus::Waiting);
    server.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenant_b_cannot_see_cancel_or_signal_tenant_a_run() {
    let (server, _dir, base) = server("key-a=tenant-a,key-b=tenant-b").await;
    let anonymous = Client::new(&base);
    let a = Client::new(&base).api_key(Some("key-a".into()));
    let b = Client::new(&base).api_key(Some("key-b".into()));
    let (status, _) = refused(anonymous.list_runs(&Default::default()).await);
    assert_eq!(status, 401);
    let run = start_run(&a, "order", json!({"item": "Lamp", "amount": 20})).await;
    let id = run.id.as_str();
    wait_for_status(&a, id, RunStatus::Waiting).await;
    assert_eq!(refused(b.get_run(id).await).0, 404);
    assert_eq!(refused(b.cancel(id, None).await).0, 404);
    assert_eq!(
        refused(b.send_event(id, "approval", &json!(true), None).await).0,
        404
    );
    assert_eq!(a.get_run(id).await.unwrap().status, RunStatus::Waiting);
    let (status, stale) = refused(a.cancel(id, Some(1)).await);
    assert_eq!(status, 412, "{stale}");
    server.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_source_webhook_reaches_its_run_even_before_the_wait_and_bad_signatures_change_nothing()
 {
    use siesta_api::signature::{Scheme, Secret, sign};
    let dir = tempfile::tempdir().unwrap();
    let mut options = DevOptions::new(dir.path().to_owned());
    options.sources = siesta_api::WebhookSource::parse_all(
        r#"[{"name": "ci", "scheme": "standard-webhooks", "secrets": ["whsec_b2xkLXNlY3JldA==", "whsec_bmV3LXNlY3JldA=="],
             "correlation": "/run_id", "event": "approval"}]"#,
    )
    .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = start(listener, options, siesta_workflows::registry())
        .await
        .unwrap();
    let base = format!("http://{}", server.addr);
    let api = Client::new(&base);
    let run = start_run(&api, "approval", json!({"change": "bump the API"})).await;
    let id = run.id;
    let body =
        serde_json::to_vec(&json!({"run_id": id, "approved": true, "by": "ci-bot"})).unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let post =
        |headers: Vec<(String, String)>, body: Vec<u8>| post_source(&api, "ci", headers, body);
    // Wrong secret, tampered body, stale timestamp, no signature: 401, nothing delivered.
    let wrong = sign(
        Scheme::StandardWebhooks,
        &Secret::parse(Scheme::StandardWebhooks, "whsec_d3Jvbmc=").unwrap(),
        "msg_0",
        now,
        &body,
    );
    assert_eq!(post(wrong, body.clone()).await.0, 401);
    let good = sign(
        Scheme::StandardWebhooks,
        &Secret::parse(Scheme::StandardWebhooks, "whsec_bmV3LXNlY3JldA==").unwrap(),
        "msg_1",
        now,
        &body,
    );
    let mut tampered = body.clone();
    tampered[2] ^= 1;
    assert_eq!(post(good.clone(), tampered).await.0, 401);
    let stale = sign(
        Scheme::StandardWebhooks,
        &Secret::parse(Scheme::StandardWebhooks, "whsec_b2xkLXNlY3JldA==").unwrap(),
        "msg_1",
        now - 3600,
        &body,
    );
    assert_eq!(post(stale, body.clone()).await.0, 401);
    assert_eq!(post(vec![], body.clone()).await.0, 401);
    let timeline = api.timeline(&id, 0, None).await.unwrap();
    assert!(
        !serde_json::to_string(&timeline)
            .unwrap()
            .contains("EventDelivered"),
        "bad webhooks delivered nothing"
    );
    // Signed with the rotated-in secret: accepted (whether or not the run waits yet), once.
    let (status, _) = post(good.clone(), body.clone()).await;
    assert_eq!(status, 200);
    let (_, again) = post(good, body.clone()).await;
    assert_eq!(again["duplicate"], true);
    let done = finished(&api, &id).await;
    assert_eq!(done.status, RunStatus::Completed, "{done:?}");
    let (status, _) = post_source(&api, "nope", vec![], b"{}".to_vec()).await;
    assert_eq!(status, 404);
    server.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_concurrent_duplicate_deliveries_wake_the_run_exactly_once() {
    let (server, _dir, base) = server("").await;
    let api = Client::new(&base);
    let run = start_run(&api, "order", json!({"item": "Lamp", "amount": 20})).await;
    let waiting = wait_for_status(&api, &run.id, RunStatus::Waiting).await;
    // Raw HTTP to the callback's public URL the run view hands out, as a provider posts.
    let hook = waiting.waits[0].url.clone().unwrap();
    let client = reqwest::Client::new();
    let payment = json!({"status": "COMPLETED", "transaction_id": "txn_dup"});
    let limit = Arc::new(tokio::sync::Semaphore::new(64));
    let mut tasks = Vec::new();
    for _ in 0..1000 {
        let (client, hook, payment, limit) =
            (client.clone(), hook.clone(), payment.clone(), limit.clone());
        tasks.push(tokio::spawn(async move {
            let _permit = limit.acquire().await.unwrap();
            let r = client
                .post(&hook)
                .header("webhook-id", "msg_storm")
                .json(&payment)
                .send()
                .await
                .unwrap();
            (
                r.status().as_u16(),
                r.json::<Value>().await.unwrap()["duplicate"] == true,
            )
        }));
    }
    let (mut accepted, mut duplicates) = (0, 0);
    for t in tasks {
        let (status, duplicate) = t.await.unwrap();
        assert_eq!(status, 200);
        if duplicate {
            duplicates += 1
        } else {
            accepted += 1
        }
    }
    assert_eq!((accepted, duplicates), (1, 999));
    let done = finished(&api, &run.id).await;
    assert_eq!(done.status, RunStatus::Completed, "{done:?}");
    let events = event_types(&api, &run.id).await;
    let count = |t: &str| events.iter().filter(|e| *e == t).count();
    assert_eq!(count("CallbackDelivered"), 1);
    assert_eq!(count("CallbackSucceeded"), 1);
    assert_eq!(count("ExecutionSucceeded"), 1);
    // One invocation to pause at the callback, one woken by the single accepted delivery.
    assert_eq!(count("InvocationCompleted"), 2, "woken exactly once");
    server.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotency_key_replays_the_same_run_and_rejects_a_different_body() {
    let (server, _dir, base) = server("").await;
    let api = Client::new(&base);
    // Raw HTTP for the starts: the test is about the answer's status and headers
    // (`Idempotent-Replayed`, `Location`), which the client does not show.
    let client = reqwest::Client::new();
    let start_with_key = |key: &str, body: &Value| {
        client
            .post(format!("{base}/runs"))
            .header("Idempotency-Key", key)
            .json(body)
            .send()
    };
    let lamp = json!({"workflow": "order", "input": {"item": "Lamp", "amount": 20}});
    let first = start_with_key("order-1", &lamp).await.unwrap();
    assert_eq!(first.status(), 201);
    assert!(first.headers().get("idempotent-replayed").is_none());
    let first: Value = first.json().await.unwrap();
    let id = first["id"].as_str().unwrap().to_owned();
    wait_for_status(&api, &id, RunStatus::Waiting).await;

    // The same key and body: the first run, as it is now; nothing new is started.
    let replay = start_with_key("order-1", &lamp).await.unwrap();
    assert_eq!(replay.status(), 201);
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    assert_eq!(replay.headers()["location"], format!("/runs/{id}").as_str());
    let replay: Value = replay.json().await.unwrap();
    assert_eq!(replay["id"], id.as_str());
    assert_eq!(replay["status"], "waiting", "{replay}");

    // The same key with another body, or another workflow: 422, nothing created.
    for other in [
        json!({"workflow": "order", "input": {"item": "Lamp", "amount": 21}}),
        json!({"workflow": "approval", "input": {"change": "Lamp"}}),
    ] {
        let mismatch = start_with_key("order-1", &other).await.unwrap();
        assert_eq!(mismatch.status(), 422, "{other}");
        let body: Value = mismatch.json().await.unwrap();
        assert_eq!(body["error"]["code"], "idempotency_key_reused", "{body}");
    }
    let runs = api.list_runs(&Default::default()).await.unwrap().runs;
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0].id, id);
    let events = event_types(&api, &id).await;
    assert_eq!(
        events.iter().filter(|e| *e == "ExecutionStarted").count(),
        1,
        "{events:?}"
    );
    let view = api.get_run(&id).await.unwrap();
    assert_eq!(view.input, lamp["input"], "the first body is kept");

    // The same key and input for another workflow (an input both accept): 422 too.
    let both = json!({"item": "Lamp", "amount": 20, "change": "Lamp"});
    let as_order = start_with_key("order-3", &json!({"workflow": "order", "input": both}))
        .await
        .unwrap();
    assert_eq!(as_order.status(), 201);
    let as_approval = start_with_key("order-3", &json!({"workflow": "approval", "input": both}))
        .await
        .unwrap();
    assert_eq!(as_approval.status(), 422);
    assert_eq!(
        as_approval.json::<Value>().await.unwrap()["error"]["code"],
        "idempotency_key_reused"
    );

    // Another key is another run.
    let second = start_with_key("order-2", &lamp).await.unwrap();
    assert_eq!(second.status(), 201);
    assert!(second.headers().get("idempotent-replayed").is_none());
    let second: Value = second.json().await.unwrap();
    assert_ne!(second["id"], id.as_str());

    // An input too large to keep inline (stored as an artifact) replays and mismatches
    // the same way.
    let big_item = "x".repeat(40 * 1024);
    let big = json!({"workflow": "order", "input": {"item": big_item, "amount": 5}});
    let big_first: Value = start_with_key("order-big", &big)
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let big_replay = start_with_key("order-big", &big).await.unwrap();
    assert_eq!(big_replay.status(), 201);
    assert_eq!(big_replay.headers()["idempotent-replayed"], "true");
    assert_eq!(
        big_replay.json::<Value>().await.unwrap()["id"],
        big_first["id"]
    );
    let big_other =
        json!({"workflow": "order", "input": {"item": format!("{big_item}y"), "amount": 5}});
    assert_eq!(
        start_with_key("order-big", &big_other)
            .await
            .unwrap()
            .status(),
        422
    );
    let runs = api.list_runs(&Default::default()).await.unwrap().runs;
    assert_eq!(runs.len(), 4, "{runs:?}");
    server.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_of_the_wrong_shape_is_refused_and_the_right_one_still_completes_the_order() {
    let (server, _dir, base) = server("").await;
    let api = Client::new(&base);
    let run = start_run(&api, "order", json!({"item": "Lamp", "amount": 20})).await;
    let waiting = wait_for_status(&api, &run.id, RunStatus::Waiting).await;
    // The webhooks are raw HTTP to the callback's public URL the run view hands out.
    let hook = waiting.waits[0].url.clone().unwrap();
    let callback = waiting.waits[0].callback_id.clone().unwrap();
    let client = reqwest::Client::new();

    for body in [
        json!({"unexpected": true}),
        json!({"status": "COMPLETED", "transaction_id": 42}),
    ] {
        let r = client.post(&hook).json(&body).send().await.unwrap();
        assert_eq!(r.status(), 422, "{hook} {body}");
        let error: Value = r.json().await.unwrap();
        assert_eq!(error["error"]["code"], "delivery_rejected", "{error}");
    }
    let (status, error) = refused(
        api.complete_callback(&callback, &json!({"status": "COMPLETED"}), None)
            .await,
    );
    assert_eq!(status, 422, "{error}");
    assert_eq!(error["error"]["code"], "delivery_rejected", "{error}");
    let still = api.get_run(&run.id).await.unwrap();
    assert_eq!(still.status, RunStatus::Waiting);
    assert_eq!(still.version, waiting.version, "nothing was recorded");
    assert_eq!(
        still.waits[0].url.as_deref(),
        Some(hook.as_str()),
        "the callback is open"
    );

    let paid = client
        .post(&hook)
        .json(&json!({"status": "COMPLETED", "transaction_id": "txn_ok"}))
        .send()
        .await
        .unwrap();
    assert_eq!(paid.status(), 200);
    let done = finished(&api, &run.id).await;
    assert_eq!(done.status, RunStatus::Completed, "{done:?}");
    assert_eq!(done.output.unwrap()["transaction_id"], "txn_ok");
    server.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn if_match_cancel_refuses_a_stale_version_and_cancels_at_the_current_one() {
    let (server, _dir, base) = server("").await;
    let api = Client::new(&base);
    let run = start_run(&api, "order", json!({"item": "Lamp", "amount": 20})).await;
    let id = run.id.as_str();
    let waiting = wait_for_status(&api, id, RunStatus::Waiting).await;
    let version = waiting.version;
    // Raw HTTP for the two headers the client neither shows nor sends: the run view's
    // `ETag`, and an `If-Match` that is no version.
    let client = reqwest::Client::new();
    let run_url = format!("{base}/runs/{id}");
    let shown = client.get(&run_url).send().await.unwrap();
    let etag = shown.headers()["etag"].to_str().unwrap().to_owned();
    assert_eq!(etag, format!("\"{version}\""));

    for stale in [version - 1, version + 1] {
        let (status, body) = refused(api.cancel(id, Some(stale)).await);
        assert_eq!(status, 412, "If-Match {stale} at version {version}");
        assert_eq!(body["error"]["code"], "version_mismatch", "{body}");
    }
    let not_a_version = client
        .post(format!("{run_url}/cancel"))
        .header("If-Match", "not-a-version")
        .send()
        .await
        .unwrap();
    assert_eq!(not_a_version.status(), 400);
    let unchanged = api.get_run(id).await.unwrap();
    assert_eq!(unchanged.version, version, "{unchanged:?}");
    assert_eq!(unchanged.status, RunStatus::Waiting);
    assert!(!unchanged.cancel_requested);

    api.cancel(id, Some(version)).await.unwrap();
    let cancelled = wait_for_status(&api, id, RunStatus::Cancelled).await;
    assert!(cancelled.version > version);
    assert!(
        event_types(&api, id)
            .await
            .contains(&"ExecutionCancelled".to_owned())
    );
    // Finished now: a second cancel is 409 whatever the version.
    assert_eq!(refused(api.cancel(id, None).await).0, 409);
    server.stop();
}

/// A workflow whose "payment provider" calls the callback URL back at once, inside the
/// step that submits the payment — before the run reaches `wait()`.
fn early_callback_registry() -> siesta::Registry {
    let mut registry = siesta_workflows::registry();
    registry.register("pay_at_once", |ctx: siesta::Context, _: Value| async move {
        let payment = ctx
            .create_callback::<Value>("payment")
            .timeout(Duration::from_secs(3600))
            .await?;
        let url = payment.url();
        let status: u16 = ctx
            .step("charge", move |_| async move {
                let r = reqwest::Client::new()
                    .post(&url)
                    .header("webhook-id", "psp-early-1")
                    .json(&json!({"status": "COMPLETED", "transaction_id": "txn_early"}))
                    .send()
                    .await?;
                Ok(r.status().as_u16())
            })
            .await?;
        let event = payment.wait().await?;
        Ok(json!({"webhook_status": status, "payment": event}))
    });
    registry
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_webhook_that_arrives_before_the_wait_is_kept_and_consumed() {
    let (server, _dir, base) = server_with(|_| {}, early_callback_registry()).await;
    let api = Client::new(&base);
    let run = start_run(&api, "pay_at_once", Value::Null).await;
    let done = finished(&api, &run.id).await;
    assert_eq!(done.status, RunStatus::Completed, "{done:?}");
    let output = done.output.unwrap();
    assert_eq!(output["webhook_status"], 200, "{output}");
    assert_eq!(output["payment"]["transaction_id"], "txn_early");
    let events = event_types(&api, &run.id).await;
    let at = |t: &str| events.iter().position(|e| e == t).unwrap_or(usize::MAX);
    assert!(
        at("CallbackDelivered") < at("StepSucceeded"),
        "delivered while the step that precedes the wait ran: {events:?}"
    );
    assert_eq!(
        events.iter().filter(|e| *e == "CallbackDelivered").count(),
        1
    );
    assert_eq!(
        events.iter().filter(|e| *e == "CallbackSucceeded").count(),
        1
    );
    server.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_after_the_payment_timed_out_is_gone_and_the_order_failed() {
    use siesta::{Clock, ManualClock};
    let clock = Arc::new(ManualClock::default());
    let injected: Arc<dyn Clock> = clock.clone();
    let (server, _dir, base) =
        server_with(|o| o.clock = Some(injected), siesta_workflows::registry()).await;
    let api = Client::new(&base);
    let run = start_run(&api, "order", json!({"item": "Lamp", "amount": 20})).await;
    let waiting = wait_for_status(&api, &run.id, RunStatus::Waiting).await;
    let hook = waiting.waits[0].url.clone().unwrap();
    let hour = Duration::from_secs(3600);
    assert_eq!(
        waiting.waits[0].deadline.map(|d| d.to_string()),
        Some(siesta_client::Rfc3339(clock.now().plus(hour)).to_string()),
        "{waiting:?}"
    );

    // A sweep or two at the old time change nothing; past the deadline, one times the
    // payment out and the order fails.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        api.get_run(&run.id).await.unwrap().status,
        RunStatus::Waiting
    );
    clock.advance(hour + Duration::from_secs(1));
    let failed = wait_for_status(&api, &run.id, RunStatus::Failed).await;
    assert!(
        serde_json::to_string(&failed.error)
            .unwrap()
            .contains("CallbackTimedOut"),
        "{failed:?}"
    );
    assert!(
        event_types(&api, &run.id)
            .await
            .contains(&"CallbackTimedOut".to_owned())
    );

    // Raw HTTP to the callback's public URL the run view handed out, as a provider posts.
    let late = reqwest::Client::new()
        .post(&hook)
        .header("webhook-id", "psp-late-1")
        .json(&json!({"status": "COMPLETED", "transaction_id": "txn_late"}))
        .send()
        .await
        .unwrap();
    assert_eq!(late.status(), 410);
    assert_eq!(late.json::<Value>().await.unwrap()["error"]["code"], "gone");
    let after = api.get_run(&run.id).await.unwrap();
    assert_eq!(
        after.version, failed.version,
        "the late webhook changed nothing"
    );
    assert_eq!(after.status, RunStatus::Failed);
    assert!(
        !event_types(&api, &run.id)
            .await
            .contains(&"CallbackDelivered".to_owned())
    );
    server.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_signature_scheme_accepts_old_and_new_secrets_and_refuses_forgeries_tampering_and_stale_timestamps()
 {
    use siesta_api::signature::{Scheme, Secret, sign};
    struct Case {
        source: &'static str,
        scheme: Scheme,
        old: &'static str,
        new: &'static str,
        wrong: &'static str,
    }
    let cases = [
        Case {
            source: "sw",
            scheme: Scheme::StandardWebhooks,
            old: "whsec_b2xkLXNlY3JldA==",
            new: "whsec_bmV3LXNlY3JldA==",
            wrong: "whsec_d3Jvbmc=",
        },
        Case {
            source: "stripe",
            scheme: Scheme::Stripe,
            old: "whsec_old_stripe_secret",
            new: "whsec_new_stripe_secret",
            wrong: "whsec_not_our_secret",
        },
        Case {
            source: "gh",
            scheme: Scheme::GitHub,
            old: "old github secret",
            new: "new github secret",
            wrong: "wrong github secret",
        },
    ];
    let config: Vec<Value> = cases
        .iter()
        .map(|c| {
            json!({"name": c.source, "scheme": c.scheme.as_str(), "secrets": [c.old, c.new],
                   "correlation": "/run_id", "event": "approval"})
        })
        .collect();
    let sources = siesta_api::WebhookSource::parse_all(&Value::from(config).to_string()).unwrap();
    let (server, _dir, base) =
        server_with(|o| o.sources = sources, siesta_workflows::registry()).await;
    let api = Client::new(&base);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;

    for case in &cases {
        let scheme = case.scheme;
        let name = case.source;
        let signed = |secret: &str, delivery: &str, at: i64, body: &[u8]| {
            sign(
                scheme,
                &Secret::parse(scheme, secret).unwrap(),
                delivery,
                at,
                body,
            )
        };
        let post =
            |headers: Vec<(String, String)>, body: Vec<u8>| post_source(&api, name, headers, body);
        // One approval run per secret, both waiting for their decision.
        let mut runs = Vec::new();
        for _ in 0..2 {
            let run = start_run(
                &api,
                "approval",
                json!({"change": format!("{name} change")}),
            )
            .await;
            let waiting = wait_for_status(&api, &run.id, RunStatus::Waiting).await;
            runs.push((run.id, waiting));
        }
        let body_for = |id: &str| {
            serde_json::to_vec(&json!({"run_id": id, "approved": true, "by": name})).unwrap()
        };
        let (new_id, new_waiting) = &runs[0];
        let body = body_for(new_id);
        let good = signed(case.new, "d-new", now, &body);

        let (status, error) = post(signed(case.wrong, "d-new", now, &body), body.clone()).await;
        assert_eq!(
            (status, &error["error"]["code"]),
            (401, &json!("bad_signature")),
            "{name} wrong secret: {error}"
        );
        let tampered = String::from_utf8(body.clone())
            .unwrap()
            .replace(&format!("\"by\":\"{name}\""), "\"by\":\"mallory\"")
            .into_bytes();
        assert_ne!(tampered, body);
        let (status, error) = post(good.clone(), tampered).await;
        assert_eq!(
            (status, &error["error"]["code"]),
            (401, &json!("bad_signature")),
            "{name} tampered: {error}"
        );
        let (status, error) = post(vec![], body.clone()).await;
        assert_eq!(status, 401, "{name} unsigned: {error}");
        if scheme != Scheme::GitHub {
            // GitHub signs no timestamp; the other two refuse one 10 minutes off either way.
            for at in [now - 600, now + 600] {
                let (status, error) =
                    post(signed(case.new, "d-new", at, &body), body.clone()).await;
                assert_eq!(
                    (status, &error["error"]["code"]),
                    (401, &json!("timestamp_out_of_tolerance")),
                    "{name} at {at} (now {now}): {error}"
                );
            }
        }
        let unchanged = api.get_run(new_id).await.unwrap();
        assert_eq!(
            unchanged.version, new_waiting.version,
            "{name}: {unchanged:?}"
        );
        assert!(
            !event_types(&api, new_id)
                .await
                .contains(&"EventDelivered".to_owned()),
            "{name}: refused webhooks delivered nothing"
        );

        // Signed with the new secret, under the delivery id the refused ones used: accepted.
        let (status, ack) = post(good, body.clone()).await;
        assert_eq!(
            (status, &ack["duplicate"]),
            (200, &json!(false)),
            "{name} new secret: {ack}"
        );
        // Signed with the old, still configured secret: accepted too.
        let (old_id, _) = &runs[1];
        let old_body = body_for(old_id);
        let (status, ack) = post(signed(case.old, "d-old", now, &old_body), old_body).await;
        assert_eq!(
            (status, &ack["duplicate"]),
            (200, &json!(false)),
            "{name} old secret: {ack}"
        );
        for id in [new_id, old_id] {
            let done = finished(&api, id).await;
            assert_eq!(done.status, RunStatus::Completed, "{name}: {done:?}");
            assert_eq!(
                done.output.as_ref().unwrap()["approved_by"],
                name,
                "{done:?}"
            );
        }
    }
    server.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_source_webhook_completes_the_callback_its_body_names_once_and_only_for_its_tenant()
 {
    use siesta_api::signature::{Scheme, Secret, sign};
    const SECRET: &str = "whsec_cHNwLXNlY3JldA==";
    let sources = siesta_api::WebhookSource::parse_all(&format!(
        r#"[{{"name": "psp", "scheme": "standard-webhooks", "secrets": ["{SECRET}"], "callback": "/callback_id"}},
            {{"name": "elsewhere", "tenant": "other", "scheme": "standard-webhooks", "secrets": ["{SECRET}"], "callback": "/callback_id"}}]"#
    ))
    .unwrap();
    let (server, _dir, base) =
        server_with(|o| o.sources = sources, siesta_workflows::registry()).await;
    let api = Client::new(&base);
    let run = start_run(&api, "order", json!({"item": "Lamp", "amount": 20})).await;
    let waiting = wait_for_status(&api, &run.id, RunStatus::Waiting).await;
    let callback_id = waiting.waits[0].callback_id.clone().unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let post = |source: &'static str, secret: &str, delivery: &str, body: &Value| {
        let body = serde_json::to_vec(body).unwrap();
        let secret = Secret::parse(Scheme::StandardWebhooks, secret).unwrap();
        let headers = sign(Scheme::StandardWebhooks, &secret, delivery, now, &body);
        post_source(&api, source, headers, body)
    };
    let paid =
        json!({"callback_id": callback_id, "status": "COMPLETED", "transaction_id": "txn_src"});

    let (status, _) = post("psp", "whsec_d3Jvbmc=", "d1", &paid).await;
    assert_eq!(status, 401, "wrong secret");
    let (status, _) = post("elsewhere", SECRET, "d1", &paid).await;
    assert_eq!(
        status, 404,
        "another tenant's source cannot reach this callback"
    );
    let (status, _) = post(
        "psp",
        SECRET,
        "d1",
        &json!({"callback_id": "cb_nope", "status": "COMPLETED", "transaction_id": "t"}),
    )
    .await;
    assert_eq!(status, 404, "unknown callback");
    let (status, _) = post(
        "psp",
        SECRET,
        "d1",
        &json!({"status": "COMPLETED", "transaction_id": "t"}),
    )
    .await;
    assert_eq!(status, 400, "no callback id in the body");
    let unchanged = api.get_run(&run.id).await.unwrap();
    assert_eq!(unchanged.version, waiting.version, "{unchanged:?}");

    let (status, refused) = post(
        "psp",
        SECRET,
        "d1",
        &json!({"callback_id": callback_id, "status": "COMPLETED"}),
    )
    .await;
    assert_eq!(status, 422, "the wrong shape for a PaymentEvent: {refused}");
    assert_eq!(refused["error"]["code"], "delivery_rejected");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("transaction_id"),
        "{refused}"
    );
    let unchanged = api.get_run(&run.id).await.unwrap();
    assert_eq!(unchanged.version, waiting.version, "{unchanged:?}");

    let (status, ack) = post("psp", SECRET, "d1", &paid).await;
    assert_eq!((status, &ack["duplicate"]), (200, &json!(false)), "{ack}");
    let done = finished(&api, &run.id).await;
    assert_eq!(done.status, RunStatus::Completed, "{done:?}");
    assert_eq!(done.output.unwrap()["transaction_id"], "txn_src");
    let (status, ack) = post("psp", SECRET, "d1", &paid).await;
    assert_eq!(
        (status, &ack["duplicate"]),
        (200, &json!(true)),
        "the provider's retry: {ack}"
    );
    let (status, _) = post("psp", SECRET, "d2", &paid).await;
    assert_eq!(status, 410, "another delivery to the closed callback");
    let events = event_types(&api, &run.id).await;
    assert_eq!(
        events.iter().filter(|e| *e == "CallbackDelivered").count(),
        1,
        "{events:?}"
    );
    server.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_cursor_put_raw_into_the_next_url_pages_through_every_run() {
    let (server, _dir, base) = server("").await;
    let started = common::start_approvals(&base, 3).await;
    // Raw HTTP: the test is about a cursor put into the next page's URL as it is, as a
    // client that does not encode it writes it (the typed client encodes its queries).
    let client = reqwest::Client::new();
    let listed = common::list_through_raw_cursors(&client, &base).await;
    assert_eq!(listed, started);
    server.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_on_its_own_niced_runtime_takes_runs_to_their_wait_and_stops_with_the_server() {
    let (server, _dir, base) = server_with(
        |options| options.worker_nice = 10,
        siesta_workflows::registry(),
    )
    .await;
    let api = Client::new(&base);
    let run = start_run(&api, "order", json!({"item": "Lamp", "amount": 20})).await;
    // Only the worker takes a run to its wait.
    wait_for_status(&api, &run.id, RunStatus::Waiting).await;
    assert!(server.liveness.is_alive());
    // Inside a runtime: stopping shuts the worker's runtime down without blocking
    // (dropping a Tokio runtime here the ordinary way would panic).
    server.stop();
}
