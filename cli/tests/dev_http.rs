//! `siesta dev` through real HTTP on an ephemeral port.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use siesta_app::dev::{DevOptions, DevServer, start};

mod common;
use common::get_json;

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

/// The `EventType`s of a run's timeline, in order.
async fn event_types(client: &reqwest::Client, run_url: &str) -> Vec<String> {
    get_json(client, &format!("{run_url}/timeline?limit=1000")).await["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["EventType"].as_str().unwrap().to_owned())
        .collect()
}

async fn wait_for_status(
    client: &reqwest::Client,
    url: &str,
    key: Option<&str>,
    status: &str,
) -> Value {
    for _ in 0..200 {
        let mut req = client.get(url);
        if let Some(k) = key {
            req = req.bearer_auth(k);
        }
        let body: Value = req.send().await.unwrap().json().await.unwrap();
        if body["status"] == status {
            return body;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("{url} never reached {status}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn order_pauses_a_webhook_resumes_it_and_the_same_webhook_again_changes_nothing() {
    let (server, _dir, base) = server("").await;
    let client = reqwest::Client::new();
    // Starts and reads through the typed client; the webhook stays raw HTTP, as a
    // provider sends it to the callback's public URL.
    let api = siesta_client::Client::with_http(client.clone(), &base);
    let run = api
        .start_run(
            "order",
            &json!({"item": "Lamp", "amount": 20}),
            &siesta_client::StartOptions::default(),
        )
        .await
        .unwrap();
    let run_url = format!("{base}/runs/{}", run.id);
    let waiting = wait_for_status(&client, &run_url, None, "waiting").await;
    let hook = waiting["waits"][0]["url"].as_str().unwrap().to_owned();
    assert!(hook.starts_with(&base), "{hook}");

    let payment = json!({"status": "COMPLETED", "transaction_id": "txn_42"});
    let first = client
        .post(&hook)
        .header("webhook-id", "msg_1")
        .json(&payment)
        .send()
        .await
        .unwrap();
    assert_eq!(first.status(), 200);
    let siesta_client::RunOutcome::Finished(done) =
        api.run_result(&run.id, Some(10)).await.unwrap()
    else {
        panic!("the run finished within 10 s");
    };
    assert_eq!(done.status, siesta::RunStatus::Completed, "{done:?}");
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
    let client = reqwest::Client::new();
    let run: Value = client
        .post(format!("{base}/runs"))
        .json(&json!({"workflow": "order", "input": {"item": "Lamp", "amount": 20}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let waiting = wait_for_status(
        &client,
        &format!("{base}/runs/{}", run["id"].as_str().unwrap()),
        None,
        "waiting",
    )
    .await;
    let hook = waiting["waits"][0]["url"].as_str().unwrap().to_owned();
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
    let still: Value = client
        .get(format!("{base}/runs/{}", run["id"].as_str().unwrap()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(still["status"], "waiting");
    server.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenant_b_cannot_see_cancel_or_signal_tenant_a_run() {
    let (server, _dir, base) = server("key-a=tenant-a,key-b=tenant-b").await;
    let client = reqwest::Client::new();
    let no_key = client.get(format!("{base}/runs")).send().await.unwrap();
    assert_eq!(no_key.status(), 401);
    let run: Value = client
        .post(format!("{base}/runs"))
        .bearer_auth("key-a")
        .json(&json!({"workflow": "order", "input": {"item": "Lamp", "amount": 20}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = run["id"].as_str().unwrap();
    wait_for_status(
        &client,
        &format!("{base}/runs/{id}"),
        Some("key-a"),
        "waiting",
    )
    .await;
    assert_eq!(
        client
            .get(format!("{base}/runs/{id}"))
            .bearer_auth("key-b")
            .send()
            .await
            .unwrap()
            .status(),
        404
    );
    assert_eq!(
        client
            .post(format!("{base}/runs/{id}/cancel"))
            .bearer_auth("key-b")
            .send()
            .await
            .unwrap()
            .status(),
        404
    );
    assert_eq!(
        client
            .post(format!("{base}/runs/{id}/events/approval"))
            .bearer_auth("key-b")
            .json(&true)
            .send()
            .await
            .unwrap()
            .status(),
        404
    );
    let a: Value = client
        .get(format!("{base}/runs/{id}"))
        .bearer_auth("key-a")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(a["status"], "waiting");
    let stale = client
        .post(format!("{base}/runs/{id}/cancel"))
        .bearer_auth("key-a")
        .header("If-Match", "\"1\"")
        .send()
        .await
        .unwrap();
    assert_eq!(stale.status(), 412);
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
    let client = reqwest::Client::new();
    let run: Value = client
        .post(format!("{base}/runs"))
        .json(&json!({"workflow": "approval", "input": {"change": "bump the API"}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = run["id"].as_str().unwrap().to_owned();
    let hook = format!("{base}/hooks/sources/ci");
    let body =
        serde_json::to_vec(&json!({"run_id": id, "approved": true, "by": "ci-bot"})).unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let post = |headers: Vec<(String, String)>, body: Vec<u8>| {
        let mut req = client.post(&hook).body(body);
        for (k, v) in headers {
            req = req.header(k, v);
        }
        req.send()
    };
    // Wrong secret, tampered body, stale timestamp, no signature: 401, nothing delivered.
    let wrong = sign(
        Scheme::StandardWebhooks,
        &Secret::parse(Scheme::StandardWebhooks, "whsec_d3Jvbmc=").unwrap(),
        "msg_0",
        now,
        &body,
    );
    assert_eq!(post(wrong, body.clone()).await.unwrap().status(), 401);
    let good = sign(
        Scheme::StandardWebhooks,
        &Secret::parse(Scheme::StandardWebhooks, "whsec_bmV3LXNlY3JldA==").unwrap(),
        "msg_1",
        now,
        &body,
    );
    let mut tampered = body.clone();
    tampered[2] ^= 1;
    assert_eq!(post(good.clone(), tampered).await.unwrap().status(), 401);
    let stale = sign(
        Scheme::StandardWebhooks,
        &Secret::parse(Scheme::StandardWebhooks, "whsec_b2xkLXNlY3JldA==").unwrap(),
        "msg_1",
        now - 3600,
        &body,
    );
    assert_eq!(post(stale, body.clone()).await.unwrap().status(), 401);
    assert_eq!(post(vec![], body.clone()).await.unwrap().status(), 401);
    let timeline: Value = client
        .get(format!("{base}/runs/{id}/timeline"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(
        !timeline.to_string().contains("EventDelivered"),
        "bad webhooks delivered nothing"
    );
    // Signed with the rotated-in secret: accepted (whether or not the run waits yet), once.
    let first = post(good.clone(), body.clone()).await.unwrap();
    assert_eq!(first.status(), 200);
    let again: Value = post(good, body.clone())
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(again["duplicate"], true);
    let done: Value = client
        .get(format!("{base}/runs/{id}/result"))
        .header("Prefer", "wait=10")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(done["status"], "completed", "{done}");
    let unknown = client
        .post(format!("{base}/hooks/sources/nope"))
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(unknown.status(), 404);
    server.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_concurrent_duplicate_deliveries_wake_the_run_exactly_once() {
    let (server, _dir, base) = server("").await;
    let client = reqwest::Client::new();
    let run: Value = client
        .post(format!("{base}/runs"))
        .json(&json!({"workflow": "order", "input": {"item": "Lamp", "amount": 20}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let run_url = format!("{base}/runs/{}", run["id"].as_str().unwrap());
    let waiting = wait_for_status(&client, &run_url, None, "waiting").await;
    let hook = waiting["waits"][0]["url"].as_str().unwrap().to_owned();
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
    let done: Value = client
        .get(format!("{run_url}/result"))
        .header("Prefer", "wait=10")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(done["status"], "completed", "{done}");
    let timeline: Value = client
        .get(format!("{run_url}/timeline?limit=1000"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let count = |t: &str| {
        timeline["events"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["EventType"] == t)
            .count()
    };
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
    let client = reqwest::Client::new();
    let start_run = |key: &str, body: &Value| {
        client
            .post(format!("{base}/runs"))
            .header("Idempotency-Key", key)
            .json(body)
            .send()
    };
    let lamp = json!({"workflow": "order", "input": {"item": "Lamp", "amount": 20}});
    let first = start_run("order-1", &lamp).await.unwrap();
    assert_eq!(first.status(), 201);
    assert!(first.headers().get("idempotent-replayed").is_none());
    let first: Value = first.json().await.unwrap();
    let id = first["id"].as_str().unwrap().to_owned();
    let run_url = format!("{base}/runs/{id}");
    wait_for_status(&client, &run_url, None, "waiting").await;

    // The same key and body: the first run, as it is now; nothing new is started.
    let replay = start_run("order-1", &lamp).await.unwrap();
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
        let mismatch = start_run("order-1", &other).await.unwrap();
        assert_eq!(mismatch.status(), 422, "{other}");
        let body: Value = mismatch.json().await.unwrap();
        assert_eq!(body["error"]["code"], "idempotency_key_reused", "{body}");
    }
    let runs = get_json(&client, &format!("{base}/runs")).await["runs"].clone();
    assert_eq!(runs.as_array().unwrap().len(), 1, "{runs}");
    assert_eq!(runs[0]["id"], id.as_str());
    let events = event_types(&client, &run_url).await;
    assert_eq!(
        events.iter().filter(|e| *e == "ExecutionStarted").count(),
        1,
        "{events:?}"
    );
    let view = get_json(&client, &run_url).await;
    assert_eq!(view["input"], lamp["input"], "the first body is kept");

    // The same key and input for another workflow (an input both accept): 422 too.
    let both = json!({"item": "Lamp", "amount": 20, "change": "Lamp"});
    let as_order = start_run("order-3", &json!({"workflow": "order", "input": both}))
        .await
        .unwrap();
    assert_eq!(as_order.status(), 201);
    let as_approval = start_run("order-3", &json!({"workflow": "approval", "input": both}))
        .await
        .unwrap();
    assert_eq!(as_approval.status(), 422);
    assert_eq!(
        as_approval.json::<Value>().await.unwrap()["error"]["code"],
        "idempotency_key_reused"
    );

    // Another key is another run.
    let second = start_run("order-2", &lamp).await.unwrap();
    assert_eq!(second.status(), 201);
    assert!(second.headers().get("idempotent-replayed").is_none());
    let second: Value = second.json().await.unwrap();
    assert_ne!(second["id"], id.as_str());

    // An input too large to keep inline (stored as an artifact) replays and mismatches
    // the same way.
    let big_item = "x".repeat(40 * 1024);
    let big = json!({"workflow": "order", "input": {"item": big_item, "amount": 5}});
    let big_first: Value = start_run("order-big", &big)
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let big_replay = start_run("order-big", &big).await.unwrap();
    assert_eq!(big_replay.status(), 201);
    assert_eq!(big_replay.headers()["idempotent-replayed"], "true");
    assert_eq!(
        big_replay.json::<Value>().await.unwrap()["id"],
        big_first["id"]
    );
    let big_other =
        json!({"workflow": "order", "input": {"item": format!("{big_item}y"), "amount": 5}});
    assert_eq!(
        start_run("order-big", &big_other).await.unwrap().status(),
        422
    );
    let runs = get_json(&client, &format!("{base}/runs")).await["runs"].clone();
    assert_eq!(runs.as_array().unwrap().len(), 4, "{runs}");
    server.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_of_the_wrong_shape_is_refused_and_the_right_one_still_completes_the_order() {
    let (server, _dir, base) = server("").await;
    let client = reqwest::Client::new();
    let run: Value = client
        .post(format!("{base}/runs"))
        .json(&json!({"workflow": "order", "input": {"item": "Lamp", "amount": 20}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let run_url = format!("{base}/runs/{}", run["id"].as_str().unwrap());
    let waiting = wait_for_status(&client, &run_url, None, "waiting").await;
    let hook = waiting["waits"][0]["url"].as_str().unwrap().to_owned();
    let callback = waiting["waits"][0]["callback_id"].as_str().unwrap();
    let succeed = format!("{base}/callbacks/{callback}/succeed");

    for (url, body) in [
        (&hook, json!({"unexpected": true})),
        (&hook, json!({"status": "COMPLETED", "transaction_id": 42})),
        (&succeed, json!({"status": "COMPLETED"})),
    ] {
        let r = client.post(url).json(&body).send().await.unwrap();
        assert_eq!(r.status(), 422, "{url} {body}");
        let error: Value = r.json().await.unwrap();
        assert_eq!(error["error"]["code"], "delivery_rejected", "{error}");
    }
    let still = get_json(&client, &run_url).await;
    assert_eq!(still["status"], "waiting");
    assert_eq!(still["version"], waiting["version"], "nothing was recorded");
    assert_eq!(
        still["waits"][0]["url"],
        hook.as_str(),
        "the callback is open"
    );

    let paid = client
        .post(&hook)
        .json(&json!({"status": "COMPLETED", "transaction_id": "txn_ok"}))
        .send()
        .await
        .unwrap();
    assert_eq!(paid.status(), 200);
    let done: Value = client
        .get(format!("{run_url}/result"))
        .header("Prefer", "wait=10")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["output"]["transaction_id"], "txn_ok");
    server.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn if_match_cancel_refuses_a_stale_version_and_cancels_at_the_current_one() {
    let (server, _dir, base) = server("").await;
    let client = reqwest::Client::new();
    let run: Value = client
        .post(format!("{base}/runs"))
        .json(&json!({"workflow": "order", "input": {"item": "Lamp", "amount": 20}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let run_url = format!("{base}/runs/{}", run["id"].as_str().unwrap());
    let waiting = wait_for_status(&client, &run_url, None, "waiting").await;
    let version = waiting["version"].as_u64().unwrap();
    let shown = client.get(&run_url).send().await.unwrap();
    let etag = shown.headers()["etag"].to_str().unwrap().to_owned();
    assert_eq!(etag, format!("\"{version}\""));
    let cancel = |if_match: String| {
        client
            .post(format!("{run_url}/cancel"))
            .header("If-Match", if_match)
            .send()
    };

    for stale in [version - 1, version + 1] {
        let r = cancel(format!("\"{stale}\"")).await.unwrap();
        assert_eq!(r.status(), 412, "If-Match {stale} at version {version}");
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["error"]["code"], "version_mismatch", "{body}");
    }
    assert_eq!(cancel("not-a-version".into()).await.unwrap().status(), 400);
    let unchanged = get_json(&client, &run_url).await;
    assert_eq!(unchanged["version"], version, "{unchanged}");
    assert_eq!(unchanged["status"], "waiting");
    assert_eq!(unchanged["cancel_requested"], false);

    let r = cancel(etag.clone()).await.unwrap();
    assert!(r.status() == 200 || r.status() == 202, "{}", r.status());
    let cancelled = wait_for_status(&client, &run_url, None, "cancelled").await;
    assert!(cancelled["version"].as_u64().unwrap() > version);
    assert!(
        event_types(&client, &run_url)
            .await
            .contains(&"ExecutionCancelled".to_owned())
    );
    // Finished now: a second cancel is 409 whatever the version.
    assert_eq!(
        client
            .post(format!("{run_url}/cancel"))
            .send()
            .await
            .unwrap()
            .status(),
        409
    );
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
    let client = reqwest::Client::new();
    let run: Value = client
        .post(format!("{base}/runs"))
        .json(&json!({"workflow": "pay_at_once", "input": null}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let run_url = format!("{base}/runs/{}", run["id"].as_str().unwrap());
    let done: Value = client
        .get(format!("{run_url}/result"))
        .header("Prefer", "wait=10")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["output"]["webhook_status"], 200, "{done}");
    assert_eq!(done["output"]["payment"]["transaction_id"], "txn_early");
    let events = event_types(&client, &run_url).await;
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
    let client = reqwest::Client::new();
    let run: Value = client
        .post(format!("{base}/runs"))
        .json(&json!({"workflow": "order", "input": {"item": "Lamp", "amount": 20}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let run_url = format!("{base}/runs/{}", run["id"].as_str().unwrap());
    let waiting = wait_for_status(&client, &run_url, None, "waiting").await;
    let hook = waiting["waits"][0]["url"].as_str().unwrap().to_owned();
    let hour = Duration::from_secs(3600);
    assert_eq!(
        waiting["waits"][0]["deadline"],
        siesta_api::Rfc3339(clock.now().plus(hour)).to_string(),
        "{waiting}"
    );

    // A sweep or two at the old time change nothing; past the deadline, one times the
    // payment out and the order fails.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(get_json(&client, &run_url).await["status"], "waiting");
    clock.advance(hour + Duration::from_secs(1));
    let failed = wait_for_status(&client, &run_url, None, "failed").await;
    assert!(
        failed["error"].to_string().contains("CallbackTimedOut"),
        "{failed}"
    );
    assert!(
        event_types(&client, &run_url)
            .await
            .contains(&"CallbackTimedOut".to_owned())
    );

    let late = client
        .post(&hook)
        .header("webhook-id", "psp-late-1")
        .json(&json!({"status": "COMPLETED", "transaction_id": "txn_late"}))
        .send()
        .await
        .unwrap();
    assert_eq!(late.status(), 410);
    assert_eq!(late.json::<Value>().await.unwrap()["error"]["code"], "gone");
    let after = get_json(&client, &run_url).await;
    assert_eq!(
        after["version"], failed["version"],
        "the late webhook changed nothing"
    );
    assert_eq!(after["status"], "failed");
    assert!(
        !event_types(&client, &run_url)
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
    let client = reqwest::Client::new();
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
        let post = |headers: Vec<(String, String)>, body: Vec<u8>| {
            let mut req = client
                .post(format!("{base}/hooks/sources/{name}"))
                .body(body);
            for (k, v) in headers {
                req = req.header(k, v);
            }
            async move {
                let r = req.send().await.unwrap();
                let status = r.status().as_u16();
                (status, r.json::<Value>().await.unwrap())
            }
        };
        // One approval run per secret, both waiting for their decision.
        let mut runs = Vec::new();
        for _ in 0..2 {
            let run: Value = client
                .post(format!("{base}/runs"))
                .json(
                    &json!({"workflow": "approval", "input": {"change": format!("{name} change")}}),
                )
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            let url = format!("{base}/runs/{}", run["id"].as_str().unwrap());
            let waiting = wait_for_status(&client, &url, None, "waiting").await;
            runs.push((run["id"].as_str().unwrap().to_owned(), url, waiting));
        }
        let body_for = |id: &str| {
            serde_json::to_vec(&json!({"run_id": id, "approved": true, "by": name})).unwrap()
        };
        let (new_id, new_url, new_waiting) = &runs[0];
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
        let unchanged = get_json(&client, new_url).await;
        assert_eq!(
            unchanged["version"], new_waiting["version"],
            "{name}: {unchanged}"
        );
        assert!(
            !event_types(&client, new_url)
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
        let (old_id, old_url, _) = &runs[1];
        let old_body = body_for(old_id);
        let (status, ack) = post(signed(case.old, "d-old", now, &old_body), old_body).await;
        assert_eq!(
            (status, &ack["duplicate"]),
            (200, &json!(false)),
            "{name} old secret: {ack}"
        );
        for url in [new_url, old_url] {
            let done: Value = client
                .get(format!("{url}/result"))
                .header("Prefer", "wait=10")
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            assert_eq!(done["status"], "completed", "{name}: {done}");
            assert_eq!(done["output"]["approved_by"], name, "{done}");
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
    let client = reqwest::Client::new();
    let run: Value = client
        .post(format!("{base}/runs"))
        .json(&json!({"workflow": "order", "input": {"item": "Lamp", "amount": 20}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let run_url = format!("{base}/runs/{}", run["id"].as_str().unwrap());
    let waiting = wait_for_status(&client, &run_url, None, "waiting").await;
    let callback_id = waiting["waits"][0]["callback_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let post = |source: &str, secret: &str, delivery: &str, body: &Value| {
        let body = serde_json::to_vec(body).unwrap();
        let secret = Secret::parse(Scheme::StandardWebhooks, secret).unwrap();
        let mut req = client.post(format!("{base}/hooks/sources/{source}"));
        for (k, v) in sign(Scheme::StandardWebhooks, &secret, delivery, now, &body) {
            req = req.header(k, v);
        }
        async move {
            let r = req.body(body).send().await.unwrap();
            let status = r.status().as_u16();
            (status, r.json::<Value>().await.unwrap())
        }
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
    let unchanged = get_json(&client, &run_url).await;
    assert_eq!(unchanged["version"], waiting["version"], "{unchanged}");

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
    let unchanged = get_json(&client, &run_url).await;
    assert_eq!(unchanged["version"], waiting["version"], "{unchanged}");

    let (status, ack) = post("psp", SECRET, "d1", &paid).await;
    assert_eq!((status, &ack["duplicate"]), (200, &json!(false)), "{ack}");
    let done: Value = client
        .get(format!("{run_url}/result"))
        .header("Prefer", "wait=10")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["output"]["transaction_id"], "txn_src");
    let (status, ack) = post("psp", SECRET, "d1", &paid).await;
    assert_eq!(
        (status, &ack["duplicate"]),
        (200, &json!(true)),
        "the provider's retry: {ack}"
    );
    let (status, _) = post("psp", SECRET, "d2", &paid).await;
    assert_eq!(status, 410, "another delivery to the closed callback");
    let events = event_types(&client, &run_url).await;
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
    let client = reqwest::Client::new();
    let started = common::start_approvals(&client, &base, 3).await;
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
    let client = reqwest::Client::new();
    let created = client
        .post(format!("{base}/runs"))
        .json(&json!({"workflow": "order", "input": {"item": "Lamp", "amount": 20}}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
    let run: Value = created.json().await.unwrap();
    let run_url = format!("{base}/runs/{}", run["id"].as_str().unwrap());
    // Only the worker takes a run to its wait.
    wait_for_status(&client, &run_url, None, "waiting").await;
    assert!(server.liveness.is_alive());
    // Inside a runtime: stopping shuts the worker's runtime down without blocking
    // (dropping a Tokio runtime here the ordinary way would panic).
    server.stop();
}
