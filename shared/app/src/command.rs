//! The commands every Siesta app binary has: `dev`, `replay` and `lambda ROLE`.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;

use crate::App;
use crate::dev::DevOptions;
use crate::lambda::Role;
pub use siesta_lambda::{AwsArgs, SharedArgs};

/// The commands an [`App`] runs. Flatten it into a CLI of your own
/// (`#[command(flatten)]`) to keep them beside yours, and hand the parsed value to
/// [`App::run`].
#[derive(Debug, clap::Subcommand)]
// Parsed once per process and moved once: the size of the `dev` variant costs nothing,
// and boxing it would change the variant callers match on.
#[allow(clippy::large_enum_variant)]
pub enum Command {
    /// Serve the API and webhooks on 127.0.0.1, with a queue worker and a sweep ticker,
    /// on the embedded backend (data kept in `--data-dir`, surviving restarts) or, with
    /// `--backend aws`, on DynamoDB, S3 and SQS.
    Dev(DevArgs),
    /// Check that the runs in flight replay on this binary's code, with no side
    /// effect and no write: by default the unfinished runs of other builds, in the
    /// embedded `--data-dir`, on AWS (`--backend aws`), or in exported runs
    /// (`--export FILE...`). Exits non-zero naming each run, position and both
    /// operation kinds where replay diverges: the CI step before a deploy.
    Replay(crate::replay::ReplayArgs),
    /// Serve one of the four Lambda functions on the Lambda runtime (what a function's
    /// `bootstrap` runs; the template sets `SIESTA_ROLE` instead of passing this).
    Lambda {
        /// Which function: `start` (the HTTP API), `step` (SQS wake-ups), `webhook`, or
        /// `sweep` (the schedule).
        #[arg(value_enum, env = "SIESTA_ROLE")]
        role: Role,
    },
}

impl Command {
    /// The Lambda role `SIESTA_ROLE` names, if it names one: what a function runs when
    /// its `bootstrap` is started with no arguments.
    pub fn from_env() -> Option<Command> {
        Command::for_role(&std::env::var("SIESTA_ROLE").ok()?)
    }

    /// The Lambda role `role` names (`start`, `step`, `webhook`, `sweep`), if any.
    pub fn for_role(role: &str) -> Option<Command> {
        let role = <Role as clap::ValueEnum>::from_str(role.trim(), true).ok()?;
        Some(Command::Lambda { role })
    }
}

/// The options of `dev`.
#[derive(Debug, clap::Args)]
pub struct DevArgs {
    /// Port to listen on (0 picks a free one).
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Where the data lives.
    #[arg(long, default_value = ".siesta")]
    pub data_dir: PathBuf,
    /// API keys as `key=tenant,...`; without any, auth is off and the tenant is `default`.
    #[arg(long, env = "SIESTA_API_KEYS", default_value = "")]
    pub api_keys: String,
    /// How often the sweep runs, in milliseconds.
    #[arg(long, default_value_t = 5_000)]
    pub sweep_every_ms: u64,
    /// Where runs live: `embedded` (a SQLite file in `--data-dir`) or `aws`
    /// (DynamoDB, S3 and SQS, on the emulators or on AWS).
    #[arg(long, env = "SIESTA_BACKEND", value_enum, default_value_t = BackendKind::Embedded)]
    pub backend: BackendKind,
    /// Most wake-ups the worker handles at once (one slow step never holds up
    /// another run while slots are free).
    #[arg(long, default_value_t = siesta::WorkerConfig::default().concurrency)]
    pub workers: usize,
    /// What an acknowledged write to the embedded backend survives: `full` (the
    /// default) fsyncs before every acknowledgement, so it survives an OS crash or a
    /// power loss; `relaxed` skips the fsync — faster, but the last writes before
    /// an OS crash may be lost (a process kill loses nothing).
    #[arg(long, value_enum, default_value_t = DurabilityKind::Full)]
    pub durability: DurabilityKind,
    /// Journal entries of suspended runs kept in memory, so their next wake-up
    /// continues or replays without reading the store (0 turns the cache off: every
    /// wake-up replays from the store). Memory grows with it: each sleeping run it
    /// holds costs its decoded journal.
    #[arg(long, env = "SIESTA_REPLAY_CACHE_ENTRIES", default_value_t = siesta::EngineConfig::default().replay_cache_entries)]
    pub replay_cache_entries: usize,
    /// Niceness of the threads running the queue worker and the sweep (Linux): N > 0
    /// runs them on a runtime of their own at that niceness, so a busy worker leaves
    /// the CPU to the HTTP side first; 0 (default) runs them on the server's threads.
    #[arg(long, env = "SIESTA_WORKER_NICE", default_value_t = crate::dev::DEFAULT_WORKER_NICE, value_parser = clap::value_parser!(i32).range(0..=19))]
    pub worker_nice: i32,
    /// Per-tenant quotas: a JSON file (see docs/quotas.md), e.g.
    /// `{"default": {"max_unfinished_runs": 100}, "tenants": {"acme": {...}}}`.
    #[arg(long, env = "SIESTA_QUOTAS_FILE")]
    pub quotas: Option<PathBuf>,
    /// With `--backend aws`: also remove finished runs past their retention here, as a
    /// deployment's sweep function does, by this server's `--retention`, retentions
    /// per workflow and `--quotas`. Off by default: the table may be a deployment's,
    /// whose sweep function reaps it by its own rules. (The embedded backend always
    /// reaps.)
    #[arg(long)]
    pub reap: bool,
    /// The settings the Lambda functions read under the same names: lease, webhook
    /// sources, retention.
    #[command(flatten)]
    pub shared: SharedArgs,
    /// Where the AWS backend's resources are.
    #[command(flatten)]
    pub aws: AwsArgs,
}

/// Which backend `dev` runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BackendKind {
    /// A SQLite file in the data dir; nothing else needed.
    Embedded,
    /// DynamoDB, S3 and SQS, configured as every AWS tool is (the default credential
    /// chain, `AWS_REGION`, `AWS_ENDPOINT_URL`, `AWS_ENDPOINT_URL_<SERVICE>`).
    Aws,
}

/// What an acknowledged write to the embedded backend survives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DurabilityKind {
    /// fsync before every acknowledgement (group commit): survives an OS crash.
    Full,
    /// No fsync: survives a process kill, not an OS crash or a power loss.
    Relaxed,
}

impl DevArgs {
    /// The dev server's options these arguments name (the AWS backend is connected here).
    pub async fn options(self) -> anyhow::Result<DevOptions> {
        let mut options = DevOptions::new(self.data_dir);
        options.api_keys = DevOptions::parse_api_keys(&self.api_keys)?;
        options.lease_ttl = self.shared.lease_ttl();
        options.sweep_every = Duration::from_millis(self.sweep_every_ms.max(50));
        options.workers = self.workers.max(1);
        options.replay_cache_entries = self.replay_cache_entries;
        options.worker_nice = self.worker_nice;
        options.durability = match self.durability {
            DurabilityKind::Full => siesta_embedded::Durability::Full,
            DurabilityKind::Relaxed => siesta_embedded::Durability::Relaxed,
        };
        options.retention = self.shared.retention_policy()?;
        options.concurrency_limits = self.shared.limit_overrides()?;
        options.disabled_schedules = self.shared.disabled_schedules();
        options.sources = siesta_api::WebhookSource::parse_all(&self.shared.webhook_sources)
            .map_err(anyhow::Error::msg)?;
        if let Some(path) = &self.quotas {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading quotas from {}", path.display()))?;
            options.quotas = siesta::Quotas::parse(&text)
                .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        }
        if self.backend == BackendKind::Aws {
            let names = self.aws.names()?;
            let sdk = siesta_aws::sdk_config_from_env().await;
            println!(
                "AWS backend: table {}, bucket {}, queue {}",
                names.table, names.bucket, names.queue_url
            );
            let aws = siesta_aws::AwsOptions::default();
            if self.reap {
                println!("retention: finished runs past their retention are removed here");
                options.use_aws(&sdk, names, aws);
            } else {
                options.backend =
                    Some(siesta_aws::AwsBackend::with_options(&sdk, names, aws).backend());
            }
        }
        Ok(options)
    }
}

/// Log human-readable lines on stderr at the level `SIESTA_LOG` names (default `warn`),
/// unless a subscriber is set up already; with `OTEL_EXPORTER_OTLP_ENDPOINT` set, export
/// the spans at info level and above whatever the log level
/// ([`siesta_lambda::otel`]).
pub(crate) fn init_dev_logging(metrics: Option<&crate::metrics::Metrics>) {
    use tracing_subscriber::Layer;
    use tracing_subscriber::layer::SubscriberExt;
    let filter =
        tracing_subscriber::EnvFilter::try_from_env("SIESTA_LOG").unwrap_or_else(|_| "warn".into());
    let subscriber = tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_filter(filter),
        )
        .with(siesta_lambda::otel::layer_from_env("siesta-dev"))
        // Times the engine's spans for `/metrics` whatever the log level.
        .with(metrics.map(|m| m.layer()));
    let _ = tracing::subscriber::set_global_default(subscriber);
}

/// `dev`: serve until Ctrl-C. The first line printed names the URL (tests and scripts
/// read it).
pub(crate) async fn dev(app: App, args: DevArgs) -> anyhow::Result<()> {
    let metrics = crate::metrics::Metrics::new();
    init_dev_logging(Some(&metrics));
    let port = args.port;
    let mut options = args.options().await?;
    options.metrics = metrics;
    options.build_id = app.build_id.clone();
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .with_context(|| format!("binding 127.0.0.1:{port}"))?;
    let server = crate::dev::start(listener, options.clone(), app.registry).await?;
    match options.backend {
        Some(_) => println!("{} dev listening on http://{}", app.name, server.addr),
        None => println!(
            "{} dev listening on http://{} (data in {})",
            app.name,
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
    println!("build: {}", app.build_id);
    if options.api_keys.is_empty() {
        println!("auth is off: every request is tenant `default`");
    }
    println!("web UI: http://{}/", server.addr);
    for line in other_builds_lines(&server.other_builds) {
        println!("{line}");
    }
    tokio::signal::ctrl_c().await?;
    server.stop();
    Ok(())
}

/// What `dev` says at start-up of the runs of other builds it found: per build, its
/// unfinished runs by status, how many moved to this build, and each run that waits
/// for its build with why (the first position where its journal and this build's code
/// part ways, or its workflow's pinned policy).
pub(crate) fn other_builds_lines(found: &[crate::dev::OtherBuildAtStart]) -> Vec<String> {
    let mut lines = Vec::new();
    if found.is_empty() {
        return lines;
    }
    lines.push("runs of other builds (this build runs only its own):".to_owned());
    for build in found {
        let counts: Vec<String> = build
            .unfinished
            .iter()
            .map(|(status, n)| format!("{n} {status}"))
            .collect();
        lines.push(format!(
            "  {} (tenant {}): {}",
            build.build_id,
            build.tenant,
            counts.join(", ")
        ));
        if !build.upgraded.is_empty() {
            lines.push(format!(
                "    {} replay cleanly on this build and moved to it",
                build.upgraded.len()
            ));
        }
        if !build.pinned.is_empty() {
            lines.push(format!(
                "    {} replay cleanly on this build but are pinned: they wait for their build (POST /runs/{{id}}/upgrade moves one)",
                build.pinned.len()
            ));
        }
        for diverged in &build.diverged {
            let d = &diverged.divergence;
            let kind = |k: Option<siesta::OperationKind>| k.map_or("nothing", |k| k.as_str());
            lines.push(format!(
                "    run {} waits for its build: diverges at {} (journal {}, code {})",
                diverged.run_id,
                d.position,
                kind(d.journal_kind),
                kind(d.code_kind)
            ));
        }
        for skipped in &build.skipped {
            lines.push(format!(
                "    run {} waits for its build: not checked ({})",
                skipped.run_id, skipped.reason
            ));
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(subcommand)]
        command: Command,
    }

    async fn dev_options(args: &[&str]) -> DevOptions {
        let cli = Cli::try_parse_from(["app", "dev"].iter().chain(args)).expect("parses");
        let Command::Dev(dev) = cli.command else {
            panic!("not dev: {cli:?}")
        };
        dev.options().await.expect("valid options")
    }

    #[test]
    fn dev_says_per_other_build_what_moved_and_where_each_waiting_run_diverges() {
        use siesta::{DivergedRun, Divergence, OperationKind, Position, RunId, RunStatus};
        let found = crate::dev::OtherBuildAtStart {
            tenant: siesta::TenantId::from("default"),
            build_id: "shop@0.1.0+old".into(),
            unfinished: [(RunStatus::Waiting, 3)].into(),
            upgraded: vec![RunId::from("r1")],
            pinned: vec![RunId::from("r2")],
            diverged: vec![DivergedRun {
                run_id: RunId::from("r3"),
                divergence: Divergence {
                    position: Position::from("triage#0"),
                    journal_kind: Some(OperationKind::Step),
                    code_kind: Some(OperationKind::Step),
                    message: "non-determinism".into(),
                },
            }],
            skipped: Vec::new(),
        };
        let lines = other_builds_lines(&[found]);
        assert_eq!(lines[1], "  shop@0.1.0+old (tenant default): 3 waiting");
        assert_eq!(
            lines[2],
            "    1 replay cleanly on this build and moved to it"
        );
        assert!(lines[3].starts_with("    1 replay cleanly on this build but are pinned"));
        assert_eq!(
            lines[4],
            "    run r3 waits for its build: diverges at triage#0 (journal step, code step)"
        );
        assert!(other_builds_lines(&[]).is_empty(), "nothing said when none");
    }

    #[tokio::test]
    async fn the_worker_runs_at_the_default_niceness_unless_told() {
        assert_eq!(
            dev_options(&[]).await.worker_nice,
            crate::dev::DEFAULT_WORKER_NICE
        );
        assert_eq!(dev_options(&["--worker-nice", "10"]).await.worker_nice, 10);
        assert_eq!(dev_options(&["--worker-nice", "0"]).await.worker_nice, 0);
        assert!(Cli::try_parse_from(["app", "dev", "--worker-nice", "20"]).is_err());
        assert!(Cli::try_parse_from(["app", "dev", "--worker-nice", "-1"]).is_err());
    }

    #[tokio::test]
    async fn the_replay_cache_is_the_engines_default_unless_a_size_is_given() {
        let default = siesta::EngineConfig::default().replay_cache_entries;
        assert!(default > 0);
        assert_eq!(dev_options(&[]).await.replay_cache_entries, default);
        assert_eq!(
            dev_options(&["--replay-cache-entries", "0"])
                .await
                .replay_cache_entries,
            0
        );
        assert!(
            Cli::try_parse_from(["app", "dev", "--replay-cache-entries", "lots"]).is_err(),
            "a size that is not a number is refused"
        );
    }

    #[tokio::test]
    async fn finished_runs_are_kept_thirty_days_unless_a_retention_is_given() {
        use std::time::Duration;
        let kept = |options: DevOptions| options.retention.of("any");
        assert_eq!(
            kept(dev_options(&[]).await),
            Some(Duration::from_secs(30 * 86_400))
        );
        assert_eq!(
            kept(dev_options(&["--retention", "12h"]).await),
            Some(Duration::from_secs(12 * 3600))
        );
        assert_eq!(
            kept(dev_options(&["--retention", "3s"]).await),
            Some(Duration::from_secs(3))
        );
        assert_eq!(kept(dev_options(&["--retention", "0"]).await), None);
        let cli = Cli::try_parse_from(["app", "dev", "--retention", "a while"]).expect("parses");
        let Command::Dev(dev) = cli.command else {
            panic!("not dev")
        };
        let refused = dev.options().await.expect_err("a retention without a unit");
        assert!(refused.to_string().contains("--retention"), "{refused}");
    }
}
