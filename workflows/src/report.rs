//! The `report` workflow: fetch an issue, search the knowledge base, write a Markdown
//! report as an artifact, and notify the team with an HTTP POST — a real side effect
//! that a crash and replay never repeat.
//!
//! Input: `{"issue": string, "notify"?: string}` (`notify` names a configured target;
//! any other field, a `notify_url` included, is refused). Output:
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
//! # Where the notification goes — configuration only
//! The workflow posts only to URLs the deployment configured, never to one a run's
//! input names: a caller who could choose the URL could make the worker send requests
//! to internal services (SSRF) and read what they answer. The configured targets (an
//! allow-list, [`NotifyTargets::from_env`]) are
//! - `SIESTA_NOTIFY_URL`: the default target, used when the input names none;
//! - `SIESTA_NOTIFY_TARGETS`: more named targets, `name=url` pairs separated by commas
//!   (`ops=https://ops.example/hooks/report,sales=https://sales.example/notify`),
//!   chosen with the input's `notify`.
//!
//! No default target, or `"notify": ""`: nothing is posted and the output says
//! `"notified": false`. A `notify` that names no configured target fails the run before
//! anything is fetched. Apps and tests pass the targets directly
//! ([`report_with`]), which keeps process-global variables out of tests.
//!
//! # What a caller can see of the receiver
//! Nothing the receiver says. A run's error (readable by whoever started it) carries
//! the target's name, the HTTP status and a fixed phrase, never the response body, a
//! header or the transport's own error text; those go to the worker's log.
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

use std::collections::BTreeMap;

use futures::future::BoxFuture;
use sha2::{Digest, Sha256};
use siesta::prelude::*;

/// The environment variable naming the default notify target's URL.
pub const NOTIFY_URL_ENV: &str = "SIESTA_NOTIFY_URL";
/// The environment variable listing further notify targets: `name=url,name=url`.
pub const NOTIFY_TARGETS_ENV: &str = "SIESTA_NOTIFY_TARGETS";
/// The name of the target `SIESTA_NOTIFY_URL` configures.
pub const DEFAULT_TARGET: &str = "default";

/// The header that carries the tool call's idempotency key.
pub const IDEMPOTENCY_HEADER: &str = "Idempotency-Key";

/// How long one HTTP request to the receiver may take in all.
const HTTP_TIMEOUT: Duration = Duration::from_secs(10);
/// How long connecting to the receiver may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The input of the `report` workflow. Unknown fields are refused, so an input that
/// tries to name a URL fails loudly instead of being quietly ignored.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReportInput {
    /// The issue to report on: an id (`SIESTA-42`) or a short description.
    pub issue: String,
    /// The configured notify target to tell (see [`NotifyTargets`]); absent for the
    /// default one, empty for none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notify: Option<String>,
}

/// The notify targets a deployment allows, by name: the only places `report` posts to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NotifyTargets {
    targets: BTreeMap<String, String>,
}

impl NotifyTargets {
    /// No targets: nothing is ever posted.
    pub fn none() -> Self {
        NotifyTargets::default()
    }

    /// With the target `name` at `url` (a trailing `/` dropped; an empty URL is no
    /// target).
    pub fn with(mut self, name: &str, url: &str) -> Self {
        let url = url.trim().trim_end_matches('/');
        if !url.is_empty() {
            self.targets.insert(name.trim().to_owned(), url.to_owned());
        }
        self
    }

    /// The targets `SIESTA_NOTIFY_URL` and `SIESTA_NOTIFY_TARGETS` configure (module
    /// docs); an entry of the latter that is not `name=url` is an error naming it.
    pub fn from_env() -> Result<Self, String> {
        let get = |name| std::env::var(name).unwrap_or_default();
        NotifyTargets::parse(&get(NOTIFY_URL_ENV), &get(NOTIFY_TARGETS_ENV))
    }

    /// [`NotifyTargets::from_env`] over the two values given.
    pub fn parse(default_url: &str, named: &str) -> Result<Self, String> {
        let mut targets = NotifyTargets::none().with(DEFAULT_TARGET, default_url);
        for entry in named.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            match entry.split_once('=') {
                Some((name, url)) if !name.trim().is_empty() && !url.trim().is_empty() => {
                    targets = targets.with(name, url);
                }
                _ => {
                    return Err(format!("{NOTIFY_TARGETS_ENV}: '{entry}' is not name=url"));
                }
            }
        }
        Ok(targets)
    }

    /// The URL of the target `name` (the default one for `None`); `Ok(None)` when there
    /// is nothing to tell, an error when `name` is not configured.
    fn resolve(&self, name: Option<&str>) -> Result<Option<(String, String)>, String> {
        match name.map(str::trim) {
            Some("") => Ok(None),
            None => Ok(self
                .targets
                .get(DEFAULT_TARGET)
                .map(|url| (DEFAULT_TARGET.to_owned(), url.clone()))),
            Some(name) => match self.targets.get(name) {
                Some(url) => Ok(Some((name.to_owned(), url.clone()))),
                None => Err(format!(
                    "no notify target '{name}' is configured (configured: {})",
                    self.names()
                )),
            },
        }
    }

    fn names(&self) -> String {
        if self.targets.is_empty() {
            return "none".to_owned();
        }
        self.targets.keys().cloned().collect::<Vec<_>>().join(", ")
    }
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

/// The `report` workflow posting to `targets` only: what an app registers
/// (`registry.register("report", report_with(targets))`).
pub fn report_with(
    targets: NotifyTargets,
) -> impl Fn(Context, ReportInput) -> BoxFuture<'static, Result<ReportOutcome, Error>>
+ Send
+ Sync
+ 'static {
    move |ctx, input| Box::pin(report(ctx, input, targets.clone()))
}

/// Fetch the issue, search the knowledge base, store the report as an artifact and
/// notify the team. See the [module docs](self) for the notify endpoint's contract.
pub async fn report(
    ctx: Context,
    input: ReportInput,
    targets: NotifyTargets,
) -> Result<ReportOutcome, Error> {
    let issue_ref = input.issue.trim().to_owned();
    if issue_ref.is_empty() {
        return Err(Error::msg("a report needs an issue"));
    }
    let target = targets
        .resolve(input.notify.as_deref())
        .map_err(Error::msg)?;
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
    let post_target = target.clone();
    let lookup_target = target;
    let notification: Notification = ctx
        .tool_call("notify_team", &notice, move |call| {
            notify(post_target, body, call)
        })
        .retry(RetryStrategy::exponential(6))
        .lookup(move |key| async move {
            match lookup_target {
                Some((name, url)) => lookup_notice(&name, &url, key.as_str()).await,
                // Nothing could have been posted without a target: calling again is safe.
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

/// The body of the `notify_team` tool call: skip without a URL; on a retry, ask the
/// receiver first whether an earlier attempt got through; otherwise POST.
async fn notify(
    target: Option<(String, String)>,
    notice: Notice,
    call: StepContext,
) -> Result<Notification, StepError> {
    let Some((name, url)) = target else {
        return Ok(Notification {
            notified: false,
            status: None,
            detail: "no notify target; nothing was posted".to_owned(),
        });
    };
    let key = call
        .idempotency_key()
        .map(|k| k.to_string())
        .ok_or_else(|| StepError::fatal("a tool call without an idempotency key"))?;
    // Before a retry the engine has already asked `lookup_notice` whether an earlier
    // attempt got through, so reaching here means it did not.
    post_notice(&name, &url, &key, call.traceparent().as_deref(), &notice).await
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

/// `POST {url}` the notice with its idempotency key, and the attempt's `traceparent`
/// when spans are exported: the receiver's spans join the run's trace, under this
/// attempt.
async fn post_notice(
    name: &str,
    url: &str,
    key: &str,
    traceparent: Option<&str>,
    notice: &Notice,
) -> Result<Notification, StepError> {
    let mut request = client()?.post(url).header(IDEMPOTENCY_HEADER, key);
    if let Some(traceparent) = traceparent {
        request = request.header("traceparent", traceparent);
    }
    let response = request
        .json(notice)
        .send()
        .await
        .map_err(|e| transport_error("POST", name, e))?;
    let status = response.status().as_u16();
    if response.status().is_success() {
        return Ok(Notification {
            notified: true,
            status: Some(status),
            detail: format!("posted to notify target '{name}' (HTTP {status})"),
        });
    }
    // The body is not read: whatever the receiver says stays out of the run's error.
    Err(StepError::from_http_status(
        status,
        refused("POST", name, status),
    ))
}

/// The caller-visible summary of a refusal: target, status and a fixed phrase.
fn refused(method: &str, name: &str, status: u16) -> String {
    format!("{method} to notify target '{name}': HTTP {status} from the receiver")
}

/// Ask the receiver whether it accepted a notice with idempotency key `key`:
/// `GET {url}/{key}`, 2xx → `Some` (it did), 404 → `None` (it did not). The tool
/// call's lookup after a crash, and the check before every retry.
pub async fn lookup_notice(
    name: &str,
    url: &str,
    key: &str,
) -> Result<Option<Notification>, StepError> {
    let target = format!("{}/{key}", url.trim_end_matches('/'));
    let response = client()?
        .get(&target)
        .send()
        .await
        .map_err(|e| transport_error("GET", name, e))?;
    let status = response.status().as_u16();
    match status {
        200..=299 => Ok(Some(Notification {
            notified: true,
            status: Some(status),
            detail: format!("notify target '{name}' already had the notice (key {key})"),
        })),
        404 => Ok(None),
        _ => Err(StepError::from_http_status(
            status,
            refused("GET", name, status),
        )),
    }
}

/// A request that got no response: a timeout or a connection error is worth another
/// attempt; a request that could not even be built (a malformed URL) is not. The
/// transport's own words (addresses, resolver and TLS details) go to the log only.
fn transport_error(method: &str, name: &str, e: reqwest::Error) -> StepError {
    tracing::warn!(target: "siesta::workflow", notify_target = name, error = %chain(&e), "{method} to the notify target failed");
    let message = |what: &str| format!("{method} to notify target '{name}': {what}");
    if e.is_timeout() {
        StepError::timeout(message("timed out"))
    } else if e.is_builder() {
        StepError::new("http_request", message("not a usable URL"), false)
    } else {
        StepError::new("http_connection", message("could not connect"), true)
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
    fn targets_come_from_configuration_and_an_unknown_name_is_refused() {
        let targets =
            NotifyTargets::parse("http://x/notify/", "ops = http://ops/n, sales=http://s/")
                .unwrap();
        let url = |name: Option<&str>| targets.resolve(name).map(|t| t.map(|(_, u)| u));
        assert_eq!(url(None), Ok(Some("http://x/notify".to_owned())));
        assert_eq!(url(Some("ops")), Ok(Some("http://ops/n".to_owned())));
        assert_eq!(url(Some("")), Ok(None), "an empty name turns it off");
        let e = url(Some("http://169.254.169.254/latest")).unwrap_err();
        assert!(e.contains("configured: default, ops, sales"), "{e}");

        let none = NotifyTargets::parse("", "").unwrap();
        assert_eq!(none.resolve(None), Ok(None), "no default target: no post");
        assert!(
            NotifyTargets::parse("", "ops")
                .unwrap_err()
                .contains("'ops' is not name=url")
        );
    }

    #[test]
    fn an_input_naming_a_url_is_refused() {
        let e = serde_json::from_value::<ReportInput>(
            serde_json::json!({"issue": "x", "notify_url": "http://internal/admin"}),
        )
        .unwrap_err();
        assert!(e.to_string().contains("notify_url"), "{e}");
    }
}
