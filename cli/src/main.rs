//! `siesta`: run Siesta locally, on the embedded backend, with no AWS account.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::{Parser, Subcommand};
use siesta::*;

#[derive(Parser)]
#[command(
    name = "siesta",
    version,
    about = "Durable workflows on AWS Lambda — run locally"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Inspect and steer runs on a running server.
    Runs {
        /// The server's URL.
        #[arg(
            long,
            env = "SIESTA_URL",
            default_value = "http://127.0.0.1:8080",
            global = true
        )]
        url: String,
        /// API key (when the server has keys configured).
        #[arg(long, env = "SIESTA_API_KEY", global = true)]
        api_key: Option<String>,
        /// Print JSON.
        #[arg(long, global = true)]
        json: bool,
        #[command(subcommand)]
        action: RunsAction,
    },
    /// Serve the API and webhooks on 127.0.0.1, with a queue worker and a sweep ticker,
    /// on the embedded backend (data kept in `--data-dir`, surviving restarts) or, with
    /// `--backend aws`, on DynamoDB, S3 and SQS.
    Dev {
        /// Port to listen on (0 picks a free one).
        #[arg(long, default_value_t = 8080)]
        port: u16,
        /// Where the data lives.
        #[arg(long, default_value = ".siesta")]
        data_dir: PathBuf,
        /// API keys as `key=tenant,...`; without any, auth is off and the tenant is `default`.
        #[arg(long, env = "SIESTA_API_KEYS", default_value = "")]
        api_keys: String,
        /// Lease length in milliseconds: how soon a run held by a crashed process is
        /// taken over.
        #[arg(long, default_value_t = 60_000)]
        lease_ttl_ms: u64,
        /// How often the sweep runs, in milliseconds.
        #[arg(long, default_value_t = 5_000)]
        sweep_every_ms: u64,
        /// Webhook sources as a JSON array (see the README).
        #[arg(long, env = "SIESTA_WEBHOOK_SOURCES", default_value = "")]
        webhook_sources: String,
        /// Where runs live: `embedded` (a SQLite file in `--data-dir`) or `aws`
        /// (DynamoDB, S3 and SQS, on the emulators or on AWS).
        #[arg(long, env = "SIESTA_BACKEND", value_enum, default_value_t = BackendKind::Embedded)]
        backend: BackendKind,
        /// Most wake-ups the worker handles at once (one slow step never holds up
        /// another run while slots are free).
        #[arg(long, default_value_t = siesta::WorkerConfig::default().concurrency)]
        workers: usize,
        /// What an acknowledged write to the embedded backend survives: `full` (the
        /// default) fsyncs before every acknowledgement, so it survives an OS crash or a
        /// power loss; `relaxed` skips the fsync — faster, but the last writes before
        /// an OS crash may be lost (a process kill loses nothing).
        #[arg(long, value_enum, default_value_t = DurabilityKind::Full)]
        durability: DurabilityKind,
        #[command(flatten)]
        aws: AwsArgs,
    },
    /// Create the AWS backend's table, bucket, queue and dead-letter queue from
    /// infra/template.yaml (idempotent), where the AWS configuration points (the
    /// emulators or an account), and print the `SIESTA_*` settings that name them.
    Bootstrap {
        /// Name prefix: `<prefix>-runs`, `<prefix>-artifacts`, `<prefix>-wakeups`,
        /// `<prefix>-wakeups-dlq`.
        #[arg(long, default_value = "siesta-dev")]
        prefix: String,
    },
    /// Benchmark a dev server (started in its own process) with the `chain` workflow
    /// over HTTP: throughput at 50 concurrent runs, sequential latency, bytes and
    /// syscalls per step, peak RSS. Build with `--release` for figures worth quoting.
    Bench {
        /// Rounds per shape (min/median/max are printed).
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// Concurrent clients in the concurrent shapes.
        #[arg(long, default_value_t = 50)]
        concurrency: usize,
        /// The server's `--durability` (`full` or `relaxed`).
        #[arg(long, default_value = "full")]
        durability: String,
        /// Skip the syscall counts (strace).
        #[arg(long)]
        no_strace: bool,
    },
    /// Run the `order` example end to end on the embedded backend and print its timeline
    /// as it unfolds; this process plays the payment provider, whose webhooks are signed
    /// (Standard Webhooks) and verified by the server.
    Demo {
        /// Keep the data here (default: a temporary directory).
        #[arg(long)]
        data_dir: Option<PathBuf>,
    },
}

/// Which backend `siesta dev` runs on.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum BackendKind {
    /// A SQLite file in the data dir; nothing else needed.
    Embedded,
    /// DynamoDB, S3 and SQS, configured as every AWS tool is (the default credential
    /// chain, `AWS_REGION`, `AWS_ENDPOINT_URL`, `AWS_ENDPOINT_URL_<SERVICE>`).
    Aws,
}

/// What an acknowledged write to the embedded backend survives.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum DurabilityKind {
    /// fsync before every acknowledgement (group commit): survives an OS crash.
    Full,
    /// No fsync: survives a process kill, not an OS crash or a power loss.
    Relaxed,
}

/// Where the AWS backend's resources are.
#[derive(clap::Args)]
struct AwsArgs {
    /// The DynamoDB table of runs.
    #[arg(long, env = "SIESTA_TABLE")]
    table: Option<String>,
    /// The S3 bucket of artifacts.
    #[arg(long, env = "SIESTA_BUCKET")]
    bucket: Option<String>,
    /// The SQS queue of wake-ups (its URL).
    #[arg(long, env = "SIESTA_QUEUE_URL")]
    queue_url: Option<String>,
    /// Its dead-letter queue (its URL).
    #[arg(long, env = "SIESTA_DLQ_URL")]
    dlq_url: Option<String>,
}

impl AwsArgs {
    /// The resource names, or a clear error naming what is missing.
    fn names(self) -> anyhow::Result<siesta_aws::ResourceNames> {
        let need = |v: Option<String>, flag: &str, var: &str| {
            v.filter(|v| !v.trim().is_empty()).with_context(|| {
                format!("--backend aws needs {flag} (or {var}); `siesta bootstrap` creates the resources and prints them")
            })
        };
        Ok(siesta_aws::ResourceNames {
            table: need(self.table, "--table", "SIESTA_TABLE")?,
            bucket: need(self.bucket, "--bucket", "SIESTA_BUCKET")?,
            queue_url: need(self.queue_url, "--queue-url", "SIESTA_QUEUE_URL")?,
            dead_letter_queue_url: need(self.dlq_url, "--dlq-url", "SIESTA_DLQ_URL")?,
        })
    }
}

#[derive(Subcommand)]
enum RunsAction {
    /// List runs, newest first.
    List {
        /// Only runs in this status.
        #[arg(long)]
        status: Option<String>,
        /// Only runs of this workflow.
        #[arg(long)]
        workflow: Option<String>,
    },
    /// Show one run.
    Show {
        /// The run's id.
        id: String,
    },
    /// Print a run's timeline.
    Timeline {
        /// The run's id.
        id: String,
    },
    /// Cancel a run.
    Cancel {
        /// The run's id.
        id: String,
        /// Only if the run is still at this version.
        #[arg(long)]
        if_match: Option<u64>,
    },
    /// Resume a parked run once its cause is fixed (e.g. one parked because its
    /// wake-up was dead-lettered: list them with `runs list --status parked`).
    Resume {
        /// The run's id.
        id: String,
        /// Only if the run is still at this version.
        #[arg(long)]
        if_match: Option<u64>,
    },
    /// Deliver a named event (an approval, a signal) to a run.
    SendEvent {
        /// The run's id.
        id: String,
        /// The event's name.
        name: String,
        /// The event's JSON payload.
        #[arg(default_value = "null")]
        payload: String,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("SIESTA_LOG")
                .unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    match Cli::parse().command {
        Command::Demo { data_dir } => demo(data_dir).await,
        Command::Bench {
            rounds,
            concurrency,
            durability,
            no_strace,
        } => {
            siesta_cli::bench::run(siesta_cli::bench::BenchOptions {
                rounds,
                concurrency: concurrency.max(1),
                durability,
                server_args: Vec::new(),
                strace: !no_strace,
            })
            .await
        }
        Command::Bootstrap { prefix } => {
            let sdk = siesta_aws::sdk_config_from_env().await;
            let plan = siesta_aws::bootstrap::Plan::from_embedded_template()?;
            let names = siesta_aws::bootstrap::NewResources::with_prefix(&prefix);
            let created = plan.create(&sdk, &names).await?;
            eprintln!("created (or found) the resources of infra/template.yaml:");
            println!("export SIESTA_TABLE={}", created.table);
            println!("export SIESTA_BUCKET={}", created.bucket);
            println!("export SIESTA_QUEUE_URL={}", created.queue_url);
            println!("export SIESTA_DLQ_URL={}", created.dead_letter_queue_url);
            Ok(())
        }
        Command::Dev {
            port,
            data_dir,
            api_keys,
            lease_ttl_ms,
            sweep_every_ms,
            webhook_sources,
            backend,
            workers,
            durability,
            aws,
        } => {
            let mut options = siesta_cli::dev::DevOptions::new(data_dir);
            options.api_keys = siesta_cli::dev::DevOptions::parse_api_keys(&api_keys)?;
            options.lease_ttl = Duration::from_millis(lease_ttl_ms.max(100));
            options.sweep_every = Duration::from_millis(sweep_every_ms.max(50));
            options.workers = workers.max(1);
            options.durability = match durability {
                DurabilityKind::Full => siesta_embedded::Durability::Full,
                DurabilityKind::Relaxed => siesta_embedded::Durability::Relaxed,
            };
            options.sources = siesta_api::WebhookSource::parse_all(&webhook_sources)
                .map_err(anyhow::Error::msg)?;
            if backend == BackendKind::Aws {
                let names = aws.names()?;
                let sdk = siesta_aws::sdk_config_from_env().await;
                println!(
                    "AWS backend: table {}, bucket {}, queue {}",
                    names.table, names.bucket, names.queue_url
                );
                options.backend = Some(siesta_aws::AwsBackend::new(&sdk, names).backend());
            }
            dev(port, options).await
        }
        Command::Runs {
            url,
            api_key,
            json,
            action,
        } => {
            let remote = siesta_cli::runs::Remote { url, api_key, json };
            match action {
                RunsAction::List { status, workflow } => remote.list(status, workflow).await,
                RunsAction::Show { id } => remote.show(&id).await,
                RunsAction::Timeline { id } => remote.timeline(&id).await,
                RunsAction::Cancel { id, if_match } => remote.cancel(&id, if_match).await,
                RunsAction::Resume { id, if_match } => remote.resume(&id, if_match).await,
                RunsAction::SendEvent { id, name, payload } => {
                    remote.send_event(&id, &name, &payload).await
                }
            }
        }
    }
}

async fn dev(port: u16, options: siesta_cli::dev::DevOptions) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .with_context(|| format!("binding 127.0.0.1:{port}"))?;
    let server =
        siesta_cli::dev::start(listener, options.clone(), siesta_workflows::registry()).await?;
    match options.backend {
        Some(_) => println!("siesta dev listening on http://{}", server.addr),
        None => println!(
            "siesta dev listening on http://{} (data in {})",
            server.addr,
            options.data_dir.display()
        ),
    }
    println!(
        "workflows: {}",
        server
            .engine
            .registry()
            .names()
            .collect::<Vec<_>>()
            .join(", ")
    );
    if options.api_keys.is_empty() {
        println!("auth is off: every request is tenant `default`");
    }
    println!("web UI: http://{}/", server.addr);
    tokio::signal::ctrl_c().await?;
    server.stop();
    Ok(())
}

async fn demo(data_dir: Option<PathBuf>) -> anyhow::Result<()> {
    let temp = tempfile::tempdir()?;
    let dir = data_dir.unwrap_or_else(|| temp.path().to_owned());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let mut options = siesta_cli::dev::DevOptions::new(dir.clone());
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
    let server = siesta_cli::dev::start(listener, options, siesta_workflows::registry()).await?;
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
    let run: serde_json::Value = http
        .post(format!("{base}/runs"))
        .json(&serde_json::json!({"workflow": "order", "input": input}))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let id = run["id"].as_str().context("run id")?.to_owned();
    println!("POST /runs → run {id} of workflow `order` with {input}\n");
    println!("{}", siesta_cli::runs::TIMELINE_HEADER);

    let mut after = 0u64;
    let mut paid = false;
    for _ in 0..1000 {
        let page: serde_json::Value = http
            .get(format!("{base}/runs/{id}/timeline?after={after}"))
            .send()
            .await?
            .json()
            .await?;
        for event in page["events"].as_array().into_iter().flatten() {
            let event: TimelineEvent = serde_json::from_value(event.clone())?;
            after = event.seq;
            println!("{}", siesta_cli::runs::timeline_row(&event));
        }
        let view: serde_json::Value = http
            .get(format!("{base}/runs/{id}"))
            .send()
            .await?
            .json()
            .await?;
        if let (false, Some(callback_id)) = (paid, view["waits"][0]["callback_id"].as_str()) {
            paid = true;
            tokio::spawn(pay(
                http.clone(),
                base.clone(),
                callback_id.to_owned(),
                secret.clone(),
            ));
        }
        if matches!(
            view["status"].as_str(),
            Some("completed" | "failed" | "cancelled")
        ) {
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
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    bail!("the demo run did not finish in time")
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
