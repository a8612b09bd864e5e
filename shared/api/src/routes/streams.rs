//! A run's streams: `GET /runs/{id}/streams/{name}`, as Server-Sent Events
//! (`Accept: text/event-stream`) or as long-poll JSON pages (what API Gateway, which
//! buffers a response until it ends, can carry).
//!
//! Both read from an offset — `?from=`, or the `Last-Event-ID` an `EventSource` sends
//! when it reconnects (the id of the last event it got, so reading goes on one past
//! it) — and say when the stream has ended, so a reader that reconnects anywhere gets
//! every chunk once, in order, and then the end. In a process that runs the workflows
//! (the dev server) an append or the run's end wakes a waiting reader at once; where
//! another process runs them (Lambda) the reader re-reads on a backoff from 25 ms to
//! 500 ms, and an event stream ends before the invocation's deadline (API Gateway
//! sends nothing until the response ends; the `EventSource` reconnects with its
//! `Last-Event-ID`).

use std::convert::Infallible;
use std::time::{Duration, Instant};

use axum::Json;
use axum::extract::{Extension, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use http::HeaderMap;
use siesta::ports::{ChunkKind, StreamChunk};
use siesta::*;
use siesta_api_types::{StreamChunkView, StreamPageView, StreamQuery};

use crate::auth::Tenant;
use crate::error::ApiError;
use crate::extract::{ApiPath, ApiQuery, page_size};
use crate::responses::*;
use crate::state::AppState;

/// The shortest and longest pause between two reads of a reader that no notification
/// reaches.
const POLL_MIN: Duration = Duration::from_millis(25);
const POLL_MAX: Duration = Duration::from_millis(500);

/// The view of chunk `c`.
fn chunk_view(c: StreamChunk) -> StreamChunkView {
    StreamChunkView {
        offset: c.offset,
        kind: kind_name(c.chunk.kind).to_owned(),
        data: c.chunk.data,
        step: c.chunk.step.map(|p| p.0),
        attempt: c.chunk.attempt,
        at: c.chunk.at.into(),
    }
}

fn kind_name(kind: ChunkKind) -> &'static str {
    match kind {
        ChunkKind::Data => "data",
        ChunkKind::Discard => "discard",
        ChunkKind::End => "end",
    }
}

/// The offset to start from: one past `Last-Event-ID` when sent, else `?from=`.
fn start_offset(headers: &HeaderMap, from: Option<u64>) -> Result<u64, ApiError> {
    match headers.get("last-event-id") {
        Some(v) => v
            .to_str()
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .and_then(|id| id.checked_add(1))
            .ok_or_else(|| ApiError::bad_request("Last-Event-ID must be a chunk's offset")),
        None => Ok(from.unwrap_or(0)),
    }
}

fn wants_events(headers: &HeaderMap) -> bool {
    headers
        .get(http::header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/event-stream"))
}

/// A reader of one stream from an offset.
struct Reader {
    app: AppState,
    tenant: TenantId,
    run_id: RunId,
    name: String,
    next: u64,
    limit: usize,
    streams: RunWatch,
    run: RunWatch,
}

impl Reader {
    fn new(
        app: AppState,
        tenant: TenantId,
        run_id: RunId,
        name: String,
        from: u64,
        limit: usize,
    ) -> Self {
        let streams = app.engine.watch_streams(&tenant, &run_id);
        let run = app.engine.watch_run(&tenant, &run_id);
        Reader {
            app,
            tenant,
            run_id,
            name,
            next: from,
            limit,
            streams,
            run,
        }
    }

    /// The next page: at once when it holds chunks or the stream has ended, else after
    /// waiting for either until `deadline` (an empty page then).
    async fn page(&mut self, deadline: Option<Instant>) -> Result<StreamPage, ApiError> {
        let mut backoff = POLL_MIN;
        loop {
            // Registered before the read: an append or an end in between is not missed.
            let appended = self.streams.changed();
            let ended = self.run.changed();
            let page = self
                .app
                .engine
                .read_stream(
                    &self.tenant,
                    &self.run_id,
                    &self.name,
                    self.next,
                    self.limit,
                )
                .await
                .map_err(stream_error)?;
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            if !page.chunks.is_empty() || page.closed || left.is_some_and(|l| l.is_zero()) {
                self.next = page.next;
                return Ok(page);
            }
            let pause = left.map_or(backoff, |l| backoff.min(l));
            tokio::select! {
                _ = appended => {}
                _ = ended => {}
                _ = tokio::time::sleep(pause) => backoff = (backoff * 2).min(POLL_MAX),
            }
        }
    }
}

fn stream_error(e: EngineError) -> ApiError {
    match e {
        EngineError::Store(siesta::ports::StoreError::Invalid(m)) => ApiError::bad_request(m),
        other => other.into(),
    }
}

fn event(chunk: StreamChunkView) -> Event {
    let event = Event::default().id(chunk.offset.to_string());
    let event = match chunk.kind.as_str() {
        // Data chunks are unnamed events: an `EventSource`'s `onmessage` gets them.
        "data" => event,
        other => event.event(other),
    };
    event
        .json_data(&chunk)
        .unwrap_or_else(|_| Event::default().comment("unserialisable chunk"))
}

/// A run's stream, from an offset: Server-Sent Events with `Accept: text/event-stream`
/// (each chunk's offset its event `id`; `discard` and `end` chunks as named events; a
/// last `end` event when the stream has ended; behind API Gateway the event stream
/// ends, without `end`, when the invocation's time is nearly spent, and the client
/// reconnects), otherwise a JSON page that waits up to `wait` seconds for a chunk.
#[utoipa::path(
    get, path = "/runs/{id}/streams/{name}", operation_id = "getRunStream", tag = "runs",
    security(("bearer" = [])),
    params(
        ("id" = String, Path, description = "The run's id"),
        ("name" = String, Path, description = "The stream's name (1 to 64 of A-Z a-z 0-9 _ - .)"),
        ("Last-Event-ID" = Option<String>, Header, description = "Resume one past this offset (sent by an EventSource that reconnects)"),
        StreamQuery,
    ),
    responses(
        (status = 200, description = "A page of chunks (JSON), or the chunks as they come (`text/event-stream`: events `id: <offset>`, unnamed for data, `discard`, and `end` last)",
            content(
                (StreamPageView = "application/json"),
                (String = "text/event-stream"),
            )),
        (status = 204, description = "Events only: a reconnect (`Last-Event-ID`) to a stream that ended with nothing after that id; an `EventSource` stops reconnecting"),
        ReadRunErrors,
    )
)]
pub(crate) async fn get_run_stream(
    State(app): State<AppState>,
    Tenant(tenant): Tenant,
    ApiPath((id, name)): ApiPath<(String, String)>,
    ApiQuery(query): ApiQuery<StreamQuery>,
    headers: HeaderMap,
    cap: Option<Extension<crate::MaxWait>>,
) -> Result<Response, ApiError> {
    // The document says int64 (offsets and seconds are stored as such): larger numbers
    // are refused, not read as a page past every chunk.
    if query.from.unwrap_or(0) > i64::MAX as u64 || query.wait.unwrap_or(0) > i64::MAX as u64 {
        return Err(ApiError::bad_request("from and wait are at most 2^63 - 1"));
    }
    let from = start_offset(&headers, query.from)?;
    let limit = page_size(query.limit, 100, 1000)?;
    let mut reader = Reader::new(
        app.clone(),
        tenant,
        RunId::from(id.as_str()),
        name,
        from,
        limit,
    );
    if !wants_events(&headers) {
        let cap = cap.map_or(app.max_wait, |c| c.0.0.min(app.max_wait));
        let wait = Duration::from_secs(query.wait.unwrap_or(0)).min(cap);
        let page = reader.page(Some(Instant::now() + wait)).await?;
        return Ok(Json(StreamPageView {
            chunks: page.chunks.into_iter().map(chunk_view).collect(),
            next: page.next,
            closed: page.closed,
        })
        .into_response());
    }
    // Behind API Gateway (a request that carries a `MaxWait`), which buffers the answer
    // until it ends, the event stream ends before the invocation must: the client gets
    // what came by then and reconnects from its last id. Elsewhere it stays open.
    let until = cap.map(|c| Instant::now() + c.0.0.min(app.max_wait));
    // The first page before the answer: a missing run or a bad name is a JSON error,
    // not an event stream that ends at once.
    let first = reader.page(Some(Instant::now())).await?;
    if first.closed && first.chunks.is_empty() && headers.contains_key("last-event-id") {
        // An `EventSource` reconnecting to a stream that ended after what it has: 204
        // is what tells it to stop reconnecting (an event stream would end at once and
        // it would come back, again and again).
        return Ok(http::StatusCode::NO_CONTENT.into_response());
    }
    let events = futures::stream::unfold(
        (reader, Some(first), false),
        move |(mut reader, pending, done)| async move {
            if done {
                return None;
            }
            let page = match pending {
                Some(page) => page,
                // A failed read ends the stream; the client reconnects from its last id.
                None => {
                    let page = reader.page(until).await.ok()?;
                    if page.chunks.is_empty() && !page.closed {
                        // Its time is spent (`until`).
                        return None;
                    }
                    page
                }
            };
            // An `end` chunk is the stream's `end` event already (with its offset).
            let end_chunk = page
                .chunks
                .last()
                .is_some_and(|c| c.chunk.kind == ChunkKind::End);
            let mut events: Vec<Result<Event, Infallible>> = page
                .chunks
                .into_iter()
                .map(|c| Ok(event(chunk_view(c))))
                .collect();
            if page.closed && !end_chunk {
                events.push(Ok(Event::default()
                    .event("end")
                    .json_data(serde_json::json!({ "next": page.next }))
                    .unwrap_or_default()));
            }
            Some((futures::stream::iter(events), (reader, None, page.closed)))
        },
    );
    use futures::StreamExt;
    Ok(Sse::new(events.flatten())
        .keep_alive(KeepAlive::default())
        .into_response())
}
