//! The public webhook receiver and its sources (the `/hooks/*` handlers are in
//! `routes/webhooks.rs`): `POST /hooks/{token}`, addressed by a callback's
//! capability token (no API key: the token is the credential), and
//! `POST /hooks/sources/{source}` for configured providers that cannot carry our URL:
//! their signature is verified over the raw body first, then a correlation id read from
//! the body (a JSON pointer) names the run, and the webhook is delivered to it as a named
//! event — kept if the run is not waiting for it yet. A source configured with a
//! `callback` pointer instead reads a callback's token from the body and completes that
//! callback with the verified body, as `/hooks/{token}` would (for a provider that is
//! handed the token as metadata and signs what it sends back).
//!
//! Order of checks, so that bad input changes nothing: size (413), route and token (404),
//! JSON (400), then one durable write (the delivery, deduplicated by its id), then 2xx,
//! then the wake-up. A delivery after the callback closed (completed, timed out) is 410.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use serde::Deserialize;
use siesta::*;
use siesta_webhook::{Scheme, Verifier};

/// A configured webhook source, as written in configuration (JSON).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceConfig {
    /// The `{source}` in `/hooks/sources/{source}`.
    pub name: String,
    /// The tenant whose runs it addresses (default `default`).
    #[serde(default = "default_tenant")]
    pub tenant: String,
    /// `standard-webhooks`, `stripe` or `github`.
    pub scheme: String,
    /// Active secrets (several during a rotation).
    pub secrets: Vec<String>,
    /// JSON pointer to the run id in the body, e.g. `/data/metadata/run_id`.
    /// Required unless `callback` is given.
    #[serde(default)]
    pub correlation: String,
    /// JSON pointer to a callback's token (id) in the body, e.g.
    /// `/data/metadata/callback_id`: the verified body completes that callback (of this
    /// source's tenant) instead of being delivered to a run as an event. Exclusive with
    /// `correlation` and `event`.
    #[serde(default)]
    pub callback: Option<String>,
    /// The event name delivered to the run (default: the source's name).
    #[serde(default)]
    pub event: Option<String>,
    /// Timestamp tolerance in seconds (default 300).
    #[serde(default)]
    pub tolerance_secs: Option<u64>,
}

fn default_tenant() -> String {
    "default".to_owned()
}

/// A webhook source ready to verify and route deliveries.
#[derive(Debug, Clone)]
pub struct WebhookSource {
    name: String,
    pub(crate) tenant: TenantId,
    pub(crate) verifier: Verifier,
    pub(crate) correlation: String,
    pub(crate) event: String,
    pub(crate) callback: Option<String>,
}

impl WebhookSource {
    /// The source's name: the `{source}` of `/hooks/sources/{source}`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The tenant whose runs and callbacks the source addresses.
    pub fn tenant(&self) -> &TenantId {
        &self.tenant
    }

    /// Build a source from its configuration.
    pub fn from_config(c: SourceConfig) -> Result<Self, String> {
        let scheme: Scheme = c
            .scheme
            .parse()
            .map_err(|e| format!("source {}: {e}", c.name))?;
        match (&c.callback, c.correlation.is_empty()) {
            (None, _) if !c.correlation.starts_with('/') => {
                return Err(format!(
                    "source {}: correlation must be a JSON pointer like /data/run_id",
                    c.name
                ));
            }
            (Some(pointer), _) if !pointer.starts_with('/') => {
                return Err(format!(
                    "source {}: callback must be a JSON pointer like /data/callback_id",
                    c.name
                ));
            }
            (Some(_), false) => {
                return Err(format!(
                    "source {}: give either correlation (deliver an event to a run) or \
                     callback (complete a callback), not both",
                    c.name
                ));
            }
            (Some(_), true) if c.event.is_some() => {
                return Err(format!(
                    "source {}: event names the event delivered to a run; a callback \
                     source completes a callback and takes none",
                    c.name
                ));
            }
            _ => {}
        }
        let mut verifier = Verifier::from_config(scheme, &c.secrets)
            .map_err(|e| format!("source {}: {e}", c.name))?;
        if let Some(t) = c.tolerance_secs {
            verifier = verifier.with_tolerance(Duration::from_secs(t));
        }
        Ok(WebhookSource {
            event: c.event.unwrap_or_else(|| c.name.clone()),
            tenant: TenantId(c.tenant),
            name: c.name,
            verifier,
            correlation: c.correlation,
            callback: c.callback,
        })
    }

    /// Parse a JSON array of [`SourceConfig`]s (the `SIESTA_WEBHOOK_SOURCES` format).
    pub fn parse_all(json: &str) -> Result<Vec<WebhookSource>, String> {
        if json.trim().is_empty() {
            return Ok(Vec::new());
        }
        let configs: Vec<SourceConfig> =
            serde_json::from_str(json).map_err(|e| format!("webhook sources: {e}"))?;
        configs
            .into_iter()
            .map(WebhookSource::from_config)
            .collect()
    }
}

/// The default largest webhook body accepted: 1 MiB.
pub const DEFAULT_MAX_BODY: usize = 1024 * 1024;

/// Receives webhooks and turns them into callback outcomes and events: the state of the
/// `/hooks/*` routes. Its sources can be replaced while it serves (a rotated secret).
#[derive(Clone)]
pub struct WebhookReceiver {
    max_body: usize,
    sources: Arc<RwLock<Arc<HashMap<String, WebhookSource>>>>,
}

impl WebhookReceiver {
    /// A receiver accepting bodies up to `max_body` bytes (413 over it).
    pub fn new(max_body: usize) -> Self {
        WebhookReceiver {
            max_body,
            sources: Arc::default(),
        }
    }

    /// With these configured sources.
    pub fn with_sources(self, sources: Vec<WebhookSource>) -> Self {
        self.set_sources(sources);
        self
    }

    /// Serve these sources from now on, in place of the ones before (every clone of
    /// this receiver sees them).
    pub fn set_sources(&self, sources: Vec<WebhookSource>) {
        let map = Arc::new(sources.into_iter().map(|s| (s.name.clone(), s)).collect());
        *self.sources.write().unwrap_or_else(PoisonError::into_inner) = map;
    }

    /// The source named `name`, if configured.
    pub fn source(&self, name: &str) -> Option<WebhookSource> {
        self.sources
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(name)
            .cloned()
    }

    /// The largest body accepted.
    pub fn max_body(&self) -> usize {
        self.max_body
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Result<Vec<WebhookSource>, String> {
        WebhookSource::parse_all(json)
    }

    #[test]
    fn a_source_routes_by_correlation_or_by_callback_but_not_both() {
        let by_run = parse(
            r#"[{"name": "ci", "scheme": "github", "secrets": ["s"], "correlation": "/run_id"}]"#,
        )
        .unwrap();
        assert_eq!(
            (
                by_run[0].correlation.as_str(),
                by_run[0].callback.as_deref()
            ),
            ("/run_id", None)
        );
        assert_eq!(
            by_run[0].event, "ci",
            "the event defaults to the source's name"
        );
        let by_callback = parse(
            r#"[{"name": "psp", "scheme": "stripe", "secrets": ["whsec_x"], "callback": "/data/callback_id"}]"#,
        )
        .unwrap();
        assert_eq!(
            by_callback[0].callback.as_deref(),
            Some("/data/callback_id")
        );

        for (bad, says) in [
            (
                r#"[{"name": "a", "scheme": "github", "secrets": ["s"]}]"#,
                "correlation must be a JSON pointer",
            ),
            (
                r#"[{"name": "a", "scheme": "github", "secrets": ["s"], "correlation": "run_id"}]"#,
                "correlation must be a JSON pointer",
            ),
            (
                r#"[{"name": "a", "scheme": "github", "secrets": ["s"], "callback": "cb"}]"#,
                "callback must be a JSON pointer",
            ),
            (
                r#"[{"name": "a", "scheme": "github", "secrets": ["s"], "callback": "/cb", "correlation": "/run_id"}]"#,
                "not both",
            ),
            (
                r#"[{"name": "a", "scheme": "github", "secrets": ["s"], "callback": "/cb", "event": "payment"}]"#,
                "takes none",
            ),
        ] {
            let e = parse(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
