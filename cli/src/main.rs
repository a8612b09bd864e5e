//! `siesta`: the examples app (`dev`, `lambda`: the example workflows served by
//! [`siesta_app`], as any app serves its own) plus the tools: `new` scaffolds an app,
//! `runs` steers a server's runs, `bootstrap` creates the AWS resources, `demo` runs
//! the order example end to end. This file dispatches each verb; `args` is the command
//! line as clap parses it, `demo` the demo.

mod args;
mod demo;

use anyhow::Context as _;
use clap::{CommandFactory as _, Parser};

use args::{BuildsAction, Cli, Command, RunsAction, SchedulesAction, WorkflowsAction, one};
use demo::{demo, demo_agent};

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
        Command::Workflows {
            url,
            api_key,
            json,
            action,
        } => {
            let remote = siesta_cli::runs::Remote { url, api_key, json };
            match action {
                WorkflowsAction::Pause {
                    name,
                    refuse_starts,
                } => remote.pause_workflow(&name, refuse_starts).await,
                WorkflowsAction::Resume { name } => remote.resume_workflow(&name).await,
                WorkflowsAction::Show { name } => remote.workflow_pause(&name).await,
            }
        }
        Command::Schedules {
            url,
            api_key,
            json,
            action,
        } => {
            let remote = siesta_cli::runs::Remote { url, api_key, json };
            match action.unwrap_or(SchedulesAction::List) {
                SchedulesAction::List => remote.schedules().await,
                SchedulesAction::Pause { name } => remote.pause_schedule(&name).await,
                SchedulesAction::Resume { name } => remote.resume_schedule(&name).await,
                SchedulesAction::Trigger {
                    name,
                    idempotency_key,
                } => {
                    remote
                        .trigger_schedule(&name, idempotency_key.as_deref())
                        .await
                }
            }
        }
        Command::Runs {
            url,
            api_key,
            json,
            action,
        } => {
            let remote = siesta_cli::runs::Remote { url, api_key, json };
            if let Some(bulk) = action.bulk()? {
                return remote.bulk(bulk).await;
            }
            match action {
                RunsAction::List { status, workflow } => remote.list(status, workflow).await,
                RunsAction::Show { id } => remote.show(&id).await,
                RunsAction::Timeline { id } => remote.timeline(&id).await,
                RunsAction::Stream { id, name, from } => remote.stream(&id, &name, from).await,
                RunsAction::Cancel { id, if_match, .. } => remote.cancel(&one(id)?, if_match).await,
                RunsAction::Pause { id, if_match, .. } => remote.pause(&one(id)?, if_match).await,
                RunsAction::Resume { id, if_match, .. } => remote.resume(&one(id)?, if_match).await,
                RunsAction::Action { id, cancel } => remote.action(id.as_deref(), cancel).await,
                RunsAction::Restart {
                    id,
                    from,
                    as_new,
                    repeat_tool_calls,
                    if_match,
                    ..
                } => {
                    let id = one(id)?;
                    let body = siesta_client::RestartBody {
                        from,
                        as_new,
                        repeat_tool_calls,
                    };
                    remote.restart(&id, &body, if_match).await
                }
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
                RunsAction::Limits => remote.limits().await,
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
