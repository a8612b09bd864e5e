//! A run's streams: the query of `GET /runs/{id}/streams/{name}` and its chunks, as a
//! JSON page or as Server-Sent Events (each event's data a [`StreamChunkView`]).

use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::time::Rfc3339;

/// Where to read from and how long to wait, for `GET /runs/{id}/streams/{name}`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct StreamQuery {
    /// The first offset to read (default 0, the stream's start). A `Last-Event-ID`
    /// header wins over it: reading goes on one past that id.
    pub from: Option<u64>,
    /// JSON pages only: when no chunk is there yet, wait up to this many seconds for
    /// one (or for the stream's end) before answering (default 0; capped like
    /// `Prefer: wait`).
    pub wait: Option<u64>,
    /// Chunks per page, 1 to 1000 (default 100).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<u32>,
}

/// One chunk of a stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[schema(as = StreamChunk)]
pub struct StreamChunkView {
    /// Its place in the stream: 0 for the first, gapless; its SSE event id.
    pub offset: u64,
    /// `data`; `discard`: drop every earlier chunk of the same `step` (its attempt
    /// failed or was interrupted); `end`: the run closed the stream.
    pub kind: String,
    /// What the run published (`null` for `discard` and `end`).
    pub data: serde_json::Value,
    /// The step that published it (its operation id); absent from the workflow's body.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
    /// The step's attempt (from 1) that published it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
    /// When it was published.
    pub at: Rfc3339,
}

/// A page of a stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[schema(as = StreamPage)]
pub struct StreamPageView {
    /// The chunks from the offset asked for, in order.
    pub chunks: Vec<StreamChunkView>,
    /// Pass as `from` for the next page.
    pub next: u64,
    /// The stream has ended (closed by the run, or the run finished): nothing follows
    /// `next`.
    pub closed: bool,
}
