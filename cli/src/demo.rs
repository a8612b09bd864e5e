//! `siesta demo`: the order example (with a signed payment webhook) or the support agent
//! run end to end on a dev stack in this process, their timelines printed (the binary's
//! module). It talks to the stack as any client does, through `siesta-client`.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::bail;
use siesta::*;
use siesta_client::{Client, RunView};

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
    let client = Client::new(&base);
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
    let id = start_demo_run(&client, "order", &input).await?;
    println!();
    println!("{}", siesta_cli::runs::TIMELINE_HEADER);

    let mut paid = false;
    let view = follow_run(&client, &id, |view| {
        let callback_id = view.waits.first().and_then(|w| w.callback_id.as_deref());
        if let (false, Some(callback_id)) = (paid, callback_id) {
            paid = true;
            tokio::spawn(pay(client.clone(), callback_id.to_owned(), secret.clone()));
        }
    })
    .await?;
    let outcome = match (&view.output, &view.error) {
        (Some(output), _) => output.to_string(),
        (None, Some(error)) => serde_json::to_string(error)?,
        (None, None) => "null".to_owned(),
    };
    println!("\nrun {id} is {}: {outcome}", view.status);
    server.stop();
    Ok(())
}

/// Start a run of `workflow` with `input` through the API and say so; its id.
async fn start_demo_run(
    client: &Client,
    workflow: &str,
    input: &serde_json::Value,
) -> anyhow::Result<String> {
    let run = client
        .start_run(workflow, input, &Default::default())
        .await?;
    let id = run.id;
    println!("POST /runs → run {id} of workflow `{workflow}` with {input}");
    Ok(id)
}

/// Print the run's timeline as it unfolds, calling `on_view` with the run after each
/// page, until the run has ended (completed, failed, cancelled or parked); the run as
/// it ended.
async fn follow_run(
    client: &Client,
    id: &str,
    mut on_view: impl FnMut(&RunView),
) -> anyhow::Result<RunView> {
    let mut after = 0u64;
    for _ in 0..1000 {
        let page = client.timeline(id, after, None).await?;
        for event in &page.events {
            after = event.seq;
            println!("{}", siesta_cli::runs::timeline_row(event));
        }
        let view = client.get_run(id).await?;
        on_view(&view);
        if view.status.is_finished() || view.status == RunStatus::Parked {
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
    let client = Client::new(&base);
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
    let id = start_demo_run(&client, "agent", &input).await?;
    println!("(watch it at {base}/ui/runs/{id})\n");
    println!("{}", siesta_cli::runs::TIMELINE_HEADER);
    let mut approved = false;
    let view = follow_run(&client, &id, |view| {
        let waits_for_approval = view
            .waits
            .iter()
            .any(|w| w.event.as_deref() == Some(siesta_ai::APPROVAL_EVENT));
        if !approved && waits_for_approval {
            approved = true;
            let decision = serde_json::json!({"approved": true, "by": "demo-operator", "comment": "photos look broken"});
            println!("\n→ the operator approves the refund: POST /runs/{id}/events/approval {decision}\n");
            let (client, id) = (client.clone(), id.clone());
            tokio::spawn(async move {
                if let Err(e) = client
                    .send_event(&id, siesta_ai::APPROVAL_EVENT, &decision, None)
                    .await
                {
                    eprintln!("approving the refund failed: {e}");
                }
            });
        }
    })
    .await?;
    let status = view.status;
    let output = view.output.unwrap_or_default();
    match output["answer"].as_str() {
        Some(answer) => println!(
            "\nrun {id} is {status}. The agent answered, in {} model calls and {} tokens:\n  {answer}",
            output["turns"],
            output["usage"]["input_tokens"].as_u64().unwrap_or(0)
                + output["usage"]["output_tokens"].as_u64().unwrap_or(0)
        ),
        None => println!(
            "\nrun {id} is {status}: {}",
            serde_json::to_string(&view.error)?
        ),
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
async fn pay(client: Client, callback_id: String, secret: String) {
    use siesta_api::signature::{Scheme, Secret, sign};
    tokio::time::sleep(Duration::from_millis(300)).await;
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
        let headers = sign(Scheme::StandardWebhooks, key, "psp-delivery-1", now, &body);
        let said = match client
            .source_webhook(PAYMENTS_SOURCE, &headers, body.clone())
            .await
        {
            Ok(received) if received.duplicate => {
                "200 OK, signature verified, duplicate ignored".to_owned()
            }
            Ok(_) => "200 OK, signature verified, recorded for the callback".to_owned(),
            Err(siesta_client::Error::Api {
                status, message, ..
            }) => format!("{status}, refused: {message:?}"),
            Err(e) => e.to_string(),
        };
        println!("      ↳ payment provider POST /hooks/sources/{PAYMENTS_SOURCE} ({what}): {said}");
    }
}
