//! The web UI in a real browser: headless Chromium (Debian's `chromium`), driven through
//! chromedriver (WebDriver) by fantoccini, against a dev server on an ephemeral port.
//!
//! Without Chromium the tests skip, unless `SIESTA_BROWSER_TESTS=required` (set by
//! `scripts/test`, which installs `chromium` and `chromium-driver`), where they fail.
//! Every wait is for something the page shows; none is a sleep.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use fantoccini::error::{CmdError, ErrorStatus};
use fantoccini::{Client, ClientBuilder, Locator};
use futures::FutureExt as _;
use serde_json::{Value, json};
use siesta::{Context, Error, Registry, RetryStrategy, RunStatus, StepError};
use siesta_ai::{Model, ModelError, ModelReply, ModelRequest, Role, TokenSink};
use siesta_api::{ApiKeys, ControlApi};
use siesta_app::dev::{DevOptions, DevServer, start};
// `Client` is the browser's (fantoccini); the API's typed client is `Api`.
use siesta_client::Client as Api;
use siesta_testing::{LEASE_TTL, TestEnv};
use siesta_workflows::{SupportDemoModel, agent_with};
use std::sync::Arc;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::Semaphore;

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
/// How long the page may take to show what a test waits for.
const PATIENCE: Duration = Duration::from_secs(30);

/// This machine's network is closed: no first-run, sync, component or QUIC traffic.
const CHROMIUM_FLAGS: &[&str] = &[
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
];

/// A headless Chromium session; chromedriver is killed when it is dropped.
struct Browser {
    client: Client,
    _driver: Child,
    _profile: tempfile::TempDir,
}

/// A browser, or `None` (the test skips) when Chromium is not installed and not required.
async fn browser() -> Option<Browser> {
    let missing: Vec<&str> = [CHROMIUM, CHROMEDRIVER]
        .into_iter()
        .filter(|p| !Path::new(p).exists())
        .collect();
    if !missing.is_empty() {
        let message = format!(
            "the browser tests need headless Chromium, but {} is missing: \
             `apt-get install -y chromium chromium-driver` (scripts/test does this)",
            missing.join(" and ")
        );
        if std::env::var("SIESTA_BROWSER_TESTS").as_deref() == Ok("required") {
            panic!("SIESTA_BROWSER_TESTS=required: {message}");
        }
        eprintln!("skipped: {message}");
        return None;
    }
    let mut driver = Command::new(CHROMEDRIVER)
        .arg("--port=0")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("chromedriver starts");
    // chromedriver picks a free port and says which on stdout.
    let mut lines = BufReader::new(driver.stdout.take().unwrap()).lines();
    let port = loop {
        let line = lines
            .next_line()
            .await
            .unwrap()
            .expect("chromedriver said which port it listens on");
        if let Some(rest) = line.split("started successfully on port ").nth(1) {
            break rest.trim_end_matches('.').trim().parse::<u16>().unwrap();
        }
    };
    // Keep draining its stdout so that it never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    let profile = tempfile::tempdir().unwrap();
    let mut args: Vec<String> = CHROMIUM_FLAGS.iter().map(|s| s.to_string()).collect();
    args.push(format!("--user-data-dir={}", profile.path().display()));
    let capabilities = json!({
        "browserName": "chrome",
        "goog:chromeOptions": {"binary": CHROMIUM, "args": args},
    });
    let client = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(capabilities.as_object().unwrap().clone())
        .connect(&format!("http://127.0.0.1:{port}"))
        .await
        .expect("a Chromium session through chromedriver");
    Some(Browser {
        client,
        _driver: driver,
        _profile: profile,
    })
}

/// Runs `test` with a browser (or skips it, see [`browser`]), then ends the WebDriver
/// session, which makes chromedriver quit Chromium — also when `test` panics, so that a
/// failing test leaves no browser behind.
async fn with_browser<F, Fut>(test: F)
where
    F: FnOnce(Client) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let Some(browser) = browser().await else {
        return;
    };
    let outcome = AssertUnwindSafe(test(browser.client.clone()))
        .catch_unwind()
        .await;
    browser
        .client
        .close()
        .await
        .expect("the browser session ends");
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

/// `n` sequential steps: 2n + 3 timeline events, for a page with many of them.
async fn steps(ctx: Context, n: u32) -> Result<u64, Error> {
    let mut sum = 0u64;
    for i in 0..n {
        let v: u64 = ctx
            .step(
                &format!("step_{i}"),
                move |_| async move { Ok(u64::from(i)) },
            )
            .await?;
        sum += v;
    }
    Ok(sum)
}

/// A step that fails twice before it succeeds, a `map` whose items run in child
/// contexts, a child run, then a wait for the `go` event: attempts, nesting, a linked
/// child run and an event wait.
async fn gallery(ctx: Context, _input: Value) -> Result<u64, Error> {
    let base: u64 = ctx
        .step("flaky_fetch", |step| async move {
            if step.attempt() < 3 {
                return Err(StepError::retryable("upstream answered 503"));
            }
            Ok(7)
        })
        .retry(RetryStrategy::fixed(5, Duration::from_millis(50)))
        .await?;
    let scores = ctx
        .map("score", vec![1u64, 2, 3], |item_ctx, x, _| async move {
            item_ctx
                .step("score_item", move |_| async move { Ok(x * 10) })
                .await
        })
        .await?
        .values()?;
    let child: u64 = ctx.invoke("child", "steps", 3u32).await?;
    let go: Value = ctx
        .wait_for_event("go")
        .timeout(Duration::from_secs(3600))
        .await?;
    Ok(base + scores.iter().sum::<u64>() + child + go["bonus"].as_u64().unwrap_or(0))
}

/// A report over the dev server's inline limit (32 KiB): its step's result and the
/// run's output are kept in the artifact store and fetched by the page when opened.
async fn big_report(ctx: Context, lines: u32) -> Result<Value, Error> {
    let lines: Vec<String> = ctx
        .step("render_lines", move |_| async move {
            Ok((0..lines)
                .map(|i| format!("line {i:05} of the quarterly report"))
                .collect())
        })
        .await?;
    Ok(json!({"title": "quarterly report", "lines": lines}))
}

/// Whether the partner `fragile` calls is up; the parked-run test brings it up.
static PARTNER_UP: AtomicBool = AtomicBool::new(false);

/// One call to a partner that is down until the test says otherwise; when its one
/// attempt fails the run is parked for an operator.
async fn fragile(ctx: Context, _input: Value) -> Result<String, Error> {
    ctx.step("call_partner", |_| async move {
        if PARTNER_UP.load(Ordering::SeqCst) {
            Ok("partner answered".to_owned())
        } else {
            Err(StepError::retryable("partner is down"))
        }
    })
    .retry(RetryStrategy::none())
    .park_on_exhaustion()
    .await
}

/// Whether the receiver `delivery` hands its parcel to is fixed; the restart test fixes
/// it.
static RECEIVER_FIXED: AtomicBool = AtomicBool::new(false);
/// How many times `delivery`'s first step ran: a restart from its second step does not
/// run it again.
static PREPARED: AtomicU32 = AtomicU32::new(0);

/// A step that counts its runs, then one that fails for good (its receiver answers a
/// 4xx) until the test fixes the receiver: a failed run to restart from its second step.
async fn delivery(ctx: Context, _input: Value) -> Result<String, Error> {
    let parcel: String = ctx
        .step("prepare", |_| async move {
            PREPARED.fetch_add(1, Ordering::SeqCst);
            Ok("parcel".to_owned())
        })
        .await?;
    ctx.step("deliver", move |_| {
        let parcel = parcel.clone();
        async move {
            if RECEIVER_FIXED.load(Ordering::SeqCst) {
                Ok(format!("{parcel} delivered"))
            } else {
                Err(StepError::fatal("the receiver answered 400"))
            }
        }
    })
    .retry(RetryStrategy::none())
    .await
}

async fn server(keys: &str) -> (DevServer, tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let mut options = DevOptions::new(dir.path().to_owned());
    options.api_keys = DevOptions::parse_api_keys(keys).unwrap();
    options.sweep_every = Duration::from_millis(200);
    let mut registry: Registry = siesta_workflows::registry();
    registry.register("steps", steps);
    registry.register("gallery", gallery);
    registry.register("fragile", fragile);
    registry.register("big_report", big_report);
    registry.register("delivery", delivery);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = start(listener, options, registry).await.unwrap();
    let base = format!("http://{}", server.addr);
    (server, dir, base)
}

/// The API at `base` through the typed client, with `key` as its bearer token.
fn api(base: &str, key: Option<&str>) -> Api {
    Api::new(base).api_key(key.map(str::to_owned))
}

/// Starts `body`'s `workflow` with its `input` through the client; the run view as
/// JSON, as the pages under test read it.
async fn start_run(base: &str, key: Option<&str>, body: Value, prefer_wait: bool) -> Value {
    let options = siesta_client::StartOptions {
        wait_secs: prefer_wait.then_some(60),
        ..Default::default()
    };
    let run = api(base, key)
        .start_run(body["workflow"].as_str().unwrap(), &body["input"], &options)
        .await
        .unwrap();
    serde_json::to_value(run).unwrap()
}

/// The outcome of run `id`, which has finished, as JSON.
async fn finished(base: &str, id: &str) -> Value {
    match api(base, None).run_result(id, None).await.unwrap() {
        siesta_client::RunOutcome::Finished(result) => serde_json::to_value(result).unwrap(),
        siesta_client::RunOutcome::Pending(view) => panic!("run {id} has not finished: {view:?}"),
    }
}

async fn find(client: &Client, css: &str) -> fantoccini::elements::Element {
    client
        .wait()
        .at_most(PATIENCE)
        .for_element(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("the page shows {css}: {e}"))
}

/// The text of the element `css` finds, found again if the page's live refresh
/// replaced it between the find and the read (a stale element).
async fn text_of(client: &Client, css: &str) -> String {
    for _ in 0..10 {
        match find(client, css).await.text().await {
            Ok(text) => return text,
            Err(CmdError::Standard(e)) if e.error == ErrorStatus::StaleElementReference => {}
            Err(e) => panic!("the text of {css}: {e}"),
        }
    }
    panic!("{css} kept being replaced while read")
}

/// Clicks the element `css` finds, found again if the page's live refresh replaced it
/// between the find and the click (a stale element).
async fn click(client: &Client, css: &str) {
    for _ in 0..10 {
        match find(client, css).await.click().await {
            Ok(_) => return,
            Err(CmdError::Standard(e)) if e.error == ErrorStatus::StaleElementReference => {}
            Err(e) => panic!("clicking {css}: {e}"),
        }
    }
    panic!("{css} kept being replaced while clicked")
}

/// The instant the first `<time>` under `css` shows (its `datetime`, RFC 3339 in local
/// time).
async fn time_shown(client: &Client, css: &str) -> String {
    find(client, css)
        .await
        .attr("datetime")
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("{css} has no datetime"))
}

/// `shown` (by the page) and `given` (by the API) are the same instant.
fn assert_same_instant(shown: &str, given: &str) {
    let instant = |t: &str| {
        chrono::DateTime::parse_from_rfc3339(t)
            .unwrap_or_else(|e| panic!("'{t}' is not RFC 3339: {e}"))
            .timestamp_millis()
    };
    assert_eq!(instant(shown), instant(given), "{shown} vs {given}");
}

/// Where screenshots go: `docs/` (tracked, shown in the README) only when
/// `SIESTA_UPDATE_SCREENSHOTS=1` asks for it, so that an ordinary test run leaves the
/// working tree alone; otherwise this test's scratch directory under `target/`.
fn screenshot_dir() -> PathBuf {
    if std::env::var("SIESTA_UPDATE_SCREENSHOTS").as_deref() == Ok("1") {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs")
    } else {
        Path::new(env!("CARGO_TARGET_TMPDIR")).join("screenshots")
    }
}

async fn screenshot(client: &Client, name: &str) {
    let png = client.screenshot().await.unwrap();
    assert!(png.starts_with(b"\x89PNG"), "a PNG screenshot");
    let dir = screenshot_dir();
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, png).unwrap();
    eprintln!("screenshot: {}", path.display());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_order_is_paid_through_the_ui_and_its_waterfall_shows_the_steps() {
    with_browser(|client| async move {
    let client = &client;
    let (server, _dir, base) = server("").await;
    let run = start_run(
        &base,
        None,
        json!({"workflow": "order", "input": {"item": "espresso machine", "amount": 249.0}}),
        false,
    )
    .await;
    let id = run["id"].as_str().unwrap().to_owned();
    // Company in the list: a finished run and a failed one.
    start_run(&base, None, json!({"workflow": "steps", "input": 3}), true).await;
    start_run(
        &base,
        None,
        json!({"workflow": "order", "input": {"item": "", "amount": 0.0}}),
        true,
    )
    .await;

    // The list shows the run; live refresh brings it to `waiting` at its callback.
    client.goto(&format!("{base}/")).await.unwrap();
    let row = format!(r#"tr[data-run-id="{id}"]"#);
    find(client, &format!(r#"{row} .badge[data-status="waiting"]"#)).await;
    let text = text_of(client, &row).await;
    assert!(text.contains("order"), "{text}");
    screenshot(client, "ui-runs.png").await;

    // Its page shows the callback's webhook URL, the one the API reports.
    find(client, &format!("{row} a"))
        .await
        .click()
        .await
        .unwrap();
    let shown = text_of(client, "code.callback-url").await;
    let view = api(&base, None).get_run(&id).await.unwrap();
    assert_eq!(Some(shown.as_str()), view.waits[0].url.as_deref());
    assert!(shown.starts_with(&format!("{base}/hooks/cb_")), "{shown}");
    // The page reads the API's RFC 3339 times: the start and the callback's deadline it
    // shows (in local time, `<time datetime>`) are the instants the API gives.
    assert_same_instant(
        &time_shown(client, ".meta time").await,
        &view.created_at.to_string(),
    );
    assert_same_instant(
        &time_shown(client, ".wait time").await,
        &view.waits[0].deadline.unwrap().to_string(),
    );
    let meta = text_of(client, ".meta").await;
    assert!(!meta.contains("duration —"), "a duration so far: {meta}");

    // The payment arrives through the UI's callback action, confirmed in its dialog.
    find(client, r#"button[data-action="callback-succeed"]"#)
        .await
        .click()
        .await
        .unwrap();
    let body = find(client, r#"#dialog textarea[name="body"]"#).await;
    body.clear().await.unwrap();
    body.send_keys(r#"{"status": "COMPLETED", "transaction_id": "tx-from-the-ui"}"#)
        .await
        .unwrap();
    let what = text_of(client, "#dialog #what").await;
    assert!(
        what.contains("/succeed"),
        "the dialog says what it sends: {what}"
    );
    find(client, "#dialog-confirm").await.click().await.unwrap();

    // The run completes and the waterfall shows each of its operations, finished.
    find(client, r#"h1 .badge[data-status="completed"]"#).await;
    for op in ["create_order#0", "payment#0", "request_payment#0", "ship#0"] {
        find(
            client,
            &format!(r#".wf-row[data-op="{op}"][data-state="ok"] .bar"#),
        )
        .await;
    }
    let page = text_of(client, "main").await;
    assert!(page.contains("tx-from-the-ui"), "the output is shown");
    let done = api(&base, None).timeline(&id, 0, None).await.unwrap();
    assert_same_instant(
        &time_shown(client, "#events tr.ev time").await,
        &done.events[0].event_timestamp.to_string(),
    );
    let lifecycle = text_of(client, "#lifecycle").await;
    assert!(
        lifecycle.contains("Completed at") && !lifecycle.contains("after —"),
        "when and after how long: {lifecycle}"
    );
    let result = finished(&base, &id).await;
    assert_eq!(result["output"]["transaction_id"], "tx-from-the-ui");
    screenshot(client, "ui-run.png").await;

    // A large output is a reference on the page; opening it fetches the value from the
    // artifact store and shows it pretty-printed.
    let big = start_run(
        &base,
        None,
        json!({"workflow": "big_report", "input": 1500}),
        true,
    )
    .await;
    assert_eq!(big["status"], "completed", "{big}");
    assert!(big["output"]["value_ref"].is_object(), "{big}");
    client
        .goto(&format!("{base}/ui/runs/{}", big["id"].as_str().unwrap()))
        .await
        .unwrap();
    // The page is drawn twice on a first load (the run, then with its timeline): the
    // button is looked for once both are painted.
    find(client, "body[data-painted]").await;
    let open = find(client, ".io button[data-value-href]").await;
    let label = open.text().await.unwrap();
    assert!(label.contains("KB"), "the button says how large: {label}");
    open.click().await.unwrap();
    let shown = find(client, ".io pre.large-value[data-loaded]")
        .await
        .text()
        .await
        .unwrap();
    assert!(
        shown.contains("\"line 01499 of the quarterly report\""),
        "the value is shown"
    );
    assert!(
        shown.contains("\n  \"lines\": [\n"),
        "pretty-printed: {}",
        &shown[..200.min(shown.len())]
    );

    // A run with a thousand timeline events: how fast its page renders, and what the
    // page weighs. Printed, not asserted (speed goals are met in figures, not tests).
    let many = start_run(
        &base,
        None,
        json!({"workflow": "steps", "input": 499}),
        true,
    )
    .await;
    assert_eq!(many["status"], "completed", "{many}");
    let many_id = many["id"].as_str().unwrap();
    client
        .goto(&format!("{base}/ui/runs/{many_id}"))
        .await
        .unwrap();
    find(client, r#"h1 .badge[data-status="completed"]"#).await;
    // The rows below the fold are added after the first paint.
    find(client, r#"#events tr.ev[data-seq="1000"]"#).await;
    let rows = client
        .find_all(Locator::Css("#events tr.ev"))
        .await
        .unwrap()
        .len();
    assert!(rows >= 1000, "every event has a row: {rows}");
    client
        .wait()
        .at_most(PATIENCE)
        .for_element(Locator::Css("body[data-painted]"))
        .await
        .unwrap();
    let figures = client
        .execute(
            r#"const nav = performance.getEntriesByType('navigation')[0];
               const ui = performance.getEntriesByType('resource').filter((r) => r.name.includes('/ui/'));
               const fcp = performance.getEntriesByName('first-contentful-paint')[0];
               return {
                 events: window.siestaRunRendered.events,
                 fetch_ms: window.siestaRunRendered.fetchMs,
                 render_ms: window.siestaRunRendered.renderMs,
                 layout_ms: window.siestaRunRendered.layoutMs,
                 script_started_ms: window.siestaRunRendered.startedMs,
                 run_painted_ms: window.siestaRunRendered.paintedMs,
                 timeline_painted_ms: window.siestaRunRendered.timelinePaintedMs,
                 first_contentful_paint_ms: fcp ? fcp.startTime : null,
                 page_bytes: nav.decodedBodySize + ui.reduce((n, r) => n + r.decodedBodySize, 0),
               };"#,
            vec![],
        )
        .await
        .unwrap();
    println!("run page with {rows} timeline events: {figures}");
    server.stop();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_waterfall_shows_attempts_and_nested_items_and_an_event_is_sent_through_the_ui() {
    with_browser(|client| async move {
        let client = &client;
        let (server, _dir, base) = server("").await;
        let run = start_run(
            &base,
            None,
            json!({"workflow": "gallery", "input": {}}),
            false,
        )
        .await;
        let id = run["id"].as_str().unwrap().to_owned();
        client.goto(&format!("{base}/ui/runs/{id}")).await.unwrap();

        // Live refresh brings the run to its event wait, with the step's three attempts
        // (two failed) and the map's items nested under it.
        find(client, r#"h1 .badge[data-status="waiting"]"#).await;
        find(client, r#".wait[data-kind="event"]"#).await;
        find(
            client,
            r#".wf-row[data-op="flaky_fetch#0"][data-state="ok"]"#,
        )
        .await;
        for (attempt, state) in [(1, "failed"), (2, "failed"), (3, "ok")] {
            find(
            client,
            &format!(
                r#".wf-row.attempt[data-op="flaky_fetch#0"][data-attempt="{attempt}"] .bar.{state}"#
            ),
        )
        .await;
        }
        let items = client
            .find_all(Locator::Css(".wf-row[data-depth=\"1\"]"))
            .await
            .unwrap()
            .len();
        assert!(items >= 3, "the map's items are nested under it: {items}");
        let lifecycle = text_of(client, "#lifecycle").await;
        assert!(lifecycle.contains("event go is delivered"), "{lifecycle}");
        // The child run is linked from its row, and links back to its parent.
        let child = find(client, r#".wf-row[data-op="child#0"][data-state="ok"] a"#)
            .await
            .attr("href")
            .await
            .unwrap()
            .expect("a link to the child run");
        assert!(child.starts_with("/ui/runs/"), "{child}");

        // The event goes in through the UI's action, and the run completes.
        find(client, r#".wait button[data-action="event"]"#)
            .await
            .click()
            .await
            .unwrap();
        let name = find(client, r#"#dialog input[name="name"]"#).await;
        assert_eq!(name.prop("value").await.unwrap().as_deref(), Some("go"));
        let body = find(client, r#"#dialog textarea[name="body"]"#).await;
        body.clear().await.unwrap();
        body.send_keys(r#"{"bonus": 1000}"#).await.unwrap();
        find(client, "#dialog-confirm").await.click().await.unwrap();
        find(client, r#"h1 .badge[data-status="completed"]"#).await;
        let result = finished(&base, &id).await;
        assert_eq!(result["output"], 7 + 60 + 3 + 1000);
        screenshot(client, "ui-waterfall.png").await;
        client.goto(&format!("{base}{child}")).await.unwrap();
        let parent = find(client, ".meta a").await.attr("href").await.unwrap();
        assert_eq!(parent.as_deref(), Some(format!("/ui/runs/{id}").as_str()));
        server.stop();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_run_is_explained_and_resumed_through_the_ui() {
    with_browser(|client| async move {
        let client = &client;
        let (server, _dir, base) = server("").await;
        let run = start_run(
            &base,
            None,
            json!({"workflow": "fragile", "input": {}}),
            false,
        )
        .await;
        let id = run["id"].as_str().unwrap();
        client.goto(&format!("{base}/ui/runs/{id}")).await.unwrap();
        find(client, r#"h1 .badge[data-status="parked"]"#).await;
        let lifecycle = text_of(client, "#lifecycle").await;
        assert!(lifecycle.contains("needs an operator"), "{lifecycle}");
        assert!(lifecycle.contains("partner is down"), "{lifecycle}");
        find(
            client,
            r#".wf-row[data-op="call_partner#0"][data-state="failed"]"#,
        )
        .await;

        // The partner is back; the operator resumes the run from its page.
        PARTNER_UP.store(true, Ordering::SeqCst);
        find(client, r#"button[data-action="resume"]"#)
            .await
            .click()
            .await
            .unwrap();
        let what = text_of(client, "#dialog #what").await;
        assert!(what.contains(&format!("POST /runs/{id}/resume")), "{what}");
        find(client, "#dialog-confirm").await.click().await.unwrap();
        find(client, r#"#events tr.ev[data-type="RunResumed"]"#).await;
        // Replay goes on from the journal: today the exhausted step's failure reaches the
        // workflow (the run fails); were the step tried again, it would now succeed.
        find(
            client,
            r#"h1 .badge[data-status="failed"], h1 .badge[data-status="completed"]"#,
        )
        .await;
        server.stop();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_run_is_restarted_from_its_failed_step_then_forked_through_the_ui() {
    with_browser(|client| async move {
        let client = &client;
        let (server, _dir, base) = server("").await;
        let run = start_run(
            &base,
            None,
            json!({"workflow": "delivery", "input": {}}),
            true,
        )
        .await;
        assert_eq!(run["status"], "failed", "{run}");
        let id = run["id"].as_str().unwrap().to_owned();
        client.goto(&format!("{base}/ui/runs/{id}")).await.unwrap();
        find(client, r#"h1 .badge[data-status="failed"]"#).await;
        // The form's positions come from the timeline: the page is looked at once it is in.
        find(client, "body[data-painted]").await;

        // The form offers the run's operations, the first that failed by default.
        find(client, r#"button[data-action="restart"]"#)
            .await
            .click()
            .await
            .unwrap();
        let from = find(client, r#"#dialog select[name="from"]"#).await;
        assert_eq!(from.prop("value").await.unwrap().as_deref(), Some(""));
        let default = text_of(client, r#"#dialog select[name="from"] option[value=""]"#).await;
        assert!(default.contains("deliver#0"), "{default}");
        find(
            client,
            r#"#dialog select[name="from"] option[value="prepare#0"]"#,
        )
        .await;
        let what = text_of(client, "#dialog #what").await;
        assert!(what.contains(&format!("POST /runs/{id}/restart")), "{what}");
        assert!(what.ends_with("{}"), "no body fields by default: {what}");

        // The receiver is fixed; restarted in place, the run completes without preparing
        // again, and says who restarted it from where.
        RECEIVER_FIXED.store(true, Ordering::SeqCst);
        find(client, "#dialog-confirm").await.click().await.unwrap();
        find(client, r#"h1 .badge[data-status="completed"]"#).await;
        find(client, r#"#events tr.ev[data-type="RunRestarted"]"#).await;
        let info = shows(client, "restart-info", "Restarted by").await;
        assert!(info.contains("from deliver#0"), "{info}");
        let event = text_of(
            client,
            r#"#events tr.ev[data-type="RunRestarted"] td.summary"#,
        )
        .await;
        assert!(
            event.contains("restarted by dev · from deliver#0"),
            "{event}"
        );
        assert_eq!(finished(&base, &id).await["output"], "parcel delivered");
        assert_eq!(
            PREPARED.load(Ordering::SeqCst),
            1,
            "the first step ran once"
        );
        screenshot(client, "ui-restart.png").await;

        // As a new run from the second step: the page moves to the fork, linked back.
        find(client, r#"button[data-action="restart"]"#)
            .await
            .click()
            .await
            .unwrap();
        find(client, r#"#dialog select[name="from"]"#)
            .await
            .select_by_value("deliver#0")
            .await
            .unwrap();
        find(client, r#"#dialog input[name="as_new"]"#)
            .await
            .click()
            .await
            .unwrap();
        let what = text_of(client, "#dialog #what").await;
        assert!(
            what.ends_with(r#"{"from":"deliver#0","as_new":true}"#),
            "{what}"
        );
        find(client, "#dialog-confirm").await.click().await.unwrap();
        let info = shows(client, "restart-info", "Forked from").await;
        assert!(info.contains(&id), "{info}");
        let url = client.current_url().await.unwrap();
        let fork = url.path().strip_prefix("/ui/runs/").unwrap().to_owned();
        assert_ne!(fork, id, "the page shows the fork");
        find(client, r#"h1 .badge[data-status="completed"]"#).await;
        assert_eq!(finished(&base, &fork).await["output"], "parcel delivered");
        assert_eq!(
            PREPARED.load(Ordering::SeqCst),
            1,
            "the fork kept the first step"
        );
        let origin = api(&base, None).get_run(&id).await.unwrap();
        let origin = serde_json::to_value(origin).unwrap();
        assert_eq!(origin["restart"]["fork"], fork.as_str(), "{origin}");
        server.stop();
    })
    .await;
}

/// `fetch_then_notify`: a step, then one that fails for good (a 400); with `renamed`,
/// the first step has another name — code that no longer replays the journal before the
/// failed step.
fn renamed_registry(renamed: bool) -> Registry {
    let mut registry = Registry::new();
    registry.register(
        "fetch_then_notify",
        move |ctx: Context, _: Value| async move {
            let first = if renamed { "fetch_v2" } else { "fetch" };
            ctx.step(first, |_| async { Ok(1u32) }).await?;
            ctx.step("notify", |_| async {
                Err::<Value, _>(StepError::from_http_status(400, "the receiver said 400"))
            })
            .await
        },
    );
    registry
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_whose_journal_no_longer_replays_shows_where_and_changes_nothing() {
    with_browser(|client| async move {
        let client = &client;
        // The run failed on the old code; the page is served by an engine whose code
        // renamed the step before the failed one.
        let env = TestEnv::builder(renamed_registry(false))
            .tenant("default")
            .build();
        let id = env.start("fetch_then_notify", json!(null)).await;
        assert_eq!(env.status(&id).await, RunStatus::Failed);
        let (engine, _) = env.engine_with(renamed_registry(true), env.config().clone());
        let router = ControlApi::new(engine)
            .authenticate(ApiKeys::default())
            .merge(siesta_ui::router())
            .router();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let server = tokio::spawn(siesta_api::server::serve(
            listener,
            router,
            Default::default(),
        ));

        client.goto(&format!("{base}/ui/runs/{id}")).await.unwrap();
        find(client, r#"h1 .badge[data-status="failed"]"#).await;
        find(client, "body[data-painted]").await;
        find(client, r#"button[data-action="restart"]"#)
            .await
            .click()
            .await
            .unwrap();
        find(client, "#dialog-confirm").await.click().await.unwrap();
        let error = shows(client, "action-error", "nothing changed").await;
        assert!(error.starts_with("409 diverged"), "{error}");
        assert!(error.contains("Where: fetch_v2#0"), "{error}");
        let run = env.run(&id).await;
        assert_eq!(
            run.status,
            RunStatus::Failed,
            "the refused restart changed nothing"
        );
        assert!(run.restart.is_none(), "no restart recorded");
        server.abort();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_selected_in_the_list_are_cancelled_and_a_filter_is_acted_on_by_a_job() {
    with_browser(|client| async move {
        let client = &client;
        let (server, _dir, base) = server("").await;
        let mut ids = Vec::new();
        for item in ["kettle", "toaster", "grinder"] {
            let run = start_run(
                &base,
                None,
                json!({"workflow": "order", "input": {"item": item, "amount": 20.0}}),
                false,
            )
            .await;
            ids.push(run["id"].as_str().unwrap().to_owned());
        }
        client
            .goto(&format!("{base}/?workflow=order"))
            .await
            .unwrap();
        // Once all three wait at their callback the list stops changing.
        for id in &ids {
            find(
                client,
                &format!(r#"tr[data-run-id="{id}"] .badge[data-status="waiting"]"#),
            )
            .await;
        }
        for id in &ids[..2] {
            click(client, &format!(r#"tr[data-run-id="{id}"] input.pick"#)).await;
        }
        shows(client, "picked", "2 selected").await;

        // Actions → Cancel…: the dialog says how many and which; confirmed, one call each.
        find(client, "#actions-menu summary")
            .await
            .click()
            .await
            .unwrap();
        find(client, r#"#actions-menu button[data-bulk="cancel"]"#)
            .await
            .click()
            .await
            .unwrap();
        assert_eq!(text_of(client, "#dialog #bulk-count").await, "2");
        let what = text_of(client, "#dialog #what").await;
        assert!(
            what.contains(&format!("POST /runs/{}/cancel", ids[0])),
            "{what}"
        );
        find(client, "#dialog-confirm").await.click().await.unwrap();
        find(client, r#"#job[data-kind="selection"][data-status="done"]"#).await;
        assert_eq!(text_of(client, r#"#job [data-count="done"]"#).await, "2");
        for id in &ids[..2] {
            find(
                client,
                &format!(r#"tr[data-run-id="{id}"] .badge[data-status="cancelled"]"#),
            )
            .await;
        }
        let third = api(&base, None).get_run(&ids[2]).await.unwrap();
        assert_eq!(
            third.status,
            RunStatus::Waiting,
            "the unselected run is left alone"
        );
        screenshot(client, "ui-bulk.png").await;

        // With nothing selected, the action goes to every run the list's filter matches:
        // a job on the server, followed to its end.
        client
            .goto(&format!("{base}/?status=waiting&workflow=order"))
            .await
            .unwrap();
        find(
            client,
            &format!(
                r#"tr[data-run-id="{}"] .badge[data-status="waiting"]"#,
                ids[2]
            ),
        )
        .await;
        find(client, "#actions-menu summary")
            .await
            .click()
            .await
            .unwrap();
        // A restart would be a job over the filter, from the position given (not sent).
        find(client, r#"#actions-menu button[data-bulk="restart"]"#)
            .await
            .click()
            .await
            .unwrap();
        let filter = text_of(client, "#dialog #bulk-filter").await;
        assert_eq!(filter, "workflow = order, status = waiting");
        find(client, r#"#dialog input[name="from"]"#)
            .await
            .send_keys("payment#0")
            .await
            .unwrap();
        let what = text_of(client, "#dialog #what").await;
        assert!(
            what.ends_with(r#"{"action":"restart","filter":{"workflow":"order","status":"waiting"},"from":"payment#0"}"#),
            "{what}"
        );
        find(client, "#dialog-cancel").await.click().await.unwrap();
        // Pause is sent.
        find(client, "#actions-menu summary")
            .await
            .click()
            .await
            .unwrap();
        find(client, r#"#actions-menu button[data-bulk="pause"]"#)
            .await
            .click()
            .await
            .unwrap();
        let what = text_of(client, "#dialog #what").await;
        assert!(what.starts_with("POST /runs/actions"), "{what}");
        find(client, "#dialog-confirm").await.click().await.unwrap();
        find(client, r#"#job[data-kind="job"][data-status="done"]"#).await;
        assert_eq!(text_of(client, r#"#job [data-count="done"]"#).await, "1");
        let third = api(&base, None).get_run(&ids[2]).await.unwrap();
        assert_eq!(
            third.status,
            RunStatus::Paused,
            "the job paused the matching run"
        );
        // Each run's page says who acted on it.
        for (id, said) in [(&ids[0], "Cancelled by dev"), (&ids[2], "Paused by dev")] {
            client.goto(&format!("{base}/ui/runs/{id}")).await.unwrap();
            shows(client, "lifecycle", said).await;
        }
        server.stop();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_api_keys_the_ui_asks_for_a_key_once_and_shows_only_that_tenants_runs() {
    with_browser(|client| async move {
        let client = &client;
        let (server, _dir, base) = server("key-a=acme,key-b=globex").await;
        let ours = start_run(
            &base,
            Some("key-a"),
            json!({"workflow": "order", "input": {"item": "anvil", "amount": 10.0}}),
            false,
        )
        .await;
        let theirs = start_run(
            &base,
            Some("key-b"),
            json!({"workflow": "order", "input": {"item": "rocket", "amount": 99.0}}),
            false,
        )
        .await;

        client.goto(&format!("{base}/")).await.unwrap();
        let input = find(client, r#"#key-form input[name="key"]"#).await;
        input.send_keys("key-a").await.unwrap();
        find(client, "#key-form button")
            .await
            .click()
            .await
            .unwrap();
        let row = find(
            client,
            &format!(r#"tr[data-run-id="{}"]"#, ours["id"].as_str().unwrap()),
        )
        .await;
        let text = row.text().await.unwrap();
        assert!(text.contains("acme"), "the run's tenant is shown: {text}");
        let other = client
            .find_all(Locator::Css(&format!(
                r#"tr[data-run-id="{}"]"#,
                theirs["id"].as_str().unwrap()
            )))
            .await
            .unwrap();
        assert!(other.is_empty(), "another tenant's run is not shown");

        // The key is kept: a run page opened directly needs no second prompt.
        client
            .goto(&format!("{base}/ui/runs/{}", ours["id"].as_str().unwrap()))
            .await
            .unwrap();
        find(client, "code.callback-url").await;
        assert!(
            client
                .find_all(Locator::Css("#key-form"))
                .await
                .unwrap()
                .is_empty()
        );

        // Cancel, confirmed on a version the run has since left: the API's 412 is shown in
        // the dialog and nothing happens; confirmed again on the current version, it is done.
        let id = ours["id"].as_str().unwrap();
        find(client, r#"button[data-action="cancel"]"#)
            .await
            .click()
            .await
            .unwrap();
        find(client, "#dialog-confirm").await;
        api(&base, Some("key-a"))
            .send_message(id, &json!({"note": "the run moves on"}), None)
            .await
            .unwrap();
        find(client, "#dialog-confirm").await.click().await.unwrap();
        let error = find(client, "#action-error.shown")
            .await
            .text()
            .await
            .unwrap();
        assert!(
            error.starts_with("412"),
            "the API's error is shown: {error}"
        );
        find(client, "#dialog-cancel").await.click().await.unwrap();
        let view =
            serde_json::to_value(api(&base, Some("key-a")).get_run(id).await.unwrap()).unwrap();
        assert_eq!(
            view["status"], "waiting",
            "the stale cancel changed nothing"
        );
        // Live refresh shows the run's new version; the next cancel is sent with it.
        find(
            client,
            &format!(
                r#"button[data-action="cancel"][data-version="{}"]"#,
                view["version"]
            ),
        )
        .await
        .click()
        .await
        .unwrap();
        find(client, "#dialog-confirm").await.click().await.unwrap();
        find(client, r#"h1 .badge[data-status="cancelled"]"#).await;
        server.stop();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_flow_page_shows_limits_and_schedules_and_a_schedule_is_paused_and_resumed_there() {
    with_browser(|client| async move {
        let client = &client;
        let (server, _dir, base) = server("").await;
        // The examples' limit `per-customer` (one run per customer): acme's first run
        // holds the slot, its second waits for it.
        let mut runs = Vec::new();
        for _ in 0..2 {
            let run = start_run(
                &base,
                None,
                json!({"workflow": "per_customer", "input": {"customer": "acme"}}),
                false,
            )
            .await;
            runs.push(run["id"].as_str().unwrap().to_owned());
        }
        client.goto(&format!("{base}/")).await.unwrap();
        find(client, r#"a[href="/ui/flow"]"#)
            .await
            .click()
            .await
            .unwrap();

        // Limits: acme's key with its holder and its waiter, linked to the queued runs;
        // a limit nothing holds is one row of dashes.
        let acme = r#"#limits tr[data-limit="per-customer"][data-key="acme"]"#;
        assert_eq!(text_of(client, &format!("{acme} td.holders")).await, "1");
        assert_eq!(text_of(client, &format!("{acme} td.waiters")).await, "1");
        let text = text_of(client, acme).await;
        assert!(text.contains("input /customer"), "{text}");
        let queued = find(client, &format!("{acme} td.queued a"))
            .await
            .attr("href")
            .await
            .unwrap();
        assert_eq!(
            queued.as_deref(),
            Some("/?status=queued&workflow=per_customer")
        );
        let idle = text_of(
            client,
            r#"#limits tr[data-limit="limited-runs"]:not([data-key]) td.holders"#,
        )
        .await;
        assert_eq!(idle, "—");

        // Schedules: the examples' nightly report, its next tick the API's.
        let nightly = r#"#schedules tr[data-schedule="nightly-report"]"#;
        let text = text_of(client, &format!(r#"{nightly}[data-paused="false"]"#)).await;
        for shown in ["report", "0 2 * * *", "UTC", "active"] {
            assert!(text.contains(shown), "{shown}: {text}");
        }
        let view = api(&base, None).schedules().await.unwrap().schedules;
        let view = view.iter().find(|s| s.name == "nightly-report").unwrap();
        assert_same_instant(
            &time_shown(client, &format!("{nightly} td.next time")).await,
            &view.next.unwrap().to_string(),
        );

        // Pause, then Resume: the page's buttons, and the API agrees each time.
        for (action, paused, said) in [("pause", true, "Paused"), ("resume", false, "Resumed")] {
            find(
                client,
                &format!(r#"{nightly} button[data-schedule-action="{action}"]"#),
            )
            .await
            .click()
            .await
            .unwrap();
            find(client, &format!(r#"{nightly}[data-paused="{paused}"]"#)).await;
            shows(client, "schedule-answer", said).await;
            let schedules = api(&base, None).schedules().await.unwrap().schedules;
            let now = schedules
                .iter()
                .find(|s| s.name == "nightly-report")
                .unwrap();
            assert_eq!(now.paused, paused, "after {action}");
            assert_eq!(now.next.is_none(), paused, "after {action}");
        }
        let text = text_of(client, nightly).await;
        assert!(text.contains("active"), "{text}");

        // Trigger now: a run of the schedule starts, linked from the answer.
        find(
            client,
            &format!(r#"{nightly} button[data-schedule-action="trigger"]"#),
        )
        .await
        .click()
        .await
        .unwrap();
        shows(client, "schedule-answer", "Triggered nightly-report").await;
        let href = find(client, "#schedule-answer a")
            .await
            .attr("href")
            .await
            .unwrap()
            .unwrap();
        let triggered = href.strip_prefix("/ui/runs/").unwrap();
        let run = api(&base, None).get_run(triggered).await.unwrap();
        assert_eq!(run.workflow, "report");
        screenshot(client, "ui-flow.png").await;

        // The key's link opens the runs list at the queued runs: acme's second is there.
        find(client, &format!("{acme} td.queued a"))
            .await
            .click()
            .await
            .unwrap();
        find(
            client,
            &format!(
                r#"tr[data-run-id="{}"] .badge[data-status="queued"]"#,
                runs[1]
            ),
        )
        .await;
        let listed = client
            .find_all(Locator::Css(&format!(r#"tr[data-run-id="{}"]"#, runs[0])))
            .await
            .unwrap();
        assert!(listed.is_empty(), "the run holding the slot is not queued");
        server.stop();
    })
    .await;
}

/// A payment made by a tool call: with no lookup, a crash between "running" and its
/// result leaves its outcome unknown and parks the run for an operator.
fn charge_registry() -> Registry {
    let mut registry = Registry::new();
    registry.register("charge", |ctx: Context, _: Value| async move {
        let charged = ctx
            .tool_call("charge", &json!({"amount": 5}), |_| async move {
                Ok(json!("charged by the call"))
            })
            .await?;
        Ok(json!({"charged": charged}))
    });
    registry
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_tool_call_is_resolved_through_the_ui() {
    with_browser(|client| async move {
        let client = &client;
        // The process dies right after the tool call is recorded as running; the run is
        // parked when its lease runs out (the test's clock is moved, not waited for).
        let env = TestEnv::builder(charge_registry())
            .tenant("default")
            .build();
        let id = env.create("charge", json!(null), None).await.unwrap();
        env.crash_after_writes(1);
        env.run_until_idle().await;
        assert!(env.has_crashed(), "the engine died inside the tool call");
        env.restart();
        env.advance(LEASE_TTL + Duration::from_secs(1)).await;
        assert_eq!(env.status(&id).await, RunStatus::Parked);

        // The UI and the API over the engine that replaced the dead one, on a socket.
        let router = ControlApi::new(env.engine())
            .authenticate(ApiKeys::default())
            .merge(siesta_ui::router())
            .router();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let server = tokio::spawn(siesta_api::server::serve(
            listener,
            router,
            Default::default(),
        ));

        client.goto(&format!("{base}/ui/runs/{id}")).await.unwrap();
        find(client, r#"h1 .badge[data-status="parked"]"#).await;
        find(client, "body[data-painted]").await;
        let lifecycle = text_of(client, "#lifecycle").await;
        assert!(lifecycle.contains("tool call"), "{lifecycle}");
        find(
            client,
            r#"button[data-action="resolve"][data-op="charge#0"]"#,
        )
        .await
        .click()
        .await
        .unwrap();
        let outcome = find(client, r#"#dialog select[name="outcome"]"#).await;
        assert_eq!(
            outcome.prop("value").await.unwrap().as_deref(),
            Some("succeeded")
        );
        let value = find(client, r#"#dialog textarea[name="value"]"#).await;
        value.clear().await.unwrap();
        value.send_keys(r#""charged by hand""#).await.unwrap();
        let what = text_of(client, "#dialog #what").await;
        assert!(
            what.contains(&format!("POST /runs/{id}/operations/charge%230/resolve")),
            "{what}"
        );
        assert!(
            what.contains(r#"{"outcome":"succeeded","value":"charged by hand"}"#),
            "{what}"
        );
        find(client, "#dialog-confirm").await.click().await.unwrap();
        // The dialog closes once the API accepted the resolution.
        find(client, "dialog#dialog:not([open])").await;
        let run = env.run(&id).await;
        assert_ne!(run.status, RunStatus::Parked, "resolved: {:?}", run.status);

        // The engine works the resumed run; the page's live refresh shows it completed,
        // with the operator's value as the call's result.
        env.run_until_idle().await;
        find(client, r#"h1 .badge[data-status="completed"]"#).await;
        let page = text_of(client, "main").await;
        assert!(page.contains("charged by hand"), "the output is shown");
        server.abort();
    })
    .await;
}

/// The example's fake model, whose second reply (after the order lookup) goes out one
/// word per permit of `gate`.
struct Gated {
    gate: Arc<Semaphore>,
}

#[async_trait::async_trait]
impl Model for Gated {
    async fn complete(
        &self,
        request: &ModelRequest,
        tokens: Option<TokenSink>,
    ) -> Result<ModelReply, ModelError> {
        let reply = SupportDemoModel.complete(request, None).await?;
        let turn = request
            .messages
            .iter()
            .filter(|m| m.role == Role::Assistant)
            .count();
        if let Some(sink) = tokens {
            for word in reply.message.content.split_inclusive(' ') {
                if turn == 1 {
                    self.gate
                        .acquire()
                        .await
                        .expect("the gate stays open")
                        .forget();
                }
                sink(word);
            }
        }
        Ok(reply)
    }
}

/// Waits until the element with id `id` shows text containing `wanted`; its text.
async fn shows(client: &Client, id: &str, wanted: &str) -> String {
    let xpath = format!("//*[@id='{id}'][contains(., '{wanted}')]");
    client
        .wait()
        .at_most(PATIENCE)
        .for_element(Locator::XPath(&xpath))
        .await
        .unwrap_or_else(|e| panic!("#{id} shows {wanted:?}: {e}"))
        .text()
        .await
        .unwrap()
}

/// The `agent` example's model's words arrive live on the run page while its call is in
/// progress, and the refund it asks for is approved there. The model is the example's
/// built-in fake, held back word by word by the test ([`Gated`]), so the page shows text
/// the journal does not hold yet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_models_words_arrive_live_and_the_refund_is_approved_on_the_run_page() {
    with_browser(|client| async move {
        let gate = Arc::new(Semaphore::new(0));
        let mut registry = Registry::new();
        registry.register("agent", agent_with(Arc::new(Gated { gate: gate.clone() })));
        let dir = tempfile::tempdir().unwrap();
        let mut options = DevOptions::new(dir.path().to_owned());
        options.sweep_every = Duration::from_millis(200);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let server = start(listener, options, registry).await.unwrap();
        let base = format!("http://{}", server.addr);

        let client = &client;
        let run = start_run(
            &base,
            None,
            json!({"workflow": "agent", "input": {"customer": "Ada", "message": "It arrived broken, refund please."}}),
            false,
        )
        .await;
        let id = run["id"].as_str().unwrap().to_owned();
        client.goto(&format!("{base}/ui/runs/{id}")).await.unwrap();
        // The first call (the lookup's sentence) is in the conversation; the second is
        // held back by the gate.
        shows(client, "conversation", "Let me look up your latest order.").await;
        gate.add_permits(3);
        let live = shows(client, "live-tokens", "I found order").await;
        assert!(!live.contains("refund of"), "only the words let out so far: {live}");
        gate.add_permits(100);
        // The call ends and the run waits for a person: Approve is offered.
        find(client, r#"#pending-approval button[data-action="approve"]"#).await.click().await.unwrap();
        let by = find(client, r#"#dialog input[name="by"]"#).await;
        by.clear().await.unwrap();
        by.send_keys("alice").await.unwrap();
        let what = text_of(client, "#dialog #what").await;
        assert!(what.contains(&format!("POST /runs/{id}/events/approval")), "{what}");
        assert!(what.contains(r#"{"approved":true,"by":"alice"}"#), "{what}");
        find(client, "#dialog-confirm").await.click().await.unwrap();
        find(client, r#"h1 .badge[data-status="completed"]"#).await;
        shows(client, "conversation", "Your refund of $249").await;
        server.stop();
    })
    .await;
}
