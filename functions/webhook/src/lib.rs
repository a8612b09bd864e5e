//! Webhooks as a Lambda: `siesta_api`'s router (its public `/hooks/*` routes are the ones
//! API Gateway sends here), the signature checked over the raw body (API Gateway's
//! base64 bodies are decoded first). Source secrets are cached for the container's life
//! and re-read at most every [`SOURCES_REFRESH`], so a rotated secret takes effect
//! without a deploy.

mod runtime;

pub use runtime::run;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Request, State};
use axum::middleware::{self, Next};
use axum::response::Response;
use lambda_http::Body;
use siesta::Engine;
use siesta_api::{ControlApi, DEFAULT_MAX_BODY, Received, WebhookReceiver};
use siesta_lambda::Settings;
use siesta_lambda::http::{JwtClaim, answer};
use siesta_lambda::metrics::{Unit, emit};
use tokio::sync::Mutex;
use tracing::Instrument;

/// How long read webhook sources are used before they are read again.
pub const SOURCES_REFRESH: Duration = Duration::from_secs(300);

/// The webhook function: built once per container.
#[derive(Clone)]
pub struct Webhook {
    router: Router,
    sources: Arc<Sources>,
}

/// The sources the receiver serves, and where and when they were read.
struct Sources {
    settings: Settings,
    sdk: aws_config::SdkConfig,
    receiver: WebhookReceiver,
    read_at: Mutex<Instant>,
    refresh_ms: AtomicU64,
}

impl Sources {
    async fn refresh_if_due(&self) {
        let every = Duration::from_millis(self.refresh_ms.load(Ordering::Relaxed));
        let mut read_at = self.read_at.lock().await;
        if read_at.elapsed() < every {
            return;
        }
        match self.settings.webhook_sources(&self.sdk).await {
            Ok(fresh) => {
                self.receiver.set_sources(fresh);
                *read_at = Instant::now();
            }
            // Keep serving with what was read before; try again next time.
            Err(e) => tracing::warn!(error = %e, "webhook sources not refreshed"),
        }
    }
}

impl Webhook {
    /// Over `engine`, with the sources `settings` name (read now).
    pub async fn new(
        engine: Engine,
        settings: Settings,
        sdk: aws_config::SdkConfig,
    ) -> Result<Self, siesta_lambda::SetupError> {
        let receiver = WebhookReceiver::new(DEFAULT_MAX_BODY)
            .with_sources(settings.webhook_sources(&sdk).await?);
        let claim = JwtClaim::new(settings.tenant_claim.clone());
        let sources = Arc::new(Sources {
            settings,
            sdk,
            receiver: receiver.clone(),
            read_at: Mutex::new(Instant::now()),
            refresh_ms: AtomicU64::new(SOURCES_REFRESH.as_millis() as u64),
        });
        // Only `/hooks/*` is routed here; should anything else arrive (through a function
        // URL, say), it needs a JWT like at the start function.
        let router = ControlApi::new(engine)
            .authenticate(claim)
            .webhooks(receiver)
            .router()
            .layer(middleware::from_fn_with_state(sources.clone(), around))
            // Spans are sent before each invocation returns: a frozen container sends
            // nothing.
            .layer(middleware::map_response(siesta_lambda::otel::flush_after));
        Ok(Webhook { router, sources })
    }

    /// Read the sources again once they are `every` old (default [`SOURCES_REFRESH`]).
    pub fn with_refresh(self, every: Duration) -> Self {
        self.sources
            .refresh_ms
            .store(every.as_millis() as u64, Ordering::Relaxed);
        self
    }

    /// The router, for `lambda_http::run`.
    pub fn router(&self) -> Router {
        self.router.clone()
    }

    /// Answer one webhook, as the runtime does; its spans are sent before it returns
    /// (when traces are exported).
    pub async fn handle(&self, req: lambda_http::Request) -> lambda_http::Response<Body> {
        answer(&self.router, req).await
    }
}

/// The route `path` takes, for spans and logs: a callback's URL carries its token,
/// which completes the callback for whoever reads it, so only its template is named.
fn route(path: &str) -> &str {
    if path.starts_with("/hooks/sources/") {
        path
    } else if path.starts_with("/hooks/") {
        "/hooks/{token}"
    } else {
        "other"
    }
}

/// Fresh sources, a span naming the source and its tenant (a token's tenant is only
/// known once the callback is looked up), and the duplicate and refusal counts.
async fn around(State(sources): State<Arc<Sources>>, request: Request, next: Next) -> Response {
    sources.refresh_if_due().await;
    let source = request
        .uri()
        .path()
        .strip_prefix("/hooks/sources/")
        .map(|name| name.trim_end_matches('/').to_owned());
    let tenant = source
        .as_deref()
        .and_then(|name| sources.receiver.source(name))
        .map(|s| s.tenant().to_string());
    let span = tracing::info_span!(
        "webhook",
        route = route(request.uri().path()),
        source = source.as_deref().unwrap_or_default(),
        tenant = tenant.as_deref().unwrap_or_default(),
    );
    async move {
        let response = next.run(request).await;
        let duplicate = response
            .extensions()
            .get::<Received>()
            .is_some_and(|r| r.duplicate);
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
                    &[f64::from(u8::from(!response.status().is_success()))],
                ),
            ],
        );
        response
    }
    .instrument(span)
    .await
}
