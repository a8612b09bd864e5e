//! `siesta bench`: the `chain` workflow driven over HTTP against a real dev server in
//! its own process, so that its RSS, its bytes written and its syscalls are its own.
//!
//! Shapes (each run is `POST /runs` with `Prefer: wait=60`, answered when it finishes):
//! 100-step runs × 50 concurrent (steps/s), 1-step runs × 50 concurrent (runs/s), and
//! 1-step and 100-step runs one after another (p50 latency). Each shape runs
//! `--rounds` times; min/median/max are printed. Per shape: bytes the server wrote per
//! step (`/proc/<pid>/io`); after the timed rounds, one more round under
//! `strace -c -f` counts the server's fsyncs and write syscalls per step (skipped
//! without strace); the server's peak RSS (`VmHWM`) closes the report. With
//! `--replay-cycles N`, the step+sleep replay shape follows (see `replay`).

mod replay;
pub mod sleeping;
pub mod streams;
pub mod timers;
pub mod ui;

use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use tokio::io::{AsyncBufReadExt, BufReader};

/// What to run.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// Rounds per shape.
    pub rounds: usize,
    /// Concurrent clients in the concurrent shapes.
    pub concurrency: usize,
    /// `siesta dev --durability` of the server.
    pub durability: String,
    /// Extra `siesta dev` arguments.
    pub server_args: Vec<String>,
    /// Count syscalls with strace (when installed).
    pub strace: bool,
    /// Run the chain shapes (throughput, latency).
    pub shapes: bool,
    /// Cycles of the step+sleep replay shape; `None` skips it.
    pub replay_cycles: Option<u64>,
}

struct Server {
    child: tokio::process::Child,
    pid: u32,
    base: String,
    dir: DataDir,
    /// What the server's sweeps reported so far (its `sweep` log lines).
    sweeps: std::sync::Arc<std::sync::Mutex<SweepTally>>,
}

/// The sum of the sweep reports a dev server logged (`SIESTA_LOG` names the dev module
/// at `info`: one line per sweep that found a run due).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct SweepTally {
    /// Sweeps that found something due.
    sweeps: u64,
    /// Runs their due-index pages held.
    due: u64,
    /// Of those, runs whose wake-up the queue still held (none sent).
    already_queued: u64,
    /// Wake-ups the sweeps sent.
    woken: u64,
}

impl SweepTally {
    /// Add one `sweep` log line (ANSI colours and all) to the tally.
    fn add_line(&mut self, line: &str) {
        let plain = strip_ansi(line);
        if !plain.contains("siesta_app::dev") || !plain.contains(" sweep") {
            return;
        }
        let field = |name: &str| {
            plain
                .split_whitespace()
                .find_map(|w| w.strip_prefix(name)?.strip_prefix('='))
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0)
        };
        self.sweeps += 1;
        self.due += field("due");
        self.already_queued += field("already_queued");
        self.woken += field("woken");
    }

    /// What happened between `earlier` and this tally.
    fn since(self, earlier: SweepTally) -> SweepTally {
        SweepTally {
            sweeps: self.sweeps - earlier.sweeps,
            due: self.due - earlier.due,
            already_queued: self.already_queued - earlier.already_queued,
            woken: self.woken - earlier.woken,
        }
    }

    /// Store and queue calls these sweeps made: per sweep a dead-letter receive and a
    /// due-index query; per due run a `holds` look-up; per run found queued a
    /// `set_resend_after`; per wake-up sent a send and a `set_resend_after`.
    fn store_calls(self) -> u64 {
        2 * self.sweeps + self.due + self.already_queued + 2 * self.woken
    }
}

/// The URL a `siesta dev` just started says it listens on, read from its stdout.
pub(crate) async fn listening_url(
    lines: &mut tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
) -> anyhow::Result<String> {
    loop {
        let Some(line) = lines.next_line().await? else {
            bail!("the server exited before it listened");
        };
        if let Some(at) = line.find("http://") {
            let url = line[at..].split_whitespace().next().unwrap_or_default();
            return Ok(url.trim_end_matches('/').to_owned());
        }
    }
}

/// `line` without ANSI escape sequences.
fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // ESC [ … final byte in @..~
            for c in chars.by_ref() {
                if ('@'..='~').contains(&c) && c != '[' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Where a bench's server keeps its data.
enum DataDir {
    /// Its own directory, deleted with the server.
    Temporary(tempfile::TempDir),
    /// One the operator named, kept (e.g. to time a restart on it).
    Kept(std::path::PathBuf),
}

impl DataDir {
    fn path(&self) -> &std::path::Path {
        match self {
            DataDir::Temporary(dir) => dir.path(),
            DataDir::Kept(dir) => dir,
        }
    }
}

impl Server {
    /// Start `siesta dev` with `--durability durability` and `server_args`, in a data
    /// directory of its own.
    async fn start(durability: &str, server_args: &[String]) -> anyhow::Result<Server> {
        Self::start_in(None, durability, server_args).await
    }

    /// Like [`Server::start`], keeping the data in `data_dir` when one is given.
    async fn start_in(
        data_dir: Option<&std::path::Path>,
        durability: &str,
        server_args: &[String],
    ) -> anyhow::Result<Server> {
        let dir = match data_dir {
            Some(dir) => {
                std::fs::create_dir_all(dir)?;
                DataDir::Kept(dir.to_path_buf())
            }
            None => DataDir::Temporary(tempfile::tempdir()?),
        };
        let exe = std::env::current_exe()?;
        let mut child = tokio::process::Command::new(exe)
            .arg("dev")
            .args(["--port", "0", "--durability", durability])
            .arg("--data-dir")
            .arg(dir.path())
            .args(server_args)
            .env("RUST_LOG", "warn")
            .env("SIESTA_LOG", "warn,siesta_app::dev=info")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .context("starting `siesta dev`")?;
        let pid = child.id().context("the server has no pid")?;
        let mut lines = BufReader::new(child.stdout.take().context("no stdout")?).lines();
        let base = listening_url(&mut lines).await?;
        // Keep draining its stdout so it never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        let sweeps = std::sync::Arc::new(std::sync::Mutex::new(SweepTally::default()));
        {
            let sweeps = sweeps.clone();
            let mut log = BufReader::new(child.stderr.take().context("no stderr")?).lines();
            tokio::spawn(async move {
                while let Ok(Some(line)) = log.next_line().await {
                    sweeps
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .add_line(&line);
                }
            });
        }
        Ok(Server {
            child,
            pid,
            base,
            dir,
            sweeps,
        })
    }

    /// The sweep reports logged so far.
    fn sweep_tally(&self) -> SweepTally {
        *self.sweeps.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn written_bytes(&self) -> u64 {
        proc_field(self.pid, "io", "write_bytes").unwrap_or(0)
    }

    fn peak_rss_kb(&self) -> u64 {
        proc_field(self.pid, "status", "VmHWM").unwrap_or(0)
    }
}

fn proc_field(pid: u32, file: &str, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/{file}")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

/// One shape: `runs` runs of `steps` steps, `clients` at a time.
#[derive(Clone, Copy)]
struct Shape {
    name: &'static str,
    steps: u64,
    clients: usize,
    runs: usize,
}

/// What one round measured.
struct Round {
    elapsed: Duration,
    latencies: Vec<Duration>,
    bytes: u64,
}

async fn round(
    client: &siesta_client::Client,
    server: &Server,
    shape: Shape,
) -> anyhow::Result<Round> {
    let before = server.written_bytes();
    let started = Instant::now();
    let per_client = shape.runs.div_ceil(shape.clients);
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..shape.clients {
        let client = client.clone();
        tasks.spawn(async move {
            let mut latencies = Vec::with_capacity(per_client);
            let input = serde_json::json!(shape.steps);
            let options = siesta_client::StartOptions {
                wait_secs: Some(60),
                ..Default::default()
            };
            for _ in 0..per_client {
                let t = Instant::now();
                let run = client.start_run("chain", &input, &options).await?;
                let expected = shape.steps * shape.steps.saturating_sub(1) / 2;
                let output = run.output.as_ref().and_then(serde_json::Value::as_u64);
                if run.status != siesta::RunStatus::Completed || output != Some(expected) {
                    bail!(
                        "run did not complete with {expected} ({}): {:?}",
                        run.status.as_str(),
                        run.output
                    );
                }
                latencies.push(t.elapsed());
            }
            Ok::<_, anyhow::Error>(latencies)
        });
    }
    let mut latencies = Vec::new();
    while let Some(done) = tasks.join_next().await {
        latencies.extend(done??);
    }
    let elapsed = started.elapsed();
    let bytes = server.written_bytes().saturating_sub(before);
    latencies.sort();
    Ok(Round {
        elapsed,
        latencies,
        bytes,
    })
}

fn median(v: &mut [f64]) -> (f64, f64, f64) {
    v.sort_by(|a, b| a.total_cmp(b));
    (v[0], v[v.len() / 2], v[v.len() - 1])
}

/// Syscall counts of the server during one untimed round, from `strace -c -f`.
async fn syscalls(
    client: &siesta_client::Client,
    server: &Server,
    shape: Shape,
) -> anyhow::Result<Option<Vec<(String, u64)>>> {
    let out = tempfile::NamedTempFile::new()?;
    let Ok(mut strace) = tokio::process::Command::new("strace")
        .args([
            "-f",
            "-c",
            "-e",
            "trace=fsync,fdatasync,write,pwrite64,futex",
        ])
        .arg("-o")
        .arg(out.path())
        .args(["-p", &server.pid.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
    else {
        return Ok(None);
    };
    // strace attaches to each thread before it prints nothing; give it a moment.
    tokio::time::sleep(Duration::from_millis(500)).await;
    round(client, server, shape).await?;
    let pid = strace.id().context("strace pid")?;
    // SIGINT makes strace detach and write its summary.
    let _ = std::process::Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status();
    strace.wait().await?;
    let text = std::fs::read_to_string(out.path())?;
    let counts = text
        .lines()
        .filter_map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            let name = cols.last()?;
            let calls = cols.get(3)?.parse::<u64>().ok()?;
            Some((name.to_string(), calls))
        })
        .collect();
    Ok(Some(counts))
}

/// Run the benchmark and print its report.
pub async fn run(options: BenchOptions) -> anyhow::Result<()> {
    let server = Server::start(&options.durability, &options.server_args).await?;
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(options.concurrency * 2)
        .build()?;
    // One client, one connection pool, for every request of every shape.
    let client = siesta_client::Client::with_http(http, &server.base);
    let c = options.concurrency;
    let shapes = [
        Shape {
            name: "100-step runs x concurrent",
            steps: 100,
            clients: c,
            runs: c * 4,
        },
        Shape {
            name: "1-step runs x concurrent",
            steps: 1,
            clients: c,
            runs: c * 40,
        },
        Shape {
            name: "1-step runs, sequential",
            steps: 1,
            clients: 1,
            runs: 300,
        },
        Shape {
            name: "100-step runs, sequential",
            steps: 100,
            clients: 1,
            runs: 30,
        },
    ];
    println!(
        "siesta bench: chain over HTTP (Prefer: wait), server pid {} at {}, durability {}, {} concurrent, {} rounds; load average {}",
        server.pid,
        server.base,
        options.durability,
        c,
        options.rounds,
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    // Warm up: connections, page cache, the server's allocator.
    round(
        &client,
        &server,
        Shape {
            name: "warm-up",
            steps: 10,
            clients: c,
            runs: c,
        },
    )
    .await?;
    for shape in shapes.into_iter().filter(|_| options.shapes) {
        let mut throughput = Vec::new();
        let mut p50 = Vec::new();
        let mut bytes_per_step = Vec::new();
        for _ in 0..options.rounds.max(1) {
            let r = round(&client, &server, shape).await?;
            let steps =
                (shape.runs.div_ceil(shape.clients) * shape.clients) as f64 * shape.steps as f64;
            let runs = steps / shape.steps as f64;
            throughput.push(if shape.steps > 1 { steps } else { runs } / r.elapsed.as_secs_f64());
            p50.push(r.latencies[r.latencies.len() / 2].as_secs_f64() * 1000.0);
            bytes_per_step.push(r.bytes as f64 / steps);
        }
        let unit = if shape.steps > 1 { "steps/s" } else { "runs/s" };
        let (lo, mid, hi) = median(&mut throughput);
        let (plo, pmid, phi) = median(&mut p50);
        let (_, bmid, _) = median(&mut bytes_per_step);
        println!("{}:", shape.name);
        println!("  {unit:<22} min {lo:>9.0}  median {mid:>9.0}  max {hi:>9.0}");
        println!("  p50 latency ms         min {plo:>9.2}  median {pmid:>9.2}  max {phi:>9.2}");
        println!("  bytes written per step {bmid:>9.0} (median, /proc/<pid>/io write_bytes)");
        if options.strace {
            match syscalls(&client, &server, shape).await? {
                Some(counts) => {
                    let steps = (shape.runs.div_ceil(shape.clients) * shape.clients) as f64
                        * shape.steps as f64;
                    let per_step: Vec<String> = counts
                        .iter()
                        .filter(|(name, _)| name != "total")
                        .map(|(name, n)| format!("{name} {:.3}", *n as f64 / steps))
                        .collect();
                    println!(
                        "  syscalls per step      {} (strace -c -f, one untimed round)",
                        per_step.join(", ")
                    );
                }
                None => println!("  syscalls per step      n/a (strace not found)"),
            }
        }
    }
    if let Some(cycles) = options.replay_cycles {
        replay::run(&client, cycles).await?;
    }
    println!("server peak RSS: {} KB (VmHWM)", server.peak_rss_kb());
    drop(server.child);
    Ok(())
}
