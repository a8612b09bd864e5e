//! Webhooks as a Lambda: the signature is checked over the raw body (API Gateway's
//! base64 bodies are decoded first), then [`WebhookReceiver`] stores the delivery and
//! wakes the run. Source secrets are cached for the container's life and re-read at
//! most every [`SOURCES_REFRESH`], so a rotated secret takes effect without a deploy.

use std::sync::Arc;
use std::time::{Duration, Instant};

use lambda_http::{Body, Request, Response};
use siesta::Engine;
use siesta_api::{DEFAULT_MAX_BODY, WebhookReceiver, WebhookSource};
use siesta_lambda::Settings;
use siesta_lambda::http::{from_api_response, to_api_request};
use siesta_lambda::metrics::{Unit, emit};
use tokio::sync::RwLock;
use tracing::Instrument;

/// How long read webhook sources are used before they are read again.
pub const SOURCES_REFRESH: Duration = Duration::from_secs(300);

/// The webhook function: built once per container.
#[derive(Clone)]
pub struct Webhook {
    engine: Engine,
    settings: Settings,
    sdk: aws_config::SdkConfig,
    sources: Arc<RwLock<(Vec<WebhookSource>, Instant)>>,
    refresh: Duration,
}

impl Webhook {
    /// Over `engine`, with the sources `settings` name (read now).
    pub async fn new(
        engine: Engine,
        settings: Settings,
        sdk: aws_config::SdkConfig,
    ) -> Result<Self, siesta_lambda::SetupError> {
        let sources = settings.webhook_sources(&sdk).await?;
        Ok(Webhook {
            engine,
            settings,
            sdk,
            sources: Arc::new(RwLock::new((sources, Instant::now()))),
            refresh: SOURCES_REFRESH,
        })
    }

    /// Read the sources again once they are `every` old (default [`SOURCES_REFRESH`]).
    pub fn with_refresh(mut self, every: Duration) -> Self {
        self.refresh = every;
        self
    }

    async fn sources(&self) -> Vec<WebhookSource> {
        {
            let cached = self.sources.read().await;
            if cached.1.elapsed() < self.refresh {
                return cached.0.clone();
            }
        }
        let mut cached = self.sources.write().await;
        if cached.1.elapsed() >= self.refresh {
            match self.settings.webhook_sources(&self.sdk).await {
                Ok(fresh) => *cached = (fresh, Instant::now()),
                // Keep serving with what was read before; try again next time.
                Err(e) => tracing::warn!(error = %e, "webhook sources not refreshed"),
            }
        }
        cached.0.clone()
    }

    /// Answer one webhook.
    pub async fn handle(&self, req: Request) -> Response<Body> {
        let sources = self.sources().await;
        // The source's tenant when the path names a configured source; a token's tenant
        // is only known once the callback is looked up.
        let source = req
            .uri()
            .path()
            .strip_prefix("/hooks/sources/")
            .map(|name| name.trim_end_matches('/').to_owned());
        let tenant = source
            .as_deref()
            .and_then(|name| sources.iter().find(|s| s.name() == name))
            .map(|s| s.tenant().to_string());
        let span = tracing::info_span!(
            "webhook",
            path = %req.uri().path(),
            source = source.as_deref().unwrap_or_default(),
            tenant = tenant.as_deref().unwrap_or_default(),
        );
        async {
            let receiver =
                WebhookReceiver::new(self.engine.clone(), DEFAULT_MAX_BODY).with_sources(sources);
            let response = receiver.handle(to_api_request(req)).await;
            let duplicate = response.body["duplicate"] == serde_json::Value::Bool(true);
            tracing::info!(status = response.status.as_u16(), duplicate, "answered");
            emit(
                "webhook",
                &[
                    (
                        "WebhookDuplicates",
                        Unit::Count,
                        &[f64::from(u8::from(duplicate))],
                    ),
                    (
                        "WebhooksRefused",
                        Unit::Count,
                        &[f64::from(u8::from(!response.status.is_success()))],
                    ),
                ],
            );
            from_api_response(response)
        }
        .instrument(span)
        .await
    }
}
