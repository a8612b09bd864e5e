//! The streams ([`StreamStore`]): chunks a run publishes, in the same file as the run,
//! keyed by the run's key, the stream's name and the offset.
//!
//! An append is one savepoint of the group-committing writer: it reads the stream's
//! last chunk (an `End` refuses the append) and inserts the new ones right after it,
//! so offsets are gapless and two appends never share one — the writer runs one write
//! at a time. Durable like every other write: answered after the fsync that covers it.

use async_trait::async_trait;
use rusqlite::{OptionalExtension, params};
use siesta::ports::*;
use siesta::*;

use crate::{EmbeddedBackend, from_json, sql, to_json};

/// Schema version 2: the streams' chunks.
pub(crate) const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS stream_chunks (
    run INTEGER NOT NULL, stream TEXT NOT NULL, offset INTEGER NOT NULL, body TEXT NOT NULL,
    PRIMARY KEY (run, stream, offset));
";

/// What a file that holds runs needs for version 2: nothing, no run has streams yet.
pub(crate) const BACKFILL: &str = "";

/// Schema version 3: the keys of keyed chunks (a workflow body's), each with the
/// offset its chunk was stored at.
pub(crate) const KEYS_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS stream_keys (
    run INTEGER NOT NULL, stream TEXT NOT NULL, key TEXT NOT NULL, offset INTEGER NOT NULL,
    PRIMARY KEY (run, stream, key)) WITHOUT ROWID;
";

#[async_trait]
impl StreamStore for EmbeddedBackend {
    async fn append(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        stream: &str,
        chunks: &[NewChunk],
    ) -> Result<u64, StoreError> {
        check_append(stream, chunks)?;
        let bodies = chunks.iter().map(to_json).collect::<Result<Vec<_>, _>>()?;
        let keys: Vec<Option<String>> = chunks.iter().map(|c| c.key.clone()).collect();
        let (tenant, run_id, stream) = (
            tenant.as_str().to_owned(),
            run_id.as_str().to_owned(),
            stream.to_owned(),
        );
        self.tx_of(tenant.clone(), move |tx, _| {
            let run_key: i64 = tx
                .query_row(
                    "SELECT key FROM runs WHERE tenant = ?1 AND run_id = ?2",
                    params![tenant, run_id],
                    |r| r.get(0),
                )
                .optional()
                .map_err(sql)?
                .ok_or(StoreError::NotFound)?;
            let last: Option<(i64, String)> = tx
                .prepare_cached(
                    "SELECT offset, body FROM stream_chunks WHERE run = ?1 AND stream = ?2
                     ORDER BY offset DESC LIMIT 1",
                )
                .and_then(|mut s| {
                    s.query_row(params![run_key, stream], |r| Ok((r.get(0)?, r.get(1)?)))
                        .optional()
                })
                .map_err(sql)?;
            let key = keys.first().cloned().flatten();
            if let Some(key) = &key {
                let stored: Option<i64> = tx
                    .prepare_cached(
                        "SELECT offset FROM stream_keys WHERE run = ?1 AND stream = ?2 AND key = ?3",
                    )
                    .and_then(|mut s| s.query_row(params![run_key, stream, key], |r| r.get(0)).optional())
                    .map_err(sql)?;
                if let Some(offset) = stored {
                    return Ok(offset as u64);
                }
            }
            let first = match last {
                None => 0,
                Some((offset, body)) => {
                    let chunk: NewChunk = from_json(&body)?;
                    if chunk.kind == ChunkKind::End {
                        return Err(StoreError::Gone(format!("stream '{stream}' is closed")));
                    }
                    offset + 1
                }
            };
            let mut insert = tx
                .prepare_cached(
                    "INSERT INTO stream_chunks (run, stream, offset, body) VALUES (?1, ?2, ?3, ?4)",
                )
                .map_err(sql)?;
            for (i, body) in bodies.iter().enumerate() {
                insert
                    .execute(params![run_key, stream, first + i as i64, body])
                    .map_err(sql)?;
            }
            if let Some(key) = &key {
                tx.prepare_cached(
                    "INSERT INTO stream_keys (run, stream, key, offset) VALUES (?1, ?2, ?3, ?4)",
                )
                .and_then(|mut s| s.execute(params![run_key, stream, key, first]))
                .map_err(sql)?;
            }
            Ok(first as u64)
        })
        .await
    }

    async fn read(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        stream: &str,
        from: u64,
        limit: usize,
    ) -> Result<Vec<StreamChunk>, StoreError> {
        let (tenant, run_id, stream) = (
            tenant.as_str().to_owned(),
            run_id.as_str().to_owned(),
            stream.to_owned(),
        );
        let from = i64::try_from(from).unwrap_or(i64::MAX);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.read(move |tx| {
            let mut query = tx
                .prepare_cached(
                    "SELECT c.offset, c.body FROM runs JOIN stream_chunks AS c ON c.run = runs.key
                     WHERE runs.tenant = ?1 AND runs.run_id = ?2 AND c.stream = ?3 AND c.offset >= ?4
                     ORDER BY c.offset LIMIT ?5",
                )
                .map_err(sql)?;
            let rows = query
                .query_map(params![tenant, run_id, stream, from, limit], |r| {
                    Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?))
                })
                .map_err(sql)?;
            let mut chunks = Vec::new();
            for row in rows {
                let (offset, body) = row.map_err(sql)?;
                chunks.push(StreamChunk {
                    offset: offset as u64,
                    chunk: from_json(&body)?,
                });
            }
            Ok(chunks)
        })
        .await
    }
}
