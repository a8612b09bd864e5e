//! Reading a run's streams as a reader sees them: a page of chunks, where the next
//! page starts, and whether the stream has ended.
//!
//! A stream is closed when it holds an [`ChunkKind::End`] chunk or when its run has
//! finished and the reader has every chunk. The run is read **before** the chunks:
//! every publish of a run happens before the checkpoint that finishes it, so a run
//! seen finished has all its chunks in the read that follows, and a reader told
//! `closed` has missed none.

use super::{Engine, EngineError};
use crate::model::{RunId, TenantId};
use crate::notify::RunWatch;
use crate::ports::{ChunkKind, StoreError, StreamChunk, valid_stream_name};

/// A page of a stream ([`Engine::read_stream`]).
#[derive(Debug, Clone, PartialEq)]
pub struct StreamPage {
    /// The chunks from the offset asked for, in offset order (an `End` chunk last).
    pub chunks: Vec<StreamChunk>,
    /// The offset to read from next: one past the last chunk, or the offset asked for
    /// when there was none.
    pub next: u64,
    /// The stream has ended: nothing will follow `next`.
    pub closed: bool,
}

/// The chunks a reader that honours [`ChunkKind::Discard`] shows: each `discard` drops
/// every earlier chunk of its step; markers and the `End` chunk are left out. What a
/// UI renders of a step's text is then exactly what the step's last attempt published.
pub fn visible(chunks: &[StreamChunk]) -> Vec<StreamChunk> {
    let mut shown: Vec<StreamChunk> = Vec::with_capacity(chunks.len());
    for c in chunks {
        match c.chunk.kind {
            ChunkKind::Data => shown.push(c.clone()),
            ChunkKind::Discard => {
                shown.retain(|s| s.chunk.step.is_none() || s.chunk.step != c.chunk.step)
            }
            ChunkKind::End => {}
        }
    }
    shown
}

impl Engine {
    /// Up to `limit` chunks of `tenant`'s run's stream `name` from offset `from`, and
    /// whether the stream is closed. [`EngineError::NotFound`] when the tenant has no
    /// such run; a stream nothing was published to is empty (and closed once the run
    /// finished).
    pub async fn read_stream(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        name: &str,
        from: u64,
        limit: usize,
    ) -> Result<StreamPage, EngineError> {
        if !valid_stream_name(name) {
            return Err(EngineError::Store(StoreError::Invalid(format!(
                "invalid stream name '{name}'"
            ))));
        }
        // First the run, then the chunks: see the module docs.
        let finished = self.get_run(tenant, run_id).await?.status.is_finished();
        let limit = limit.max(1);
        let mut chunks = self
            .backend
            .streams
            .read(tenant, run_id, name, from, limit)
            .await?;
        let end = chunks.iter().position(|c| c.chunk.kind == ChunkKind::End);
        if let Some(end) = end {
            chunks.truncate(end + 1);
        }
        let closed = end.is_some() || (finished && chunks.len() < limit);
        let next = chunks.last().map_or(from, |c| c.offset + 1);
        Ok(StreamPage {
            chunks,
            next,
            closed,
        })
    }

    /// Watch a run's streams, to hear at once when this process appends to any of
    /// them. Register before reading; see [`RunWatch`]. A run's end is heard with
    /// [`Engine::watch_run`].
    pub fn watch_streams(&self, tenant: &TenantId, run_id: &RunId) -> RunWatch {
        self.stream_watchers.watch(tenant, run_id)
    }
}
