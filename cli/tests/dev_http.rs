//! `siesta dev` through real HTTP on an ephemeral port.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use siesta_cli::dev::{DevOptions, DevServer, start};

async fn server(keys: &str) -> (DevServer, tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let mut options = DevOptions::new(dir.path().to_owned());
    options.api_keys = DevOptions::parse_api_keys(keys).unwrap();
    options.sweep_every = Duration::from_millis(200);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = start(listener, options, siesta_workflows::registry())
        .await
        .unwrap();
    let base = format!("http://{}", server.addr);
    (server, dir, base)
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
    let created = client
        .post(format!("{base}/runs"))
        .json(&json!({"workflow": "order", "input": {"item": "Lamp", "amount": 20}}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
    let run: Value = created.json().await.unwrap();
    let run_url = format!("{base}/runs/{}", run["id"].as_str().unwrap());
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
    assert_eq!(done["output"]["transaction_id"], "txn_42");
    let version = client
        .get(&run_url)
        .send()
        .await
        .unwrap()
        .json::<Value>()
        .await
        .unwrap()["version"]
        .clone();

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
    let after: Value = client
        .get(&run_url)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(after["version"], version, "neither changed anything");
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
