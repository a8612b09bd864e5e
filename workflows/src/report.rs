//! The `report` workflow: fetch an issue, search the knowledge base, write a Markdown
//! report as an artifact, and notify the team with an HTTP POST — a real side effect
//! that a crash and replay never repeat.
//!
//! Input: `{"issue": string, "notify_url"?: string}`. Output:
//! `{"issue": string, "artifact": {"sha256", "size", "media_type", "location"},
//! "notified": bool}`.
//!
//! 1. step `fetch_issue` — a deterministic, fake issue record derived from the input
//!    (no network), so the example runs anywhere;
//! 2. step `search_knowledge_base` — deterministic, fake hits;
//! 3. [`put_artifact`](siesta::Context::put_artifact) `report` — the Markdown report,
//!    content-addressed by SHA-256;
//! 4. tool call `notify_team` — `POST` a [`Notice`] to the notify endpoint.
//!
//! # Where the notification goes
//! The endpoint is the input's `notify_url` when present, else the environment variable
//! [`SIESTA_NOTIFY_URL`](NOTIFY_URL_ENV), read **inside** the tool call (so the value
//! used is the one journaled with the call's outcome, not one read at replay). An empty
//! or missing URL skips the POST; the output then says `"notified": false`. The input
//! override exists so that tests (and multi-team deployments) need not touch a
//! process-global variable; `"notify_url": ""` turns notification off for one run.
//!
//! # The receiver's contract
//! - `POST {url}` with the JSON body [`Notice`] (`{"run_id", "issue",
//!   "artifact_sha256"}`) and the header `Idempotency-Key: idem_<64 hex>`: the tool
//!   call's key, derived from tenant, run, position and the notice, so every attempt
//!   and every replay of this notification carries the same key. Any 2xx accepts it.
//!   408, 429 and 5xx are retried on a durable timer (up to 6 attempts, exponential
//!   backoff); any other status is fatal and fails the run; connection errors and
//!   timeouts are retried.
//! - `GET {url}/{key}` answers whether a POST with that key was accepted: **200** if it
//!   was, **404** if it was not. Any other status is classified as above.
//! - The receiver should also accept a repeated POST with a key it already has without
//!   acting twice (it stores the keys for the `GET` anyway): a response lost in
//!   flight, or a POST still being processed when the next attempt asks, can otherwise
//!   bring the same notice twice.
//!
//! # Why a crash never posts twice
//! The engine records the call `running` (with its key) before the POST and
//! `succeeded`/`failed` after. A run that crashed in between finds `running` when it
//! replays and asks the receiver with the `GET` above (the tool call's
//! [`lookup`](siesta::context::ToolCallBuilder::lookup)): 200 settles the call as
//! done without posting, 404 means the POST never arrived and it is made now. Every
//! retry after a failed attempt asks the same question before posting again, in case
//! the failed attempt's POST did arrive (a timeout after the receiver had accepted it).

use std::time::Duration;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use siesta::context::StepContext;
use siesta::{ArtifactRef, Context, Error, RetryStrategy, StepError};

/// The environment variable naming the notify endpoint.
pub const NOTIFY_URL_ENV: &str = "SIESTA_NOTIFY_URL";

/// The header that carries the tool call's idempotency key.
pub const IDEMPOTENCY_HEADER: &str = "Idempotency-Key";

/// How long one HTTP request to the receiver may take in all.
const HTTP_TIMEOUT: Duration = Duration::from_secs(10);
/// How long connecting to the receiver may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The input of the `report` workflow.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReportInput {
    /// The issue to report on: an id (`SIESTA-42`) or a short description.
    pub issue: String,
    /// Where to POST the notice; overrides `SIESTA_NOTIFY_URL`. An empty string turns
    /// notification off for this run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notify_url: Option<String>,
}

/// The issue record `fetch_issue` returns (fake, derived from the input).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Issue {
    /// The tracker's key, e.g. `ISSUE-4711`.
    pub key: String,
    /// The issue's title: the input, trimmed.
    pub title: String,
    /// The component it is filed against.
    pub component: String,
    /// `P1`, `P2` or `P3`.
    pub priority: String,
    /// Who filed it.
    pub reporter: String,
}

/// One knowledge-base article `search_knowledge_base` found (fake).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KnowledgeHit {
    /// The article's id, e.g. `KB-1234`.
    pub id: String,
    /// The article's title.
    pub title: String,
    /// Relevance in thousandths (1000 = perfect match).
    pub score: u32,
}

/// What the team is told: the POST body, and the tool call's payload (so its
/// idempotency key is derived from it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Notice {
    /// The run that wrote the report.
    pub run_id: String,
    /// The issue, as given in the input.
    pub issue: String,
    /// The SHA-256 of the report artifact.
    pub artifact_sha256: String,
}

/// The outcome of the `notify_team` tool call, as journaled.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Notification {
    /// Whether the receiver has the notice.
    pub notified: bool,
    /// The HTTP status that settled it (the POST's, or the lookup's), if any.
    pub status: Option<u16>,
    /// What happened, for a person.
    pub detail: String,
}

/// The outcome of a `report` run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReportOutcome {
    /// The issue, as given in the input.
    pub issue: String,
    /// The Markdown report.
    pub artifact: ArtifactRef,
    /// Whether the team was notified (false when no notify URL is configured).
    pub notified: bool,
}

/// Fetch the issue, search the knowledge base, store the report as an artifact and
/// notify the team. See the [module docs](self) for the notify endpoint's contract.
pub async fn report(ctx: Context, input: ReportInput) -> Result<ReportOutcome, Error> {
    let issue_ref = input.issue.trim().to_owned();
    if issue_ref.is_empty() {
        return Err(Error::msg("a report needs an issue"));
    }
    let query = issue_ref.clone();
    let issue: Issue = ctx
        .step(
            "fetch_issue",
            move |_| async move { Ok(fake_issue(&query)) },
        )
        .await?;
    let found = issue.clone();
    let hits: Vec<KnowledgeHit> = ctx
        .step("search_knowledge_base", move |_| async move {
            Ok(fake_search(&found))
        })
        .await?;
    let markdown = render_report(&issue, &hits);
    let artifact = ctx
        .put_artifact("report", markdown.into_bytes(), "text/markdown")
        .await?;
    let notice = Notice {
        run_id: ctx.run_id().to_string(),
        issue: issue_ref.clone(),
        artifact_sha256: artifact.sha256.clone(),
    };
    let body = notice.clone();
    let post_url = input.notify_url.clone();
    let lookup_url = input.notify_url;
    let notification: Notification = ctx
        .tool_call("notify_team", &notice, move |call| {
            notify(post_url, body, call)
        })
        .retry(RetryStrategy::exponential(6))
        .lookup(move |key| async move {
            match notify_url(lookup_url.as_deref()) {
                Some(url) => lookup_notice(&url, key.as_str()).await,
                // Nothing could have been posted without a URL: calling again is safe.
                None => Ok(None),
            }
        })
        .await?;
    ctx.log(format!(
        "report on '{issue_ref}' stored as {}; {}",
        artifact.sha256, notification.detail
    ));
    Ok(ReportOutcome {
        issue: issue_ref,
        artifact,
        notified: notification.notified,
    })
}

/// The notify endpoint: `override_url` when given, else `SIESTA_NOTIFY_URL`; `None`
/// when that is empty or unset. A trailing `/` is dropped.
pub fn notify_url(override_url: Option<&str>) -> Option<String> {
    let url = match override_url {
        Some(url) => url.to_owned(),
        None => std::env::var(NOTIFY_URL_ENV).unwrap_or_default(),
    };
    let url = url.trim().trim_end_matches('/');
    (!url.is_empty()).then(|| url.to_owned())
}

/// The body of the `notify_team` tool call: skip without a URL; on a retry, ask the
/// receiver first whether an earlier attempt got through; otherwise POST.
async fn notify(
    override_url: Option<String>,
    notice: Notice,
    call: StepContext,
) -> Result<Notification, StepError> {
    let Some(url) = notify_url(override_url.as_deref()) else {
        return Ok(Notification {
            notified: false,
            status: None,
            detail: format!("{NOTIFY_URL_ENV} is not set; nothing was posted"),
        });
    };
    let key = call
        .idempotency_key()
        .map(|k| k.to_string())
        .ok_or_else(|| StepError::fatal("a tool call without an idempotency key"))?;
    // Before a retry the engine has already asked `lookup_notice` whether an earlier
    // attempt got through, so reaching here means it did not.
    post_notice(&url, &key, &notice).await
}

fn client() -> Result<reqwest::Client, StepError> {
    // One client per call: a client's pool is bound to the runtime that first used it,
    // and a notification is one request (two on a retry).
    reqwest::Client::builder()
        .timeout(HTTP_TIMEOUT)
        .connect_timeout(CONNECT_TIMEOUT)
        .build()
        .map_err(|e| StepError::fatal(format!("building the HTTP client: {}", chain(&e))))
}

/// `POST {url}` the notice with its idempotency key.
async fn post_notice(url: &str, key: &str, notice: &Notice) -> Result<Notification, StepError> {
    let response = client()?
        .post(url)
        .header(IDEMPOTENCY_HEADER, key)
        .json(notice)
        .send()
        .await
        .map_err(|e| transport_error("POST", url, e))?;
    let status = response.status().as_u16();
    if response.status().is_success() {
        return Ok(Notification {
            notified: true,
            status: Some(status),
            detail: format!("posted to {url} (HTTP {status})"),
        });
    }
    let text = response.text().await.unwrap_or_default();
    let text: String = text.chars().take(200).collect();
    Err(StepError::from_http_status(
        status,
        format!("POST {url}: HTTP {status} {}", text.trim()),
    ))
}

/// Ask the receiver whether it accepted a notice with idempotency key `key`:
/// `GET {url}/{key}`, 2xx → `Some` (it did), 404 → `None` (it did not). The tool
/// call's lookup after a crash, and the check before every retry.
pub async fn lookup_notice(url: &str, key: &str) -> Result<Option<Notification>, StepError> {
    let target = format!("{}/{key}", url.trim_end_matches('/'));
    let response = client()?
        .get(&target)
        .send()
        .await
        .map_err(|e| transport_error("GET", &target, e))?;
    let status = response.status().as_u16();
    match status {
        200..=299 => Ok(Some(Notification {
            notified: true,
            status: Some(status),
            detail: format!("{url} already had the notice (idempotency key {key})"),
        })),
        404 => Ok(None),
        _ => Err(StepError::from_http_status(
            status,
            format!("GET {target}: HTTP {status}"),
        )),
    }
}

/// A request that got no response: a timeout or a connection error is worth another
/// attempt; a request that could not even be built (a malformed URL) is not.
fn transport_error(method: &str, url: &str, e: reqwest::Error) -> StepError {
    let message = format!("{method} {url}: {}", chain(&e));
    if e.is_timeout() {
        StepError::timeout(message)
    } else if e.is_builder() {
        StepError::new("http_request", message, false)
    } else {
        StepError::new("http_connection", message, true)
    }
}

/// An error and its sources, one line.
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

/// A number drawn deterministically from `seed`.
fn draw(seed: &str) -> u64 {
    let digest = Sha256::digest(seed.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(first)
}

/// The fake issue tracker: the same input always gives the same record.
fn fake_issue(issue: &str) -> Issue {
    const COMPONENTS: [&str; 4] = ["engine", "webhooks", "storage", "cli"];
    const REPORTERS: [&str; 3] = ["ada", "grace", "linus"];
    let n = draw(issue);
    Issue {
        key: format!("ISSUE-{}", 1000 + n % 9000),
        title: issue.to_owned(),
        component: COMPONENTS[(n >> 16) as usize % COMPONENTS.len()].to_owned(),
        priority: format!("P{}", 1 + (n >> 24) % 3),
        reporter: REPORTERS[(n >> 32) as usize % REPORTERS.len()].to_owned(),
    }
}

/// The fake knowledge base: three hits, best first, derived from the issue.
fn fake_search(issue: &Issue) -> Vec<KnowledgeHit> {
    let titles = [
        format!("Runbook: {} incidents", issue.component),
        format!("Known problems with {}", issue.title),
        format!("How {} retries and recovers", issue.component),
    ];
    titles
        .into_iter()
        .enumerate()
        .map(|(i, title)| {
            let n = draw(&format!("{}:{}:{i}", issue.key, title));
            KnowledgeHit {
                id: format!("KB-{}", 100 + n % 900),
                title,
                score: 950 - 150 * i as u32 - (n >> 16) as u32 % 50,
            }
        })
        .collect()
}

/// The report, in Markdown.
fn render_report(issue: &Issue, hits: &[KnowledgeHit]) -> String {
    let mut md = format!(
        "# {}: {}\n\n| Field | Value |\n|---|---|\n| Component | {} |\n| Priority | {} |\n| Reporter | {} |\n\n## Related knowledge\n\n",
        issue.key, issue.title, issue.component, issue.priority, issue.reporter
    );
    for (i, hit) in hits.iter().enumerate() {
        md.push_str(&format!(
            "{}. **{}** {} (relevance {}.{:03})\n",
            i + 1,
            hit.id,
            hit.title,
            hit.score / 1000,
            hit.score % 1000
        ));
    }
    let next = match hits.first() {
        Some(best) => format!("Start with {} ({}).", best.id, best.title),
        None => "No related articles; triage from scratch.".to_owned(),
    };
    md.push_str(&format!("\n## Next step\n\n{next}\n"));
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fake_records_are_deterministic() {
        assert_eq!(fake_issue("login times out"), fake_issue("login times out"));
        let issue = fake_issue("login times out");
        let hits = fake_search(&issue);
        assert_eq!(hits.len(), 3);
        assert!(hits.windows(2).all(|w| w[0].score > w[1].score));
        assert_eq!(render_report(&issue, &hits), render_report(&issue, &hits));
    }

    #[test]
    fn an_explicit_empty_url_turns_notification_off() {
        assert_eq!(notify_url(Some("")), None);
        assert_eq!(notify_url(Some("  ")), None);
        assert_eq!(
            notify_url(Some("http://x/notify/")).as_deref(),
            Some("http://x/notify")
        );
    }
}
