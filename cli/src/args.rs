//! The command line as clap parses it: every verb of `siesta` and its flags (the binary's
//! module; `main.rs` dispatches them).

use std::path::PathBuf;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "siesta",
    version,
    about = "Durable workflows on AWS Lambda — run locally"
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Option<Command>,
}

#[derive(Subcommand)]
pub(crate) enum Command {
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
    /// A server's schedules (`GET /schedules`): list them with their next ticks, or
    /// pause, resume or trigger one.
    Schedules {
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
        action: Option<SchedulesAction>,
    },
    /// A server's workflows: pause one (its runs held, its new starts and schedules'
    /// ticks queued or refused) or resume it (docs/operations.md).
    Workflows {
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
        action: WorkflowsAction,
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
pub(crate) enum BuildsAction {
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
pub(crate) enum WorkflowsAction {
    /// Pause a workflow: a bulk pause holds its runs; until resumed its new starts and
    /// its schedules' ticks are created paused (or, with `--refuse-starts`, refused).
    Pause {
        /// The workflow's name.
        name: String,
        /// Refuse its new starts (409) and skip its schedules' ticks, rather than queue
        /// them paused.
        #[arg(long)]
        refuse_starts: bool,
    },
    /// Resume a paused workflow: its starts begin again, its paused runs are resumed.
    Resume {
        /// The workflow's name.
        name: String,
    },
    /// Whether a workflow is paused, by whom and since when.
    Show {
        /// The workflow's name.
        name: String,
    },
}

#[derive(Subcommand)]
pub(crate) enum SchedulesAction {
    /// List the schedules with their next ticks (the default).
    List,
    /// Pause a schedule: it fires no tick until resumed.
    Pause {
        /// The schedule's name.
        name: String,
    },
    /// Resume a paused schedule from its next tick (the paused ones are not caught up).
    Resume {
        /// The schedule's name.
        name: String,
    },
    /// Start a run of the schedule now, with its input.
    Trigger {
        /// The schedule's name.
        name: String,
        /// A key that makes a retry answer the run the first call started.
        #[arg(long)]
        idempotency_key: Option<String>,
    },
}

/// The flags that make a run's action a bulk action over every run a filter matches
/// (`POST /runs/actions`) instead of one run's.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct BulkArgs {
    /// Act on every run of the tenant this filter matches instead of one run:
    /// `field=value` pairs, comma-separated, from workflow, status, build, error_kind,
    /// created_after, created_before, failed_after, failed_before (RFC 3339) and
    /// dead_lettered. Starts a durable job and follows its progress.
    #[arg(long, value_name = "FIELD=VALUE,...")]
    pub(crate) filter: Option<String>,
    /// With `--filter`: runs acted on per second (default 50).
    #[arg(long)]
    pub(crate) rate: Option<u32>,
    /// With `--filter`: print the job's id and return (follow it with `runs action ID`).
    #[arg(long)]
    pub(crate) no_wait: bool,
}

#[derive(Subcommand)]
pub(crate) enum RunsAction {
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
    /// Cancel a run, or with `--filter` every run a filter matches.
    Cancel {
        /// The run's id.
        #[arg(required_unless_present = "filter", conflicts_with = "filter")]
        id: Option<String>,
        /// Only if the run is still at this version.
        #[arg(long, conflicts_with = "filter")]
        if_match: Option<u64>,
        #[command(flatten)]
        bulk: BulkArgs,
    },
    /// Pause a run: at once when it waits, at its next step boundary when it runs. It
    /// takes no turn until `runs resume`; deliveries are still recorded meanwhile.
    /// With `--filter`, every run a filter matches.
    Pause {
        /// The run's id.
        #[arg(required_unless_present = "filter", conflicts_with = "filter")]
        id: Option<String>,
        /// Only if the run is still at this version.
        #[arg(long, conflicts_with = "filter")]
        if_match: Option<u64>,
        #[command(flatten)]
        bulk: BulkArgs,
    },
    /// Resume a parked run once its cause is fixed, or a paused run (for one parked
    /// because its wake-up was dead-lettered, `runs redrive` does the same). With
    /// `--filter`, every run a filter matches.
    Resume {
        /// The run's id.
        #[arg(required_unless_present = "filter", conflicts_with = "filter")]
        id: Option<String>,
        /// Only if the run is still at this version.
        #[arg(long, conflicts_with = "filter")]
        if_match: Option<u64>,
        #[command(flatten)]
        bulk: BulkArgs,
    },
    /// Restart a run from a step (docs/operations.md): in place by default, from the
    /// first operation that failed, keeping everything before it; the journal before
    /// the point must replay on the build serving the API (else 409, naming where, and
    /// nothing changes). A tool call after the point that succeeded keeps its outcome
    /// unless `--repeat-tool-calls`. With `--filter`, every run a filter matches.
    Restart {
        /// The run's id.
        #[arg(required_unless_present = "filter", conflicts_with = "filter")]
        id: Option<String>,
        /// The position to go on from (an operation's timeline id, e.g. `notify#0`).
        #[arg(long)]
        from: Option<String>,
        /// As a new run forked from this one, rather than in place.
        #[arg(long)]
        as_new: bool,
        /// Make the tool calls after the point again (same idempotency keys).
        #[arg(long)]
        repeat_tool_calls: bool,
        /// Only if the run is still at this version.
        #[arg(long, conflicts_with = "filter")]
        if_match: Option<u64>,
        #[command(flatten)]
        bulk: BulkArgs,
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
    /// build that replays; the others are listed with where they diverge. With
    /// `--filter`, every run a filter matches, as a paced job.
    Upgrade {
        /// The run's id.
        #[arg(required_unless_present_any = ["all", "filter"], conflicts_with_all = ["all", "filter"])]
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
        #[command(flatten)]
        bulk: BulkArgs,
    },
    /// Print a run and its replay input (journal and deliveries) as one JSON document: what
    /// `myapp replay --export FILE` checks.
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
    /// List the concurrency limits: per key, how many of the caller's runs hold a slot
    /// and how many wait in line (queued runs), against the limit's max.
    Limits,
    /// Redrive a dead letter (resume the run it parked), or all of them with `--all`,
    /// or with `--filter` those a filter matches, as a paced job.
    Redrive {
        /// The run the dead letter parked.
        #[arg(required_unless_present_any = ["all", "filter"], conflicts_with_all = ["all", "filter"])]
        id: Option<String>,
        /// Every dead letter of the tenant (up to 1 000 per call).
        #[arg(long, conflicts_with = "filter")]
        all: bool,
        /// Only if the run is still at this version.
        #[arg(long, requires = "id")]
        if_match: Option<u64>,
        #[command(flatten)]
        bulk: BulkArgs,
    },
    /// Show a bulk action (`runs cancel --filter …` and the like): its progress and
    /// the runs it skipped or failed on, with why; `--cancel` stops it. Without an id,
    /// the tenant's bulk actions, newest first.
    Action {
        /// The job's id.
        id: Option<String>,
        /// Cancel it: it acts on no more runs (those acted on stay acted on).
        #[arg(long, requires = "id")]
        cancel: bool,
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

impl RunsAction {
    /// The bulk action this asks for, when it names a `--filter` rather than a run;
    /// `--rate` or `--no-wait` without one is refused (clap's `requires` does not see
    /// through the flattened flags).
    pub(crate) fn bulk(&self) -> anyhow::Result<Option<siesta_cli::bulk::Bulk>> {
        use siesta_client::RunsActionKind as Kind;
        let (action, bulk, restart) = match self {
            RunsAction::Cancel { bulk, .. } => (Kind::Cancel, bulk, (None, false, false)),
            RunsAction::Pause { bulk, .. } => (Kind::Pause, bulk, (None, false, false)),
            RunsAction::Resume { bulk, .. } => (Kind::Resume, bulk, (None, false, false)),
            RunsAction::Upgrade { bulk, .. } => (Kind::Upgrade, bulk, (None, false, false)),
            RunsAction::Redrive { bulk, .. } => (Kind::Redrive, bulk, (None, false, false)),
            RunsAction::Restart {
                bulk,
                from,
                as_new,
                repeat_tool_calls,
                ..
            } => (
                Kind::Restart,
                bulk,
                (from.clone(), *as_new, *repeat_tool_calls),
            ),
            _ => return Ok(None),
        };
        let Some(filter) = bulk.filter.clone() else {
            if bulk.rate.is_some() || bulk.no_wait {
                anyhow::bail!("--rate and --no-wait go with --filter");
            }
            return Ok(None);
        };
        Ok(Some(siesta_cli::bulk::Bulk {
            action,
            filter,
            rate: bulk.rate,
            no_wait: bulk.no_wait,
            restart,
        }))
    }
}

/// The run a run's action names: clap requires it unless `--filter` is given, and a
/// `--filter` is handled before this is asked.
pub(crate) fn one(id: Option<String>) -> anyhow::Result<String> {
    id.ok_or_else(|| anyhow::anyhow!("name a run, or --filter for every run a filter matches"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_runs_action_takes_a_run_or_a_filter_never_both() {
        let parse = |args: &[&str]| Cli::try_parse_from(["siesta", "runs"].iter().chain(args));
        for verb in ["cancel", "pause", "resume", "restart", "upgrade", "redrive"] {
            assert!(parse(&[verb, "run-1"]).is_ok(), "{verb} RUN");
            assert!(
                parse(&[
                    verb,
                    "--filter",
                    "workflow=order",
                    "--rate",
                    "10",
                    "--no-wait"
                ])
                .is_ok(),
                "{verb} --filter"
            );
            assert!(parse(&[verb]).is_err(), "{verb}: a run or a filter");
            assert!(
                parse(&[verb, "run-1", "--filter", "workflow=order"]).is_err(),
                "{verb}: not both"
            );
            let Some(Command::Runs { action, .. }) =
                parse(&[verb, "run-1", "--rate", "5"]).unwrap().command
            else {
                panic!("runs")
            };
            assert!(action.bulk().is_err(), "--rate needs --filter");
        }
        assert!(parse(&["action"]).is_ok());
        assert!(parse(&["action", "job-1", "--cancel"]).is_ok());
        assert!(parse(&["action", "--cancel"]).is_err());
    }

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
