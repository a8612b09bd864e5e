//! `siesta new` end to end: the scaffold builds and passes its own tests with no edit,
//! and its binary's `dev` serves `hello` over HTTP. It builds in this workspace's target
//! directory, so Siesta's crates and their dependencies are compiled once for both.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use serde_json::json;

/// This checkout's root.
fn checkout() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_owned()
}

/// The target directory this test was built in (`<target>/<profile>/deps/<test>`).
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.ancestors().nth(3).unwrap().to_owned()
}

/// Cargo, in `dir`, on the shared target directory, offline (every crate the scaffold
/// needs is one this workspace already uses).
fn cargo(dir: &Path, args: &[&str]) -> std::process::Output {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    Command::new(cargo)
        .args(args)
        .arg("--offline")
        .current_dir(dir)
        .env("CARGO_TARGET_DIR", target_dir())
        .env_remove("CARGO_MANIFEST_DIR")
        .output()
        .expect("run cargo")
}

/// The lines of a failed `cargo` that say why (errors, panics, failed tests), first, so
/// that a log cut to its first and last lines still shows the cause.
fn why_it_failed(out: &str, err: &str) -> String {
    let causes: Vec<&str> = err
        .lines()
        .chain(out.lines())
        .filter(|l| {
            l.starts_with("error")
                || l.contains("panicked at")
                || l.contains("FAILED")
                || l.starts_with("warning: ")
        })
        .take(12)
        .collect();
    if causes.is_empty() {
        let tail: Vec<&str> = err.lines().rev().take(12).collect();
        return tail.into_iter().rev().collect::<Vec<_>>().join(" | ");
    }
    causes.join(" | ")
}

/// Kills the dev server when the test ends, however it ends.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_app_builds_passes_its_tests_and_serves_hello_in_dev() {
    let scratch = tempfile::tempdir().unwrap();
    let app = scratch.path().join("hello-app");
    let made = Command::new(env!("CARGO_BIN_EXE_siesta"))
        .arg("new")
        .arg(&app)
        .arg("--siesta-path")
        .arg(checkout())
        .output()
        .unwrap();
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    for file in siesta_cli::new::file_names() {
        assert!(app.join(file).is_file(), "{file} was written");
    }
    let readme = std::fs::read_to_string(app.join("README.md")).unwrap();
    let commands: Vec<&str> = readme
        .lines()
        .skip_while(|l| !l.starts_with("```"))
        .skip(1)
        .take(5)
        .map(|l| l.split('#').next().unwrap().trim())
        .collect();
    assert_eq!(
        commands,
        [
            "cargo run -- dev",
            "cargo test",
            "cargo run -- replay --backend aws",
            "sam build -t infra/template.yaml --beta-features",
            "sam deploy --guided"
        ]
    );

    let tested = cargo(&app, &["test"]);
    let out = String::from_utf8_lossy(&tested.stdout);
    let err = String::from_utf8_lossy(&tested.stderr);
    assert!(
        tested.status.success(),
        "cargo test in the scaffold failed: {}\n--- stdout\n{out}\n--- stderr\n{err}",
        why_it_failed(&out, &err)
    );
    assert!(out.contains("test result: ok. 2 passed"), "{out}");
    assert!(
        !err.contains("warning"),
        "the scaffold builds without warnings:\n{err}"
    );

    let binary = target_dir().join("debug").join("hello-app");
    let data = scratch.path().join("data");
    let mut child = Command::new(&binary)
        .args(["dev", "--port", "0", "--data-dir"])
        .arg(&data)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the scaffold's dev server");
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let server = Killed(child);
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    // Keep draining: a closed pipe would kill the server at its next line of output.
    std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
    assert!(line.starts_with("hello-app dev listening on"), "{line}");
    let base = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .expect("the URL")
        .to_owned();

    let options = siesta_client::StartOptions {
        wait_secs: Some(30),
        ..Default::default()
    };
    let run = siesta_client::Client::new(&base)
        .start_run("hello", &json!({"name": "Ada"}), &options)
        .await
        .unwrap();
    assert_eq!(run.status, siesta::RunStatus::Completed, "{run:?}");
    assert_eq!(run.output, Some(json!("Hello, Ada!")), "{run:?}");
    drop(server);

    // The check before a deploy, as the README shows it: the finished run replays.
    let replayed = Command::new(&binary)
        .args(["replay", "--all", "--data-dir"])
        .arg(&data)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&replayed.stdout);
    assert!(replayed.status.success(), "{out}");
    assert!(
        out.contains("1 run(s) checked") && out.contains("1 clean"),
        "{out}"
    );
}
