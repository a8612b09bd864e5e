//! Streams: chunks a run publishes while it works (a model's tokens, progress), for
//! readers to follow live. See `docs/streams.md`.
//!
//! Invariants this module keeps, and why:
//! - **A chunk is never published twice by a replay.** The workflow's body runs again
//!   on every replay, so a publish from the body is skipped while its branch replays
//!   what the journal holds (the rule of [`Context::log`]), and the chunks it does
//!   append carry a key — the branch and the publish's place in it, the same on every
//!   replay — that the store appends once: a branch that crashed before its first
//!   checkpoint runs its publishes again, and the store drops the ones it has. A step's
//!   closure runs only for a live attempt, never on replay. The price, at a crash
//!   between a body's publish and the next journaled operation: the chunk may be lost
//!   (the replay skips it), never doubled.
//! - **A failed attempt's chunks are marked void, not removed.** Streams are append-
//!   only and offsets never move, so a reader that has shown them can be told. Every
//!   execution of a step's closure opens each stream it writes with a
//!   [`ChunkKind::Discard`] chunk naming the step (what an interrupted execution of it
//!   published before is void), and a failed attempt appends one more after its last
//!   chunk. A reader that drops a step's earlier chunks at each `discard` shows exactly
//!   the text of the step's attempt that succeeded.
//! - **Publishing is not journaled.** A stream is output for people watching, not
//!   state the run decides on: no checkpoint, no position, and no non-determinism if
//!   the code publishes more or less on replay.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use serde::Serialize;

use super::Context;
use crate::error::{Error, ErrorKind, StepError};
use crate::model::{Position, RunId, TenantId};
use crate::ports::{ChunkKind, NewChunk, StoreError, StreamStore, valid_stream_name};
use crate::time::Clock;

fn stream_error(name: &str, e: StoreError) -> Error {
    let kind = match e {
        StoreError::Invalid(_) => ErrorKind::InvalidConfig,
        _ => ErrorKind::Storage,
    };
    Error::new(kind, format!("stream '{name}': {e}"), None)
}

fn checked_name(name: &str) -> Result<(), Error> {
    if valid_stream_name(name) {
        Ok(())
    } else {
        Err(Error::new(
            ErrorKind::InvalidConfig,
            format!("invalid stream name '{name}': 1 to 64 of A-Z a-z 0-9 _ - ."),
            None,
        ))
    }
}

/// A named stream of the run, written from the workflow's body: `ctx.stream("progress")`.
///
/// Cheap to clone. A publish made while the branch replays is skipped (it was made
/// when the branch first ran), so each reaches the stream once. Inside a step's
/// closure use [`StepContext::stream`](super::StepContext::stream) instead, whose
/// chunks carry the step's attempt.
#[derive(Clone)]
pub struct Stream {
    ctx: Context,
    name: String,
}

impl Context {
    /// The run's stream `name` (1 to 64 of `A-Z a-z 0-9 _ - .`), to publish chunks to
    /// from the workflow's body. Readers follow it at `GET /runs/{id}/streams/{name}`;
    /// it is closed when the run finishes, or earlier by [`Stream::close`].
    ///
    /// ```ignore
    /// ctx.stream("progress").publish(&"looking the order up").await?;
    /// ```
    pub fn stream(&self, name: &str) -> Stream {
        Stream {
            ctx: self.clone(),
            name: name.to_owned(),
        }
    }
}

impl Stream {
    /// The stream's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Append `data` (any JSON, at most 32 KiB) to the stream, once: skipped while this
    /// branch replays. Fails with a validation error when the stream is closed or the
    /// chunk too large.
    pub async fn publish<T: Serialize + ?Sized>(&self, data: &T) -> Result<(), Error> {
        let data = serde_json::to_value(data)?;
        self.append(ChunkKind::Data, data).await
    }

    /// Close the stream: readers see its end, and later publishes fail. Skipped on
    /// replay like a publish. A run's streams are closed anyway when it finishes.
    pub async fn close(&self) -> Result<(), Error> {
        self.append(ChunkKind::End, serde_json::Value::Null).await
    }

    async fn append(&self, kind: ChunkKind, data: serde_json::Value) -> Result<(), Error> {
        checked_name(&self.name)?;
        let shared = &self.ctx.shared;
        // The publish's place in its branch, counted whether or not it is skipped: the
        // same on every replay, so it keys the chunk.
        let path = self
            .ctx
            .path
            .as_ref()
            .map(|p| p.0.clone())
            .unwrap_or_default();
        let n = {
            let mut st = shared.state();
            let n = st
                .stream_publishes
                .entry((path.clone(), self.name.clone()))
                .or_insert(0);
            *n += 1;
            *n - 1
        };
        if self.ctx.is_replaying() || shared.checking {
            return Ok(());
        }
        // Readers outside the run see the chunk at once: what it could carry (a held
        // callback's URL) is durable first.
        self.ctx.flush_held().await;
        let chunk = NewChunk {
            kind,
            data,
            step: None,
            attempt: None,
            at: shared.now(),
            key: Some(format!("{path}#{n}")),
        };
        shared
            .backend
            .streams
            .append(&shared.tenant, &shared.run_id, &self.name, &[chunk])
            .await
            .map(|_| ())
            .map_err(|e| stream_error(&self.name, e))
    }
}

/// What a step's attempt needs to publish: the store, the attempt, and the streams it
/// has written to so far (each opened with a discard marker, and marked again when the
/// attempt fails).
#[derive(Clone)]
pub(crate) struct AttemptStreams {
    store: Arc<dyn StreamStore>,
    clock: Arc<dyn Clock>,
    tenant: TenantId,
    run_id: RunId,
    step: Position,
    attempt: u32,
    opened: Arc<Mutex<BTreeSet<String>>>,
}

impl std::fmt::Debug for AttemptStreams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AttemptStreams")
            .field("step", &self.step)
            .field("attempt", &self.attempt)
            .finish_non_exhaustive()
    }
}

impl AttemptStreams {
    pub(crate) fn new(ctx: &Context, step: &Position, attempt: u32) -> Self {
        AttemptStreams {
            store: ctx.shared.backend.streams.clone(),
            clock: ctx.shared.clock.clone(),
            tenant: ctx.shared.tenant.clone(),
            run_id: ctx.shared.run_id.clone(),
            step: step.clone(),
            attempt,
            opened: Arc::default(),
        }
    }

    fn chunk(&self, kind: ChunkKind, data: serde_json::Value) -> NewChunk {
        NewChunk {
            kind,
            data,
            step: Some(self.step.clone()),
            attempt: Some(self.attempt),
            at: self.clock.now(),
            key: None,
        }
    }

    /// The attempt failed: mark void what it published, on every stream it wrote to.
    /// A marker that cannot be written is logged, not fatal: the failure is journaled
    /// all the same, and the next attempt's opening marker voids the chunks anyway.
    pub(crate) async fn attempt_failed(&self) {
        let opened: Vec<String> = self
            .opened
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .cloned()
            .collect();
        for name in opened {
            let marker = self.chunk(ChunkKind::Discard, serde_json::Value::Null);
            if let Err(e) = self
                .store
                .append(&self.tenant, &self.run_id, &name, &[marker])
                .await
            {
                tracing::warn!(
                    target: "siesta::workflow",
                    tenant = %self.tenant,
                    run_id = %self.run_id,
                    position = %self.step,
                    attempt = self.attempt,
                    "could not mark the failed attempt's chunks on stream '{name}': {e}"
                );
            }
        }
    }
}

/// A named stream of the run, written from a step's closure:
/// `step.stream("tokens")`. Its chunks carry the step and the attempt.
#[derive(Clone, Debug)]
pub struct StepStream {
    streams: AttemptStreams,
    name: String,
}

impl StepStream {
    pub(crate) fn new(streams: AttemptStreams, name: &str) -> Self {
        StepStream {
            streams,
            name: name.to_owned(),
        }
    }

    /// The stream's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Append `data` (any JSON, at most 32 KiB), tagged with this step and attempt.
    /// The first publish of this execution to the stream is preceded, in the same
    /// write, by a [`ChunkKind::Discard`] marker: whatever an earlier execution of the
    /// step published is void.
    ///
    /// Its error is a [`StepError`], for `?` in the step's closure: retryable when
    /// storage failed, fatal when the name or the chunk is invalid or the stream closed.
    pub async fn publish<T: Serialize + ?Sized>(&self, data: &T) -> Result<(), StepError> {
        if !valid_stream_name(&self.name) {
            return Err(StepError::new(
                "InvalidStream",
                format!(
                    "invalid stream name '{}': 1 to 64 of A-Z a-z 0-9 _ - .",
                    self.name
                ),
                false,
            ));
        }
        let data = serde_json::to_value(data)?;
        let first = self
            .streams
            .opened
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(self.name.clone());
        let mut chunks = Vec::with_capacity(2);
        if first {
            chunks.push(
                self.streams
                    .chunk(ChunkKind::Discard, serde_json::Value::Null),
            );
        }
        chunks.push(self.streams.chunk(ChunkKind::Data, data));
        let s = &self.streams;
        let written = s
            .store
            .append(&s.tenant, &s.run_id, &self.name, &chunks)
            .await;
        if written.is_err() && first {
            // Not opened after all: the next publish writes the marker again.
            s.opened
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&self.name);
        }
        written.map(|_| ()).map_err(|e| {
            let message = format!("stream '{}': {e}", self.name);
            match e {
                StoreError::Invalid(_) => StepError::new("InvalidStream", message, false),
                StoreError::Gone(_) => StepError::new("StreamClosed", message, false),
                _ => StepError::new("Storage", message, true),
            }
        })
    }
}
