//! `siesta bench --ui`: how fast the web UI paints a run page with 1 000 timeline
//! events, and what the page weighs. A dev server in its own process (this binary's
//! `dev`) runs one `chain` run of 499 steps (1 001 events); headless Chromium, driven
//! through chromedriver (WebDriver, as the browser tests do), opens its page `rounds`
//! times, each a fresh navigation. Per load, from the browser's own timings:
//!
//! - first paint and first contentful paint (`performance.getEntriesByType('paint')`);
//! - the run painted: the first frame with the run's content — its status and
//!   lifecycle, waits, actions, input and output, drawn from the run view (the page
//!   marks it; the browser's first paint may be the "Loading…" shell before it);
//! - the timeline painted: the first frame with the first screen of the waterfall and
//!   of the event table (the rest is added after it);
//! - both as marked by the page (a task after the frame, which may wait behind other
//!   work) and as the browser's Largest Contentful Paint entries date their paints;
//! - the document's response end and `DOMContentLoaded`;
//! - bytes and requests: the page's own (document, script, style, icon) and the API
//!   reads it makes (run view, timeline).
//!
//! Min/median/max are printed, with the machine's load average. Figures, not asserts:
//! build with `--release` for figures worth quoting.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context as _, bail};
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// Steps of the benchmarked run: 2 × 499 + 3 = 1 001 timeline events.
const STEPS: u64 = 499;
/// How long one page load may take before the bench gives up.
const PATIENCE: Duration = Duration::from_secs(60);

/// What to run.
#[derive(Debug, Clone)]
pub struct UiBenchOptions {
    /// Page loads measured (after one warm-up load).
    pub rounds: usize,
    /// The Chromium binary.
    pub chromium: String,
    /// The chromedriver binary.
    pub chromedriver: String,
}

impl UiBenchOptions {
    /// `rounds` loads with Debian's Chromium (`/usr/bin/chromium`, `/usr/bin/chromedriver`),
    /// or the binaries `SIESTA_CHROMIUM` / `SIESTA_CHROMEDRIVER` name.
    pub fn new(rounds: usize) -> Self {
        UiBenchOptions {
            rounds: rounds.max(1),
            chromium: std::env::var("SIESTA_CHROMIUM")
                .unwrap_or_else(|_| "/usr/bin/chromium".into()),
            chromedriver: std::env::var("SIESTA_CHROMEDRIVER")
                .unwrap_or_else(|_| "/usr/bin/chromedriver".into()),
        }
    }
}

/// A `siesta dev` in its own process, killed when dropped.
struct DevServer {
    _child: Child,
    base: String,
    _dir: tempfile::TempDir,
}

impl DevServer {
    async fn start() -> anyhow::Result<DevServer> {
        let dir = tempfile::tempdir()?;
        let mut child = Command::new(std::env::current_exe()?)
            .args(["dev", "--port", "0", "--data-dir"])
            .arg(dir.path())
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .context("starting `siesta dev`")?;
        let mut lines = BufReader::new(child.stdout.take().context("no stdout")?).lines();
        let base = super::listening_url(&mut lines).await?;
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Ok(DevServer {
            _child: child,
            base,
            _dir: dir,
        })
    }
}

/// Headless Chromium through chromedriver; both end when the session is closed and
/// the driver dropped.
struct Browser {
    client: Client,
    _driver: Child,
    _profile: tempfile::TempDir,
}

impl Browser {
    async fn start(options: &UiBenchOptions) -> anyhow::Result<Browser> {
        for binary in [&options.chromium, &options.chromedriver] {
            if !Path::new(binary).exists() {
                bail!(
                    "{binary} is missing: `apt-get install -y chromium chromium-driver` \
                     (or name them with SIESTA_CHROMIUM / SIESTA_CHROMEDRIVER)"
                );
            }
        }
        let mut driver = Command::new(&options.chromedriver)
            .arg("--port=0")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .context("starting chromedriver")?;
        let mut lines = BufReader::new(driver.stdout.take().context("no stdout")?).lines();
        let port = loop {
            let Some(line) = lines.next_line().await? else {
                bail!("chromedriver exited before it said its port");
            };
            if let Some(rest) = line.split("started successfully on port ").nth(1) {
                break rest.trim_end_matches('.').trim().parse::<u16>()?;
            }
        };
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        let profile = tempfile::tempdir()?;
        let args = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            "--window-size=1400,1000",
            &format!("--user-data-dir={}", profile.path().display()),
        ];
        let capabilities = json!({
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": options.chromium, "args": args},
        });
        let client = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(capabilities.as_object().cloned().unwrap_or_default())
            .connect(&format!("http://127.0.0.1:{port}"))
            .await
            .context("a Chromium session through chromedriver")?;
        Ok(Browser {
            client,
            _driver: driver,
            _profile: profile,
        })
    }
}

/// What the page reports after a load (see the module's doc).
const FIGURES_JS: &str = r#"
const nav = performance.getEntriesByType('navigation')[0];
const paint = Object.fromEntries(performance.getEntriesByType('paint').map((p) => [p.name, p.startTime]));
const resources = performance.getEntriesByType('resource');
const own = resources.filter((r) => new URL(r.name).pathname.startsWith('/ui/'));
const apiReads = resources.filter((r) => !new URL(r.name).pathname.startsWith('/ui/'));
const size = (list) => list.reduce((n, r) => n + (r.decodedBodySize || 0), 0);
const rendered = window.siestaRunRendered || {};
return {
  events: rendered.events ?? null,
  first_paint_ms: paint['first-paint'] ?? null,
  first_contentful_paint_ms: paint['first-contentful-paint'] ?? null,
  run_painted_ms: rendered.paintedMs ?? null,
  timeline_painted_ms: rendered.timelinePaintedMs ?? null,
  view_fetched_ms: rendered.viewFetchedMs ?? null,
  response_end_ms: nav.responseEnd,
  dom_content_loaded_ms: nav.domContentLoadedEventEnd,
  script_started_ms: rendered.startedMs ?? null,
  view_render_ms: rendered.viewRenderedMs - rendered.viewFetchedMs,
  view_layout_ms: rendered.viewLaidOutMs - rendered.viewRenderedMs,
  timeline_fetched_ms: rendered.timelineFetchedMs ?? null,
  render_ms: rendered.renderMs ?? null,
  layout_ms: rendered.layoutMs ?? null,
  page_bytes: nav.decodedBodySize + size(own),
  page_requests: 1 + own.length,
  api_bytes: size(apiReads),
  api_requests: apiReads.length,
};
"#;

/// The paints of the page's largest contentful element as it grew (Largest Contentful
/// Paint entries, buffered by the browser): when the "Loading…" shell, the run and the
/// timeline were really painted, not when a task after the frame got to run.
const PAINTS_JS: &str = r#"
const done = arguments[arguments.length - 1];
new PerformanceObserver((list, observer) => {
  observer.disconnect();
  done(list.getEntries().map((e) => e.startTime));
}).observe({ type: 'largest-contentful-paint', buffered: true });
"#;

async fn load_once(client: &Client, url: &str) -> anyhow::Result<Value> {
    // Leave the page first, so that each load is a fresh navigation.
    client.goto("about:blank").await?;
    client.goto(url).await?;
    client
        .wait()
        .at_most(PATIENCE)
        .for_element(Locator::Css("body[data-painted]"))
        .await
        .context("the run page was painted")?;
    let mut figures = client.execute(FIGURES_JS, vec![]).await?;
    let paints = client.execute_async(PAINTS_JS, vec![]).await?;
    let paints: Vec<f64> = paints
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_f64).collect())
        .unwrap_or_default();
    // The first paint of a larger element after the run view (then the timeline) was
    // fetched is the run's (the timeline's) paint.
    let after = |key: &str| {
        let at = figures[key].as_f64()?;
        paints.iter().copied().find(|&p| p >= at)
    };
    let (run, timeline) = (after("view_fetched_ms"), after("timeline_fetched_ms"));
    figures["run_lcp_ms"] = json!(run);
    figures["timeline_lcp_ms"] = json!(timeline);
    figures["largest_contentful_paint_ms"] = json!(paints.last());
    Ok(figures)
}

fn spread(values: &mut [f64]) -> Option<(f64, f64, f64)> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(|a, b| a.total_cmp(b));
    Some((
        values[0],
        values[values.len() / 2],
        values[values.len() - 1],
    ))
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

/// Run the UI benchmark and print its report.
pub async fn run(options: UiBenchOptions) -> anyhow::Result<()> {
    let server = DevServer::start().await?;
    let wait = siesta_client::StartOptions {
        wait_secs: Some(60),
        ..Default::default()
    };
    let run = siesta_client::Client::new(&server.base)
        .start_run("chain", &json!(STEPS), &wait)
        .await?;
    if run.status != siesta::RunStatus::Completed {
        bail!("the {STEPS}-step chain run did not complete: {run:?}");
    }
    let id = run.id.as_str();
    let url = format!("{}{}", server.base, siesta_ui::run_page_path(id));
    println!(
        "UI bench: the page of a {STEPS}-step chain run ({}), {} loads after one warm-up, load average {}",
        url,
        options.rounds,
        load_average()
    );

    let browser = Browser::start(&options).await?;
    let outcome = measure(&browser.client, &url, options.rounds).await;
    browser
        .client
        .close()
        .await
        .context("ending the browser session")?;
    let loads = outcome?;

    let series = |key: &str| -> Vec<f64> { loads.iter().filter_map(|l| l[key].as_f64()).collect() };
    println!(
        "{:<28} {:>9} {:>9} {:>9}",
        "ms after navigation start", "min", "median", "max"
    );
    for (label, key) in [
        ("first paint", "first_paint_ms"),
        ("first contentful paint", "first_contentful_paint_ms"),
        ("document response end", "response_end_ms"),
        ("DOMContentLoaded", "dom_content_loaded_ms"),
        ("script started", "script_started_ms"),
        ("run view fetched", "view_fetched_ms"),
        ("  its render (ms)", "view_render_ms"),
        ("  its style, layout (ms)", "view_layout_ms"),
        ("run painted", "run_painted_ms"),
        ("  its paint (LCP)", "run_lcp_ms"),
        ("timeline fetched", "timeline_fetched_ms"),
        ("  its render (ms)", "render_ms"),
        ("  its style, layout (ms)", "layout_ms"),
        ("timeline painted", "timeline_painted_ms"),
        ("  its paint (LCP)", "timeline_lcp_ms"),
        ("largest contentful paint", "largest_contentful_paint_ms"),
    ] {
        match spread(&mut series(key)) {
            Some((min, med, max)) => println!("{label:<28} {min:>9.1} {med:>9.1} {max:>9.1}"),
            None => println!("{label:<28} {:>9}", "—"),
        }
    }
    let last = loads.last().context("at least one load")?;
    println!(
        "timeline events shown: {}; page weight: {} B in {} requests (document, script, style, icon); \
         API reads: {} B in {} requests",
        last["events"],
        last["page_bytes"],
        last["page_requests"],
        last["api_bytes"],
        last["api_requests"]
    );
    println!("load average after: {}", load_average());
    Ok(())
}

async fn measure(client: &Client, url: &str, rounds: usize) -> anyhow::Result<Vec<Value>> {
    load_once(client, url).await?;
    let mut loads = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        loads.push(load_once(client, url).await?);
    }
    Ok(loads)
}
