//! The runs: start one, list them, read one, long-poll for its result, page through
//! its timeline.

use std::time::Duration;

use axum::Json;
use axum::extract::{Extension, State};
use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode, header};
use sha2::{Digest, Sha256};
use siesta::ports::RunFilter;
use siesta::*;

use crate::auth::Tenant;
use crate::error::ApiError;
use crate::extract::{
    ApiPath, ApiQuery, IdempotencyKey, JsonObject, PreferWait, page_size, sequence_after,
};
use crate::responses::*;
use crate::state::AppState;
use crate::view::{self, run_answer, served_view, timeline_event_view};
use siesta_api_types::{
    RunListQuery, RunPage, RunResult, RunView, StartRun, Timeline, TimelineQuery,
};

/// Start a run. With `Idempotency-Key`, a retry with the same body answers with the
/// first run; with `Prefer: wait=N`, the answer waits up to N seconds for the run to
/// finish.
#[utoipa::path(
    post, path = "/runs", operation_id = "startRun", tag = "runs",
    security(("bearer" = [])),
    params(
        ("Idempotency-Key" = Option<String>, Header, description = "Same key and body: the first answer again; same key, other body: 422"),
        ("Prefer" = Option<String>, Header, description = "`wait=N` (N <= 60): wait up to N seconds for the run to finish"),
        ("traceparent" = Option<String>, Header, description = "W3C Trace Context: the run's spans join this trace (every wake-up, however much later)"),
    ),
    request_body(content = StartRun, content_type = "application/json"),
    responses(
        (status = 200, description = "Joined: a debounce gathered this start into a run queued already (docs/flow-control.md); the body is that run", body = RunView),
        (status = 201, description = "Started (or, with a reused Idempotency-Key, the first start)", body = RunView,
            headers(
                ("Location" = String, description = "The run's URL"),
                ("Idempotent-Replayed" = Option<String>, description = "`true` when this answers a retried start"),
            ),
            links(
                ("GetRun" = (operation_id = "getRun", parameters(("id" = "$response.body#/id")))),
                ("GetRunResult" = (operation_id = "getRunResult", parameters(("id" = "$response.body#/id")))),
                ("GetRunTimeline" = (operation_id = "getRunTimeline", parameters(("id" = "$response.body#/id")))),
                ("GetRunStream" = (operation_id = "getRunStream", parameters(("id" = "$response.body#/id")))),
                ("CancelRun" = (operation_id = "cancelRun", parameters(("id" = "$response.body#/id")))),
                ("PauseRun" = (operation_id = "pauseRun", parameters(("id" = "$response.body#/id")))),
                ("ResumeRun" = (operation_id = "resumeRun", parameters(("id" = "$response.body#/id")))),
                ("RestartRun" = (operation_id = "restartRun", parameters(("id" = "$response.body#/id")))),
                ("ResolveOperation" = (operation_id = "resolveOperation", parameters(("id" = "$response.body#/id")))),
                ("DeliverEvent" = (operation_id = "deliverEvent", parameters(("id" = "$response.body#/id")))),
                ("InjectMessage" = (operation_id = "injectMessage", parameters(("id" = "$response.body#/id")))),
                ("ExportRun" = (operation_id = "exportRun", parameters(("id" = "$response.body#/id")))),
                ("CheckRunReplay" = (operation_id = "checkRunReplay", parameters(("id" = "$response.body#/id")))),
                ("UpgradeRun" = (operation_id = "upgradeRun", parameters(("id" = "$response.body#/id")))),
                ("GetRunValue" = (operation_id = "getRunValue", parameters(("id" = "$response.body#/id"), ("sha256" = "$response.body#/input/value_ref/sha256")))),
            )),
        StartErrors,
    )
)]
pub(crate) async fn start_run(
    State(app): State<AppState>,
    Tenant(tenant): Tenant,
    IdempotencyKey(key): IdempotencyKey,
    PreferWait(wait): PreferWait,
    cap: Option<Extension<crate::MaxWait>>,
    headers: http::HeaderMap,
    JsonObject(start): JsonObject<StartRun>,
) -> Result<Response, ApiError> {
    let run_id = key.as_deref().map(|k| idempotent_run_id(&tenant, k));
    // A caller's trace: the run joins it under this request's span (its child), or
    // under the caller's span when spans are not exported.
    let trace_parent = crate::incoming_trace_parent(&headers)
        .map(|sent| siesta::telemetry::current_trace_parent().unwrap_or(sent));
    let (run, replayed, joined) = match (
        app.engine
            .start_or_join(
                &tenant,
                &start.workflow,
                start.input.clone(),
                StartOptions {
                    run_id: run_id.clone(),
                    trace_parent,
                    concurrency_key: start.concurrency_key.clone(),
                },
            )
            .await,
        run_id,
    ) {
        (Ok(started), _) => (started.run, false, started.joined),
        (Err(EngineError::AlreadyExists), Some(run_id)) => {
            // A retry: its first attempt may have died before the run's wake-up was
            // sent, so a run that has not begun is woken again (harmless if it was not).
            let run = app.engine.ensure_started(&tenant, &run_id).await?;
            if run.workflow != start.workflow || !same_input(&run.input, &start.input) {
                return Err(ApiError::new(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "idempotency_key_reused",
                    "this Idempotency-Key was used with a different request body",
                ));
            }
            (run, true, false)
        }
        (Err(e), _) => return Err(e.into()),
    };
    let run = match wait {
        Some(wait) => {
            app.await_finish(&tenant, &run.id, wait, cap.map(|c| c.0))
                .await?
        }
        None => run,
    };
    let view = app.view(&tenant, &run).await?;
    let status = if joined {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    let mut response = run_answer(status, &view);
    if let Some(by) = queued_by(&run) {
        response
            .extensions_mut()
            .insert(crate::StartQueued { by, joined });
    }
    let headers = response.headers_mut();
    if let Ok(location) = HeaderValue::from_str(&format!("/runs/{}", run.id)) {
        headers.insert(header::LOCATION, location);
    }
    if replayed {
        headers.insert(
            header::HeaderName::from_static("idempotent-replayed"),
            HeaderValue::from_static("true"),
        );
    }
    Ok(response)
}

/// The caller's runs, newest first, filtered and paged.
#[utoipa::path(
    get, path = "/runs", operation_id = "listRuns", tag = "runs",
    security(("bearer" = [])),
    params(RunListQuery),
    responses(
        (status = 200, description = "A page of runs", body = RunPage),
        ListErrors,
    )
)]
pub(crate) async fn list_runs(
    State(app): State<AppState>,
    Tenant(tenant): Tenant,
    ApiQuery(query): ApiQuery<RunListQuery>,
) -> Result<Json<RunPage>, ApiError> {
    let filter = RunFilter {
        status: query
            .status
            .map(|v| {
                RunStatus::ALL
                    .into_iter()
                    .find(|s| s.as_str() == v)
                    .ok_or_else(|| ApiError::bad_request(format!("unknown status '{v}'")))
            })
            .transpose()?,
        workflow: query.workflow,
    };
    let limit = page_size(query.limit, 50, 200)?;
    let page = app
        .engine
        .backend()
        .store
        .list_runs(&tenant, &filter, query.cursor.as_deref(), limit)
        .await
        .map_err(|e| match e {
            // The caller's cursor is what did not parse.
            siesta::ports::StoreError::Invalid(m) => ApiError::bad_request(m),
            other => other.into(),
        })?;
    let mut runs = Vec::with_capacity(page.runs.len());
    for run in &page.runs {
        let mut view = served_view(run, None, app.engine.config());
        app.place_in_line(run, &mut view).await;
        runs.push(view);
    }
    Ok(Json(RunPage {
        runs,
        next_cursor: page.next_cursor,
    }))
}

/// The run view; its `ETag` is the run's version.
#[utoipa::path(
    get, path = "/runs/{id}", operation_id = "getRun", tag = "runs",
    security(("bearer" = [])),
    params(("id" = String, Path, description = "The run's id")),
    responses(
        (status = 200, description = "The run", body = RunView,
            links(
                ("CompleteCallback" = (operation_id = "succeedCallback", parameters(("callback_id" = "$response.body#/waits/0/callback_id")))),
                ("FailCallback" = (operation_id = "failCallback", parameters(("callback_id" = "$response.body#/waits/0/callback_id")))),
                ("HeartbeatCallback" = (operation_id = "heartbeatCallback", parameters(("callback_id" = "$response.body#/waits/0/callback_id")))),
                ("CallbackWebhook" = (operation_id = "callbackWebhook", parameters(("token" = "$response.body#/waits/0/callback_id")))),
            )),
        ReadRunErrors,
    )
)]
pub(crate) async fn get_run(
    State(app): State<AppState>,
    Tenant(tenant): Tenant,
    ApiPath(id): ApiPath<String>,
) -> Result<Response, ApiError> {
    let run = app
        .engine
        .get_run(&tenant, &RunId::from(id.as_str()))
        .await?;
    app.run_answer(StatusCode::OK, &tenant, &run).await
}

/// Long-poll for the outcome: `Prefer: wait=N` holds the request until the run
/// finishes or N seconds pass.
#[utoipa::path(
    get, path = "/runs/{id}/result", operation_id = "getRunResult", tag = "runs",
    security(("bearer" = [])),
    params(
        ("id" = String, Path, description = "The run's id"),
        ("Prefer" = Option<String>, Header, description = "`wait=N` (N <= 60): wait up to N seconds for the run to finish"),
    ),
    responses(
        (status = 200, description = "The run finished", body = RunResult),
        (status = 202, description = "Not finished yet: the run view", body = RunView),
        ReadRunErrors,
    )
)]
pub(crate) async fn get_run_result(
    State(app): State<AppState>,
    Tenant(tenant): Tenant,
    ApiPath(id): ApiPath<String>,
    PreferWait(wait): PreferWait,
    cap: Option<Extension<crate::MaxWait>>,
) -> Result<Response, ApiError> {
    let run = app
        .await_finish(
            &tenant,
            &RunId::from(id.as_str()),
            wait.unwrap_or(Duration::ZERO),
            cap.map(|c| c.0),
        )
        .await?;
    if !run.status.is_finished() {
        return app.run_answer(StatusCode::ACCEPTED, &tenant, &run).await;
    }
    let result = RunResult {
        id: run.id.to_string(),
        status: run.status,
        output: run
            .output
            .as_ref()
            .map(|p| view::payload_json(run.id.as_str(), p)),
        error: run.error.clone(),
    };
    let mut response = Json(result).into_response();
    if let Ok(etag) = HeaderValue::from_str(&format!("\"{}\"", run.version)) {
        response.headers_mut().insert(header::ETAG, etag);
    }
    Ok(response)
}

/// The run's timeline events after a sequence number.
#[utoipa::path(
    get, path = "/runs/{id}/timeline", operation_id = "getRunTimeline", tag = "runs",
    security(("bearer" = [])),
    params(("id" = String, Path, description = "The run's id"), TimelineQuery),
    responses(
        (status = 200, description = "A page of events", body = Timeline),
        ReadRunErrors,
    )
)]
pub(crate) async fn get_run_timeline(
    State(app): State<AppState>,
    Tenant(tenant): Tenant,
    ApiPath(id): ApiPath<String>,
    ApiQuery(query): ApiQuery<TimelineQuery>,
) -> Result<Json<Timeline>, ApiError> {
    let id = RunId::from(id.as_str());
    app.engine.get_run(&tenant, &id).await?;
    let after = sequence_after(query.after)?;
    let limit = page_size(query.limit, 100, 1000)?;
    let events = app
        .engine
        .backend()
        .store
        .timeline(&tenant, &id, after, limit)
        .await?;
    let next_after = events.last().map_or(after, |e| e.seq);
    let events = events
        .into_iter()
        .map(|e| timeline_event_view(id.as_str(), e))
        .collect();
    Ok(Json(Timeline { events, next_after }))
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

/// What queued a start's run, by name: its concurrency limit, start rate or debounce.
fn queued_by(run: &siesta::Run) -> Option<String> {
    if run.status != siesta::RunStatus::Queued {
        return None;
    }
    match (&run.held, &run.queued) {
        (Some(held), _) => Some(match &held.reason {
            siesta::HoldReason::Debounce { name, .. } | siesta::HoldReason::Rate { name, .. } => {
                name.clone()
            }
        }),
        (None, Some(at)) => Some(at.limit.clone()),
        (None, None) => None,
    }
}
