//! `siesta`: the examples app (`dev`, `lambda`: the example workflows served by
//! [`siesta_app`], as any app serves its own) plus the tools: `new` scaffolds an app,
//! `runs` steers a server's runs, `bootstrap` creates the AWS resources, `demo` runs
//! the order example end to end.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::{CommandFactory as _, Parser, Subcommand};
use siesta::*;

#[derive(Parser)]
#[command(
    name = "siesta",
    version,
    about = "Durable workflows on AWS Lambda — run locally"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// `dev` and `lambda`: the example workflows served as any Siesta app serves its own.
    #[command(flatten)]
    App(siesta_app::Command),
    /// Create a Siesta app in DIR: a crate whose one binary serves `dev` and the four
    /// Lambda roles, a `hello` workflow with its test, a SAM template and a README.
    New {
        /// The directory to create; its last component names the crate.
        dir: PathBuf,
        /// Depend on the Siesta checkout at this path (default: the checkout this
        /// `siesta` was built from).
        #[arg(long, conflicts_with = "siesta_git")]
        siesta_path: Option<PathBuf>,
        /// Depend on Siesta from this git repository.
        #[arg(long)]
        siesta_git: Option<String>,
    },
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
    /// The builds of a server's runs, each with its unfinished runs by status and whether
    /// it is still deployed (`GET /builds`, as `runs builds`); `builds prune` deletes the
    /// Lambda versions no unfinished run needs.
    Builds {
        /// The server's URL.
        #[arg(long, env = "SIESTA_URL", default_value = "http://127.0.0.1:8080")]
        url: String,
        /// API key (when the server has keys configured).
        #[arg(long, env = "SIESTA_API_KEY")]
        api_key: Option<String>,
        /// Print JSON.
        #[arg(long, global = true)]
        json: bool,
        #[command(subcommand)]
        action: Option<BuildsAction>,
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
        /// Instead: the web UI's first paint of a run page with 1 000 timeline events
        /// and its page weight, in headless Chromium (`--rounds` loads, default 3).
        #[arg(long)]
        ui: bool,
        /// Also run the step+sleep(1 ms) replay shape: one `chain` run of this many
        /// cycles (e.g. 10000), time per cycle at cycle 1 000 and at the last.
        #[arg(long)]
        replay_cycles: Option<u64>,
        /// Skip the chain shapes (throughput, latency), e.g. to run only the replay shape.
        #[arg(long)]
        no_shapes: bool,
        /// Instead: the wake-up path with N `approval` runs asleep — starts, the burst's
        /// drain, idle CPU, RSS, bytes per run, read/list/resume latencies, tenant B and
        /// outside-world wake-ups during the burst (docs/performance-wakeups.md).
        #[arg(long, value_name = "N")]
        sleeping: Option<usize>,
        /// With `--sleeping`: keep the server's data in this directory (default: a
        /// temporary one, deleted after), e.g. to time `siesta dev` opening it again.
        #[arg(long, requires = "sleeping")]
        data_dir: Option<PathBuf>,
        /// Instead: N `timer` runs due at the same instant fire — time to fire them
        /// all, timers/s, the sweep's store calls per fired timer
        /// (docs/performance-wakeups.md).
        #[arg(long, value_name = "N")]
        timers: Option<usize>,
        /// Instead: one `ticker` run per round publishes N chunks on a stream, read
        /// over Server-Sent Events — chunks/s and publish → read latency p50/p99.
        #[arg(long, value_name = "N")]
        streams: Option<u32>,
    },
    /// Run the `order` example end to end on the embedded backend and print its timeline
    /// as it unfolds; this process plays the payment provider, whose webhooks are signed
    /// (Standard Webhooks) and verified by the server.
    Demo {
        /// Which example: `order` (the payment webhook) or `agent` (the support agent:
        /// a model, tools, an approval; the built-in fake model unless
        /// OPENAI_BASE_URL/OPENAI_API_KEY name an endpoint).
        #[arg(default_value = "order", value_parser = ["order", "agent"])]
        example: String,
        /// Keep the data here (default: a temporary directory).
        #[arg(long)]
        data_dir: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
enum BuildsAction {
    /// On AWS: delete the Lambda versions of the stack's functions that no unfinished
    /// run needs — a step version whose build has no unfinished run in any tenant (and
    /// its build registry item), never one whose build has; never the version the alias
    /// points at nor a newer one; the other functions' versions older than the alias.
    /// Prints each version, deleted or kept, and why. Reads every unfinished run's key
    /// (a scan of the sparse `by_build` index: as many items as unfinished runs). AWS
    /// configuration from the environment.
    Prune {
        /// The stack: its functions are `<stack>-step`, `-start`, `-webhook`, `-sweep`.
        #[arg(long, env = "SIESTA_STACK")]
        stack: String,
        /// The runs table (default `<stack>-runs`, as the template names it).
        #[arg(long, env = "SIESTA_TABLE")]
        table: Option<String>,
        /// The alias every event source invokes.
        #[arg(long, default_value = "live")]
        alias: String,
        /// Say what would be deleted; delete nothing.
        #[arg(long)]
        dry_run: bool,
    },
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
    /// Follow a run's stream (what it publishes: a model's tokens, progress) until it
    /// ends.
    Stream {
        /// The run's id.
        id: String,
        /// The stream's name.
        name: String,
        /// The first offset to read.
        #[arg(long, default_value_t = 0)]
        from: u64,
    },
    /// Cancel a run.
    Cancel {
        /// The run's id.
        id: String,
        /// Only if the run is still at this version.
        #[arg(long)]
        if_match: Option<u64>,
    },
    /// Resume a parked run once its cause is fixed (for one parked because its wake-up
    /// was dead-lettered, `runs redrive` does the same).
    Resume {
        /// The run's id.
        id: String,
        /// Only if the run is still at this version.
        #[arg(long)]
        if_match: Option<u64>,
    },
    /// Resolve a tool call whose outcome is unknown (its process died while it ran, and
    /// it has no lookup), which parked the run: say it succeeded (with its result),
    /// failed (with a message), or must be made again. The run resumes; the timeline
    /// shows the resolution and who made it.
    #[command(group(clap::ArgGroup::new("outcome").required(true).args(["succeeded", "failed", "retry"])))]
    Resolve {
        /// The run's id.
        id: String,
        /// The tool call's position (its timeline id, e.g. `charge#0`).
        position: String,
        /// The call happened and returned this JSON.
        #[arg(long, value_name = "JSON")]
        succeeded: Option<String>,
        /// The call failed with this message (or must not be made).
        #[arg(long, value_name = "MESSAGE")]
        failed: Option<String>,
        /// Make the call again: you take the risk that it already happened.
        #[arg(long)]
        retry: bool,
        /// Only if the run is still at this version.
        #[arg(long)]
        if_match: Option<u64>,
    },
    /// Move a run to the build serving the API, only if its journal replays cleanly on
    /// that build's code now; otherwise the server refuses (409) naming the position
    /// and both operation kinds. Also takes a run parked for `NonDeterminism` once a
    /// fixed build replays it. With `--all --build ID`, every unfinished run of that
    /// build that replays; the others are listed with where they diverge.
    Upgrade {
        /// The run's id.
        #[arg(required_unless_present = "all", conflicts_with = "all")]
        id: Option<String>,
        /// Every unfinished run of `--build`.
        #[arg(long, requires = "build")]
        all: bool,
        /// The build whose runs `--all` moves (`-`: runs that recorded no build).
        #[arg(long, value_name = "ID")]
        build: Option<String>,
        /// Only if the run is still at this version.
        #[arg(long, requires = "id")]
        if_match: Option<u64>,
    },
    /// Print a run and its history (journal and deliveries) as one JSON document: what
    /// `myapp replay --history FILE` checks.
    Export {
        /// The run's id.
        id: String,
    },
    /// List the dead letters: runs parked because a wake-up of theirs kept failing and
    /// was dead-lettered (the caller's tenant).
    DeadLetters,
    /// List the builds the caller's runs started on: each with its unfinished runs by
    /// status, first and last seen and whether it is still deployed, the serving one
    /// marked (a drain you can see). The same as `siesta builds`.
    Builds,
    /// Redrive a dead letter (resume the run it parked), or all of them with `--all`.
    Redrive {
        /// The run the dead letter parked.
        #[arg(required_unless_present = "all", conflicts_with = "all")]
        id: Option<String>,
        /// Every dead letter of the tenant (up to 1 000 per call).
        #[arg(long)]
        all: bool,
        /// Only if the run is still at this version.
        #[arg(long, requires = "id")]
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

/// The examples app: the example workflows, with this build's id.
fn app() -> siesta_app::App {
    siesta_app::App::new(siesta_workflows::registry())
        .name("siesta")
        .build_id(siesta_app::build_id!())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let command = match Cli::parse().command {
        Some(command) => command,
        // A Lambda function's `bootstrap` is started with no arguments.
        None => match siesta_app::Command::from_env() {
            Some(role) => Command::App(role),
            None => {
                Cli::command().print_help()?;
                std::process::exit(2);
            }
        },
    };
    if !matches!(command, Command::App(_)) {
        tracing_subscriber::fmt()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_env("SIESTA_LOG")
                    .unwrap_or_else(|_| "warn".into()),
            )
            .with_writer(std::io::stderr)
            .init();
    }
    match command {
        Command::App(command) => app().run(command).await,
        Command::New {
            dir,
            siesta_path,
            siesta_git,
        } => {
            use siesta_cli::new::Source;
            let source = match (siesta_path, siesta_git) {
                (Some(path), _) => Source::Path(
                    std::fs::canonicalize(&path)
                        .with_context(|| format!("--siesta-path {}", path.display()))?,
                ),
                (None, Some(url)) => Source::Git(url),
                (None, None) => Source::this_checkout().context(
                    "this siesta was not built from a checkout that is still there: pass --siesta-path or --siesta-git",
                )?,
            };
            siesta_cli::new::scaffold(&dir, &source)
        }
        Command::Demo { example, data_dir } if example == "agent" => demo_agent(data_dir).await,
        Command::Demo { data_dir, .. } => demo(data_dir).await,
        Command::Bench {
            rounds,
            concurrency,
            durability,
            no_strace,
            ui,
            replay_cycles,
            no_shapes,
            sleeping,
            data_dir,
            timers,
            streams,
        } => {
            if let Some(chunks) = streams {
                return siesta_cli::bench::streams::run(
                    siesta_cli::bench::streams::StreamsOptions {
                        chunks: chunks.max(1),
                        rounds,
                        durability,
                    },
                )
                .await;
            }
            if let Some(timers) = timers {
                return siesta_cli::bench::timers::run(siesta_cli::bench::timers::TimersOptions {
                    timers: timers.max(1),
                    durability,
                })
                .await;
            }
            if let Some(runs) = sleeping {
                return siesta_cli::bench::sleeping::run(
                    siesta_cli::bench::sleeping::SleepingOptions {
                        runs: runs.max(1),
                        durability,
                        data_dir,
                    },
                )
                .await;
            }
            if ui {
                return siesta_cli::bench::ui::run(siesta_cli::bench::ui::UiBenchOptions::new(
                    rounds,
                ))
                .await;
            }
            siesta_cli::bench::run(siesta_cli::bench::BenchOptions {
                rounds,
                concurrency: concurrency.max(1),
                durability,
                server_args: Vec::new(),
                strace: !no_strace,
                shapes: !no_shapes,
                replay_cycles,
            })
            .await
        }
        Command::Bootstrap { prefix } => {
            let sdk = siesta_aws::sdk_config_from_env().await;
            let plan = siesta_aws::bootstrap::Plan::declared();
            let names = siesta_aws::bootstrap::NewResources::with_prefix(&prefix);
            let created = plan.create(&sdk, &names).await?;
            eprintln!("created (or found) the resources of infra/template.yaml:");
            println!("export SIESTA_TABLE={}", created.table);
            println!("export SIESTA_BUCKET={}", created.bucket);
            println!("export SIESTA_QUEUE_URL={}", created.queue_url);
            println!("export SIESTA_DLQ_URL={}", created.dead_letter_queue_url);
            Ok(())
        }
        Command::Builds {
            url,
            api_key,
            json,
            action,
        } => match action {
            None => {
                siesta_cli::runs::Remote { url, api_key, json }
                    .builds()
                    .await
            }
            Some(BuildsAction::Prune {
                stack,
                table,
                alias,
                dry_run,
            }) => {
                let sdk = siesta_aws::sdk_config_from_env().await;
                siesta_cli::builds::prune(
                    siesta_cli::builds::PruneOptions {
                        stack,
                        table,
                        alias,
                        dry_run,
                        json,
                    },
                    &sdk,
                )
                .await
            }
        },
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
                RunsAction::Stream { id, name, from } => remote.stream(&id, &name, from).await,
                RunsAction::Cancel { id, if_match } => remote.cancel(&id, if_match).await,
                RunsAction::Resume { id, if_match } => remote.resume(&id, if_match).await,
                RunsAction::Resolve {
                    id,
                    position,
                    succeeded,
                    failed,
                    retry: _,
                    if_match,
                } => {
                    let outcome = match (succeeded, failed) {
                        (Some(json), _) => siesta_cli::runs::Outcome::succeeded(&json)?,
                        (None, Some(message)) => siesta_cli::runs::Outcome::Failed(message),
                        (None, None) => siesta_cli::runs::Outcome::Retry,
                    };
                    remote.resolve(&id, &position, outcome, if_match).await
                }
                RunsAction::DeadLetters => remote.dead_letters().await,
                RunsAction::Builds => remote.builds().await,
                RunsAction::Upgrade {
                    id,
                    build,
                    if_match,
                    ..
                } => match id {
                    Some(id) => remote.upgrade(&id, if_match).await,
                    None => remote.upgrade_build(build.as_deref().unwrap_or("-")).await,
                },
                RunsAction::Export { id } => remote.export(&id).await,
                RunsAction::Redrive { id, if_match, .. } => {
                    remote.redrive(id.as_deref(), if_match).await
                }
                RunsAction::SendEvent { id, name, payload } => {
                    remote.send_event(&id, &name, &payload).await
                }
            }
        }
    }
}

async fn demo(data_dir: Option<PathBuf>) -> anyhow::Result<()> {
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
async fn demo_agent(data_dir: Option<PathBuf>) -> anyhow::Result<()> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_resolve_takes_exactly_one_outcome() {
        let parse = |args: &[&str]| {
            Cli::try_parse_from(
                ["siesta", "runs", "resolve", "run-1", "charge#0"]
                    .iter()
                    .chain(args),
            )
        };
        assert!(parse(&["--retry"]).is_ok());
        assert!(parse(&["--succeeded", "1", "--if-match", "4"]).is_ok());
        assert!(parse(&["--failed", "refused"]).is_ok());
        for wrong in [&[][..], &["--retry", "--failed", "refused"][..]] {
            let e = parse(wrong).err().expect("refused");
            assert!(
                matches!(
                    e.kind(),
                    clap::error::ErrorKind::MissingRequiredArgument
                        | clap::error::ErrorKind::ArgumentConflict
                ),
                "{wrong:?}: {e}"
            );
        }
    }
}
