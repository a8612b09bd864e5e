//! `siesta bench --sleeping N`: the wake-up path under load, against a real dev server
//! in its own process (this binary's `dev`), with the `approval` example — each run
//! plans, then sleeps waiting for its `approval` event.
//!
//! 1. Tenant B's figures on an idle server: starts, start → waiting, event → completed.
//! 2. Tenant A starts `N` runs (16 clients, no `Prefer: wait`): the start latencies and
//!    rate; meanwhile tenant B's figures again (cross-tenant) and outside-world wake-ups
//!    (an event for a run of B that was already waiting) while A's burst drains; the
//!    burst's drain rate (starts → every run waiting, wake-ups/s).
//! 3. With `N` runs asleep: idle CPU (nothing due), RSS, bytes on disk per sleeping run,
//!    and p50/p99 of read, list (filters and a deep page), event → run completed and a
//!    signed webhook → run completed.
//!
//! Every figure is printed; nothing is asserted. Build with `--release` for figures
//! worth quoting.

use std::time::{Duration, Instant};

use anyhow::bail;
use serde_json::json;
use siesta::RunStatus;
use siesta_client::{RunFilter, RunOutcome, StartOptions};

use super::{Server, proc_field};

/// Clients starting runs at once.
const CLIENTS: usize = 16;
/// Samples per latency figure of the sleeping server.
const SAMPLES: usize = 200;
/// Runs completed per resume figure (event, webhook), and per tenant-B phase.
const RESUMES: usize = 30;
/// The webhook source that delivers approvals as events.
const SOURCE: &str = "approvals";
/// Its Standard Webhooks secret (bench only).
const SECRET: &str = "whsec_c2llc3RhLWJlbmNoLXNsZWVwaW5nLXNlY3JldA==";

/// What to run.
#[derive(Debug, Clone)]
pub struct SleepingOptions {
    /// Runs of tenant A put to sleep.
    pub runs: usize,
    /// `siesta dev --durability`.
    pub durability: String,
    /// Keep the server's data here (default: a temporary directory, deleted after).
    pub data_dir: Option<std::path::PathBuf>,
}

/// One tenant's client (its API key; the pool shared with the other tenant's).
#[derive(Clone)]
struct Client {
    api: siesta_client::Client,
}

impl Client {
    async fn start(&self) -> anyhow::Result<(String, Duration)> {
        let t = Instant::now();
        let run = self
            .api
            .start_run(
                "approval",
                &json!({"change": "rotate the keys"}),
                &StartOptions::default(),
            )
            .await?;
        Ok((run.id, t.elapsed()))
    }

    async fn status(&self, id: &str) -> anyhow::Result<RunStatus> {
        Ok(self.api.get_run(id).await?.status)
    }

    /// Until the run reaches `status` (polled every 5 ms, at most 10 minutes).
    async fn until(&self, id: &str, status: RunStatus) -> anyhow::Result<()> {
        let started = Instant::now();
        while self.status(id).await? != status {
            if started.elapsed() > Duration::from_secs(600) {
                bail!("run {id} never reached {}", status.as_str());
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        Ok(())
    }

    /// Hold until the run finishes; it must have completed.
    async fn completed(&self, id: &str) -> anyhow::Result<()> {
        let started = Instant::now();
        loop {
            if let RunOutcome::Finished(result) = self.api.run_result(id, Some(30)).await? {
                if result.status != RunStatus::Completed {
                    bail!("run {id} ended {}", result.status.as_str());
                }
                return Ok(());
            }
            if started.elapsed() > Duration::from_secs(600) {
                bail!("run {id} did not finish");
            }
        }
    }

    /// Approve the run by event; the time until it completed.
    async fn approve(&self, id: &str) -> anyhow::Result<Duration> {
        Ok(self.approve_timed(id).await?.1)
    }

    /// Approve the run by event; the time until the event was accepted (`POST`
    /// answered: the delivery stored and its wake-up sent) and until the run completed.
    async fn approve_timed(&self, id: &str) -> anyhow::Result<(Duration, Duration)> {
        let t = Instant::now();
        self.api
            .send_event(
                id,
                "approval",
                &json!({"approved": true, "by": "bench"}),
                None,
            )
            .await?;
        let accepted = t.elapsed();
        self.completed(id).await?;
        Ok((accepted, t.elapsed()))
    }

    /// Approve the run by a signed webhook of the `approvals` source; the time until it
    /// completed.
    async fn approve_by_webhook(&self, id: &str, n: usize) -> anyhow::Result<Duration> {
        use siesta_api::signature::{Scheme, Secret, sign};
        let secret = Secret::parse(Scheme::StandardWebhooks, SECRET)
            .map_err(|e| anyhow::anyhow!("{e:?}"))?;
        let body = serde_json::to_vec(&json!({"run_id": id, "approved": true, "by": "hook"}))?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        let t = Instant::now();
        let headers = sign(
            Scheme::StandardWebhooks,
            &secret,
            &format!("msg-{n}"),
            now,
            &body,
        );
        self.api.source_webhook(SOURCE, &headers, body).await?;
        self.completed(id).await?;
        Ok(t.elapsed())
    }
}

/// `count` different indices of `0..n` (all `n` when fewer), spread evenly over them.
fn spread(n: usize, count: usize) -> Vec<usize> {
    let count = count.min(n);
    // Steps of n / count ≥ 1: no index twice.
    (0..count).map(|i| i * n / count).collect()
}

/// p50 and p99 of `samples`, in ms.
fn p50_p99(samples: &mut [Duration]) -> (f64, f64) {
    if samples.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    samples.sort();
    let at = |q: f64| {
        let i = ((samples.len() as f64 - 1.0) * q).round() as usize;
        samples[i].as_secs_f64() * 1000.0
    };
    (at(0.50), at(0.99))
}

fn row(what: &str, samples: &mut [Duration]) {
    let (p50, p99) = p50_p99(samples);
    println!(
        "{what:<52} p50 {p50:>8.2} ms   p99 {p99:>8.2} ms   (n = {})",
        samples.len()
    );
}

/// CPU time (user + system) of `pid` so far, in clock ticks.
pub(super) fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // After the command's closing parenthesis: fields 3.. of proc(5); utime and stime
    // are fields 14 and 15.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| fields.get(n - 3).and_then(|v| v.parse::<u64>().ok());
    field(14).unwrap_or(0) + field(15).unwrap_or(0)
}

/// Bytes under `dir`.
fn disk_bytes(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => disk_bytes(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

/// The load average, as `uptime` shows it.
pub(super) fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// Tenant B's figures: starts, start → waiting, event → completed, `RESUMES` runs.
async fn tenant_b(b: &Client, label: &str) -> anyhow::Result<()> {
    let (mut starts, mut waits, mut resumes) = (Vec::new(), Vec::new(), Vec::new());
    let mut accepted = Vec::new();
    for _ in 0..RESUMES {
        let t = Instant::now();
        let (id, start) = b.start().await?;
        starts.push(start);
        b.until(&id, RunStatus::Waiting).await?;
        waits.push(t.elapsed());
        let (event, resumed) = b.approve_timed(&id).await?;
        accepted.push(event);
        resumes.push(resumed);
    }
    row(
        &format!("tenant B {label}: start (POST /runs)"),
        &mut starts,
    );
    row(
        &format!("tenant B {label}: start → waiting (planned)"),
        &mut waits,
    );
    row(
        &format!("tenant B {label}: event → completed"),
        &mut resumes,
    );
    row("  of which event → accepted (POST answered)", &mut accepted);
    Ok(())
}

/// Run the bench.
pub async fn run(options: SleepingOptions) -> anyhow::Result<()> {
    let sources = json!([{
        "name": SOURCE, "tenant": "a", "scheme": "standard-webhooks", "secrets": [SECRET],
        "correlation": "/run_id", "event": "approval"
    }]);
    let server_args = [
        "--api-keys".to_owned(),
        "key-a=a,key-b=b".to_owned(),
        "--webhook-sources".to_owned(),
        sources.to_string(),
    ];
    let server = Server::start_in(
        options.data_dir.as_deref(),
        &options.durability,
        &server_args,
    )
    .await?;
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(64)
        .build()?;
    let a = Client {
        api: siesta_client::Client::with_http(http.clone(), &server.base)
            .api_key(Some("key-a".to_owned())),
    };
    let b = Client {
        api: siesta_client::Client::with_http(http, &server.base).api_key(Some("key-b".to_owned())),
    };
    let n = options.runs;
    println!(
        "siesta bench --sleeping {n}: `approval` runs on a dev server (pid {}, --durability {}), load {}",
        server.pid,
        options.durability,
        load()
    );

    // 1. Tenant B on an idle server; and B's runs that will wait through A's burst.
    tenant_b(&b, "idle").await?;
    let mut sleepers_b = Vec::new();
    for _ in 0..RESUMES {
        let (id, _) = b.start().await?;
        b.until(&id, RunStatus::Waiting).await?;
        sleepers_b.push(id);
    }

    // 2. Tenant A's burst of starts, with a progress line every 10 s on stderr.
    let burst = Instant::now();
    let started = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for c in 0..CLIENTS {
        let (a, started) = (a.clone(), started.clone());
        let count = n / CLIENTS + usize::from(c < n % CLIENTS);
        tasks.spawn(async move {
            let mut out = Vec::with_capacity(count);
            for _ in 0..count {
                out.push(a.start().await?);
                started.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            Ok::<_, anyhow::Error>(out)
        });
    }
    let progress = {
        let (started, pid) = (started.clone(), server.pid);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(10)).await;
                eprintln!(
                    "  … {} of {n} started ({:.0} s, server RSS {} KB, load {})",
                    started.load(std::sync::atomic::Ordering::Relaxed),
                    burst.elapsed().as_secs_f64(),
                    proc_field(pid, "status", "VmRSS").unwrap_or(0),
                    load()
                );
            }
        })
    };
    // While it is started and drains: B's figures and outside-world wake-ups.
    let during = {
        let b = b.clone();
        let sleepers = sleepers_b.clone();
        tokio::spawn(async move {
            let mut outside = Vec::new();
            for id in &sleepers {
                outside.push(b.approve(id).await?);
            }
            tenant_b(&b, "during A's burst").await?;
            Ok::<_, anyhow::Error>(outside)
        })
    };
    let (mut ids, mut starts) = (Vec::with_capacity(n), Vec::with_capacity(n));
    while let Some(done) = tasks.join_next().await {
        for (id, latency) in done?? {
            ids.push(id);
            starts.push(latency);
        }
    }
    let started_in = burst.elapsed();
    // Drained: no run of A is pending or running any more.
    loop {
        let mut busy = false;
        for status in ["pending", "running"] {
            let filter = RunFilter {
                status: Some(status.to_owned()),
                limit: Some(1),
                ..RunFilter::default()
            };
            busy |= !a.api.list_runs(&filter).await?.runs.is_empty();
        }
        if !busy {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let drained_in = burst.elapsed();
    progress.abort();
    println!();
    println!(
        "## tenant A: {n} starts, 16 clients, no Prefer: wait (load {})",
        load()
    );
    row("start (POST /runs)", &mut starts);
    println!(
        "{:<52} {:.0} runs/s ({:.1} s)",
        "start rate",
        n as f64 / started_in.as_secs_f64(),
        started_in.as_secs_f64()
    );
    println!(
        "{:<52} {:.1} s after the first start: {:.0} wake-ups/s",
        "burst drained (every run waiting)",
        drained_in.as_secs_f64(),
        n as f64 / drained_in.as_secs_f64()
    );
    let mut outside = during.await??;
    row(
        "outside world during the burst: event → completed (tenant B)",
        &mut outside,
    );

    // 3. N runs asleep.
    println!();
    println!("## {n} runs asleep (load {})", load());
    let ticks_per_s = 100.0;
    let before = cpu_ticks(server.pid);
    let window = Duration::from_secs(10);
    tokio::time::sleep(window).await;
    let used = (cpu_ticks(server.pid) - before) as f64 / ticks_per_s;
    println!(
        "{:<52} {:.2} % of a core over {} s",
        "idle CPU (nothing due)",
        100.0 * used / window.as_secs_f64(),
        window.as_secs()
    );
    let rss = |field| proc_field(server.pid, "status", field).unwrap_or(0);
    println!(
        "{:<52} {} KB (peak {} KB): anonymous {} KB, file pages mapped {} KB",
        "RSS",
        rss("VmRSS"),
        server.peak_rss_kb(),
        rss("RssAnon"),
        rss("RssFile")
    );
    let bytes = disk_bytes(server.dir.path());
    let wal = std::fs::metadata(server.dir.path().join("siesta.db-wal")).map_or(0, |m| m.len());
    println!(
        "{:<52} {:.0} B ({} MB for {} runs, of which WAL {} MB)",
        "bytes on disk per sleeping run",
        bytes as f64 / (n + 3 * RESUMES) as f64,
        bytes / 1_000_000,
        n + 3 * RESUMES,
        wal / 1_000_000
    );

    // Runs spread over all `n` (a stride prime to any `n` this bench is run with): at
    // 1 000 runs the whole file is in every cache, at 1 000 000 these reads are cold.
    let pick = |i: usize| &ids[(i * 7919) % ids.len()];
    let mut reads = Vec::new();
    for i in 0..SAMPLES {
        let t = Instant::now();
        a.api.get_run(pick(i)).await?;
        reads.push(t.elapsed());
    }
    row("read (GET /runs/{id}), a different run each", &mut reads);
    let mut again = Vec::new();
    for _ in 0..SAMPLES {
        let t = Instant::now();
        a.api.get_run(pick(0)).await?;
        again.push(t.elapsed());
    }
    row("read (GET /runs/{id}), the same run again", &mut again);
    let list =
        |status: Option<&str>, workflow: Option<&str>, limit, cursor: Option<String>| RunFilter {
            status: status.map(str::to_owned),
            workflow: workflow.map(str::to_owned),
            cursor,
            limit: Some(limit),
        };
    for (label, query) in [
        ("list (GET /runs?limit=50)", list(None, None, 50, None)),
        (
            "list (?status=waiting&limit=50)",
            list(Some("waiting"), None, 50, None),
        ),
        (
            "list (?workflow=approval&limit=50)",
            list(None, Some("approval"), 50, None),
        ),
        (
            "list (?status=waiting&workflow=approval&limit=50)",
            list(Some("waiting"), Some("approval"), 50, None),
        ),
    ] {
        let mut lists = Vec::new();
        for _ in 0..SAMPLES / 4 {
            let t = Instant::now();
            a.api.list_runs(&query).await?;
            lists.push(t.elapsed());
        }
        row(label, &mut lists);
    }
    // A deep page: the cursor of the page halfway down the list.
    let deep = n / 2 / 200;
    let mut cursor = None::<String>;
    for _ in 0..deep {
        let page = a
            .api
            .list_runs(&list(Some("waiting"), None, 200, cursor.clone()))
            .await?;
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    if let Some(c) = &cursor {
        let deep_page = list(Some("waiting"), None, 50, Some(c.clone()));
        let mut lists = Vec::new();
        for _ in 0..SAMPLES / 4 {
            let t = Instant::now();
            a.api.list_runs(&deep_page).await?;
            lists.push(t.elapsed());
        }
        row(
            &format!("list, a deep page (after {} runs)", deep * 200),
            &mut lists,
        );
    }
    // A resume completes its run, and a completed run answers another approval with
    // 410 Gone: each resume needs a run of its own. The stride of `pick` repeats runs
    // below 61 runs (or at a multiple of 7919); harmless for reads, not here. With fewer
    // than 2 × RESUMES runs asleep, fewer samples.
    let resumed = spread(ids.len(), 2 * RESUMES);
    let mut events = Vec::new();
    for &i in resumed.iter().step_by(2) {
        events.push(a.approve(&ids[i]).await?);
    }
    row("deliver event → run completed", &mut events);
    let mut hooks = Vec::new();
    for (n, &i) in resumed.iter().skip(1).step_by(2).enumerate() {
        hooks.push(a.approve_by_webhook(&ids[i], n).await?);
    }
    row("signed webhook → run completed", &mut hooks);
    println!(
        "{:<52} {} KB (peak {} KB): anonymous {} KB, file pages mapped {} KB",
        "RSS after the reads, lists and resumes",
        rss("VmRSS"),
        server.peak_rss_kb(),
        rss("RssAnon"),
        rss("RssFile")
    );
    println!("(load at the end {})", load());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::spread;

    #[test]
    fn spread_gives_different_indices_within_the_runs_however_few_there_are() {
        for n in [1, 2, 16, 59, 60, 61, 100, 7919, 2 * 7919, 1_000_000] {
            let picked = spread(n, 60);
            assert_eq!(picked.len(), n.min(60), "n = {n}");
            assert!(picked.iter().all(|&i| i < n), "n = {n}: {picked:?}");
            let mut distinct = picked.clone();
            distinct.sort_unstable();
            distinct.dedup();
            assert_eq!(distinct.len(), picked.len(), "n = {n}: {picked:?}");
        }
    }

    #[test]
    fn spread_covers_the_runs_from_the_first_to_the_last() {
        let n = 1_000_000;
        let picked = spread(n, 60);
        assert_eq!(picked.first(), Some(&0));
        // No gap wider than one step of n / 60, to the end included.
        let mut ends = picked.clone();
        ends.push(n);
        assert!(
            ends.windows(2).all(|w| w[1] - w[0] <= n.div_ceil(60)),
            "{picked:?}"
        );
    }
}
