//! `siesta dev --backend aws` through real HTTP: the dev stack on DynamoDB Local and
//! LocalStack (S3, SQS), resources made from infra/template.yaml. Skips without the
//! emulators unless the test command requires them.

use std::time::Duration;

use serde_json::{Value, json};
use siesta_api::signature::{Scheme, Secret, sign};
use siesta_app::dev::{DevOptions, start};

mod common;

const SECRET: &str = "whsec_cHNwLXNlY3JldA==";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_the_aws_backend_an_order_pauses_a_signed_webhook_resumes_it_and_duplicates_change_nothing()
 {
    let Some(env) = siesta_aws::testing::emulators().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut options = DevOptions::new(dir.path().to_owned());
    options.sweep_every = Duration::from_millis(500);
    options.sources = siesta_api::WebhookSource::parse_all(&format!(
        r#"[{{"name": "psp", "scheme": "standard-webhooks", "secrets": ["{SECRET}"], "callback": "/callback_id"}}]"#
    ))
    .unwrap();
    options.backend = Some(env.backend(5).await.backend());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = start(listener, options, siesta_workflows::registry())
        .await
        .unwrap();
    let base = format!("http://{}", server.addr);
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
    let mut waiting = Value::Null;
    for _ in 0..200 {
        waiting = client
            .get(&run_url)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if waiting["status"] == "waiting" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(waiting["status"], "waiting", "{waiting}");
    let callback_id = waiting["waits"][0]["callback_id"]
        .as_str()
        .unwrap()
        .to_owned();

    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let paid =
        json!({"callback_id": callback_id, "status": "COMPLETED", "transaction_id": "txn_aws"});
    let post = |secret: &str, delivery: &str| {
        let body = serde_json::to_vec(&paid).unwrap();
        let secret = Secret::parse(Scheme::StandardWebhooks, secret).unwrap();
        let mut req = client.post(format!("{base}/hooks/sources/psp"));
        for (k, v) in sign(Scheme::StandardWebhooks, &secret, delivery, now, &body) {
            req = req.header(k, v);
        }
        async move {
            let r = req.body(body).send().await.unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap())
        }
    };

    let (status, _) = post("whsec_d3Jvbmc=", "d1").await;
    assert_eq!(status, 401, "a forged webhook is refused");
    let (status, ack) = post(SECRET, "d1").await;
    assert_eq!((status, &ack["duplicate"]), (200, &json!(false)), "{ack}");
    let done: Value = client
        .get(format!("{run_url}/result"))
        .header("Prefer", "wait=20")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["output"]["transaction_id"], "txn_aws");
    let version = client
        .get(&run_url)
        .send()
        .await
        .unwrap()
        .json::<Value>()
        .await
        .unwrap()["version"]
        .clone();

    let (status, ack) = post(SECRET, "d1").await;
    assert_eq!(
        (status, &ack["duplicate"]),
        (200, &json!(true)),
        "the retry: {ack}"
    );
    let (status, _) = post(SECRET, "d2").await;
    assert_eq!(
        status, 410,
        "a new delivery for the closed callback is gone"
    );
    tokio::time::sleep(Duration::from_millis(600)).await;
    let after: Value = client
        .get(&run_url)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(after["version"], version, "duplicates changed nothing");
    let timeline: Value = client
        .get(format!("{run_url}/timeline?limit=1000"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let delivered = timeline["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["EventType"] == "CallbackDelivered")
        .count();
    assert_eq!(delivered, 1, "{timeline}");
    server.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_the_aws_backend_a_list_cursor_put_raw_into_the_next_url_pages_through_every_run() {
    let Some(env) = siesta_aws::testing::emulators().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut options = DevOptions::new(dir.path().to_owned());
    options.backend = Some(env.backend(5).await.backend());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = start(listener, options, siesta_workflows::registry())
        .await
        .unwrap();
    let base = format!("http://{}", server.addr);
    let client = reqwest::Client::new();
    let started = common::start_approvals(&client, &base, 3).await;
    let listed = common::list_through_raw_cursors(&client, &base).await;
    // The table is shared with other tests of the tenant `default`: every run started
    // here is listed, each page reached through the cursor as it came.
    assert!(listed.is_superset(&started), "{listed:?} ⊉ {started:?}");
    server.stop();
}
