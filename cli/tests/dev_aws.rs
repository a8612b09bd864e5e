//! `siesta dev --backend aws` through real HTTP: the dev stack on DynamoDB Local and
//! LocalStack (S3, SQS), resources made from infra/template.yaml. Skips without the
//! emulators unless the test command requires them.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use siesta::retention::RetentionPolicy;
use siesta::{Context, ManualClock, Registry, RunId, RunStatus, TenantId};
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
    let api = siesta_client::Client::new(&base);

    let run = api
        .start_run(
            "order",
            &json!({"item": "Lamp", "amount": 20}),
            &siesta_client::StartOptions::default(),
        )
        .await
        .unwrap();
    let mut waiting = api.get_run(&run.id).await.unwrap();
    for _ in 0..200 {
        if waiting.status == RunStatus::Waiting {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        waiting = api.get_run(&run.id).await.unwrap();
    }
    assert_eq!(waiting.status, RunStatus::Waiting, "{waiting:?}");
    let callback_id = waiting.waits[0].callback_id.clone().unwrap();

    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let paid =
        json!({"callback_id": callback_id, "status": "COMPLETED", "transaction_id": "txn_aws"});
    let post = |secret: &str, delivery: &str| {
        let body = serde_json::to_vec(&paid).unwrap();
        let secret = Secret::parse(Scheme::StandardWebhooks, secret).unwrap();
        let headers = sign(Scheme::StandardWebhooks, &secret, delivery, now, &body);
        let api = &api;
        async move {
            match api.source_webhook("psp", &headers, body).await {
                Ok(received) => (200, serde_json::to_value(received).unwrap()),
                Err(siesta_client::Error::Api { status, body, .. }) => {
                    (status.as_u16(), body.unwrap_or_default())
                }
                Err(e) => panic!("the webhook did not reach the API: {e}"),
            }
        }
    };

    let (status, _) = post("whsec_d3Jvbmc=", "d1").await;
    assert_eq!(status, 401, "a forged webhook is refused");
    let (status, ack) = post(SECRET, "d1").await;
    assert_eq!((status, &ack["duplicate"]), (200, &json!(false)), "{ack}");
    let siesta_client::RunOutcome::Finished(done) =
        api.run_result(&run.id, Some(20)).await.unwrap()
    else {
        panic!("the run finished within 20 s");
    };
    assert_eq!(done.status, RunStatus::Completed, "{done:?}");
    assert_eq!(done.output.unwrap()["transaction_id"], "txn_aws");
    let version = api.get_run(&run.id).await.unwrap().version;

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
    let after = api.get_run(&run.id).await.unwrap();
    assert_eq!(after.version, version, "duplicates changed nothing");
    let timeline = api.full_timeline(&run.id).await.unwrap();
    let delivered = timeline
        .iter()
        .filter(|e| e.event_type == siesta::EventType::CallbackDelivered)
        .count();
    assert_eq!(delivered, 1, "{timeline:?}");
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
    let started = common::start_approvals(&base, 3).await;
    // Raw HTTP: the test is about a cursor put into the next page's URL as it is.
    let client = reqwest::Client::new();
    let listed = common::list_through_raw_cursors(&client, &base).await;
    // The table is shared with other tests of the tenant `default`: every run started
    // here is listed, each page reached through the cursor as it came.
    assert!(listed.is_superset(&started), "{listed:?} ⊉ {started:?}");
    server.stop();
}

/// `siesta dev --backend aws --retention 1h`: the dev server's reaper is the AWS
/// backend's, at the given retention — a finished run is gone once an hour has passed
/// on the server's clock, a run still waiting (started at the same time) is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_the_aws_backend_the_dev_server_removes_a_finished_run_past_its_retention_and_keeps_a_waiting_one()
 {
    let Some(env) = siesta_aws::testing::emulators().await else {
        return;
    };
    // A table of its own: the reaper reads the whole table's reap index.
    env.in_own_table(|env| async move {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::default());
        let mut options = DevOptions::new(dir.path().to_owned());
        options.clock = Some(clock.clone());
        options.reap_every = Duration::from_millis(50);
        options.retention = RetentionPolicy::keep_for(Some(Duration::from_secs(3600)));
        options.use_aws(
            &env.sdk,
            env.names(5).await,
            siesta_aws::AwsOptions::default(),
        );
        let mut registry = Registry::new();
        registry.register(
            "quick",
            |_: Context, _: Value| async move { Ok(json!("done")) },
        );
        registry.register("patient", |ctx: Context, _: Value| async move {
            ctx.wait_for_event::<Value>("go").await
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let server = start(listener, options, registry).await.unwrap();
        let engine = server.engine.clone();
        let tenant = TenantId::from("default");
        let quick = engine
            .start(&tenant, "quick", json!({}), None)
            .await
            .unwrap();
        let patient = engine
            .start(&tenant, "patient", json!({}), None)
            .await
            .unwrap();
        let status = |id: RunId| {
            let engine = engine.clone();
            let tenant = tenant.clone();
            async move { engine.get_run(&tenant, &id).await.map(|r| r.status) }
        };
        for _ in 0..400 {
            if status(quick.id.clone()).await.ok() == Some(RunStatus::Completed)
                && status(patient.id.clone()).await.ok() == Some(RunStatus::Waiting)
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        assert_eq!(
            status(quick.id.clone()).await.unwrap(),
            RunStatus::Completed
        );
        assert_eq!(
            status(patient.id.clone()).await.unwrap(),
            RunStatus::Waiting
        );

        clock.advance(Duration::from_secs(3700));
        let mut removed = false;
        for _ in 0..400 {
            if matches!(
                engine.get_run(&tenant, &quick.id).await,
                Err(siesta::EngineError::NotFound)
            ) {
                removed = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        assert!(
            removed,
            "the finished run is removed once its retention passed"
        );
        assert_eq!(
            status(patient.id.clone()).await.unwrap(),
            RunStatus::Waiting,
            "a waiting run of the same age is kept"
        );
        server.stop();
    })
    .await;
}
