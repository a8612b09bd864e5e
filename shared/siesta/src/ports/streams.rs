//! The stream store: durable, append-only streams of chunks a run publishes, and the
//! checks every backend makes on an append.

use super::*;

/// The longest a stream's name may be; see [`valid_stream_name`].
pub const MAX_STREAM_NAME: usize = 64;

/// The most bytes one chunk's data may take as JSON (well under DynamoDB's 400 KB item
/// limit, and what one server-sent event should carry).
pub const MAX_CHUNK_BYTES: usize = 32 * 1024;

/// The most chunks one [`StreamStore::append`] may carry (one `TransactWriteItems`).
pub const MAX_CHUNKS_PER_APPEND: usize = MAX_TRANSACTION_ITEMS;

/// Whether `name` may name a stream: 1 to [`MAX_STREAM_NAME`] ASCII letters, digits,
/// `_`, `-` and `.`, so it is one URL path segment and one key component as it is.
pub fn valid_stream_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_STREAM_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// What a chunk of a stream is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChunkKind {
    /// Data the run published.
    Data,
    /// Every earlier chunk that the same step published (any attempt up to and
    /// including this chunk's) is void: the attempt that published it failed, or was
    /// interrupted and runs again. A reader that shows a step's text drops it.
    Discard,
    /// The run closed the stream; nothing follows.
    End,
}

/// A chunk to append ([`StreamStore::append`]); the store assigns its offset.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewChunk {
    /// What it is.
    pub kind: ChunkKind,
    /// Its data (`null` for markers).
    #[serde(default)]
    pub data: serde_json::Value,
    /// The step that published it (its position); `None` from the workflow's body.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<Position>,
    /// The step's attempt (from 1) that published it; `None` from the body.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
    /// When it was published.
    pub at: Timestamp,
    /// Its key, for a chunk that may be appended again (a workflow body's publish,
    /// re-run when its pass is replayed): a chunk whose key the stream holds already is
    /// not appended a second time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

/// A stored chunk: what was appended, at its offset.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamChunk {
    /// Its place in the stream: 0 for the first chunk, then one more for each, with no
    /// gaps.
    pub offset: u64,
    /// The chunk as appended.
    #[serde(flatten)]
    pub chunk: NewChunk,
}

/// Durable, append-only streams of chunks, named per run and addressed by offset.
///
/// Offsets are gapless: the first chunk of a stream is at 0, and each append takes the
/// offsets right after the last chunk stored, so concurrent writers never share an
/// offset and a reader that has read up to `n` has every chunk before `n`. A stream
/// that ends with a [`ChunkKind::End`] chunk takes no more. Tenant-scoped like every
/// key: another tenant's run of the same id has other streams. The store does not
/// check that the run exists or is unfinished (that would cost a read of the run per
/// append on DynamoDB): the engine appends only for runs it is running.
#[async_trait]
pub trait StreamStore: Send + Sync + 'static {
    /// Append `chunks` (1 to [`MAX_CHUNKS_PER_APPEND`], each at most
    /// [`MAX_CHUNK_BYTES`] of data) at the end of the stream, all or none; returns the
    /// offset of the first. A chunk with a [`NewChunk::key`] is appended alone; when the
    /// stream holds its key already nothing is written and the answer is the offset it
    /// was stored at. [`StoreError::Gone`] if the stream has ended,
    /// [`StoreError::Invalid`] if the request is too large, a keyed chunk is not alone,
    /// or the name is invalid. On DynamoDB one conditional `PutItem` for one chunk, one
    /// `TransactWriteItems` for more or for a keyed chunk (with its key's item), each
    /// item conditioned on its key being free (a lost race for an offset re-reads the
    /// end and tries again).
    async fn append(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        stream: &str,
        chunks: &[NewChunk],
    ) -> Result<u64, StoreError>;

    /// The chunks at offsets `from` and after, in offset order, at most `limit`. One
    /// `Query`, strongly consistent: every append acknowledged before the read began
    /// is in it.
    async fn read(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        stream: &str,
        from: u64,
        limit: usize,
    ) -> Result<Vec<StreamChunk>, StoreError>;
}

/// Checks every backend makes on an append before writing anything.
pub fn check_append(stream: &str, chunks: &[NewChunk]) -> Result<(), StoreError> {
    if !valid_stream_name(stream) {
        return Err(StoreError::Invalid(format!(
            "invalid stream name '{stream}': 1 to {MAX_STREAM_NAME} of A-Z a-z 0-9 _ - ."
        )));
    }
    if chunks.is_empty() || chunks.len() > MAX_CHUNKS_PER_APPEND {
        return Err(StoreError::Invalid(format!(
            "an append carries 1 to {MAX_CHUNKS_PER_APPEND} chunks, not {}",
            chunks.len()
        )));
    }
    if chunks.len() > 1 && chunks.iter().any(|c| c.key.is_some()) {
        return Err(StoreError::Invalid(
            "a keyed chunk is appended alone".to_owned(),
        ));
    }
    for chunk in chunks {
        let size = serde_json::to_vec(&chunk.data).map_or(usize::MAX, |v| v.len());
        if size > MAX_CHUNK_BYTES {
            return Err(StoreError::Invalid(format!(
                "a chunk's data is {size} bytes of JSON, over the limit of {MAX_CHUNK_BYTES}"
            )));
        }
    }
    Ok(())
}
