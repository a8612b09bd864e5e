//! `siesta runs …`: talk to a running server (`siesta dev`, or the deployed API).

use std::io::IsTerminal;

use anyhow::{Context as _, bail};
use serde_json::Value;

/// Where the server is and how to reach it.
#[derive(Debug, Clone)]
pub struct Remote {
    /// The server's base URL.
    pub url: String,
    /// The API key, if the server wants one.
    pub api_key: Option<String>,
    /// Print JSON instead of tables.
    pub json: bool,
}

impl Remote {
    /// The typed client of this server's API.
    pub(crate) fn client(&self) -> siesta_client::Client {
        siesta_client::Client::new(&self.url).api_key(self.api_key.clone())
    }

    /// A failed call as the CLI reports it: the API's refusal as `STATUS: message`, a
    /// server it could not reach as "reaching URL".
    pub(crate) fn failed(&self, error: siesta_client::Error) -> anyhow::Error {
        match error {
            siesta_client::Error::Api {
                status, message, ..
            } => anyhow::anyhow!("{status}: {message}"),
            siesta_client::Error::Transport { source, .. } => {
                anyhow::Error::new(source).context(format!("reaching {}", self.url))
            }
            decode @ siesta_client::Error::Decode { .. } => decode.into(),
        }
    }

    /// Serializes an answer of the typed client for `print`.
    pub(crate) fn shown(value: &impl serde::Serialize) -> anyhow::Result<Value> {
        Ok(serde_json::to_value(value)?)
    }

    pub(crate) fn print(&self, value: &Value, table: impl FnOnce(&Value)) {
        if self.json {
            println!(
                "{}",
                serde_json::to_string_pretty(value).unwrap_or_default()
            );
        } else {
            table(value);
        }
    }

    /// `runs list`.
    pub async fn list(
        &self,
        status: Option<String>,
        workflow: Option<String>,
    ) -> anyhow::Result<()> {
        let filter = siesta_client::RunFilter {
            status,
            workflow,
            limit: Some(100),
            cursor: None,
        };
        let page = self
            .client()
            .list_runs(&filter)
            .await
            .map_err(|e| self.failed(e))?;
        let body = Self::shown(&page)?;
        self.print(&body, |b| {
            println!(
                "{:<40} {:<12} {:<10} {:<26} {:<26} {:>12} {:>7}",
                "RUN", "WORKFLOW", "STATUS", "STARTED", "FINISHED", "DURATION", "VERSION"
            );
            let now = chrono::Utc::now().timestamp_millis();
            for run in b["runs"].as_array().into_iter().flatten() {
                let times = RunTimes::of(run);
                // A run of another build: this server leaves it to its build.
                let awaiting = run["awaiting_build"]
                    .as_str()
                    .map(|b| format!("  awaiting build {b}"))
                    .or_else(|| queued_note(&run["queued"]).map(|q| format!("  {q}")))
                    .unwrap_or_default();
                println!(
                    "{:<40} {:<12} {} {:<26} {:<26} {:>12} {:>7}{awaiting}",
                    run["id"].as_str().unwrap_or(""),
                    run["workflow"].as_str().unwrap_or(""),
                    paint_status(run["status"].as_str().unwrap_or("")),
                    times.started.map(local_time).unwrap_or_default(),
                    times.finished.map(local_time).unwrap_or_else(|| "-".into()),
                    times.duration(now),
                    run["version"].as_u64().unwrap_or(0)
                );
            }
        });
        Ok(())
    }

    /// `runs show`.
    pub async fn show(&self, id: &str) -> anyhow::Result<()> {
        let run = self
            .client()
            .get_run(id)
            .await
            .map_err(|e| self.failed(e))?;
        let body = Self::shown(&run)?;
        self.print(&body, |b| {
            println!("run       {}", b["id"].as_str().unwrap_or(""));
            println!("workflow  {}", b["workflow"].as_str().unwrap_or(""));
            println!(
                "status    {}",
                paint_status(b["status"].as_str().unwrap_or(""))
            );
            println!("version   {}", b["version"]);
            if let Some(build) = b["build_id"].as_str() {
                println!("build     {build}");
            }
            if let Some(build) = b["awaiting_build"].as_str() {
                println!(
                    "awaiting  build {build}: this server runs only its own build; the run goes on when {build} serves it, or when an upgrade moves it here"
                );
            }
            if let Some(queued) = queued_note(&b["queued"]) {
                println!("queued    {queued}: {}", queued_outcome(&b["queued"]));
            }
            println!(
                "web UI    {}{}",
                self.url.trim_end_matches('/'),
                siesta_ui::run_page_path(id)
            );
            let times = RunTimes::of(b);
            if let Some(started) = times.started {
                println!("started   {}", local_time(started));
            }
            if let Some(finished) = times.finished {
                println!("finished  {}", local_time(finished));
            }
            println!(
                "duration  {}",
                times.duration(chrono::Utc::now().timestamp_millis())
            );
            println!("input     {}", b["input"]);
            if !b["output"].is_null() {
                println!("output    {}", b["output"]);
            }
            if !b["error"].is_null() {
                println!(
                    "error     {}: {}",
                    b["error"]["kind"].as_str().unwrap_or(""),
                    b["error"]["message"].as_str().unwrap_or("")
                );
            }
            for w in b["waits"].as_array().into_iter().flatten() {
                let what = w["url"].as_str().or(w["event"].as_str()).unwrap_or("");
                let until = api_time(&w["deadline"])
                    .map(|d| format!(" until {}", local_time(d)))
                    .unwrap_or_default();
                println!(
                    "waiting   {} {} {}{until}",
                    w["kind"].as_str().unwrap_or(""),
                    w["operation"].as_str().unwrap_or(""),
                    what
                );
            }
        });
        Ok(())
    }

    /// `runs builds`: the builds the caller's runs started on, each with its
    /// unfinished runs by status.
    pub async fn builds(&self) -> anyhow::Result<()> {
        let builds = self.client().builds().await.map_err(|e| self.failed(e))?;
        let body = Self::shown(&builds)?;
        self.print(&body, |b| print!("{}", builds_table(b)));
        Ok(())
    }

    /// `runs limits`: every concurrency limit, per key its holders and waiters.
    pub async fn limits(&self) -> anyhow::Result<()> {
        let limits = self.client().limits().await.map_err(|e| self.failed(e))?;
        let body = Self::shown(&limits)?;
        self.print(&body, |b| print!("{}", limits_table(b)));
        Ok(())
    }

    /// `runs timeline`.
    pub async fn timeline(&self, id: &str) -> anyhow::Result<()> {
        let timeline = self
            .client()
            .timeline(id, 0, Some(1000))
            .await
            .map_err(|e| self.failed(e))?;
        self.print(&Self::shown(&timeline)?, |_| {
            println!("{TIMELINE_HEADER}");
            for event in &timeline.events {
                println!("{}", timeline_row(event));
            }
        });
        Ok(())
    }

    /// `runs stream`: follow a run's stream from `from` until it ends, a long-poll page
    /// at a time (what works through API Gateway too). Text chunks are printed as they
    /// come, without a line break (a model's tokens read as text), other values one a
    /// line; a `discard` (a failed attempt's chunks are void) is noted on stderr. With
    /// `--json`, each chunk is one JSON line.
    pub async fn stream(&self, id: &str, name: &str, from: u64) -> anyhow::Result<()> {
        use std::io::Write as _;
        let client = self.client();
        let mut next = from;
        loop {
            let page = client
                .stream_page(id, name, next, Some(20), Some(1000))
                .await
                .map_err(|e| self.failed(e))?;
            let mut out = std::io::stdout().lock();
            for chunk in &page.chunks {
                if self.json {
                    writeln!(out, "{}", serde_json::to_string(chunk)?)?;
                    continue;
                }
                match (chunk.kind.as_str(), &chunk.data) {
                    ("data", Value::String(text)) => write!(out, "{text}")?,
                    ("data", value) => writeln!(out, "{value}")?,
                    ("discard", _) => eprintln!(
                        "\n[{} attempt {}: what it published before is void]",
                        chunk.step.as_deref().unwrap_or("?"),
                        chunk
                            .attempt
                            .map_or_else(|| "null".to_owned(), |a| a.to_string())
                    ),
                    _ => {}
                }
            }
            out.flush()?;
            next = page.next;
            if page.closed {
                if !self.json {
                    writeln!(out)?;
                }
                return Ok(());
            }
        }
    }

    /// `runs cancel`.
    pub async fn cancel(&self, id: &str, if_match: Option<u64>) -> anyhow::Result<()> {
        let run = self
            .client()
            .cancel(id, if_match)
            .await
            .map_err(|e| self.failed(e))?;
        self.transitioned(id, &run)
    }

    /// `runs pause`.
    pub async fn pause(&self, id: &str, if_match: Option<u64>) -> anyhow::Result<()> {
        let run = self
            .client()
            .pause(id, if_match)
            .await
            .map_err(|e| self.failed(e))?;
        self.transitioned(id, &run)
    }

    /// `runs resume`.
    pub async fn resume(&self, id: &str, if_match: Option<u64>) -> anyhow::Result<()> {
        let run = self
            .client()
            .resume(id, if_match)
            .await
            .map_err(|e| self.failed(e))?;
        self.transitioned(id, &run)
    }

    /// `runs restart RUN`: `POST /runs/{id}/restart`.
    pub async fn restart(
        &self,
        id: &str,
        body: &siesta_client::RestartBody,
        if_match: Option<u64>,
    ) -> anyhow::Result<()> {
        let run = self
            .client()
            .restart(id, body, if_match)
            .await
            .map_err(|e| self.failed(e))?;
        self.print(&Self::shown(&run)?, |_| {
            let from = run
                .restart
                .as_ref()
                .and_then(|r| r.from.as_deref())
                .unwrap_or("where it stopped");
            if run.id == id {
                println!(
                    "run {id} restarted from {from}: {}",
                    paint_status(run.status.as_str())
                );
            } else {
                println!(
                    "run {id} forked from {from} as run {}: {}",
                    run.id,
                    paint_status(run.status.as_str())
                );
            }
        });
        Ok(())
    }

    /// `runs upgrade RUN`: `POST /runs/{id}/upgrade`.
    pub async fn upgrade(&self, id: &str, if_match: Option<u64>) -> anyhow::Result<()> {
        let run = self
            .client()
            .upgrade_run(id, if_match)
            .await
            .map_err(|e| self.failed(e))?;
        self.print(&Self::shown(&run)?, |_| {
            println!(
                "run {id} is on build {} and {}",
                run.build_id.as_deref().unwrap_or("-"),
                paint_status(run.status.as_str())
            )
        });
        Ok(())
    }

    /// `runs upgrade --all --build ID`: `POST /builds/{build}/upgrade`; fails when a
    /// run of the build does not replay (each is listed with where it diverges).
    pub async fn upgrade_build(&self, build: &str) -> anyhow::Result<()> {
        let report = self
            .client()
            .upgrade_build(build)
            .await
            .map_err(|e| self.failed(e))?;
        self.print(&Self::shown(&report)?, |_| {
            println!(
                "build {} → {}: {} upgraded, {} diverged, {} skipped",
                report.from,
                report.to,
                report.upgraded.len(),
                report.diverged.len(),
                report.skipped.len()
            );
            for id in &report.upgraded {
                println!("  upgraded  {id}");
            }
            for d in &report.diverged {
                let kind = |k: Option<siesta::OperationKind>| {
                    k.map_or("nothing", siesta::OperationKind::as_str)
                };
                println!(
                    "  diverged  {} at {}: journal {} vs code {}",
                    d.run_id,
                    d.divergence.position,
                    kind(d.divergence.journal_kind),
                    kind(d.divergence.code_kind)
                );
            }
            for s in &report.skipped {
                println!("  skipped   {}: {}", s.run_id, s.reason);
            }
        });
        let diverged = report.diverged.len();
        if diverged > 0 {
            bail!(
                "{diverged} run(s) of build {build} do not replay on the new build and stay on it"
            );
        }
        Ok(())
    }

    /// `runs export RUN`: the run and its replay input (journal, deliveries) as JSON on stdout.
    pub async fn export(&self, id: &str) -> anyhow::Result<()> {
        let export = self
            .client()
            .export_run(id)
            .await
            .map_err(|e| self.failed(e))?;
        println!("{}", serde_json::to_string_pretty(&export)?);
        Ok(())
    }

    /// Prints run `id`'s new status after a cancel, resume or redrive.
    fn transitioned(&self, id: &str, run: &siesta_client::RunView) -> anyhow::Result<()> {
        self.print(&Self::shown(run)?, |_| match &run.pause_requested {
            Some(by) => println!(
                "run {} is {}: it pauses at its next step boundary (asked by {by})",
                id,
                paint_status(run.status.as_str())
            ),
            None => println!("run {} is {}", id, paint_status(run.status.as_str())),
        });
        Ok(())
    }

    /// `runs resolve`: `POST /runs/{id}/operations/{position}/resolve`.
    pub async fn resolve(
        &self,
        id: &str,
        position: &str,
        outcome: Outcome,
        if_match: Option<u64>,
    ) -> anyhow::Result<()> {
        let run = self
            .client()
            .resolve_operation(id, position, &outcome.resolution(), if_match)
            .await
            .map_err(|e| self.failed(e))?;
        self.print(&Self::shown(&run)?, |_| {
            println!(
                "{position} of run {id} resolved ({}); the run is {}",
                outcome.name(),
                paint_status(run.status.as_str())
            )
        });
        Ok(())
    }

    /// `runs send-event`.
    pub async fn send_event(&self, id: &str, name: &str, payload: &str) -> anyhow::Result<()> {
        let value: Value =
            serde_json::from_str(payload).context("the event payload must be JSON")?;
        let accepted = self
            .client()
            .send_event(id, name, &value, None)
            .await
            .map_err(|e| self.failed(e))?;
        self.print(&Self::shown(&accepted)?, |_| {
            let dup = if accepted.duplicate {
                " (duplicate, ignored)"
            } else {
                ""
            };
            println!("event '{name}' delivered to {id}{dup}");
        });
        Ok(())
    }

    /// `runs dead-letters`: every dead letter of the caller's tenant (the runs parked
    /// because a wake-up of theirs was dead-lettered), page after page.
    pub async fn dead_letters(&self) -> anyhow::Result<()> {
        let mut all = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let page = self
                .client()
                .dead_lettered_runs(cursor.as_deref(), Some(200))
                .await
                .map_err(|e| self.failed(e))?;
            all.extend(page.dead_letters);
            match page.next_cursor {
                Some(c) => cursor = Some(c),
                None => break,
            }
        }
        let body = serde_json::json!({ "dead_letters": all });
        self.print(&body, |b| {
            println!(
                "{:<40} {:<12} {:<30} {:>7}  REASON",
                "RUN", "WORKFLOW", "PARKED", "VERSION"
            );
            for letter in b["dead_letters"].as_array().into_iter().flatten() {
                let parked = api_time(&letter["parked_at"])
                    .map(local_time)
                    .unwrap_or_default();
                println!(
                    "{:<40} {:<12} {:<30} {:>7}  {}",
                    letter["run_id"].as_str().unwrap_or(""),
                    letter["workflow"].as_str().unwrap_or(""),
                    parked,
                    letter["version"].as_u64().unwrap_or(0),
                    letter["reason"].as_str().unwrap_or("")
                );
            }
        });
        Ok(())
    }

    /// `runs redrive`: resume the run one dead letter parked (`id`), or every one.
    pub async fn redrive(&self, id: Option<&str>, if_match: Option<u64>) -> anyhow::Result<()> {
        let Some(id) = id else {
            let redriven = self
                .client()
                .redrive_all()
                .await
                .map_err(|e| self.failed(e))?;
            self.print(&Self::shown(&redriven)?, |_| {
                println!("{} dead letters redriven", redriven.redriven);
                for id in &redriven.run_ids {
                    println!("  {id}");
                }
            });
            return Ok(());
        };
        let run = self
            .client()
            .redrive(id, if_match)
            .await
            .map_err(|e| self.failed(e))?;
        self.transitioned(id, &run)
    }
}

/// What an operator says happened to a tool call whose outcome is unknown.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// It happened and returned this value.
    Succeeded(Value),
    /// It failed with this message.
    Failed(String),
    /// Make it again.
    Retry,
}

impl Outcome {
    /// `--succeeded JSON`: the value must be JSON.
    pub fn succeeded(json: &str) -> anyhow::Result<Outcome> {
        serde_json::from_str(json)
            .map(Outcome::Succeeded)
            .context("--succeeded takes the call's result as JSON (a string is \"quoted\")")
    }

    /// The resolution sent to the resolve route.
    pub fn resolution(&self) -> siesta_client::Resolution {
        match self {
            Outcome::Succeeded(value) => siesta_client::Resolution::Succeeded {
                value: value.clone(),
            },
            Outcome::Failed(message) => siesta_client::Resolution::Failed {
                error: siesta_client::ResolvedError::Detailed {
                    code: None,
                    message: message.clone(),
                },
            },
            Outcome::Retry => siesta_client::Resolution::Retry,
        }
    }

    fn name(&self) -> &'static str {
        match self {
            Outcome::Succeeded(_) => "succeeded",
            Outcome::Failed(_) => "failed",
            Outcome::Retry => "retry",
        }
    }
}

/// When a run (as the API shows it) started and finished, in ms since the epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunTimes {
    /// When it was created.
    pub started: Option<i64>,
    /// When it finished (its last change, once completed, failed or cancelled).
    pub finished: Option<i64>,
}

impl RunTimes {
    /// The times of a run view.
    pub fn of(run: &Value) -> RunTimes {
        let finished = matches!(
            run["status"].as_str(),
            Some("completed" | "failed" | "cancelled")
        );
        RunTimes {
            started: api_time(&run["created_at"]),
            finished: api_time(&run["updated_at"]).filter(|_| finished),
        }
    }

    /// From start to finish, or to `now` (marked `…`) while it is not finished.
    pub fn duration(&self, now: i64) -> String {
        match (self.started, self.finished) {
            (Some(s), Some(f)) => human_duration(f - s),
            (Some(s), None) => format!("{}…", human_duration(now - s)),
            _ => String::new(),
        }
    }
}

/// A time the API shows (RFC 3339), in ms since the epoch; `None` when absent or not a
/// time.
pub fn api_time(value: &Value) -> Option<i64> {
    serde_json::from_value::<siesta_api::Rfc3339>(value.clone())
        .ok()
        .map(siesta_api::Rfc3339::millis)
}

/// An instant (ms since the epoch) in this machine's local time with its UTC offset:
/// `2026-11-24 02:41:14 +01:00`.
pub fn local_time(ms: i64) -> String {
    time_in(ms, &chrono::Local)
}

fn time_in<Tz: chrono::TimeZone>(ms: i64, tz: &Tz) -> String
where
    Tz::Offset: std::fmt::Display,
{
    match chrono::DateTime::from_timestamp_millis(ms) {
        Some(t) => t
            .with_timezone(tz)
            .format("%Y-%m-%d %H:%M:%S %:z")
            .to_string(),
        None => format!("{ms} ms"),
    }
}

/// A length of time for a person: `350 ms`, `2.41 s`, `3 min 20 s`, `1 h 5 min`,
/// `2 d 3 h`.
pub fn human_duration(ms: i64) -> String {
    let ms = ms.max(0);
    if ms < 1000 {
        return format!("{ms} ms");
    }
    let secs = ms / 1000;
    let (m, h, d) = (secs / 60, secs / 3600, secs / 86_400);
    match () {
        _ if secs < 10 => format!("{:.2} s", ms as f64 / 1000.0),
        _ if secs < 60 => format!("{:.1} s", ms as f64 / 1000.0),
        _ if m < 60 => format!("{m} min {} s", secs % 60),
        _ if h < 24 => format!("{h} h {} min", m % 60),
        _ => format!("{d} d {} h", h % 24),
    }
}

/// The header of [`timeline_row`]'s table.
pub const TIMELINE_HEADER: &str =
    " SEQ  EVENT                  SUB-TYPE           OPERATION                    DETAILS";

/// One timeline event as a table row, details cut to fit a terminal line.
pub fn timeline_row(e: &siesta_api::TimelineEventView) -> String {
    let sub = e.sub_type.map(|s| format!("{s:?}")).unwrap_or_default();
    let op = e.id.clone().or_else(|| e.name.clone()).unwrap_or_default();
    let mut details = e.details.as_ref().map(Value::to_string).unwrap_or_default();
    if details.chars().count() > 80 {
        // Cut on a character boundary: details may hold any UTF-8.
        details = details.chars().take(77).collect::<String>() + "...";
    }
    format!(
        "{:>4}  {:<22} {:<18} {:<28} {details}",
        e.seq,
        format!("{:?}", e.event_type),
        sub,
        op
    )
}

/// `GET /builds` as a table: one line per build, the serving one marked `*`, whether it
/// is still deployed (`yes`, `no`, `?` when unknown), its unfinished runs by status (`-`
/// when none), first and last seen in local time.
pub fn builds_table(body: &Value) -> String {
    let mut out = format!(
        "{:<44} {:<7} {:<8} {:<32} {:<26} {:<26}\n",
        "BUILD", "SERVING", "DEPLOYED", "UNFINISHED", "FIRST SEEN", "LAST SEEN"
    );
    for build in body["builds"].as_array().into_iter().flatten() {
        let unfinished: Vec<String> = build["unfinished"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(status, n)| format!("{n} {status}"))
            .collect();
        let unfinished = if unfinished.is_empty() {
            "-".to_owned()
        } else {
            unfinished.join(", ")
        };
        let seen = |key: &str| api_time(&build[key]).map_or_else(|| "-".to_owned(), local_time);
        let deployed = match build["deployed"].as_bool() {
            Some(true) => "yes",
            Some(false) => "no",
            None => "?",
        };
        out.push_str(&format!(
            "{:<44} {:<7} {:<8} {:<32} {:<26} {:<26}\n",
            build["build_id"].as_str().unwrap_or(""),
            if build["serving"] == true { "*" } else { "" },
            deployed,
            unfinished,
            seen("first_seen"),
            seen("last_seen"),
        ));
    }
    out
}

/// What a queued run waits for, in words: `queued for per-customer "acme", 2nd in
/// line`, `queued for its turn under provider "a" at 2027-01-15T09:00:00Z`, or
/// `gathered by order-updates "o-1" (3 starts), begins at …`; `None` when the view
/// carries no `queued`.
pub fn queued_note(queued: &Value) -> Option<String> {
    let key = queued["key"].as_str().unwrap_or("");
    let key = if key.is_empty() {
        String::new()
    } else {
        format!(" {key:?}")
    };
    let next_at = queued["next_at"].as_str();
    if let Some(debounce) = queued["debounce"].as_str() {
        let starts = queued["starts"].as_u64().unwrap_or(1);
        let at = next_at.map_or_else(String::new, |t| format!(", begins at {t}"));
        return Some(format!(
            "gathered by {debounce}{key} ({starts} start{}){at}",
            if starts == 1 { "" } else { "s" }
        ));
    }
    let limit = queued["limit"].as_str()?;
    if let Some(at) = next_at {
        return Some(format!("queued for its turn under {limit}{key} at {at}"));
    }
    let place = match queued["position"].as_u64() {
        Some(1) => ", next in line".to_owned(),
        Some(n) => format!(", place {n} in line"),
        None => String::new(),
    };
    Some(format!("queued for {limit}{key}{place}"))
}

/// What follows a queued run's note in `siesta runs show`: when it begins.
fn queued_outcome(queued: &Value) -> &'static str {
    if queued["debounce"].is_string() {
        "it begins then, unless another start of the key joins it first (each moves it a period on, up to the debounce's maximum delay)"
    } else if queued["next_at"].is_string() {
        "it begins at its turn"
    } else {
        "it starts when a run holding the key finishes (`siesta runs limits` shows who holds it)"
    }
}

/// The `runs limits` table: a row per key in use, and a row for a limit none uses.
pub fn limits_table(body: &Value) -> String {
    let mut out = format!(
        "{:<24} {:<32} {:>5} {:>8} {:>8}  {}\n",
        "LIMIT", "KEY", "MAX", "HOLDERS", "WAITERS", "WORKFLOWS"
    );
    for limit in body["limits"].as_array().into_iter().flatten() {
        let name = limit["name"].as_str().unwrap_or("");
        let max = limit["max"]
            .as_u64()
            .map_or_else(|| "-".to_owned(), |m| m.to_string());
        let workflows: Vec<&str> = limit["workflows"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let workflows = workflows.join(",");
        let keys = limit["keys"].as_array().cloned().unwrap_or_default();
        if keys.is_empty() {
            out.push_str(&format!(
                "{name:<24} {:<32} {max:>5} {:>8} {:>8}  {workflows}\n",
                "-", 0, 0
            ));
        }
        for key in keys {
            out.push_str(&format!(
                "{name:<24} {:<32} {max:>5} {:>8} {:>8}  {workflows}\n",
                key["key"]
                    .as_str()
                    .filter(|k| !k.is_empty())
                    .unwrap_or("(all)"),
                key["holders"].as_u64().unwrap_or(0),
                key["waiters"].as_u64().unwrap_or(0),
            ));
        }
    }
    out
}

fn paint_status(status: &str) -> String {
    if !std::io::stdout().is_terminal() {
        return format!("{status:<10}");
    }
    let colour = match status {
        "completed" => "32",
        "failed" | "parked" => "31",
        "cancelled" => "90",
        "waiting" | "queued" | "paused" => "33",
        _ => "36",
    };
    format!("\x1b[{colour}m{status:<10}\x1b[0m")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_shown_in_a_time_zone_with_its_offset() {
        let paris_winter = chrono::FixedOffset::east_opt(3600).unwrap();
        assert_eq!(
            time_in(1_795_484_474_441, &paris_winter),
            "2026-11-24 02:41:14 +01:00"
        );
        assert_eq!(
            time_in(0, &chrono::FixedOffset::west_opt(5 * 3600).unwrap()),
            "1969-12-31 19:00:00 -05:00"
        );
    }

    #[test]
    fn api_times_are_read_as_rfc_3339_and_anything_else_is_no_time() {
        use serde_json::json;
        assert_eq!(
            api_time(&json!("2027-01-15T08:00:00.123Z")),
            Some(1_800_000_000_123)
        );
        assert_eq!(
            api_time(&json!(1_800_000_000_123_i64)),
            Some(1_800_000_000_123)
        );
        assert_eq!(api_time(&json!("soon")), None);
        assert_eq!(api_time(&Value::Null), None);
    }

    #[test]
    fn the_builds_table_marks_the_serving_build_and_counts_unfinished_runs_by_status() {
        use serde_json::json;
        let table = builds_table(&json!({
            "serving": "shop@0.1.1+new",
            "builds": [
                {"build_id": "shop@0.1.1+new", "serving": true, "deployed": true,
                 "unfinished": {}, "first_seen": null, "last_seen": null},
                {"build_id": "shop@0.1.0+old", "serving": false, "deployed": false,
                 "unfinished": {"parked": 1, "waiting": 3},
                 "first_seen": "2027-01-15T08:00:00.000Z", "last_seen": "2027-01-15T09:00:00.000Z"},
            ]
        }));
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 3, "{table}");
        assert!(lines[0].starts_with("BUILD"));
        assert!(lines[1].starts_with("shop@0.1.1+new"), "{table}");
        assert!(lines[1].contains(" * "), "{table}");
        assert!(lines[1].contains(" yes "), "{table}");
        assert!(lines[2].contains(" no "), "{table}");
        assert!(lines[2].contains("1 parked, 3 waiting"), "{table}");
        assert!(lines[2].contains("2027-01-15"), "{table}");
    }

    #[test]
    fn a_queued_run_says_which_limit_key_and_place_it_waits_for() {
        let queued = serde_json::json!({"limit": "per-customer", "key": "acme", "position": 2});
        assert_eq!(
            queued_note(&queued).unwrap(),
            "queued for per-customer \"acme\", place 2 in line"
        );
        let next = serde_json::json!({"limit": "total", "key": "", "position": 1});
        assert_eq!(
            queued_note(&next).unwrap(),
            "queued for total, next in line"
        );
        assert_eq!(queued_note(&Value::Null), None);
    }

    #[test]
    fn a_run_held_for_an_instant_says_by_what_and_when_it_begins() {
        let rate =
            serde_json::json!({"limit": "provider", "key": "a", "next_at": "2027-01-15T09:00:01Z"});
        assert_eq!(
            queued_note(&rate).unwrap(),
            "queued for its turn under provider \"a\" at 2027-01-15T09:00:01Z"
        );
        let gathered = serde_json::json!({"debounce": "order-updates", "key": "o-1", "starts": 3,
            "next_at": "2027-01-15T09:00:10Z"});
        assert_eq!(
            queued_note(&gathered).unwrap(),
            "gathered by order-updates \"o-1\" (3 starts), begins at 2027-01-15T09:00:10Z"
        );
        assert!(queued_outcome(&gathered).contains("joins it"));
        assert_eq!(queued_outcome(&rate), "it begins at its turn");
    }

    #[test]
    fn the_limits_table_has_a_row_per_key_in_use_and_one_for_an_idle_limit() {
        let body = serde_json::json!({"limits": [
            {"name": "idle", "scope": "runs", "max": 3, "key": "none", "workflows": ["job"], "keys": []},
            {"name": "per-customer", "scope": "runs", "max": 1, "key": "input:/customer",
             "workflows": ["per_customer"], "keys": [{"key": "acme", "holders": 1, "waiters": 2}]},
        ]});
        let table = limits_table(&body);
        let rows: Vec<Vec<&str>> = table
            .lines()
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert_eq!(rows.len(), 3, "{table}");
        assert_eq!(rows[1], vec!["idle", "-", "3", "0", "0", "job"]);
        assert_eq!(
            rows[2],
            vec!["per-customer", "acme", "1", "1", "2", "per_customer"]
        );
    }

    #[test]
    fn durations_read_as_a_person_would_say_them() {
        assert_eq!(human_duration(-5), "0 ms");
        assert_eq!(human_duration(350), "350 ms");
        assert_eq!(human_duration(2_414), "2.41 s");
        assert_eq!(human_duration(42_000), "42.0 s");
        assert_eq!(human_duration(200_000), "3 min 20 s");
        assert_eq!(human_duration(3_900_000), "1 h 5 min");
        assert_eq!(human_duration(183_600_000), "2 d 3 h");
    }

    #[test]
    fn a_run_is_finished_only_once_it_completed_failed_or_was_cancelled() {
        let waiting = serde_json::json!({"status": "waiting",
            "created_at": "1970-01-01T00:00:01.000Z", "updated_at": "1970-01-01T00:00:05.000Z"});
        let times = RunTimes::of(&waiting);
        assert_eq!(times.started, Some(1000));
        assert_eq!(times.finished, None);
        assert_eq!(times.duration(3_500), "2.50 s…");
        let done = serde_json::json!({"status": "completed",
            "created_at": "1970-01-01T00:00:01.000Z", "updated_at": "1970-01-01T00:00:01.350Z"});
        assert_eq!(RunTimes::of(&done).finished, Some(1350));
        assert_eq!(RunTimes::of(&done).duration(99_999), "350 ms");
    }

    /// A server that records each request (path as sent, `If-Match`, body) and answers
    /// with `status` and `answer`.
    async fn recording_server(
        status: u16,
        answer: Value,
    ) -> (
        String,
        tokio::sync::mpsc::UnboundedReceiver<(String, Option<String>, Value)>,
    ) {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let app = axum::Router::new().fallback(move |request: axum::extract::Request| {
            let tx = tx.clone();
            let answer = answer.clone();
            async move {
                let path = request.uri().path().to_owned();
                let if_match = request
                    .headers()
                    .get("if-match")
                    .map(|v| v.to_str().unwrap().to_owned());
                let bytes = axum::body::to_bytes(request.into_body(), usize::MAX)
                    .await
                    .unwrap();
                tx.send((
                    path,
                    if_match,
                    serde_json::from_slice(&bytes).unwrap_or(Value::Null),
                ))
                .unwrap();
                (
                    axum::http::StatusCode::from_u16(status).unwrap(),
                    axum::Json(answer),
                )
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        (url, rx)
    }

    /// A run view (what the typed client decodes) in `status`.
    fn run_view(status: &str) -> Value {
        serde_json::json!({
            "id": "run-1", "workflow": "pay", "tenant": "default", "status": status,
            "version": 3, "input": null, "cancel_requested": false,
            "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:01Z",
        })
    }

    fn remote(url: String) -> Remote {
        Remote {
            url,
            api_key: None,
            json: true,
        }
    }

    #[tokio::test]
    async fn runs_stream_reads_pages_from_the_offset_asked_until_the_stream_is_closed() {
        let (url, mut seen) = recording_server(
            200,
            serde_json::json!({"chunks": [{"offset": 4, "kind": "data", "data": "lo", "at": "2026-01-01T00:00:00Z"}], "next": 5, "closed": true}),
        )
        .await;
        remote(url).stream("run/1", "tokens", 4).await.unwrap();
        let (path, _, _) = seen.recv().await.unwrap();
        assert_eq!(path, "/runs/run%2F1/streams/tokens");
        assert!(
            seen.try_recv().is_err(),
            "a closed stream is not read again"
        );
    }

    #[tokio::test]
    async fn runs_resolve_posts_each_outcome_to_the_operations_encoded_position() {
        let (url, mut seen) = recording_server(202, run_view("pending")).await;
        let remote = remote(url);
        let cases = [
            (
                Outcome::succeeded(r#"{"receipt": "r-9"}"#).unwrap(),
                serde_json::json!({"outcome": "succeeded", "value": {"receipt": "r-9"}}),
            ),
            (
                Outcome::Failed("the bank refused".into()),
                serde_json::json!({"outcome": "failed", "error": {"message": "the bank refused"}}),
            ),
            (Outcome::Retry, serde_json::json!({"outcome": "retry"})),
        ];
        for (outcome, body) in cases {
            remote
                .resolve("run-1", "pay/charge#0", outcome, Some(7))
                .await
                .unwrap();
            let (path, if_match, sent) = seen.recv().await.unwrap();
            assert_eq!(path, "/runs/run-1/operations/pay%2Fcharge%230/resolve");
            assert_eq!(if_match.as_deref(), Some("\"7\""));
            assert_eq!(sent, body);
        }
        remote
            .resolve("run-1", "charge#0", Outcome::Retry, None)
            .await
            .unwrap();
        assert_eq!(
            seen.recv().await.unwrap().1,
            None,
            "no If-Match unless asked"
        );
    }

    #[tokio::test]
    async fn runs_resolve_reports_the_servers_refusal() {
        let (url, _seen) = recording_server(
            409,
            serde_json::json!({"error": {"code": "nothing_to_resolve", "message": "not a tool call whose outcome is unknown"}}),
        )
        .await;
        let e = remote(url)
            .resolve("run-1", "prepare#0", Outcome::Retry, None)
            .await
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "409 Conflict: not a tool call whose outcome is unknown"
        );
    }

    #[tokio::test]
    async fn runs_dead_letters_follows_every_cursor_and_redrive_posts_one_or_all() {
        let (tx, mut seen) = tokio::sync::mpsc::unbounded_channel::<(String, Option<String>)>();
        let app = axum::Router::new().fallback(move |request: axum::extract::Request| {
            let tx = tx.clone();
            async move {
                let uri = request.uri().to_string();
                let if_match = request
                    .headers()
                    .get("if-match")
                    .map(|v| v.to_str().unwrap().to_owned());
                tx.send((uri.clone(), if_match)).unwrap();
                let letter = |id: &str| {
                    serde_json::json!({"run_id": id, "workflow": "quick", "version": 3,
                        "parked_at": "2026-11-24T08:00:00.000Z", "reason": "dead-lettered"})
                };
                axum::Json(match uri.as_str() {
                    "/dead-letters?limit=200" => serde_json::json!({
                        "dead_letters": [letter("run-1")], "next_cursor": "0a1b"}),
                    "/dead-letters?cursor=0a1b&limit=200" => {
                        serde_json::json!({"dead_letters": [letter("run-2")]})
                    }
                    "/dead-letters/redrive" => {
                        serde_json::json!({"redriven": 2, "run_ids": ["run-1", "run-2"]})
                    }
                    _ => run_view("pending"),
                })
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        let remote = remote(url);

        // Each request is recorded before it is answered, so once a call returns what
        // it sent is in the channel.
        remote.dead_letters().await.unwrap();
        assert_eq!(seen.try_recv().unwrap().0, "/dead-letters?limit=200");
        assert_eq!(
            seen.try_recv().unwrap().0,
            "/dead-letters?cursor=0a1b&limit=200",
            "the next page, through the cursor as given"
        );
        remote.redrive(Some("run-1"), Some(3)).await.unwrap();
        assert_eq!(
            seen.try_recv().unwrap(),
            (
                "/dead-letters/run-1/redrive".to_owned(),
                Some("\"3\"".to_owned())
            )
        );
        remote.redrive(None, None).await.unwrap();
        assert_eq!(
            seen.try_recv().unwrap(),
            ("/dead-letters/redrive".to_owned(), None)
        );
        assert!(seen.try_recv().is_err(), "nothing else sent");
    }

    #[tokio::test]
    async fn runs_upgrade_posts_one_run_or_a_whole_build_and_fails_when_runs_diverge() {
        let (tx, mut seen) = tokio::sync::mpsc::unbounded_channel::<(String, Option<String>)>();
        let app = axum::Router::new().fallback(move |request: axum::extract::Request| {
            let tx = tx.clone();
            async move {
                let path = request.uri().path().to_owned();
                let if_match = request
                    .headers()
                    .get("if-match")
                    .map(|v| v.to_str().unwrap().to_owned());
                tx.send((path.clone(), if_match)).unwrap();
                axum::Json(if path.starts_with("/builds/") {
                    serde_json::json!({"from": "app@a", "to": "app@b", "upgraded": ["run-1"],
                        "diverged": [{"run_id": "run-2", "divergence": {"position": "triage#0",
                            "journal_kind": "step", "code_kind": "step", "message": "..."}}],
                        "skipped": []})
                } else {
                    let mut run = run_view("waiting");
                    run["build_id"] = "app@b".into();
                    run
                })
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        let remote = remote(url);

        remote.upgrade("run-1", Some(4)).await.unwrap();
        assert_eq!(
            seen.try_recv().unwrap(),
            ("/runs/run-1/upgrade".to_owned(), Some("\"4\"".to_owned()))
        );
        let e = remote.upgrade_build("app@0.1.0+abc").await.unwrap_err();
        assert!(e.to_string().contains("1 run(s)"), "{e}");
        assert_eq!(
            seen.try_recv().unwrap().0,
            "/builds/app%400.1.0%2Babc/upgrade",
            "the build id is one encoded path segment"
        );
    }

    #[test]
    fn a_succeeded_value_that_is_not_json_is_refused_before_anything_is_sent() {
        let e = Outcome::succeeded("charged").unwrap_err();
        assert!(e.to_string().contains("--succeeded takes"), "{e}");
        assert_eq!(
            Outcome::succeeded("\"charged\"").unwrap(),
            Outcome::Succeeded(Value::from("charged"))
        );
    }

    #[test]
    fn long_details_are_cut_on_a_character_boundary() {
        let event = siesta::TimelineEvent::execution_started(
            siesta::Timestamp(0),
            "order",
            serde_json::json!({"Item": "☕".repeat(100)}),
        );
        let row = timeline_row(&siesta_api::timeline_event_view("r", event));
        assert!(row.ends_with("..."), "{row}");
        assert!(row.starts_with("   1  ExecutionStarted"), "{row}");
    }
}
