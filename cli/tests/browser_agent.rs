//! The `agent` example in a real browser (headless Chromium through chromedriver, as in
//! `browser.rs`): the model's words arrive live on the run page while its call is in
//! progress, and the refund it asks for is approved there.
//!
//! The model is the example's built-in fake, held back word by word by the test: each
//! word of its second reply goes out only when the test lets it, so the test sees the
//! page show text that the journal does not hold yet. No wait is a sleep.

use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};
use futures::FutureExt as _;
use serde_json::json;
use siesta::Registry;
use siesta_ai::{Model, ModelError, ModelReply, ModelRequest, Role, TokenSink};
use siesta_app::dev::{DevOptions, start};
use siesta_workflows::{SupportDemoModel, agent_with};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;
use tokio::sync::Semaphore;

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
const PATIENCE: Duration = Duration::from_secs(30);
const CHROMIUM_FLAGS: &[&str] = &[
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1400,1000",
];

/// The example's fake model, whose second reply (after the order lookup) goes out one
/// word per permit of `gate`.
struct Gated {
    gate: Arc<Semaphore>,
}

#[async_trait::async_trait]
impl Model for Gated {
    async fn complete(
        &self,
        request: &ModelRequest,
        tokens: Option<TokenSink>,
    ) -> Result<ModelReply, ModelError> {
        let reply = SupportDemoModel.complete(request, None).await?;
        let turn = request
            .messages
            .iter()
            .filter(|m| m.role == Role::Assistant)
            .count();
        if let Some(sink) = tokens {
            for word in reply.message.content.split_inclusive(' ') {
                if turn == 1 {
                    self.gate
                        .acquire()
                        .await
                        .expect("the gate stays open")
                        .forget();
                }
                sink(word);
            }
        }
        Ok(reply)
    }
}

async fn find(client: &Client, css: &str) -> fantoccini::elements::Element {
    client
        .wait()
        .at_most(PATIENCE)
        .for_element(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("the page shows {css}: {e}"))
}

/// Waits until the element with id `id` shows text containing `wanted`; its text.
async fn shows(client: &Client, id: &str, wanted: &str) -> String {
    let xpath = format!("//*[@id='{id}'][contains(., '{wanted}')]");
    client
        .wait()
        .at_most(PATIENCE)
        .for_element(Locator::XPath(&xpath))
        .await
        .unwrap_or_else(|e| panic!("#{id} shows {wanted:?}: {e}"))
        .text()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_models_words_arrive_live_and_the_refund_is_approved_on_the_run_page() {
    if [CHROMIUM, CHROMEDRIVER]
        .iter()
        .any(|p| !Path::new(p).exists())
    {
        assert_ne!(
            std::env::var("SIESTA_BROWSER_TESTS").as_deref(),
            Ok("required"),
            "SIESTA_BROWSER_TESTS=required but Chromium or chromedriver is missing"
        );
        eprintln!("skipped: no Chromium");
        return;
    }
    let gate = Arc::new(Semaphore::new(0));
    let mut registry = Registry::new();
    registry.register("agent", agent_with(Arc::new(Gated { gate: gate.clone() })));
    let dir = tempfile::tempdir().unwrap();
    let mut options = DevOptions::new(dir.path().to_owned());
    options.sweep_every = Duration::from_millis(200);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = start(listener, options, registry).await.unwrap();
    let base = format!("http://{}", server.addr);

    let mut driver = Command::new(CHROMEDRIVER)
        .arg("--port=0")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("chromedriver starts");
    let mut lines = BufReader::new(driver.stdout.take().unwrap()).lines();
    let port = loop {
        let line = lines
            .next_line()
            .await
            .unwrap()
            .expect("chromedriver names its port");
        if let Some(rest) = line.split("started successfully on port ").nth(1) {
            break rest.trim_end_matches('.').trim().parse::<u16>().unwrap();
        }
    };
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    let profile = tempfile::tempdir().unwrap();
    let mut args: Vec<String> = CHROMIUM_FLAGS.iter().map(|s| s.to_string()).collect();
    args.push(format!("--user-data-dir={}", profile.path().display()));
    let capabilities =
        json!({"browserName": "chrome", "goog:chromeOptions": {"binary": CHROMIUM, "args": args}});
    let client = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(capabilities.as_object().unwrap().clone())
        .connect(&format!("http://127.0.0.1:{port}"))
        .await
        .expect("a Chromium session");

    let outcome = AssertUnwindSafe(async {
        let client = &client;
        let run: serde_json::Value = reqwest::Client::new()
            .post(format!("{base}/runs"))
            .json(&json!({"workflow": "agent", "input": {"customer": "Ada", "message": "It arrived broken, refund please."}}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let id = run["id"].as_str().unwrap().to_owned();
        client.goto(&format!("{base}/ui/runs/{id}")).await.unwrap();
        // The first call (the lookup's sentence) is in the conversation; the second is
        // held back by the gate.
        shows(client, "conversation", "Let me look up your latest order.").await;
        gate.add_permits(3);
        let live = shows(client, "live-tokens", "I found order").await;
        assert!(!live.contains("refund of"), "only the words let out so far: {live}");
        gate.add_permits(100);
        // The call ends and the run waits for a person: Approve is offered.
        find(client, r#"#pending-approval button[data-action="approve"]"#).await.click().await.unwrap();
        let by = find(client, r#"#dialog input[name="by"]"#).await;
        by.clear().await.unwrap();
        by.send_keys("alice").await.unwrap();
        let what = find(client, "#dialog #what").await.text().await.unwrap();
        assert!(what.contains(&format!("POST /runs/{id}/events/approval")), "{what}");
        assert!(what.contains(r#"{"approved":true,"by":"alice"}"#), "{what}");
        find(client, "#dialog-confirm").await.click().await.unwrap();
        find(client, r#"h1 .badge[data-status="completed"]"#).await;
        shows(client, "conversation", "Your refund of $249").await;
    })
    .catch_unwind()
    .await;
    client.close().await.expect("the browser session ends");
    server.stop();
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}
