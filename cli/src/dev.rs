//! `siesta dev`: the four handlers in one process on the embedded backend — an HTTP
//! server for the control API and webhooks, a queue worker standing in for the SQS
//! trigger, and a sweep ticker standing in for EventBridge.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use siesta::*;
use siesta_api::{
    ApiError, ApiRequest, ApiResponse, ControlApi, DEFAULT_MAX_BODY, WebhookReceiver, WebhookSource,
};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// How the dev server runs.
#[derive(Clone)]
pub struct DevOptions {
    /// Where the embedded backend keeps its file.
    pub data_dir: PathBuf,
    /// API keys and the tenant each maps to; empty: auth off, tenant `default`.
    pub api_keys: HashMap<String, TenantId>,
    /// How often the sweep runs.
    pub sweep_every: Duration,
    /// Largest webhook body accepted.
    pub max_webhook_body: usize,
    /// Configured webhook sources (`/hooks/sources/{source}`).
    pub sources: Vec<WebhookSource>,
    /// How long a lease lasts without renewal (how soon a crashed run is taken over).
    pub lease_ttl: Duration,
    /// The clock the engine and the backend read; `None`: the system clock. Tests pass
    /// a [`ManualClock`] to move past a deadline without waiting for it.
    pub clock: Option<Arc<dyn Clock>>,
    /// The backend to run on; `None`: the embedded one in `data_dir`. `siesta dev
    /// --backend aws` passes the AWS backend (DynamoDB, S3, SQS).
    pub backend: Option<siesta::ports::Backend>,
    /// Most wake-ups the worker handles at once.
    pub workers: usize,
    /// What an acknowledged write to the embedded backend survives (default: an OS
    /// crash, fsync before every acknowledgement).
    pub durability: siesta_embedded::Durability,
}

impl std::fmt::Debug for DevOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DevOptions")
            .field("data_dir", &self.data_dir)
            .field("api_keys", &self.api_keys.len())
            .field("sweep_every", &self.sweep_every)
            .field("max_webhook_body", &self.max_webhook_body)
            .field("sources", &self.sources)
            .field("lease_ttl", &self.lease_ttl)
            .field("workers", &self.workers)
            .field("durability", &self.durability)
            .field(
                "clock",
                &self.clock.as_ref().map_or("system", |_| "injected"),
            )
            .field(
                "backend",
                &self.backend.as_ref().map_or("embedded", |_| "given"),
            )
            .finish_non_exhaustive()
    }
}

impl DevOptions {
    /// Defaults for `data_dir`: no API keys, a sweep every 5 s, 1 MiB webhooks, 60 s
    /// leases.
    pub fn new(data_dir: PathBuf) -> Self {
        DevOptions {
            data_dir,
            api_keys: HashMap::new(),
            sweep_every: Duration::from_secs(5),
            max_webhook_body: DEFAULT_MAX_BODY,
            lease_ttl: Duration::from_secs(60),
            sources: Vec::new(),
            clock: None,
            backend: None,
            workers: WorkerConfig::default().concurrency,
            durability: siesta_embedded::Durability::Full,
        }
    }

    /// Parse `key=tenant,key2=tenant2` (the `SIESTA_API_KEYS` format).
    pub fn parse_api_keys(spec: &str) -> anyhow::Result<HashMap<String, TenantId>> {
        spec.split(',')
            .filter(|s| !s.trim().is_empty())
            .map(|pair| {
                let (key, tenant) = pair
                    .split_once('=')
                    .with_context(|| format!("'{pair}' is not key=tenant"))?;
                anyhow::ensure!(
                    !key.trim().is_empty() && !tenant.trim().is_empty(),
                    "'{pair}' is not key=tenant"
                );
                Ok((key.trim().to_owned(), TenantId::from(tenant.trim())))
            })
            .collect()
    }
}

/// A running dev server.
pub struct DevServer {
    /// Where it listens.
    pub addr: SocketAddr,
    /// The engine it runs.
    pub engine: Engine,
    /// Whether its worker and sweep loops still run (what `/healthz` reports).
    pub liveness: Liveness,
    tasks: Vec<JoinHandle<()>>,
}

impl DevServer {
    /// Stop serving, working and sweeping.
    pub fn stop(self) {
        for t in self.tasks {
            t.abort();
        }
    }
}

#[derive(Clone)]
struct App {
    api: ControlApi,
    hooks: WebhookReceiver,
    keys: Arc<HashMap<String, TenantId>>,
}

/// Start the dev server on `listener` with `registry`'s workflows.
pub async fn start(
    listener: TcpListener,
    options: DevOptions,
    registry: Registry,
) -> anyhow::Result<DevServer> {
    let addr = listener.local_addr()?;
    let clock: Arc<dyn Clock> = options
        .clock
        .clone()
        .unwrap_or_else(|| Arc::new(SystemClock));
    let backend = match options.backend.clone() {
        Some(backend) => backend,
        None => siesta_embedded::EmbeddedBackend::open_with_options(
            options.data_dir.join("siesta.db"),
            clock.clone(),
            siesta_embedded::EmbeddedOptions {
                durability: options.durability,
                ..siesta_embedded::EmbeddedOptions::default()
            },
        )
        .with_context(|| {
            format!(
                "opening the embedded backend in {}",
                options.data_dir.display()
            )
        })?
        .backend(),
    };
    let config = EngineConfig {
        callback_base_url: format!("http://{addr}"),
        lease_ttl: options.lease_ttl,
        ..EngineConfig::default()
    };
    let engine = Engine::new(backend, clock, registry, config);
    let liveness = Liveness::new();
    let app = App {
        api: ControlApi::new(engine.clone()).with_liveness(liveness.clone()),
        hooks: WebhookReceiver::new(engine.clone(), options.max_webhook_body)
            .with_sources(options.sources.clone()),
        keys: Arc::new(options.api_keys.clone()),
    };
    // Bodies over the webhook limit get our JSON 413; the transport only guards memory.
    let router = Router::new()
        .merge(siesta_ui::router())
        .fallback(handle)
        .layer(DefaultBodyLimit::max(
            options.max_webhook_body.saturating_mul(4),
        ))
        .with_state(app);
    let server = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, router).await {
            tracing::error!(error = %e, "dev server stopped");
        }
    });
    let worker = {
        let engine = engine.clone();
        let config = WorkerConfig {
            concurrency: options.workers,
            ..WorkerConfig::default()
        };
        let alive = liveness.register("worker");
        tokio::spawn(async move {
            let _alive = alive;
            engine.work(config).await
        })
    };
    let sweeper = {
        let engine = engine.clone();
        let every = options.sweep_every;
        let alive = liveness.register("sweep");
        tokio::spawn(async move {
            let _alive = alive;
            loop {
                tokio::time::sleep(every).await;
                match engine.sweep(1000).await {
                    Ok(report) if report.woken > 0 => tracing::info!(woken = report.woken, "sweep"),
                    Ok(_) => {}
                    Err(e) => tracing::warn!(error = %e, "sweep"),
                }
            }
        })
    };
    Ok(DevServer {
        addr,
        engine,
        liveness,
        tasks: vec![server, worker, sweeper],
    })
}

async fn handle(
    State(app): State<App>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let req = ApiRequest {
        method,
        path: uri.path().to_owned(),
        query: uri.query().unwrap_or("").to_owned(),
        headers,
        body,
    };
    let public = matches!(req.path.as_str(), "/healthz" | "/openapi.json");
    let response = if req.path == "/hooks" || req.path.starts_with("/hooks/") {
        app.hooks.handle(req).await
    } else if public {
        app.api.handle(&TenantId::from("default"), req).await
    } else {
        match tenant(&app.keys, &req.headers) {
            Ok(tenant) => app.api.handle(&tenant, req).await,
            Err(e) => e.into(),
        }
    };
    into_response(response)
}

/// The caller's tenant: from `Authorization: Bearer <key>` when keys are configured.
fn tenant(keys: &HashMap<String, TenantId>, headers: &HeaderMap) -> Result<TenantId, ApiError> {
    if keys.is_empty() {
        return Ok(TenantId::from("default"));
    }
    let bearer = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(str::trim);
    bearer.and_then(|k| keys.get(k).cloned()).ok_or_else(|| {
        ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "a valid 'Authorization: Bearer <api key>' is required",
        )
    })
}

fn into_response(r: ApiResponse) -> Response {
    let mut response = (r.status, axum::Json(r.body)).into_response();
    response.headers_mut().extend(r.headers);
    response
}
