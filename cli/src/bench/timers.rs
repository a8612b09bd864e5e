//! `siesta bench --timers N`: `N` timers due at the same instant fire, on a dev server in
//! its own process (embedded backend), with the `timer` example.
//!
//! `N` runs of `timer` are started (16 clients) with `{"until": T}`, one instant `T` far
//! enough ahead that every run is asleep on its timer by then (15 s plus 1 ms per run).
//! From `T` on, the bench polls until no run waits any more (all fired) and then until
//! none is running or pending either (a run whose timer fired is done only once its
//! step is), and prints both times, how many runs fired and how each ended, completed
//! timers per second, the server's CPU meanwhile and what its sweeps did (from the
//! server's `sweep` log lines): sweeps, runs their pages held, wake-ups they sent, and
//! store calls per fired timer. Nothing is asserted.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime};

use anyhow::bail;
use serde_json::json;
use siesta_client::{Client, RunFilter, StartOptions};

use super::Server;
use super::sleeping::{cpu_ticks, load};

/// Clients starting runs at once.
const CLIENTS: usize = 16;

/// What to run.
#[derive(Debug, Clone)]
pub struct TimersOptions {
    /// Timers (runs) due at the same instant.
    pub timers: usize,
    /// `siesta dev --durability`.
    pub durability: String,
}

/// Whether any `timer` run is in `status` (a page of one).
async fn any_with(client: &Client, status: &str) -> anyhow::Result<bool> {
    let page = client.list_runs(&timer_runs(status, 1, None)).await?;
    Ok(!page.runs.is_empty())
}

/// `timer` runs in `status`, `limit` a page, after `cursor`.
fn timer_runs(status: &str, limit: u32, cursor: Option<String>) -> RunFilter {
    RunFilter {
        status: Some(status.to_owned()),
        workflow: Some("timer".to_owned()),
        cursor,
        limit: Some(limit),
    }
}

/// Run the bench.
pub async fn run(options: TimersOptions) -> anyhow::Result<()> {
    let server = Server::start(&options.durability, &[]).await?;
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(64)
        .build()?;
    let client = Client::with_http(http, &server.base);
    let n = options.timers;
    let lead = Duration::from_secs(15) + Duration::from_millis(n as u64);
    let at = SystemTime::now() + lead;
    let until = chrono::DateTime::<chrono::Utc>::from(at)
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    println!(
        "siesta bench --timers {n}: `timer` runs on a dev server (pid {}, --durability {}) due at {until}, load {}",
        server.pid,
        options.durability,
        load()
    );

    // Start them all.
    let started = Arc::new(AtomicUsize::new(0));
    let t0 = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for c in 0..CLIENTS {
        let (client, until, started) = (client.clone(), until.clone(), started.clone());
        let count = n / CLIENTS + usize::from(c < n % CLIENTS);
        tasks.spawn(async move {
            let input = json!({"until": until});
            for _ in 0..count {
                client
                    .start_run("timer", &input, &StartOptions::default())
                    .await?;
                started.fetch_add(1, Ordering::Relaxed);
            }
            Ok::<_, anyhow::Error>(())
        });
    }
    let progress = {
        let started = started.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(10)).await;
                eprintln!(
                    "  … {} of {n} started ({:.0} s, load {})",
                    started.load(Ordering::Relaxed),
                    t0.elapsed().as_secs_f64(),
                    load()
                );
            }
        })
    };
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    let started_in = t0.elapsed();
    // Every run asleep on its timer before the instant?
    while any_with(&client, "pending").await? || any_with(&client, "running").await? {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    progress.abort();
    let asleep_in = t0.elapsed();
    let Ok(wait) = at.duration_since(SystemTime::now()) else {
        bail!(
            "the runs were not all asleep before their instant ({:.1} s after it): not a burst; start fewer",
            SystemTime::now()
                .duration_since(at)
                .unwrap_or_default()
                .as_secs_f64()
        );
    };
    println!(
        "{:<52} {:.1} s ({:.0} runs/s); all asleep after {:.1} s",
        "started",
        started_in.as_secs_f64(),
        n as f64 / started_in.as_secs_f64(),
        asleep_in.as_secs_f64()
    );

    // The instant: fire.
    tokio::time::sleep(wait).await;
    let (sweeps_before, cpu_before) = (server.sweep_tally(), cpu_ticks(server.pid));
    let fire = Instant::now();
    let mut last_report = Instant::now();
    let mut firing = Firing::default();
    loop {
        let waiting = any_with(&client, "waiting").await?;
        // A run whose timer fired is mid-step (`running`, or `pending` between a
        // yield and its next claim) until it completes: not done yet.
        let busy = !waiting
            && (any_with(&client, "running").await? || any_with(&client, "pending").await?);
        if firing.observe(fire.elapsed(), waiting, busy) {
            break;
        }
        if last_report.elapsed() > Duration::from_secs(10) {
            eprintln!(
                "  … firing for {:.0} s (load {})",
                fire.elapsed().as_secs_f64(),
                load()
            );
            last_report = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (fired_in, done_in) = (firing.fired_in(), firing.done_in());
    let cpu = (cpu_ticks(server.pid) - cpu_before) as f64 / 100.0;
    let sweeps = server.sweep_tally().since(sweeps_before);
    let mut ended = Vec::new();
    for status in ["completed", "failed", "parked", "cancelled"] {
        ended.push((status, count_with(&client, status).await?));
    }
    let fired: usize = ended.iter().map(|(_, c)| c).sum();
    let completed = ended[0].1;
    println!();
    println!("## {n} timers due at the same instant (load {})", load());
    println!(
        "{:<52} {:.2} s after the instant",
        "all fired (no run waiting)",
        fired_in.as_secs_f64()
    );
    println!(
        "{:<52} {:.2} s after the instant",
        "all done (none waiting, running or pending)",
        done_in.as_secs_f64()
    );
    println!(
        "{:<52} {fired} of {n} fired, {completed} completed ({})",
        "runs",
        ended
            .iter()
            .map(|(s, c)| format!("{s} {c}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!(
        "{:<52} {:.0} timers/s (completed runs over the time to all done)",
        "fired",
        completed as f64 / done_in.as_secs_f64()
    );
    println!(
        "{:<52} {:.2} s ({:.0} % of a core)",
        "server CPU while firing",
        cpu,
        100.0 * cpu / done_in.as_secs_f64()
    );
    println!(
        "{:<52} {} sweeps, {} runs on their pages, {} found queued, {} wake-ups sent",
        "the sweep while firing", sweeps.sweeps, sweeps.due, sweeps.already_queued, sweeps.woken
    );
    println!(
        "{:<52} {:.4} (of which {:.4} per run it looked at, the rest 2 per sweep)",
        "the sweep's store calls per fired timer",
        sweeps.store_calls() as f64 / n as f64,
        (sweeps.store_calls() - 2 * sweeps.sweeps) as f64 / n as f64
    );
    println!("(load at the end {})", load());
    Ok(())
}

/// When the timers fired and when their runs were done, from looks at the runs after
/// the instant.
#[derive(Debug, Default, PartialEq)]
struct Firing {
    /// The first look that found no run waiting.
    fired: Option<Duration>,
    /// The first look that found none waiting, running or pending.
    done: Option<Duration>,
}

impl Firing {
    /// One look, `elapsed` after the instant: whether any run was still `waiting`, and
    /// whether any was `busy` (running or pending: its timer fired, its step is not
    /// finished). True once every run is done.
    fn observe(&mut self, elapsed: Duration, waiting: bool, busy: bool) -> bool {
        if !waiting && self.fired.is_none() {
            self.fired = Some(elapsed);
        }
        if !waiting && !busy {
            self.done = Some(elapsed);
        }
        self.done.is_some()
    }

    fn fired_in(&self) -> Duration {
        self.fired.or(self.done).unwrap_or_default()
    }

    fn done_in(&self) -> Duration {
        self.done.unwrap_or_default()
    }
}

/// `timer` runs in `status`, counted through the list (pages of 200).
async fn count_with(client: &Client, status: &str) -> anyhow::Result<usize> {
    let mut count = 0;
    let mut cursor: Option<String> = None;
    loop {
        let page = client.list_runs(&timer_runs(status, 200, cursor)).await?;
        count += page.runs.len();
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => return Ok(count),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::SweepTally;
    use super::Firing;

    #[test]
    fn the_timers_are_not_done_while_a_fired_run_is_still_running() {
        let ms = Duration::from_millis;
        let mut firing = Firing::default();
        assert!(!firing.observe(ms(20), true, false));
        // No run waits any more, but one is mid-step after its timer fired.
        assert!(!firing.observe(ms(40), false, true));
        assert!(!firing.observe(ms(60), false, true));
        assert!(firing.observe(ms(80), false, false));
        assert_eq!(firing.fired_in(), ms(40));
        assert_eq!(firing.done_in(), ms(80));
    }

    #[test]
    fn sweep_log_lines_are_added_up_with_or_without_colours() {
        let mut tally = SweepTally::default();
        tally.add_line("2026-11-24T08:00:00Z  INFO siesta_app::dev: sweep due=12 woken=2 already_queued=10 dead_letters=0");
        tally.add_line("\u{1b}[2m2026\u{1b}[0m \u{1b}[32m INFO\u{1b}[0m \u{1b}[2msiesta_app::dev\u{1b}[0m\u{1b}[2m:\u{1b}[0m sweep \u{1b}[3mdue\u{1b}[0m\u{1b}[2m=\u{1b}[0m3 \u{1b}[3mwoken\u{1b}[0m\u{1b}[2m=\u{1b}[0m3 \u{1b}[3malready_queued\u{1b}[0m\u{1b}[2m=\u{1b}[0m0");
        tally.add_line("2026-11-24T08:00:00Z  WARN siesta::engine: something else due=99");
        assert_eq!(
            tally,
            SweepTally {
                sweeps: 2,
                due: 15,
                already_queued: 10,
                woken: 5
            }
        );
        assert_eq!(tally.store_calls(), 4 + 15 + 10 + 10);
    }
}
