//! A typed client of Siesta's HTTP API, written once for the CLI, the benches and the
//! tests: one method per route, requests and answers in the API's own types
//! ([`RunView`], [`Timeline`], [`StartRun`]... from `siesta-api-types`, which the server
//! derives its routes and OpenAPI document from) so the server and its clients share one
//! definition, and errors a caller can act on ([`Error`]). It depends on no server
//! crate: no web framework, only an HTTP client (reqwest).
//!
//! Path segments are percent-encoded by one function ([`path_segment`], the API's
//! own); queries are encoded by reqwest.

pub use reqwest::StatusCode;
use reqwest::{Method, RequestBuilder};
use serde::Serialize;
use serde::de::DeserializeOwned;

pub use siesta::{DivergedRun, Divergence, RunExport, SkippedRun, UpgradeReport};
/// Every request body, query and view of the API (`siesta-api-types`).
pub use siesta_api_types as types;
pub use siesta_api_types::{
    Accepted, BuildList, BuildView, CallbackFailure, DeadLetteredRunPage, DeadLetteredRunQuery,
    DeadLetteredRunView, ErrorBody, Health, LimitKeyView, LimitList, LimitView, QueuedView,
    Received, Redriven, ReplayCheckView, Resolution, ResolvedError, Rfc3339, RunPage, RunResult,
    RunView, ScheduleList, ScheduleView, StartRun, StreamChunkView, StreamPageView, StreamQuery,
    Timeline, TimelineEventView, TimelineQuery, ValueRef, path_segment,
};

/// Filters and paging of [`Client::list_runs`]: the query of `GET /runs`.
pub use siesta_api_types::RunListQuery as RunFilter;
pub use siesta_api_types::{PauseWorkflowBody, RestartBody, RestartView, WorkflowPauseView};
pub use siesta_api_types::{
    RunsActionFilter, RunsActionKind, RunsActionList, RunsActionStatus, RunsActionView,
    StartRunsAction,
};

/// What a failed call went wrong with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The request did not reach the API, or its answer did not arrive.
    #[error("{url}: {source}")]
    Transport {
        /// What was asked.
        url: String,
        /// Why it failed.
        #[source]
        source: reqwest::Error,
    },
    /// The API refused: its status, its error code (`not_found`, `version_mismatch`...)
    /// and message.
    #[error("{status}: {code}: {message}")]
    Api {
        /// The HTTP status.
        status: StatusCode,
        /// The API's stable error code (`http_<status>` when the body said none).
        code: String,
        /// What happened, for a person.
        message: String,
        /// The whole error body, when it was one (a `diverged` 409 carries where).
        body: Option<serde_json::Value>,
    },
    /// The answer was not what the route answers.
    #[error("{url}: the answer ({status}) does not decode: {source}")]
    Decode {
        /// What was asked.
        url: String,
        /// The answer's status.
        status: StatusCode,
        /// Why it did not decode.
        #[source]
        source: serde_json::Error,
    },
}

impl Error {
    /// The API's status, when the API answered with an error.
    pub fn status(&self) -> Option<StatusCode> {
        match self {
            Error::Api { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// The API's error code, when the API answered with an error.
    pub fn code(&self) -> Option<&str> {
        match self {
            Error::Api { code, .. } => Some(code),
            _ => None,
        }
    }
}

/// Options of [`Client::start_run`].
#[derive(Debug, Clone, Default)]
pub struct StartOptions {
    /// `Idempotency-Key`: a retry with the same key and body answers with the first run.
    pub idempotency_key: Option<String>,
    /// `Prefer: wait=N`: wait up to N seconds for the run to finish.
    pub wait_secs: Option<u64>,
    /// `traceparent`: the run joins this W3C trace.
    pub traceparent: Option<String>,
    /// `concurrency_key`: the key the run counts under for concurrency limits whose
    /// key is given at start.
    pub concurrency_key: Option<String>,
}

/// The answer of `GET /runs/{id}/result`: the outcome, or the run while it is not
/// finished.
#[derive(Debug)]
pub enum RunOutcome {
    /// It finished (200).
    Finished(RunResult),
    /// Not finished yet (202): the run view.
    Pending(Box<RunView>),
}

/// A client of one Siesta API.
#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
    base: String,
    api_key: Option<String>,
}

impl Client {
    /// A client of the API at `base_url` (`http://127.0.0.1:8080`), without an API key.
    pub fn new(base_url: impl Into<String>) -> Client {
        Client::with_http(reqwest::Client::new(), base_url)
    }

    /// A client sending its requests through `http` (timeouts, proxies...).
    pub fn with_http(http: reqwest::Client, base_url: impl Into<String>) -> Client {
        Client {
            http,
            base: base_url.into().trim_end_matches('/').to_string(),
            api_key: None,
        }
    }

    /// Sends `key` as the bearer token of every request.
    pub fn api_key(mut self, key: Option<String>) -> Client {
        self.api_key = key;
        self
    }

    /// The API's base URL.
    pub fn base_url(&self) -> &str {
        &self.base
    }

    fn request(&self, method: Method, path: &str) -> RequestBuilder {
        let request = self.http.request(method, format!("{}{path}", self.base));
        match &self.api_key {
            Some(key) => request.bearer_auth(key),
            None => request,
        }
    }

    /// Sends `request`; its URL and the open response, whatever its status.
    async fn execute(&self, request: RequestBuilder) -> Result<(String, reqwest::Response), Error> {
        let request = request.build().map_err(|source| Error::Transport {
            url: self.base.clone(),
            source,
        })?;
        let url = request.url().to_string();
        let response = self
            .http
            .execute(request)
            .await
            .map_err(|source| Error::Transport {
                url: url.clone(),
                source,
            })?;
        Ok((url, response))
    }

    /// Sends `request`; the answer's status and body, or the API's error.
    async fn send(&self, request: RequestBuilder) -> Result<(StatusCode, String, Vec<u8>), Error> {
        let (url, response) = self.execute(request).await?;
        let status = response.status();
        let body = response
            .bytes()
            .await
            .map_err(|source| Error::Transport {
                url: url.clone(),
                source,
            })?
            .to_vec();
        if status.is_success() {
            return Ok((status, url, body));
        }
        Err(refusal(status, &body))
    }

    async fn call<T: DeserializeOwned>(&self, request: RequestBuilder) -> Result<T, Error> {
        let (status, url, body) = self.send(request).await?;
        decode(&url, status, &body)
    }

    /// `POST /runs`: starts `workflow` with `input`.
    pub async fn start_run(
        &self,
        workflow: &str,
        input: &serde_json::Value,
        options: &StartOptions,
    ) -> Result<RunView, Error> {
        let start = StartRun {
            workflow: workflow.to_owned(),
            input: input.clone(),
            concurrency_key: options.concurrency_key.clone(),
        };
        let mut request = self.request(Method::POST, "/runs").json(&start);
        if let Some(key) = &options.idempotency_key {
            request = request.header("Idempotency-Key", key);
        }
        if let Some(wait) = options.wait_secs {
            request = request.header("Prefer", format!("wait={wait}"));
        }
        if let Some(parent) = &options.traceparent {
            request = request.header("traceparent", parent);
        }
        self.call(request).await
    }

    /// `GET /runs`: a page of the caller's runs, newest first.
    pub async fn list_runs(&self, filter: &RunFilter) -> Result<RunPage, Error> {
        self.call(self.request(Method::GET, "/runs").query(filter))
            .await
    }

    /// `GET /runs/{id}`: the run.
    pub async fn get_run(&self, id: &str) -> Result<RunView, Error> {
        self.call(self.request(Method::GET, &run_path(id, "")))
            .await
    }

    /// `GET /runs/{id}/export`: the run and its replay input (journal and deliveries),
    /// what `myapp replay --export FILE` checks.
    pub async fn export_run(&self, id: &str) -> Result<RunExport, Error> {
        self.call(self.request(Method::GET, &run_path(id, "/export")))
            .await
    }

    /// `GET /runs/{id}/replay-check`: whether its journal replays on the build serving
    /// the API (what [`Client::upgrade_run`] would need), read-only.
    pub async fn replay_check(&self, id: &str) -> Result<ReplayCheckView, Error> {
        self.call(self.request(Method::GET, &run_path(id, "/replay-check")))
            .await
    }

    /// `GET /runs/{id}/result`: its outcome, waiting up to `wait_secs` for it to finish.
    pub async fn run_result(&self, id: &str, wait_secs: Option<u64>) -> Result<RunOutcome, Error> {
        let mut request = self.request(Method::GET, &run_path(id, "/result"));
        if let Some(wait) = wait_secs {
            request = request.header("Prefer", format!("wait={wait}"));
        }
        let (status, url, body) = self.send(request).await?;
        if status == StatusCode::ACCEPTED {
            decode(&url, status, &body).map(|v| RunOutcome::Pending(Box::new(v)))
        } else {
            decode(&url, status, &body).map(RunOutcome::Finished)
        }
    }

    /// `GET /runs/{id}/timeline`: a page of its events after `after` (its
    /// `next_after` is the next page's `after`).
    pub async fn timeline(
        &self,
        id: &str,
        after: u64,
        limit: Option<u32>,
    ) -> Result<Timeline, Error> {
        let query = TimelineQuery {
            after: Some(after),
            limit,
        };
        self.call(
            self.request(Method::GET, &run_path(id, "/timeline"))
                .query(&query),
        )
        .await
    }

    /// `GET /runs/{id}/streams/{name}` as a JSON page: the chunks from offset `from`,
    /// waiting up to `wait_secs` for one (or for the stream's end) when none is there
    /// yet, at most `limit` (the API's default when unset). The page's `next` is the
    /// next page's `from`; once `closed`, nothing follows.
    pub async fn stream_page(
        &self,
        id: &str,
        name: &str,
        from: u64,
        wait_secs: Option<u64>,
        limit: Option<u32>,
    ) -> Result<StreamPageView, Error> {
        let query = StreamQuery {
            from: Some(from),
            wait: wait_secs,
            limit,
        };
        self.call(
            self.request(Method::GET, &stream_path(id, name))
                .query(&query),
        )
        .await
    }

    /// `GET /runs/{id}/streams/{name}` as Server-Sent Events from offset `from`: the
    /// answer, its body the event stream (each chunk an event whose id is its offset
    /// and whose data is a [`StreamChunkView`]; `end` last), once the API accepted.
    pub async fn stream_events(
        &self,
        id: &str,
        name: &str,
        from: u64,
    ) -> Result<reqwest::Response, Error> {
        let query = StreamQuery {
            from: Some(from),
            ..StreamQuery::default()
        };
        let request = self
            .request(Method::GET, &stream_path(id, name))
            .query(&query)
            .header(reqwest::header::ACCEPT, "text/event-stream");
        let (url, response) = self.execute(request).await?;
        if response.status().is_success() {
            return Ok(response);
        }
        let status = response.status();
        let body = response
            .bytes()
            .await
            .map_err(|source| Error::Transport { url, source })?;
        Err(refusal(status, &body))
    }

    /// Its whole timeline, page after page.
    pub async fn full_timeline(&self, id: &str) -> Result<Vec<TimelineEventView>, Error> {
        let mut events = Vec::new();
        let mut after = 0;
        loop {
            let page = self.timeline(id, after, Some(1000)).await?;
            if page.events.is_empty() {
                return Ok(events);
            }
            after = page.next_after;
            events.extend(page.events);
        }
    }

    /// `POST /runs/{id}/cancel`, with `If-Match` when `if_match` is the version it
    /// must still have.
    pub async fn cancel(&self, id: &str, if_match: Option<u64>) -> Result<RunView, Error> {
        self.transition(&run_path(id, "/cancel"), if_match).await
    }

    /// `POST /runs/{id}/pause`: paused at once (`paused`), or, running, at its next
    /// boundary (`pause_requested`), with `If-Match` as for [`Client::cancel`].
    pub async fn pause(&self, id: &str, if_match: Option<u64>) -> Result<RunView, Error> {
        self.transition(&run_path(id, "/pause"), if_match).await
    }

    /// `POST /runs/{id}/resume` (a parked or paused run), with `If-Match` as for
    /// [`Client::cancel`].
    pub async fn resume(&self, id: &str, if_match: Option<u64>) -> Result<RunView, Error> {
        self.transition(&run_path(id, "/resume"), if_match).await
    }

    /// `POST /runs/{id}/upgrade`: moves the unfinished run to the build serving the
    /// API when its journal replays there (a 409 `diverged` otherwise, the divergence
    /// in the error's body), with `If-Match` as for [`Client::cancel`].
    pub async fn upgrade_run(&self, id: &str, if_match: Option<u64>) -> Result<RunView, Error> {
        self.transition(&run_path(id, "/upgrade"), if_match).await
    }

    /// `POST /builds/{build}/upgrade`: upgrades every unfinished run of `build` (`-`:
    /// runs that recorded none) whose journal replays on the serving build; the report
    /// lists the others.
    pub async fn upgrade_build(&self, build: &str) -> Result<UpgradeReport, Error> {
        let path = format!("/builds/{}/upgrade", path_segment(build));
        self.call(self.request(Method::POST, &path)).await
    }

    /// `POST /runs/{id}/restart`: goes on from a step (`restart.from`, default the first
    /// operation that failed), in place or, with `restart.as_new`, as a new run forked
    /// from it (the answer is then the fork). A 409 `diverged` when the journal before
    /// the point does not replay on the serving build; `If-Match` as for
    /// [`Client::cancel`].
    pub async fn restart(
        &self,
        id: &str,
        restart: &RestartBody,
        if_match: Option<u64>,
    ) -> Result<RunView, Error> {
        let mut request = self
            .request(Method::POST, &run_path(id, "/restart"))
            .json(restart);
        if let Some(version) = if_match {
            request = request.header("If-Match", format!("\"{version}\""));
        }
        self.call(request).await
    }

    /// `POST /runs/actions`: start a bulk action — `action` on every run of the
    /// caller's that `filter` matches, paced at `rate` runs a second — answered at once
    /// with the job (`running`); follow it with [`Client::runs_action`].
    pub async fn start_runs_action(
        &self,
        action: &StartRunsAction,
    ) -> Result<RunsActionView, Error> {
        self.call(self.request(Method::POST, "/runs/actions").json(action))
            .await
    }

    /// `GET /runs/actions/{id}`: a bulk action's progress (`matched`, `done`,
    /// `skipped`, `failed`) and where it is.
    pub async fn runs_action(&self, id: &str) -> Result<RunsActionView, Error> {
        self.call(self.request(Method::GET, &actions_path(id, "")))
            .await
    }

    /// `GET /runs/actions`: the caller's bulk actions, newest first.
    pub async fn runs_actions(&self) -> Result<RunsActionList, Error> {
        self.call(self.request(Method::GET, "/runs/actions")).await
    }

    /// `POST /runs/actions/{id}/cancel`: the job acts on no more runs (those acted on
    /// stay acted on); a finished job is answered as it is.
    pub async fn cancel_runs_action(&self, id: &str) -> Result<RunsActionView, Error> {
        self.call(self.request(Method::POST, &actions_path(id, "/cancel")))
            .await
    }

    async fn transition(&self, path: &str, if_match: Option<u64>) -> Result<RunView, Error> {
        let mut request = self.request(Method::POST, path);
        if let Some(version) = if_match {
            request = request.header("If-Match", format!("\"{version}\""));
        }
        self.call(request).await
    }

    /// `POST /runs/{id}/operations/{position}/resolve`: what happened to a tool call
    /// whose outcome is unknown.
    pub async fn resolve_operation(
        &self,
        id: &str,
        position: &str,
        resolution: &Resolution,
        if_match: Option<u64>,
    ) -> Result<RunView, Error> {
        let path = run_path(
            id,
            &format!("/operations/{}/resolve", path_segment(position)),
        );
        let mut request = self.request(Method::POST, &path).json(resolution);
        if let Some(version) = if_match {
            request = request.header("If-Match", format!("\"{version}\""));
        }
        self.call(request).await
    }

    /// `POST /runs/{id}/events/{name}`: delivers event `name` with `value`;
    /// `delivery_id` (`Idempotency-Key`) makes a repeat a duplicate.
    pub async fn send_event(
        &self,
        id: &str,
        name: &str,
        value: &serde_json::Value,
        delivery_id: Option<&str>,
    ) -> Result<Accepted, Error> {
        let path = run_path(id, &format!("/events/{}", path_segment(name)));
        self.deliver(&path, value, delivery_id).await
    }

    /// `POST /runs/{id}/messages`: injects a message.
    pub async fn send_message(
        &self,
        id: &str,
        message: &serde_json::Value,
        delivery_id: Option<&str>,
    ) -> Result<Accepted, Error> {
        self.deliver(&run_path(id, "/messages"), message, delivery_id)
            .await
    }

    /// `POST /callbacks/{callback_id}/succeed`: completes a callback with `value`.
    pub async fn complete_callback(
        &self,
        callback_id: &str,
        value: &serde_json::Value,
        delivery_id: Option<&str>,
    ) -> Result<Accepted, Error> {
        let path = format!("/callbacks/{}/succeed", path_segment(callback_id));
        self.deliver(&path, value, delivery_id).await
    }

    /// `POST /callbacks/{callback_id}/fail`: fails a callback.
    pub async fn fail_callback(
        &self,
        callback_id: &str,
        failure: &CallbackFailure,
        delivery_id: Option<&str>,
    ) -> Result<Accepted, Error> {
        let path = format!("/callbacks/{}/fail", path_segment(callback_id));
        self.deliver(&path, failure, delivery_id).await
    }

    /// `POST /callbacks/{callback_id}/heartbeat`: the callback's holder is alive.
    pub async fn heartbeat_callback(&self, callback_id: &str) -> Result<Accepted, Error> {
        let path = format!("/callbacks/{}/heartbeat", path_segment(callback_id));
        self.call(self.request(Method::POST, &path)).await
    }

    async fn deliver(
        &self,
        path: &str,
        body: &impl Serialize,
        delivery_id: Option<&str>,
    ) -> Result<Accepted, Error> {
        let mut request = self.request(Method::POST, path).json(body);
        if let Some(id) = delivery_id {
            request = request.header("Idempotency-Key", id);
        }
        self.call(request).await
    }

    /// `POST /hooks/{token}`: a callback's public webhook (the URL a run view shows in
    /// its `waits[].url`) with `body`; `webhook_id` (`webhook-id`) makes a repeat a
    /// duplicate. Sent without the API key: the token is the credential.
    pub async fn callback_webhook(
        &self,
        token: &str,
        body: &serde_json::Value,
        webhook_id: Option<&str>,
    ) -> Result<Received, Error> {
        let url = format!("{}/hooks/{}", self.base, path_segment(token));
        let mut request = self.http.post(url).json(body);
        if let Some(id) = webhook_id {
            request = request.header("webhook-id", id);
        }
        self.call(request).await
    }

    /// `POST /hooks/sources/{source}`: a provider's webhook, `body` exactly as signed
    /// and `headers` its signature headers (`webhook-id`, `webhook-signature`...).
    /// Sent without the API key: a source authenticates by its signature.
    pub async fn source_webhook(
        &self,
        source: &str,
        headers: &[(String, String)],
        body: Vec<u8>,
    ) -> Result<Received, Error> {
        let url = format!("{}/hooks/sources/{}", self.base, path_segment(source));
        let mut request = self
            .http
            .post(url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body);
        for (name, value) in headers {
            request = request.header(name, value);
        }
        self.call(request).await
    }

    /// `GET /dead-letters`: a page of the caller's runs parked because a wake-up of
    /// their own was dead-lettered, `limit` a page (1 to 200; the API's default when
    /// unset), after `cursor` (the previous page's `next_cursor`).
    pub async fn dead_lettered_runs(
        &self,
        cursor: Option<&str>,
        limit: Option<u32>,
    ) -> Result<DeadLetteredRunPage, Error> {
        let query = DeadLetteredRunQuery {
            cursor: cursor.map(str::to_owned),
            limit,
        };
        self.call(self.request(Method::GET, "/dead-letters").query(&query))
            .await
    }

    /// The old name of [`Client::dead_lettered_runs`]: the page lists runs that dead
    /// letters parked, not the dead letters (queue messages) themselves.
    #[deprecated(note = "use `dead_lettered_runs`: the page lists the runs dead letters parked")]
    pub async fn dead_letters(
        &self,
        cursor: Option<&str>,
        limit: Option<u32>,
    ) -> Result<DeadLetteredRunPage, Error> {
        self.dead_lettered_runs(cursor, limit).await
    }

    /// `POST /dead-letters/{id}/redrive`: resumes one run a dead letter parked (`id` is
    /// the run's).
    pub async fn redrive(&self, id: &str, if_match: Option<u64>) -> Result<RunView, Error> {
        let path = format!("/dead-letters/{}/redrive", path_segment(id));
        self.transition(&path, if_match).await
    }

    /// `POST /dead-letters/redrive`: resumes every run dead letters parked (at most
    /// 1 000 a call; call again while `redriven` is 1 000).
    pub async fn redrive_all(&self) -> Result<Redriven, Error> {
        self.call(self.request(Method::POST, "/dead-letters/redrive"))
            .await
    }

    /// `GET /builds`: the caller's builds.
    pub async fn builds(&self) -> Result<BuildList, Error> {
        self.call(self.request(Method::GET, "/builds")).await
    }

    /// `GET /limits`: every concurrency limit, with the caller's keys in use (how many
    /// runs hold each, how many wait).
    pub async fn limits(&self) -> Result<LimitList, Error> {
        self.call(self.request(Method::GET, "/limits")).await
    }

    /// `GET /schedules`: the caller's schedules, each with its next tick.
    pub async fn schedules(&self) -> Result<ScheduleList, Error> {
        self.call(self.request(Method::GET, "/schedules")).await
    }

    /// `POST /workflows/{name}/pause`: a bulk pause of its runs (the answer's `job`),
    /// and until resumed its new starts and schedules' ticks are created paused
    /// (`starts` `"queue"`, the default) or refused (`"refuse"`).
    pub async fn pause_workflow(
        &self,
        name: &str,
        starts: Option<&str>,
    ) -> Result<WorkflowPauseView, Error> {
        let body = PauseWorkflowBody {
            starts: starts.map(str::to_owned),
        };
        let path = format!("/workflows/{}/pause", path_segment(name));
        self.call(self.request(Method::POST, &path).json(&body))
            .await
    }

    /// `POST /workflows/{name}/resume`: its starts begin again and a bulk resume lets
    /// its paused runs go on (the answer's `job`).
    pub async fn resume_workflow(&self, name: &str) -> Result<WorkflowPauseView, Error> {
        let path = format!("/workflows/{}/resume", path_segment(name));
        self.call(self.request(Method::POST, &path)).await
    }

    /// `GET /workflows/{name}/pause`: whether it is paused, by whom, since when.
    pub async fn workflow_pause(&self, name: &str) -> Result<WorkflowPauseView, Error> {
        let path = format!("/workflows/{}/pause", path_segment(name));
        self.call(self.request(Method::GET, &path)).await
    }

    /// `POST /schedules/{name}/pause`: the schedule fires no tick until resumed.
    pub async fn pause_schedule(&self, name: &str) -> Result<ScheduleView, Error> {
        self.call(self.request(Method::POST, &schedule_path(name, "/pause")))
            .await
    }

    /// `POST /schedules/{name}/resume`: the schedule fires from its next tick on.
    pub async fn resume_schedule(&self, name: &str) -> Result<ScheduleView, Error> {
        self.call(self.request(Method::POST, &schedule_path(name, "/resume")))
            .await
    }

    /// `POST /schedules/{name}/trigger`: a run of the schedule now; with an
    /// `idempotency_key`, a retry answers the run the first call started.
    pub async fn trigger_schedule(
        &self,
        name: &str,
        idempotency_key: Option<&str>,
    ) -> Result<RunView, Error> {
        let mut request = self.request(Method::POST, &schedule_path(name, "/trigger"));
        if let Some(key) = idempotency_key {
            request = request.header("Idempotency-Key", key);
        }
        self.call(request).await
    }

    /// `GET /healthz`.
    pub async fn health(&self) -> Result<Health, Error> {
        self.call(self.request(Method::GET, "/healthz")).await
    }

    /// `GET /openapi.json`: the API's OpenAPI document.
    pub async fn openapi(&self) -> Result<serde_json::Value, Error> {
        self.call(self.request(Method::GET, "/openapi.json")).await
    }
}

/// `/runs/{id}/streams/{name}`, both encoded.
fn stream_path(id: &str, name: &str) -> String {
    run_path(id, &format!("/streams/{}", path_segment(name)))
}

/// `/schedules/{name}` (encoded) followed by `rest`.
fn schedule_path(name: &str, rest: &str) -> String {
    format!("/schedules/{}{rest}", path_segment(name))
}

/// `/runs/actions/{id}` (encoded) followed by `rest`.
fn actions_path(id: &str, rest: &str) -> String {
    format!("/runs/actions/{}{rest}", path_segment(id))
}

/// `/runs/{id}` (encoded) followed by `rest`.
fn run_path(id: &str, rest: &str) -> String {
    format!("/runs/{}{rest}", path_segment(id))
}

/// The API's refusal: `status` and the error body it sent (`{"error": {"code",
/// "message"}}`), or the body as text when it is not one.
fn refusal(status: StatusCode, body: &[u8]) -> Error {
    let json = serde_json::from_slice::<serde_json::Value>(body).ok();
    let error = json.as_ref().map(|j| &j["error"]);
    let code = error
        .and_then(|e| e["code"].as_str())
        .map_or_else(|| format!("http_{}", status.as_u16()), str::to_string);
    let message = error
        .and_then(|e| e["message"].as_str())
        .map(str::to_string)
        .unwrap_or_else(|| String::from_utf8_lossy(body).into_owned());
    Error::Api {
        status,
        code,
        message,
        body: json,
    }
}

fn decode<T: DeserializeOwned>(url: &str, status: StatusCode, body: &[u8]) -> Result<T, Error> {
    serde_json::from_slice(body).map_err(|source| Error::Decode {
        url: url.to_string(),
        status,
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shared query types leave out what is unset, so the API's defaults apply.
    #[test]
    fn an_unset_filter_sends_no_parameter() {
        let url = |query: &dyn Fn(RequestBuilder) -> RequestBuilder| {
            let request = query(reqwest::Client::new().get("http://api/runs"));
            request.build().unwrap().url().to_string()
        };
        assert_eq!(url(&|r| r.query(&RunFilter::default())), "http://api/runs");
        let filter = RunFilter {
            status: Some("parked".into()),
            limit: Some(5),
            ..RunFilter::default()
        };
        assert_eq!(
            url(&|r| r.query(&filter)),
            "http://api/runs?status=parked&limit=5"
        );
        let from = StreamQuery {
            from: Some(3),
            ..StreamQuery::default()
        };
        assert_eq!(url(&|r| r.query(&from)), "http://api/runs?from=3");
    }
}
