//! Helpers shared by the CLI's test binaries: `siesta dev` in a process of its own, and
//! the HTTP reads the tests make of it. Each test binary uses a part of them.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]
#![allow(dead_code)]

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use serde_json::{Value, json};

/// `siesta dev` (this build's binary) on `data_dir` with short leases and sweeps, so
/// that runs caught mid-step by a kill are taken over soon; `configure` adds to its
/// command (environment). Returns the process and the URL it listens on.
pub(crate) fn spawn_dev(data_dir: &Path, configure: impl FnOnce(&mut Command)) -> (Child, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_siesta"));
    command
        .args([
            "dev",
            "--port",
            "0",
            "--lease-ttl-ms",
            "1000",
            "--sweep-every-ms",
            "200",
            "--data-dir",
        ])
        .arg(data_dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    configure(&mut command);
    let mut child = command.spawn().expect("start siesta dev");
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    // Keep draining: a closed pipe would kill the server at its next line of output.
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .expect("listening line")
        .to_owned();
    (child, url)
}

/// `GET url`, which must succeed, as JSON.
pub(crate) async fn get_json(client: &reqwest::Client, url: &str) -> Value {
    let r = client.get(url).send().await.unwrap();
    assert!(r.status().is_success(), "GET {url}: {}", r.status());
    r.json().await.unwrap()
}

/// Starts `n` `approval` runs on the server at `base` (through the typed client); their
/// ids.
pub(crate) async fn start_approvals(base: &str, n: usize) -> BTreeSet<String> {
    let api = siesta_client::Client::new(base);
    let mut started = BTreeSet::new();
    for i in 0..n {
        let run = api
            .start_run(
                "approval",
                &json!({"change": format!("change {i}")}),
                &siesta_client::StartOptions::default(),
            )
            .await
            .unwrap();
        started.insert(run.id);
    }
    started
}

/// Every run `GET /runs?limit=1` lists, page after page (at most ten), each next page's
/// cursor put into the URL raw, as a client would write it: no escaping.
pub(crate) async fn list_through_raw_cursors(
    client: &reqwest::Client,
    base: &str,
) -> BTreeSet<String> {
    let mut listed = BTreeSet::new();
    let mut url = format!("{base}/runs?limit=1");
    for _ in 0..10 {
        let page = get_json(client, &url).await;
        for run in page["runs"].as_array().unwrap() {
            listed.insert(run["id"].as_str().unwrap().to_owned());
        }
        match page["next_cursor"].as_str() {
            Some(cursor) => url = format!("{base}/runs?limit=1&cursor={cursor}"),
            None => break,
        }
    }
    listed
}
