//! `siesta demo`: the order example (with a signed payment webhook) or the support agent
//! run end to end on a dev stack in this process, their timelines printed (the binary's
//! module).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, bail};
use siesta::*;

pub(crate) async fn demo(data_dir: Option<PathBuf>) -> anyhow::Result<()> {
    let temp = tempfile::tempdir()?;
    let dir = data_dir.unwrap_or_else(|| temp.path().to_owned());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let mut options = siesta_app::dev::DevOptions::new(dir.clone());
    // The payment provider signs its webhooks with a fresh Standard Webhooks secret: 40
    // random hex digits are valid base64 (a 30-byte key) after `whsec_`.
    let secret = format!("whsec_{}", &CallbackId::generate().0["cb_".len()..]);
    options.sources = vec![
        siesta_api::WebhookSource::from_config(siesta_api::SourceConfig {
            name: PAYMENTS_SOURCE.to_owned(),
            tenant: "default".to_owned(),
            scheme: "standard-webhooks".to_owned(),
            secrets: vec![secret.clone()],
            correlation: String::new(),
            callback: Some("/callback_id".to_owned()),
            event: None,
            tolerance_secs: None,
        })
        .map_err(anyhow::Error::msg)?,
    ];
    let server = siesta_app::dev::start(listener, options, siesta_workflows::registry()).await?;
    let base = format!("http://{}", server.addr);
    let http = reqwest::Client::new();
    println!(
        "siesta dev stack on {base} (embedded backend, data in {})",
        dir.display()
    );
    println!(
        "webhook source `{PAYMENTS_SOURCE}` (Standard Webhooks, secret {}…): a signed POST to \
         /hooks/sources/{PAYMENTS_SOURCE} completes the callback its body names",
        &secret[..12]
    );

    let input = serde_json::json!({"item": "Espresso machine", "amount": 129.0});
    let id = start_demo_run(&http, &base, "order", &input).await?;
    println!();
    println!("{}", siesta_cli::runs::TIMELINE_HEADER);

    let mut paid = false;
    let view = follow_run(&http, &base, &id, |view| {
        if let (false, Some(callback_id)) = (paid, view["waits"][0]["callback_id"].as_str()) {
            paid = true;
            tokio::spawn(pay(
                http.clone(),
                base.clone(),
                callback_id.to_owned(),
                secret.clone(),
            ));
        }
    })
    .await?;
    println!(
        "\nrun {id} is {}: {}",
        view["status"].as_str().unwrap_or(""),
        if view["output"].is_null() {
            &view["error"]
        } else {
            &view["output"]
        }
    );
    server.stop();
    Ok(())
}

/// Start a run of `workflow` with `input` through the API and say so; its id.
async fn start_demo_run(
    http: &reqwest::Client,
    base: &str,
    workflow: &str,
    input: &serde_json::Value,
) -> anyhow::Result<String> {
    let run: serde_json::Value = http
        .post(format!("{base}/runs"))
        .json(&serde_json::json!({"workflow": workflow, "input": input}))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let id = run["id"].as_str().context("run id")?.to_owned();
    println!("POST /runs → run {id} of workflow `{workflow}` with {input}");
    Ok(id)
}

/// Print the run's timeline as it unfolds, calling `on_view` with the run after each
/// page, until the run has ended (completed, failed, cancelled or parked); the run as
/// it ended.
async fn follow_run(
    http: &reqwest::Client,
    base: &str,
    id: &str,
    mut on_view: impl FnMut(&serde_json::Value),
) -> anyhow::Result<serde_json::Value> {
    let mut after = 0u64;
    for _ in 0..1000 {
        let page: serde_json::Value = http
            .get(format!("{base}/runs/{id}/timeline?after={after}"))
            .send()
            .await?
            .json()
            .await?;
        for event in page["events"].as_array().into_iter().flatten() {
            let event: siesta_api::TimelineEventView = serde_json::from_value(event.clone())?;
            after = event.seq;
            println!("{}", siesta_cli::runs::timeline_row(&event));
        }
        let view: serde_json::Value = http
            .get(format!("{base}/runs/{id}"))
            .send()
            .await?
            .json()
            .await?;
        on_view(&view);
        if matches!(
            view["status"].as_str(),
            Some("completed" | "failed" | "cancelled" | "parked")
        ) {
            return Ok(view);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    bail!("the demo run did not finish in time")
}

/// `siesta demo agent`: the support agent on the embedded backend. This process plays
/// the customer (who starts the run) and the operator (who approves the refund the
/// agent asks for); the run's timeline and the agent's answer are printed.
pub(crate) async fn demo_agent(data_dir: Option<PathBuf>) -> anyhow::Result<()> {
    let temp = tempfile::tempdir()?;
    let dir = data_dir.unwrap_or_else(|| temp.path().to_owned());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let options = siesta_app::dev::DevOptions::new(dir.clone());
    let server = siesta_app::dev::start(listener, options, siesta_workflows::registry()).await?;
    let base = format!("http://{}", server.addr);
    let http = reqwest::Client::new();
    let model = if siesta_ai::OpenAiCompatible::from_env().is_some() {
        "the OpenAI-compatible endpoint OPENAI_BASE_URL names"
    } else {
        "the built-in fake model (set OPENAI_BASE_URL / OPENAI_API_KEY for a real one)"
    };
    println!(
        "siesta dev stack on {base} (embedded backend, data in {}); the agent talks to {model}",
        dir.display()
    );
    let input = serde_json::json!({"customer": "Ada", "message": "My espresso machine arrived broken. I want my money back."});
    let id = start_demo_run(&http, &base, "agent", &input).await?;
    println!("(watch it at {base}/ui/runs/{id})\n");
    println!("{}", siesta_cli::runs::TIMELINE_HEADER);
    let mut approved = false;
    let view = follow_run(&http, &base, &id, |view| {
        let waits_for_approval = view["waits"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|w| w["event"] == siesta_ai::APPROVAL_EVENT);
        if !approved && waits_for_approval {
            approved = true;
            let decision = serde_json::json!({"approved": true, "by": "demo-operator", "comment": "photos look broken"});
            println!("\n→ the operator approves the refund: POST /runs/{id}/events/approval {decision}\n");
            let (http, url) = (http.clone(), format!("{base}/runs/{id}/events/approval"));
            tokio::spawn(async move {
                if let Err(e) = http.post(url).json(&decision).send().await.and_then(|r| r.error_for_status()) {
                    eprintln!("approving the refund failed: {e}");
                }
            });
        }
    })
    .await?;
    let status = view["status"].as_str().unwrap_or("");
    match view["output"]["answer"].as_str() {
        Some(answer) => println!(
            "\nrun {id} is {status}. The agent answered, in {} model calls and {} tokens:\n  {answer}",
            view["output"]["turns"],
            view["output"]["usage"]["input_tokens"]
                .as_u64()
                .unwrap_or(0)
                + view["output"]["usage"]["output_tokens"]
                    .as_u64()
                    .unwrap_or(0)
        ),
        None => println!("\nrun {id} is {status}: {}", view["error"]),
    }
    server.stop();
    Ok(())
}

/// The webhook source the demo's payment provider posts to.
const PAYMENTS_SOURCE: &str = "payments";

/// Play the payment provider: it was handed the callback's id as metadata, and POSTs a
/// webhook signed with its Standard Webhooks secret to the `payments` source, which
/// verifies the signature over the raw body and completes that callback. A forged copy
/// (another key) is refused first; the provider's retry of the genuine delivery is a
/// duplicate, acknowledged and ignored.
async fn pay(http: reqwest::Client, base: String, callback_id: String, secret: String) {
    use siesta_api::signature::{Scheme, Secret, sign};
    tokio::time::sleep(Duration::from_millis(300)).await;
    let url = format!("{base}/hooks/sources/{PAYMENTS_SOURCE}");
    let body = serde_json::to_vec(&serde_json::json!({
        "callback_id": callback_id, "status": "COMPLETED", "transaction_id": "txn_8f2c41"
    }))
    .unwrap_or_default();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let (Ok(genuine), Ok(forger)) = (
        Secret::parse(Scheme::StandardWebhooks, &secret),
        Secret::from_bytes(b"not the provider's key".to_vec()),
    ) else {
        println!("      ↳ payment provider: bad signing secret");
        return;
    };
    let deliveries = [
        ("forged copy, signed with another key", &forger),
        ("delivery #1", &genuine),
        ("delivery #2, the provider's retry", &genuine),
    ];
    for (what, key) in deliveries {
        let mut request = http.post(&url).body(body.clone());
        for (name, value) in sign(Scheme::StandardWebhooks, key, "psp-delivery-1", now, &body) {
            request = request.header(name, value);
        }
        let said = match request.send().await {
            Ok(r) => {
                let status = r.status();
                let answer: serde_json::Value = r.json().await.unwrap_or_default();
                match (status.is_success(), answer["duplicate"] == true) {
                    (true, true) => format!("{status}, signature verified, duplicate ignored"),
                    (true, false) => {
                        format!("{status}, signature verified, recorded for the callback")
                    }
                    (false, _) => format!("{status}, refused: {}", answer["error"]["message"]),
                }
            }
            Err(e) => e.to_string(),
        };
        println!("      ↳ payment provider POST /hooks/sources/{PAYMENTS_SOURCE} ({what}): {said}");
    }
}
