//! Siesta's control API as plain async functions over the [`Engine`]: requests and
//! responses in the `http` crate's types, no web framework and no Lambda, so `siesta
//! dev` (axum) and the `start` Lambda (lambda_http) translate to and from it and
//! nothing else. The caller's tenant is decided by the transport (API keys in dev, a
//! JWT claim behind API Gateway) and passed in.
//!
//! Errors are `{"error": {"code": "...", "message": "..."}}` with the right status;
//! see [`ApiError`].

mod error;
/// Webhook signature verification (re-exported from `siesta-webhook`).
pub use siesta_webhook as signature;
mod openapi;
mod view;
mod webhook;

use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use siesta::ports::{DeliverOutcome, RunFilter};
use siesta::*;

pub use error::ApiError;
pub use openapi::{ROUTES, Route, openapi};
pub use view::{OperationsSummary, RunView, WaitView};
pub use webhook::{DEFAULT_MAX_BODY, SourceConfig, WebhookReceiver, WebhookSource};

/// The longest `Prefer: wait=N` honoured.
pub const MAX_WAIT: Duration = Duration::from_secs(60);

/// A request, as any transport hands it over.
#[derive(Debug, Clone)]
pub struct ApiRequest {
    /// The method.
    pub method: Method,
    /// The path, without the query.
    pub path: String,
    /// The raw query string (no `?`), possibly empty.
    pub query: String,
    /// The headers.
    pub headers: HeaderMap,
    /// The raw body.
    pub body: Bytes,
}

/// A response: status, headers and a JSON body.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiResponse {
    /// The status.
    pub status: StatusCode,
    /// Headers besides `Content-Type` (always JSON).
    pub headers: HeaderMap,
    /// The JSON body.
    pub body: serde_json::Value,
}

impl ApiResponse {
    fn json(status: StatusCode, body: serde_json::Value) -> Self {
        ApiResponse {
            status,
            headers: HeaderMap::new(),
            body,
        }
    }

    fn with_header(mut self, name: header::HeaderName, value: &str) -> Self {
        if let Ok(v) = HeaderValue::from_str(value) {
            self.headers.insert(name, v);
        }
        self
    }

    fn run(status: StatusCode, view: &RunView) -> Self {
        ApiResponse::json(status, serde_json::to_value(view).unwrap_or_default())
            .with_header(header::ETAG, &format!("\"{}\"", view.version))
    }
}

impl From<ApiError> for ApiResponse {
    fn from(e: ApiError) -> Self {
        ApiResponse::json(e.status, e.body())
    }
}

/// The control API over an engine.
#[derive(Clone)]
pub struct ControlApi {
    engine: Engine,
    max_wait: Duration,
    liveness: Liveness,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StartRun {
    workflow: String,
    #[serde(default)]
    input: serde_json::Value,
}

#[derive(Deserialize)]
struct CallbackFailure {
    #[serde(default)]
    error: Option<FailureBody>,
    #[serde(default)]
    code: Option<String>,
    #[serde(default)]
    message: Option<String>,
}

#[derive(Deserialize)]
struct FailureBody {
    #[serde(default, alias = "kind")]
    code: Option<String>,
    #[serde(default)]
    message: Option<String>,
}

impl ControlApi {
    /// The API over `engine`.
    pub fn new(engine: Engine) -> Self {
        ControlApi {
            engine,
            max_wait: MAX_WAIT,
            liveness: Liveness::new(),
        }
    }

    /// The longest a request is held for `Prefer: wait` (at most [`MAX_WAIT`]): behind
    /// API Gateway, under its 30 s limit and the invocation's remaining time.
    pub fn with_max_wait(mut self, max_wait: Duration) -> Self {
        self.max_wait = max_wait.min(MAX_WAIT);
        self
    }

    /// Answer `/healthz` from these loops: 503 once any of them stopped (the dev
    /// server's worker and sweep).
    pub fn with_liveness(mut self, liveness: Liveness) -> Self {
        self.liveness = liveness;
        self
    }

    /// The engine underneath.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Answer one request for `tenant`.
    pub async fn handle(&self, tenant: &TenantId, req: ApiRequest) -> ApiResponse {
        let span =
            tracing::info_span!("api", tenant = %tenant, method = %req.method, path = %req.path);
        match tracing::Instrument::instrument(self.route(tenant, &req), span).await {
            Ok(response) => response,
            Err(e) => e.into(),
        }
    }

    fn health(&self) -> Result<ApiResponse, ApiError> {
        let stopped = self.liveness.stopped();
        if stopped.is_empty() {
            return Ok(ApiResponse::json(
                StatusCode::OK,
                serde_json::json!({"status": "ok"}),
            ));
        }
        Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            format!("stopped: {}", stopped.join(", ")),
        ))
    }

    async fn route(&self, tenant: &TenantId, req: &ApiRequest) -> Result<ApiResponse, ApiError> {
        let segments: Vec<&str> = req
            .path
            .trim_matches('/')
            .split('/')
            .filter(|s| !s.is_empty())
            .collect();
        let method = &req.method;
        match (method.as_str(), segments.as_slice()) {
            ("GET", ["openapi.json"]) => Ok(ApiResponse::json(StatusCode::OK, openapi())),
            ("GET", ["healthz"]) => self.health(),
            ("POST", ["runs"]) => self.start(tenant, req).await,
            ("GET", ["runs"]) => self.list(tenant, req).await,
            ("GET", ["runs", id]) => self.show(tenant, &RunId::from(*id)).await,
            ("GET", ["runs", id, "result"]) => self.result(tenant, &RunId::from(*id), req).await,
            ("GET", ["runs", id, "timeline"]) => {
                self.timeline(tenant, &RunId::from(*id), req).await
            }
            ("POST", ["runs", id, "cancel"]) => self.cancel(tenant, &RunId::from(*id), req).await,
            ("POST", ["runs", id, "resume"]) => self.resume(tenant, &RunId::from(*id), req).await,
            ("POST", ["runs", id, "events", name]) => {
                self.event(tenant, &RunId::from(*id), name, req).await
            }
            ("POST", ["runs", id, "messages"]) => {
                self.message(tenant, &RunId::from(*id), req).await
            }
            ("POST", ["callbacks", id, action]) => {
                self.callback(tenant, &CallbackId::from(*id), action, req)
                    .await
            }
            (
                _,
                ["healthz"]
                | ["runs"]
                | ["runs", _]
                | ["runs", _, _]
                | ["runs", _, "events", _]
                | ["callbacks", _, _],
            ) => Err(ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                format!("{method} is not allowed on {}", req.path),
            )),
            _ => Err(ApiError::not_found("route")),
        }
    }

    async fn view(&self, tenant: &TenantId, run: &Run) -> Result<RunView, ApiError> {
        let history = self
            .engine
            .backend()
            .store
            .load_history(tenant, &run.id)
            .await
            .map_err(EngineError::from)?;
        Ok(RunView::new(
            run,
            Some(&history),
            &self.engine.config().callback_base_url,
        ))
    }

    async fn start(&self, tenant: &TenantId, req: &ApiRequest) -> Result<ApiResponse, ApiError> {
        let start: StartRun = json_body(&req.body)?;
        let key = header_str(&req.headers, "idempotency-key")?;
        let run_id = key.map(|k| idempotent_run_id(tenant, k));
        let (run, replayed) = match self
            .engine
            .start(tenant, &start.workflow, start.input.clone(), run_id.clone())
            .await
        {
            Ok(run) => (run, false),
            Err(EngineError::AlreadyExists) if run_id.is_some() => {
                let run = self
                    .engine
                    .get_run(tenant, run_id.as_ref().unwrap_or(&RunId::from("")))
                    .await?;
                if run.workflow != start.workflow || !same_input(&run.input, &start.input) {
                    return Err(ApiError::new(
                        StatusCode::UNPROCESSABLE_ENTITY,
                        "idempotency_key_reused",
                        "this Idempotency-Key was used with a different request body",
                    ));
                }
                (run, true)
            }
            Err(e) => return Err(e.into()),
        };
        let run = match prefer_wait(&req.headers)? {
            Some(wait) => self.await_finish(tenant, &run.id, wait).await?,
            None => run,
        };
        let view = self.view(tenant, &run).await?;
        let mut response = ApiResponse::run(StatusCode::CREATED, &view)
            .with_header(header::LOCATION, &format!("/runs/{}", run.id));
        if replayed {
            response = response.with_header(
                header::HeaderName::from_static("idempotent-replayed"),
                "true",
            );
        }
        Ok(response)
    }

    async fn list(&self, tenant: &TenantId, req: &ApiRequest) -> Result<ApiResponse, ApiError> {
        let mut filter = RunFilter::default();
        let (mut cursor, mut limit) = (None, 50usize);
        for (k, v) in query_pairs(&req.query) {
            match k.as_str() {
                "status" => {
                    filter.status = Some(
                        RunStatus::ALL
                            .into_iter()
                            .find(|s| s.as_str() == v)
                            .ok_or_else(|| {
                                ApiError::bad_request(format!("unknown status '{v}'"))
                            })?,
                    )
                }
                "workflow" => filter.workflow = Some(v),
                "cursor" => cursor = Some(v),
                "limit" => {
                    limit = v
                        .parse::<usize>()
                        .map_err(|_| ApiError::bad_request("limit must be a number"))?
                        .clamp(1, 200)
                }
                _ => {}
            }
        }
        let page = self
            .engine
            .backend()
            .store
            .list_runs(tenant, &filter, cursor.as_deref(), limit)
            .await
            .map_err(|e| match e {
                siesta::ports::StoreError::Invalid(m) => ApiError::bad_request(m),
                other => EngineError::from(other).into(),
            })?;
        let base = &self.engine.config().callback_base_url;
        let runs: Vec<RunView> = page
            .runs
            .iter()
            .map(|r| RunView::new(r, None, base))
            .collect();
        Ok(ApiResponse::json(
            StatusCode::OK,
            serde_json::json!({"runs": runs, "next_cursor": page.next_cursor}),
        ))
    }

    async fn show(&self, tenant: &TenantId, id: &RunId) -> Result<ApiResponse, ApiError> {
        let run = self.engine.get_run(tenant, id).await?;
        Ok(ApiResponse::run(
            StatusCode::OK,
            &self.view(tenant, &run).await?,
        ))
    }

    /// Hold until the run is finished or `wait` passes. In a process that runs the
    /// workflows itself (the dev server) the engine says when an invocation ends; where
    /// another process runs them (Lambda), the run is re-read on a backoff from 10 ms
    /// to 1 s.
    async fn await_finish(
        &self,
        tenant: &TenantId,
        id: &RunId,
        wait: Duration,
    ) -> Result<Run, ApiError> {
        let deadline = Instant::now() + wait.min(self.max_wait);
        let watch = self.engine.watch_run(tenant, id);
        let mut backoff = Duration::from_millis(10);
        loop {
            // Registered before the read: an end in between is not missed.
            let changed = watch.changed();
            let run = self.engine.get_run(tenant, id).await?;
            let left = deadline.saturating_duration_since(Instant::now());
            if run.status.is_finished() || left.is_zero() {
                return Ok(run);
            }
            tokio::select! {
                _ = changed => {}
                _ = tokio::time::sleep(backoff.min(left)) => {
                    backoff = (backoff * 2).min(Duration::from_secs(1));
                }
            }
        }
    }

    async fn result(
        &self,
        tenant: &TenantId,
        id: &RunId,
        req: &ApiRequest,
    ) -> Result<ApiResponse, ApiError> {
        let wait = prefer_wait(&req.headers)?.unwrap_or(Duration::ZERO);
        let run = self.await_finish(tenant, id, wait).await?;
        if run.status.is_finished() {
            let body = serde_json::json!({
                "id": run.id,
                "status": run.status,
                "output": run.output.as_ref().map(view::payload_json),
                "error": run.error,
            });
            return Ok(ApiResponse::json(StatusCode::OK, body)
                .with_header(header::ETAG, &format!("\"{}\"", run.version)));
        }
        Ok(ApiResponse::run(
            StatusCode::ACCEPTED,
            &self.view(tenant, &run).await?,
        ))
    }

    async fn timeline(
        &self,
        tenant: &TenantId,
        id: &RunId,
        req: &ApiRequest,
    ) -> Result<ApiResponse, ApiError> {
        self.engine.get_run(tenant, id).await?;
        let (mut after, mut limit) = (0u64, 100usize);
        for (k, v) in query_pairs(&req.query) {
            match k.as_str() {
                "after" => {
                    after = v
                        .parse()
                        .map_err(|_| ApiError::bad_request("after must be a sequence number"))?
                }
                "limit" => {
                    limit = v
                        .parse::<usize>()
                        .map_err(|_| ApiError::bad_request("limit must be a number"))?
                        .clamp(1, 1000)
                }
                _ => {}
            }
        }
        let events = self
            .engine
            .backend()
            .store
            .timeline(tenant, id, after, limit)
            .await
            .map_err(EngineError::from)?;
        let next_after = events.last().map_or(after, |e| e.seq);
        Ok(ApiResponse::json(
            StatusCode::OK,
            serde_json::json!({"events": events, "next_after": next_after}),
        ))
    }

    async fn resume(
        &self,
        tenant: &TenantId,
        id: &RunId,
        req: &ApiRequest,
    ) -> Result<ApiResponse, ApiError> {
        let run = self.engine.resume(tenant, id, if_match(req)?).await?;
        Ok(ApiResponse::run(
            StatusCode::ACCEPTED,
            &self.view(tenant, &run).await?,
        ))
    }

    async fn cancel(
        &self,
        tenant: &TenantId,
        id: &RunId,
        req: &ApiRequest,
    ) -> Result<ApiResponse, ApiError> {
        let if_match = if_match(req)?;
        let run = self.engine.cancel(tenant, id, if_match).await?;
        let status = if run.status.is_finished() {
            StatusCode::OK
        } else {
            StatusCode::ACCEPTED
        };
        Ok(ApiResponse::run(status, &self.view(tenant, &run).await?))
    }

    async fn event(
        &self,
        tenant: &TenantId,
        id: &RunId,
        name: &str,
        req: &ApiRequest,
    ) -> Result<ApiResponse, ApiError> {
        let value: serde_json::Value = if req.body.is_empty() {
            serde_json::Value::Null
        } else {
            json_body(&req.body)?
        };
        let delivery =
            header_str(&req.headers, "idempotency-key")?.map(|k| DeliveryId(format!("event:{k}")));
        let outcome = self
            .engine
            .deliver_event(tenant, id, name, value, delivery)
            .await?;
        Ok(delivered(outcome))
    }

    async fn message(
        &self,
        tenant: &TenantId,
        id: &RunId,
        req: &ApiRequest,
    ) -> Result<ApiResponse, ApiError> {
        let value: serde_json::Value = json_body(&req.body)?;
        let delivery = header_str(&req.headers, "idempotency-key")?
            .map(|k| DeliveryId(format!("message:{k}")));
        let outcome = self
            .engine
            .inject_message(tenant, id, value, delivery)
            .await?;
        Ok(delivered(outcome))
    }

    async fn callback(
        &self,
        tenant: &TenantId,
        id: &CallbackId,
        action: &str,
        req: &ApiRequest,
    ) -> Result<ApiResponse, ApiError> {
        let delivery = header_str(&req.headers, "idempotency-key")?
            .map(|k| DeliveryId(format!("callback:{k}")));
        let outcome = match action {
            "succeed" => {
                let value: serde_json::Value = if req.body.is_empty() {
                    serde_json::Value::Null
                } else {
                    json_body(&req.body)?
                };
                self.engine
                    .complete_callback(id, Some(tenant), Ok(value), delivery)
                    .await
            }
            "fail" => {
                let failure: CallbackFailure = if req.body.is_empty() {
                    CallbackFailure {
                        error: None,
                        code: None,
                        message: None,
                    }
                } else {
                    json_body(&req.body)?
                };
                let (code, message) = match failure.error {
                    Some(FailureBody { code, message }) => (code, message),
                    None => (failure.code, failure.message),
                };
                let error = ErrorInfo::new(
                    code.unwrap_or_else(|| "CallbackFailed".into()),
                    message.unwrap_or_else(|| "failed by the caller".into()),
                    false,
                );
                self.engine
                    .complete_callback(id, Some(tenant), Err(error), delivery)
                    .await
            }
            "heartbeat" => self.engine.heartbeat_callback(id, Some(tenant)).await,
            _ => return Err(ApiError::not_found("route")),
        };
        match outcome {
            Err(EngineError::NotFound) => Err(ApiError::not_found("callback")),
            other => Ok(delivered(other?)),
        }
    }
}

fn delivered(outcome: DeliverOutcome) -> ApiResponse {
    let duplicate = outcome == DeliverOutcome::Duplicate;
    ApiResponse::json(
        StatusCode::ACCEPTED,
        serde_json::json!({"accepted": true, "duplicate": duplicate}),
    )
}

fn json_body<T: serde::de::DeserializeOwned>(body: &Bytes) -> Result<T, ApiError> {
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("malformed JSON body: {e}")))
}

fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Result<Option<&'a str>, ApiError> {
    headers
        .get(name)
        .map(|v| {
            v.to_str()
                .map_err(|_| ApiError::bad_request(format!("{name} is not valid text")))
        })
        .transpose()
}

/// `Prefer: wait=N` (RFC 7240), capped at [`MAX_WAIT`].
fn prefer_wait(headers: &HeaderMap) -> Result<Option<Duration>, ApiError> {
    let Some(prefer) = header_str(headers, "prefer")? else {
        return Ok(None);
    };
    for pref in prefer.split(',') {
        if let Some(n) = pref.trim().strip_prefix("wait=") {
            let secs: u64 = n
                .trim()
                .parse()
                .map_err(|_| ApiError::bad_request("Prefer: wait=N takes whole seconds"))?;
            return Ok(Some(Duration::from_secs(secs).min(MAX_WAIT)));
        }
    }
    Ok(None)
}

fn query_pairs(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex_pair = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex_pair) {
            (b'+', _) => out.push(b' '),
            (b'%', Some(b)) => {
                out.push(b);
                i += 2;
            }
            (b, _) => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The run id an `Idempotency-Key` maps to: the same key of the same tenant is the
/// same run, so a retried start finds the first one.
pub fn idempotent_run_id(tenant: &TenantId, key: &str) -> RunId {
    let mut h = Sha256::new();
    h.update(tenant.as_str().as_bytes());
    h.update([0]);
    h.update(key.as_bytes());
    RunId(format!("idem-{}", &hex::encode(h.finalize())[..32]))
}

fn same_input(stored: &Payload, requested: &serde_json::Value) -> bool {
    match stored {
        Payload::Inline(v) => v == requested,
        Payload::Artifact(a) => serde_json::to_vec(requested)
            .map(|b| hex::encode(Sha256::digest(b)) == a.sha256)
            .unwrap_or(false),
    }
}

/// The run version named by `If-Match` (its ETag), if any.
fn if_match(req: &ApiRequest) -> Result<Option<u64>, ApiError> {
    header_str(&req.headers, "if-match")?
        .map(|v| {
            v.trim()
                .trim_start_matches("W/")
                .trim_matches('"')
                .parse::<u64>()
                .map_err(|_| ApiError::bad_request("If-Match must be a run version (its ETag)"))
        })
        .transpose()
}
