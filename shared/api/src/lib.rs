//! Siesta's HTTP surface: one axum [`Router`] with the control API, the public webhook
//! receiver, `/healthz` and `/openapi.json`, served the same way by `siesta dev` (over
//! [`server::serve`]) and by the `start` and `webhook` Lambda functions (through
//! `lambda_http`), so the two cannot answer differently.
//!
//! What differs between the two is plugged in: who the caller is ([`Authenticate`]: API
//! keys in dev, the JWT authorizer's claim behind API Gateway), what `/healthz` asks
//! ([`HealthCheck`]), the webhook sources, and the transport's limits.
//!
//! Errors are `{"error": {"code": "...", "message": "..."}}` with the right status, for
//! every 4xx and 5xx (including the ones axum makes itself: 404, 405 with `Allow`, 413);
//! see [`ApiError`]. The OpenAPI 3.1 document ([`openapi`]) is derived from the handlers'
//! types and annotations, the same ones the router is built from.
//!
//! ```no_run
//! # async fn demo(engine: siesta::Engine) -> std::io::Result<()> {
//! use siesta_api::{ApiKeys, ControlApi};
//! let router = ControlApi::new(engine)
//!     .authenticate(ApiKeys::default())
//!     .router();
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! siesta_api::server::serve(listener, router, Default::default()).await
//! # }
//! ```

mod auth;
mod error;
mod extract;
mod openapi;
mod responses;
mod routes;
pub mod server;
mod state;
mod time;
/// Webhook signature verification (re-exported from `siesta-webhook`).
pub use siesta_webhook as signature;
mod values;
mod view;
mod webhook;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{MatchedPath, Request};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use http::{Method, Uri, header};
use siesta::Engine;
use tracing::Instrument;

pub use auth::{ApiKeys, Authenticate, Tenant};
pub use error::{ApiError, RETRY_AFTER_SECS};
pub use extract::MAX_WAIT;
pub use openapi::openapi;
pub use routes::idempotent_run_id;
/// The request bodies, queries and views the routes take and answer (re-exported from
/// `siesta-api-types`, which the client shares).
pub use siesta_api_types as types;
pub use siesta_api_types::{
    Accepted, BuildList, BuildView, DeadLetteredRunPage, DeadLetteredRunView, Health, NotATime,
    OperationsSummary, Received, Redriven, Rfc3339, RunPage, RunResult, RunView, StreamChunkView,
    StreamPageView, Timeline, TimelineEventView, VALUE_REF, ValueRef, WaitView, path_segment,
    value_path,
};
pub use siesta_api_types::{ErrorBody, ErrorDetail};
pub use view::{run_view, served_by, timeline_event_view};

/// On the answer to a start whose run is queued (a response extension, not sent to the
/// caller): what queued it — a concurrency limit's, a start rate's or a debounce's
/// name — and whether the start joined a run a debounce gathers. The Lambda start
/// function counts these per limit in its metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartQueued {
    /// The limit's, start rate's or debounce's name.
    pub by: String,
    /// A debounce gathered the start into a run queued already.
    pub joined: bool,
}
pub use webhook::{DEFAULT_MAX_BODY, SourceConfig, WebhookReceiver, WebhookSource};

/// The default largest control-API body (a run's input, an event, a message): 4 MiB.
pub const DEFAULT_MAX_API_BODY: usize = 4 * 1024 * 1024;

/// Whether this process can serve: asked by `/healthz`, which answers 503 with the
/// reason when it cannot (a worker or sweep task stopped, say).
pub trait HealthCheck: Send + Sync + 'static {
    /// `Err(reason)` when something this process depends on has stopped.
    fn check(&self) -> Result<(), String>;
}

impl HealthCheck for siesta::Liveness {
    fn check(&self) -> Result<(), String> {
        let stopped = self.stopped();
        if stopped.is_empty() {
            Ok(())
        } else {
            Err(format!("stopped: {}", stopped.join(", ")))
        }
    }
}

/// Which builds are still deployed, asked by `GET /builds` for the builds it lists
/// (the serving build always is). Without one — the dev server, which serves only its
/// own build — no other build is. On Lambda the build registry answers (a build is
/// deployed while a published version of the step function serves it).
#[async_trait::async_trait]
pub trait Deployments: Send + Sync + 'static {
    /// Of `builds`, which are deployed; a build the answer leaves out is shown as unknown
    /// (`null`), and so is every build when this fails (the reason is logged).
    async fn deployed(
        &self,
        builds: &[String],
    ) -> Result<std::collections::HashMap<String, bool>, String>;
}

/// A request extension: hold this request for `Prefer: wait` at most this long (under
/// [`MAX_WAIT`] and the router's own cap) — behind API Gateway, the time the invocation
/// has left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MaxWait(pub Duration);

impl<F: Fn() -> Result<(), String> + Send + Sync + 'static> HealthCheck for F {
    fn check(&self) -> Result<(), String> {
        self()
    }
}

/// The control API over an engine, built into a [`Router`] by [`ControlApi::router`].
#[derive(Clone)]
pub struct ControlApi {
    engine: Engine,
    hooks: WebhookReceiver,
    auth: Arc<dyn Authenticate>,
    health: Option<Arc<dyn HealthCheck>>,
    deployments: Option<Arc<dyn Deployments>>,
    max_body: usize,
    max_wait: Duration,
    extra: Vec<Router>,
}

impl ControlApi {
    /// The API over `engine`: a webhook receiver without sources, bodies up to
    /// [`DEFAULT_MAX_API_BODY`], and authenticated routes refused (401) until
    /// [`ControlApi::authenticate`] says how callers are known.
    pub fn new(engine: Engine) -> Self {
        ControlApi {
            hooks: WebhookReceiver::new(DEFAULT_MAX_BODY),
            engine,
            auth: Arc::new(auth::NoCallers),
            health: None,
            deployments: None,
            max_body: DEFAULT_MAX_API_BODY,
            max_wait: MAX_WAIT,
            extra: Vec::new(),
        }
    }

    /// The engine underneath.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Decide callers' tenants with `auth`.
    pub fn authenticate(mut self, auth: impl Authenticate) -> Self {
        self.auth = Arc::new(auth);
        self
    }

    /// Receive webhooks (`/hooks/*`) with `hooks` (its sources and body limit).
    pub fn webhooks(mut self, hooks: WebhookReceiver) -> Self {
        self.hooks = hooks;
        self
    }

    /// Let `/healthz` ask `check`.
    pub fn health(mut self, check: impl HealthCheck) -> Self {
        self.health = Some(Arc::new(check));
        self
    }

    /// Let `GET /builds` ask `deployments` which builds are still deployed (by default
    /// only the serving one is).
    pub fn deployments(mut self, deployments: impl Deployments) -> Self {
        self.deployments = Some(Arc::new(deployments));
        self
    }

    /// Answer `/healthz` from these loops: 503 once any of them stopped (the dev
    /// server's worker and sweep).
    pub fn with_liveness(self, liveness: siesta::Liveness) -> Self {
        self.health(liveness)
    }

    /// The longest a request is held for `Prefer: wait` (at most [`MAX_WAIT`]); a
    /// request's [`MaxWait`] extension can shorten it further.
    pub fn with_max_wait(mut self, max_wait: Duration) -> Self {
        self.max_wait = max_wait.min(MAX_WAIT);
        self
    }

    /// Refuse control-API bodies over `bytes` (413).
    pub fn max_body(mut self, bytes: usize) -> Self {
        self.max_body = bytes;
        self
    }

    /// Serve `router`'s routes beside the API's (a web UI, say). It must not set a
    /// fallback: unknown paths get the API's JSON 404.
    pub fn merge(mut self, router: Router) -> Self {
        self.extra.push(router);
        self
    }

    /// The router: every route of the API, with JSON errors and a span per request.
    pub fn router(self) -> Router {
        let state = state::AppState {
            engine: self.engine,
            hooks: self.hooks,
            auth: self.auth,
            health: self.health,
            deployments: self.deployments,
            max_body: self.max_body,
            max_wait: self.max_wait,
        };
        let (api, _) = routes::table(openapi::base()).split_for_parts();
        let mut router = api
            .fallback(not_found)
            .method_not_allowed_fallback(method_not_allowed)
            .with_state(state)
            .layer(middleware::map_response(json_errors));
        for extra in self.extra {
            router = router.merge(extra);
        }
        router.layer(middleware::from_fn(trace))
    }
}

async fn not_found() -> ApiError {
    ApiError::not_found("route")
}

async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    ApiError::new(
        http::StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!("{method} is not allowed on {}", uri.path()),
    )
}

/// Error answers made below the handlers (axum's own, a layer's) in our JSON form, their
/// headers (`Allow`) kept.
async fn json_errors(response: Response) -> Response {
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let text = http_body_util::BodyExt::collect(body)
        .await
        .map(|c| String::from_utf8_lossy(&c.to_bytes()).trim().to_owned())
        .unwrap_or_default();
    let message = if text.is_empty() {
        status.canonical_reason().unwrap_or("error").to_owned()
    } else {
        text
    };
    let error = ApiError::new(status, error::code_of(status), message);
    let fresh = error.into_response();
    parts.headers.remove(header::CONTENT_LENGTH);
    let (fresh_parts, fresh_body) = fresh.into_parts();
    parts.headers.extend(fresh_parts.headers);
    Response::from_parts(parts, fresh_body)
}

/// One span per request (method, route template, and the tenant once authenticated),
/// and a line with the status it was answered with.
///
/// The span names the route's template (`/hooks/{token}`), never the request's path: a
/// path can carry a credential (a callback's capability token is its URL), and whoever
/// reads the logs must not be able to complete a callback. Nor does it name the query
/// string or any header (`Authorization`, a webhook's signature). `Router::layer` wraps
/// each route after routing, so the matched template is already in the request's
/// extensions here; a request no route matched is named `unmatched`.
///
/// Its fields follow OpenTelemetry's HTTP server conventions (`http.request.method`,
/// `http.route`, `http.response.status_code`; named `POST /runs`, of kind server), and
/// a valid W3C `traceparent` sent with the request makes it a child of the caller's
/// span (see docs/telemetry.md).
async fn trace(request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(MatchedPath::as_str);
    let method = request.method().clone();
    let name = match route {
        Some(route) => format!("{method} {route}"),
        None => method.to_string(),
    };
    let span = tracing::info_span!(
        "request",
        otel.name = %name,
        otel.kind = "server",
        http.request.method = %method,
        http.route = %route.unwrap_or("unmatched"),
        http.response.status_code = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
        tenant = tracing::field::Empty,
    );
    if let Some(parent) = incoming_trace_parent(request.headers()) {
        siesta::telemetry::set_parent(&span, parent);
    }
    async move {
        let response = next.run(request).await;
        let status = response.status().as_u16();
        let span = tracing::Span::current();
        span.record("http.response.status_code", status);
        if response.status().is_server_error() {
            span.record("otel.status_code", "error");
        }
        tracing::info!(status, "answered");
        response
    }
    .instrument(span)
    .await
}

/// The request's W3C `traceparent`, when it sent a valid one (an invalid one is
/// ignored, as the spec says).
pub(crate) fn incoming_trace_parent(
    headers: &http::HeaderMap,
) -> Option<siesta::telemetry::TraceParent> {
    let value = headers.get("traceparent")?.to_str().ok()?;
    siesta::telemetry::TraceParent::parse(value)
}
