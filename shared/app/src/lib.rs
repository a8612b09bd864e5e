//! The crate a Siesta app's binary depends on. Build a [`Registry`] of your workflows,
//! hand it to an [`App`], and one binary serves every role:
//!
//! ```no_run
//! # async fn hello(_: siesta::Context, name: String) -> Result<String, siesta::Error> { Ok(name) }
//! fn main() -> std::process::ExitCode {
//!     let mut workflows = siesta::Registry::new();
//!     workflows.register("hello", hello);
//!     siesta_app::App::new(workflows)
//!         .build_id(siesta_app::build_id!())
//!         .main()
//! }
//! ```
//!
//! - `myapp dev [--port 8080] [--data-dir .siesta] [--backend aws] …` — the local server:
//!   the HTTP API and webhooks, a queue worker standing in for SQS and a sweep ticker
//!   standing in for EventBridge, on the embedded store (a SQLite file) or, with
//!   `--backend aws`, on DynamoDB, S3 and SQS ([`dev`]).
//! - `myapp replay [--data-dir .siesta | --backend aws | --export FILE…] [--all]
//!   [--build ID]` — the check before a deploy: the runs in flight (by default the
//!   unfinished runs of other builds) replayed on this binary's code with no side
//!   effect and no write; exits non-zero naming each run, position and both operation
//!   kinds where replay diverges ([`replay`]).
//! - `myapp lambda start|step|webhook|sweep`, or `myapp` with `SIESTA_ROLE` set — one of
//!   the four Lambda functions ([`Role`]). One build artifact serves all four: the
//!   template gives each function the same binary and its own `SIESTA_ROLE`.
//!
//! `siesta runs …` (the `siesta` command) inspects and steers the runs of any of them.
//! A CLI of your own keeps these commands by flattening [`Command`] into it and calling
//! [`App::run`]; `siesta` itself is built that way.
//!
//! Every run records the build id it started on ([`App::build_id`], default
//! [`build_id!`]: your crate's version and a hash of its build).

mod background_runtime;
mod command;
pub mod dev;
mod lambda;
pub mod metrics;
pub mod replay;

use std::process::ExitCode;

use siesta::Registry;

pub use command::{AwsArgs, BackendKind, Command, DevArgs, DurabilityKind, SharedArgs};
pub use lambda::Role;

/// Your crate's name, version and build hash as a build id, e.g.
/// `myapp@0.1.0+5f3a9c0e1b2d4a67` (the form of `siesta::build_id!`): `CARGO_PKG_NAME`,
/// `CARGO_PKG_VERSION` and, when the build set it, `SIESTA_BUILD_HASH` (compile time,
/// both read in the crate that calls the macro). A build script sets the hash; the one
/// `siesta new` writes hashes the crate's sources.
#[macro_export]
macro_rules! build_id {
    () => {
        match ::core::option_env!("SIESTA_BUILD_HASH") {
            ::core::option::Option::Some(hash) => ::std::format!(
                "{}@{}+{}",
                ::core::env!("CARGO_PKG_NAME"),
                ::core::env!("CARGO_PKG_VERSION"),
                hash
            ),
            ::core::option::Option::None => ::std::format!(
                "{}@{}",
                ::core::env!("CARGO_PKG_NAME"),
                ::core::env!("CARGO_PKG_VERSION")
            ),
        }
    };
}

/// A Siesta app: its workflows and build id; [`App::main`] runs the role the command line
/// (or `SIESTA_ROLE`) names.
#[derive(Clone)]
pub struct App {
    registry: Registry,
    build_id: String,
    name: String,
}

impl App {
    /// An app running `registry`'s workflows. Its build id is `unversioned` until
    /// [`App::build_id`] sets one; its name is the binary's file name.
    pub fn new(registry: Registry) -> Self {
        let name = std::env::args_os()
            .next()
            .map(std::path::PathBuf::from)
            .and_then(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
            .unwrap_or_else(|| "app".to_owned());
        App {
            registry,
            build_id: "unversioned".to_owned(),
            name,
        }
    }

    /// The code version every run started by this app records (see [`build_id!`]).
    pub fn build_id(mut self, build_id: impl Into<String>) -> Self {
        self.build_id = build_id.into();
        self
    }

    /// The name the app calls itself in help and log lines (default: the binary's file
    /// name).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// The workflows this app runs.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The build id runs record.
    pub fn version(&self) -> &str {
        &self.build_id
    }

    /// The whole program: parse the command line (`dev …`, `lambda ROLE`; with no
    /// command, the role `SIESTA_ROLE` names), run it on a Tokio runtime, and report an
    /// error on stderr with exit code 1.
    pub fn main(self) -> ExitCode {
        let command = match self.parse() {
            Ok(command) => command,
            Err(e) => e.exit(),
        };
        let runtime = match tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
        {
            Ok(runtime) => runtime,
            Err(e) => {
                eprintln!("{}: starting the Tokio runtime: {e}", self.name);
                return ExitCode::FAILURE;
            }
        };
        let name = self.name.clone();
        match runtime.block_on(self.run(command)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("{name}: {e:#}");
                ExitCode::FAILURE
            }
        }
    }

    /// The command the command line names, or the Lambda role `SIESTA_ROLE` names when it
    /// names no command.
    fn parse(&self) -> Result<Command, clap::Error> {
        self.parse_from(std::env::args_os(), std::env::var("SIESTA_ROLE").ok())
    }

    /// [`App::parse`] over `args` (the program's name first) and `role` (the value of
    /// `SIESTA_ROLE`).
    fn parse_from(
        &self,
        args: impl IntoIterator<Item = impl Into<std::ffi::OsString> + Clone>,
        role: Option<String>,
    ) -> Result<Command, clap::Error> {
        use clap::{FromArgMatches as _, Subcommand as _};
        let cli = Command::augment_subcommands(
            clap::Command::new(self.name.clone())
                .version(self.build_id.clone())
                .about("Durable workflows on Siesta: the local server and the Lambda roles"),
        );
        let mut help = cli.clone();
        let matches = cli.try_get_matches_from(args)?;
        if matches.subcommand().is_none() {
            return role.as_deref().and_then(Command::for_role).ok_or_else(|| {
                help.error(
                    clap::error::ErrorKind::MissingSubcommand,
                    "name a command (e.g. `dev`), or set SIESTA_ROLE to a Lambda role \
                         (start, step, webhook, sweep)",
                )
            });
        }
        Command::from_arg_matches(&matches)
    }

    /// Run `command`: the dev server until Ctrl-C, or a Lambda role until the Lambda
    /// runtime stops. Logging is set up here (human-readable on stderr for `dev`, JSON
    /// lines for Lambda) unless the caller set up a subscriber already.
    pub async fn run(self, command: Command) -> anyhow::Result<()> {
        match command {
            Command::Dev(args) => command::dev(self, args).await,
            Command::Replay(args) => replay::replay(self, args).await,
            Command::Lambda { role } => {
                siesta_lambda::init_logging();
                lambda::serve(role, self.registry, &self.build_id)
                    .await
                    .map_err(|e| anyhow::anyhow!(e))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn app() -> App {
        App::new(Registry::new())
            .name("myapp")
            .build_id("1.2.3+abc")
    }

    #[test]
    fn dev_takes_the_options_siesta_dev_has() {
        let command = app()
            .parse_from(
                [
                    "myapp",
                    "dev",
                    "--port",
                    "0",
                    "--data-dir",
                    "/tmp/d",
                    "--backend",
                    "aws",
                ],
                None,
            )
            .unwrap();
        let Command::Dev(args) = command else {
            panic!("{command:?}")
        };
        assert_eq!(args.port, 0);
        assert_eq!(args.data_dir, std::path::PathBuf::from("/tmp/d"));
        assert_eq!(args.backend, BackendKind::Aws);
        assert_eq!(args.shared.lease_ttl_ms, 60_000);
    }

    #[test]
    fn a_lambda_role_is_named_by_the_command_or_by_siesta_role() {
        let named = app().parse_from(["myapp", "lambda", "step"], None).unwrap();
        assert!(
            matches!(named, Command::Lambda { role: Role::Step }),
            "{named:?}"
        );
        // A function's bootstrap is started with no arguments.
        let configured = app()
            .parse_from(["bootstrap"], Some("sweep".into()))
            .unwrap();
        assert!(
            matches!(configured, Command::Lambda { role: Role::Sweep }),
            "{configured:?}"
        );
    }

    #[test]
    fn no_command_and_no_role_is_a_usage_error_naming_both() {
        for role in [None, Some("stepper".to_owned())] {
            let err = app().parse_from(["myapp"], role).unwrap_err();
            assert!(err.to_string().contains("SIESTA_ROLE"), "{err}");
        }
    }

    #[test]
    fn the_version_flag_prints_the_build_id() {
        let err = app().parse_from(["myapp", "--version"], None).unwrap_err();
        assert_eq!(err.kind(), clap::error::ErrorKind::DisplayVersion);
        assert!(err.to_string().contains("1.2.3+abc"), "{err}");
    }
}
