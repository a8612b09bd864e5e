//! `myapp replay` over a dev data dir: runs of an older build are checked against this
//! binary's code; the command fails (exit code 1) naming the run, the position and
//! both operation kinds when one diverges, and passes code that only appends work.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

use std::sync::Arc;

use clap::Parser;
use serde_json::{Value, json};
use siesta::*;
use siesta_app::{App, Command};

#[derive(Debug, Parser)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

fn build_a() -> Registry {
    let mut reg = Registry::new();
    reg.register("agent", |ctx: Context, _: Value| async move {
        ctx.step("llm", |_| async { Ok(1) }).await?;
        let ok: bool = ctx.wait_for_event("approval").await?;
        Ok(json!(ok))
    });
    reg
}

fn inserted_step() -> Registry {
    let mut reg = Registry::new();
    reg.register("agent", |ctx: Context, _: Value| async move {
        ctx.step("triage", |_| async { Ok(0) }).await?;
        ctx.step("llm", |_| async { Ok(1) }).await?;
        let ok: bool = ctx.wait_for_event("approval").await?;
        Ok(json!(ok))
    });
    reg
}

fn appended_step() -> Registry {
    let mut reg = Registry::new();
    reg.register("agent", |ctx: Context, _: Value| async move {
        ctx.step("llm", |_| async { Ok(1) }).await?;
        let ok: bool = ctx.wait_for_event("approval").await?;
        ctx.step("notify", |_| async { Ok(2) }).await?;
        Ok(json!(ok))
    });
    reg
}

/// A data dir holding one run of build A, waiting for its approval.
async fn data_dir_with_a_waiting_run() -> (tempfile::TempDir, RunId) {
    let dir = tempfile::tempdir().unwrap();
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let embedded =
        siesta_embedded::EmbeddedBackend::open(dir.path().join("siesta.db"), clock.clone())
            .unwrap();
    let config = EngineConfig {
        build_id: "agent@a".into(),
        ..EngineConfig::default()
    };
    let engine = Engine::new(embedded.backend(), clock, build_a(), config);
    let run = engine
        .start(&TenantId::from("default"), "agent", json!(null), None)
        .await
        .unwrap();
    engine.run_until_idle(10).await.unwrap();
    assert_eq!(
        engine
            .get_run(&TenantId::from("default"), &run.id)
            .await
            .unwrap()
            .status,
        RunStatus::Waiting
    );
    (dir, run.id)
}

fn replay_args(dir: &std::path::Path, extra: &[&str]) -> Command {
    let args = ["app", "replay", "--data-dir", dir.to_str().unwrap()];
    Cli::try_parse_from(args.iter().chain(extra))
        .expect("parses")
        .command
}

#[tokio::test]
async fn replay_fails_naming_the_run_and_position_when_a_step_was_inserted() {
    let (dir, id) = data_dir_with_a_waiting_run().await;
    let app = App::new(inserted_step()).build_id("agent@b");
    let Command::Replay(args) = replay_args(dir.path(), &[]) else {
        panic!("not replay")
    };
    let mut out = Vec::new();
    let report = siesta_app::replay::check(app.clone(), args, &mut out)
        .await
        .unwrap();
    let out = String::from_utf8(out).unwrap();
    assert_eq!(report.checked, 1, "{out}");
    assert_eq!(report.diverged.len(), 1, "{out}");
    assert!(
        out.contains(id.as_str())
            && out.contains("triage#0")
            && out.contains("journal step vs code step"),
        "{out}"
    );

    // The binary's exit: an error, which `App::main` turns into exit code 1.
    let err = app
        .run(replay_args(dir.path(), &[]))
        .await
        .expect_err("a diverging run fails the command");
    assert!(err.to_string().contains("1 of 1 runs"), "{err}");
}

#[tokio::test]
async fn replay_passes_an_appended_step_and_skips_this_builds_runs_unless_all() {
    let (dir, _) = data_dir_with_a_waiting_run().await;
    let app = App::new(appended_step()).build_id("agent@b");
    app.clone()
        .run(replay_args(dir.path(), &[]))
        .await
        .expect("an appended step replays");

    // Build A itself has no runs of other builds to check, but `--all` checks its own.
    let app_a = App::new(build_a()).build_id("agent@a");
    let Command::Replay(args) = replay_args(dir.path(), &[]) else {
        panic!()
    };
    let report = siesta_app::replay::check(app_a.clone(), args, &mut Vec::new())
        .await
        .unwrap();
    assert_eq!(report.checked, 0);
    let Command::Replay(args) = replay_args(dir.path(), &["--all"]) else {
        panic!()
    };
    let report = siesta_app::replay::check(app_a, args, &mut Vec::new())
        .await
        .unwrap();
    assert_eq!((report.checked, report.diverged.len()), (1, 0));
}

#[tokio::test]
async fn replay_checks_exported_runs_without_a_store_under_the_flag_and_its_former_name() {
    let (dir, id) = data_dir_with_a_waiting_run().await;
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let embedded =
        siesta_embedded::EmbeddedBackend::open(dir.path().join("siesta.db"), clock.clone())
            .unwrap();
    let engine = Engine::new(
        embedded.backend(),
        clock,
        build_a(),
        EngineConfig::default(),
    );
    let export = engine
        .export_run(&TenantId::from("default"), &id)
        .await
        .unwrap();
    let file = dir.path().join("run.json");
    std::fs::write(&file, serde_json::to_vec(&export).unwrap()).unwrap();
    let export_flag = ["--export", file.to_str().unwrap()];
    // The flag's former name still works: scripts written for it keep passing.
    let former_flag = ["--history", file.to_str().unwrap()];

    let fails = App::new(inserted_step()).build_id("agent@b");
    assert!(
        fails
            .run(replay_args(
                std::path::Path::new("/nonexistent"),
                &export_flag
            ))
            .await
            .is_err()
    );
    let passes = App::new(appended_step()).build_id("agent@b");
    passes
        .run(replay_args(
            std::path::Path::new("/nonexistent"),
            &export_flag,
        ))
        .await
        .expect("an appended step replays");
    App::new(appended_step())
        .build_id("agent@b")
        .run(replay_args(
            std::path::Path::new("/nonexistent"),
            &former_flag,
        ))
        .await
        .expect("--history still names the exports");
}
