//! [`StreamStore`] on the runs table: each chunk one item in its run's partition, at
//! sort key `S#<stream>#<offset, 20 digits>` (see `docs/dynamodb.md`).
//!
//! Offsets are claimed by the items themselves: a chunk is put conditioned on its
//! offset being free (`attribute_not_exists(pk)`), so two writers racing for an offset
//! cannot both have it; the loser reads the stream's end again and retries after it.
//! A writer remembers where each stream it wrote ends, so in the usual case (one step
//! publishing a model's tokens) a chunk costs one `PutItem` — 1 WCU per KB — and
//! nothing else; the end is read (one `Query` of one item) only the first time, or
//! after a lost race. An append of several chunks is one `TransactWriteItems` (2 WCU
//! per KB and item, all or none).
//!
//! A single put whose answer is lost (a timeout after it applied) is retried by the
//! SDK and then fails its condition on its own item: each append carries a token the
//! failed condition returns (`ALL_OLD`), and a match is the earlier success. A
//! transaction's retry is answered as the original through its `ClientRequestToken`.
//!
//! A keyed chunk (a workflow body's, which a replay may publish again) is written in
//! one `TransactWriteItems` with a record of its key (`SK#<stream>#<key>`, holding the
//! offset), conditioned on the key being new: 4 WCU, and a second publish of the same
//! key writes nothing and answers the offset of the first.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{
    AttributeValue, Put, ReturnConsumedCapacity, ReturnValuesOnConditionCheckFailure,
    TransactWriteItem,
};
use siesta::ports::*;
use siesta::*;

use crate::error::{corrupt, sdk};
use crate::item::{Item, n, s};
use crate::keys::*;
use crate::store::CapacityMeter;

/// How many times an append that lost the race for its offsets reads the end again.
const RACE_ATTEMPTS: usize = 16;
/// Stream ends remembered; past that the memory is cleared (a miss costs one `Query`).
const REMEMBERED_ENDS: usize = 10_000;

const BODY: &str = "body";
const OFFSET: &str = "offset";
/// The token of the append that wrote the item.
const WRITER: &str = "writer";

/// The streams on DynamoDB.
pub(crate) struct DynamoStreams {
    client: Client,
    table: String,
    capacity: Arc<CapacityMeter>,
    /// Where each stream this process appended to ends: (partition, stream) → the next
    /// offset.
    ends: Mutex<HashMap<(String, String), u64>>,
}

fn chunk_item(
    pk: &str,
    stream: &str,
    offset: u64,
    chunk: &NewChunk,
    writer: &str,
) -> Result<Item, StoreError> {
    let body = serde_json::to_string(chunk).map_err(|e| StoreError::Invalid(e.to_string()))?;
    Ok(HashMap::from([
        (PK.to_owned(), s(pk)),
        (SK.to_owned(), s(stream_sk(stream, offset))),
        (OFFSET.to_owned(), n(offset)),
        (BODY.to_owned(), s(body)),
        (WRITER.to_owned(), s(writer)),
    ]))
}

pub(crate) fn chunk_from_item(item: &Item) -> Result<StreamChunk, StoreError> {
    let offset = match item.get(OFFSET) {
        Some(AttributeValue::N(v)) => v
            .parse()
            .map_err(|_| corrupt("stream chunk", format!("offset {v}")))?,
        _ => return Err(corrupt("stream chunk", "no offset")),
    };
    let chunk = match item.get(BODY) {
        Some(AttributeValue::S(body)) => {
            serde_json::from_str(body).map_err(|e| corrupt("stream chunk", e))?
        }
        _ => return Err(corrupt("stream chunk", "no body")),
    };
    Ok(StreamChunk { offset, chunk })
}

impl DynamoStreams {
    pub(crate) fn new(client: Client, table: String, capacity: Arc<CapacityMeter>) -> Self {
        DynamoStreams {
            client,
            table,
            capacity,
            ends: Mutex::default(),
        }
    }

    fn remembered(&self, pk: &str, stream: &str) -> Option<u64> {
        self.ends
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&(pk.to_owned(), stream.to_owned()))
            .copied()
    }

    fn remember(&self, pk: &str, stream: &str, next: Option<u64>) {
        let mut ends = self.ends.lock().unwrap_or_else(|e| e.into_inner());
        let key = (pk.to_owned(), stream.to_owned());
        match next {
            Some(next) => {
                if ends.len() >= REMEMBERED_ENDS {
                    ends.clear();
                }
                ends.insert(key, next);
            }
            None => {
                ends.remove(&key);
            }
        }
    }

    /// The offset after the stream's last chunk, read from the table (one `Query` of
    /// one item, strongly consistent); [`StoreError::Gone`] if the stream has ended.
    async fn end(&self, pk: &str, stream: &str) -> Result<u64, StoreError> {
        let out = self
            .client
            .query()
            .table_name(&self.table)
            .key_condition_expression("pk = :pk AND begins_with(sk, :prefix)")
            .expression_attribute_values(":pk", s(pk))
            .expression_attribute_values(":prefix", s(stream_prefix(stream)))
            .scan_index_forward(false)
            .limit(1)
            .consistent_read(true)
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await
            .map_err(|e| sdk("stream_end", e))?;
        self.capacity.add(false, out.consumed_capacity());
        match out.items().first() {
            None => Ok(0),
            Some(item) => {
                let last = chunk_from_item(item)?;
                if last.chunk.kind == ChunkKind::End {
                    Err(StoreError::Gone(format!("stream '{stream}' is closed")))
                } else {
                    Ok(last.offset + 1)
                }
            }
        }
    }

    /// Write `chunks` from offset `first`: `Ok(true)` if written, `Ok(false)` if an
    /// offset was taken (nothing written).
    async fn write_at(
        &self,
        pk: &str,
        stream: &str,
        first: u64,
        chunks: &[NewChunk],
    ) -> Result<bool, StoreError> {
        let writer = uuid::Uuid::new_v4().to_string();
        let items = chunks
            .iter()
            .enumerate()
            .map(|(i, c)| chunk_item(pk, stream, first + i as u64, c, &writer))
            .collect::<Result<Vec<_>, _>>()?;
        if let [item] = items.as_slice() {
            let result = self
                .client
                .put_item()
                .table_name(&self.table)
                .set_item(Some(item.clone()))
                .condition_expression("attribute_not_exists(pk)")
                .return_values_on_condition_check_failure(
                    ReturnValuesOnConditionCheckFailure::AllOld,
                )
                .return_consumed_capacity(ReturnConsumedCapacity::Total)
                .send()
                .await;
            return match result {
                Ok(out) => {
                    self.capacity.add(true, out.consumed_capacity());
                    Ok(true)
                }
                Err(e) => match e.as_service_error() {
                    Some(PutItemError::ConditionalCheckFailedException(c)) => {
                        // Our own item, when the SDK retried a put that had applied.
                        let ours = c
                            .item()
                            .and_then(|old| old.get(WRITER))
                            .is_some_and(|w| *w == s(&writer));
                        Ok(ours)
                    }
                    _ => Err(sdk("stream_append", e)),
                },
            };
        }
        let mut transact = Vec::with_capacity(items.len());
        for item in items {
            let put = Put::builder()
                .table_name(&self.table)
                .set_item(Some(item))
                .condition_expression("attribute_not_exists(pk)")
                .build()
                .map_err(|e| StoreError::Invalid(format!("building a DynamoDB request: {e}")))?;
            transact.push(TransactWriteItem::builder().put(put).build());
        }
        let mut backoff = Duration::from_millis(10);
        for attempt in 1..=RACE_ATTEMPTS {
            let result = self
                .client
                .transact_write_items()
                .set_transact_items(Some(transact.clone()))
                .client_request_token(writer.clone())
                .return_consumed_capacity(ReturnConsumedCapacity::Total)
                .send()
                .await;
            match result {
                Ok(out) => {
                    self.capacity.add(true, out.consumed_capacity());
                    return Ok(true);
                }
                Err(e) => {
                    let codes: Vec<String> = match e.as_service_error() {
                        Some(TransactWriteItemsError::TransactionCanceledException(c)) => c
                            .cancellation_reasons()
                            .iter()
                            .map(|r| r.code().unwrap_or("None").to_owned())
                            .collect(),
                        _ => return Err(sdk("stream_append", e)),
                    };
                    if codes.iter().any(|c| c == "ConditionalCheckFailed") {
                        return Ok(false);
                    }
                    if codes.iter().any(|c| c == "ValidationError") || attempt == RACE_ATTEMPTS {
                        return Err(StoreError::Unavailable(format!(
                            "stream_append: transaction cancelled: {codes:?}"
                        )));
                    }
                    // Contention only: nothing was written; try again.
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_millis(500));
                }
            }
        }
        Err(StoreError::Unavailable("stream_append: gave up".into()))
    }
}

/// What a keyed append found.
enum Keyed {
    Written,
    /// The stream holds the key already, its chunk at this offset.
    Duplicate(u64),
    /// Another writer took the offset.
    Taken,
}

impl DynamoStreams {
    /// Write the keyed `chunk` at `offset` with its key's record, in one transaction.
    async fn write_keyed(
        &self,
        pk: &str,
        stream: &str,
        offset: u64,
        chunk: &NewChunk,
        key: &str,
    ) -> Result<Keyed, StoreError> {
        let writer = uuid::Uuid::new_v4().to_string();
        let record: Item = HashMap::from([
            (PK.to_owned(), s(pk)),
            (SK.to_owned(), s(stream_key_sk(stream, key))),
            (OFFSET.to_owned(), n(offset)),
        ]);
        let build = |item: Item, old: bool| {
            let mut put = Put::builder()
                .table_name(&self.table)
                .set_item(Some(item))
                .condition_expression("attribute_not_exists(pk)");
            if old {
                put = put.return_values_on_condition_check_failure(
                    ReturnValuesOnConditionCheckFailure::AllOld,
                );
            }
            put.build()
                .map(|p| TransactWriteItem::builder().put(p).build())
                .map_err(|e| StoreError::Invalid(format!("building a DynamoDB request: {e}")))
        };
        let items = vec![
            build(record, true)?,
            build(chunk_item(pk, stream, offset, chunk, &writer)?, false)?,
        ];
        let result = self
            .client
            .transact_write_items()
            .set_transact_items(Some(items))
            .client_request_token(writer)
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await;
        match result {
            Ok(out) => {
                self.capacity.add(true, out.consumed_capacity());
                Ok(Keyed::Written)
            }
            Err(e) => {
                let reasons = match e.as_service_error() {
                    Some(TransactWriteItemsError::TransactionCanceledException(c)) => {
                        c.cancellation_reasons().to_vec()
                    }
                    _ => return Err(sdk("stream_append", e)),
                };
                let failed = |i: usize| {
                    reasons.get(i).and_then(|r| r.code()) == Some("ConditionalCheckFailed")
                };
                if failed(0) {
                    let stored = reasons[0].item().and_then(|old| match old.get(OFFSET) {
                        Some(AttributeValue::N(v)) => v.parse().ok(),
                        _ => None,
                    });
                    return match stored {
                        Some(offset) => Ok(Keyed::Duplicate(offset)),
                        None => self
                            .stored_key(pk, stream, key)
                            .await
                            .map(|o| Keyed::Duplicate(o.unwrap_or(offset))),
                    };
                }
                if failed(1) {
                    return Ok(Keyed::Taken);
                }
                Err(StoreError::Unavailable(format!(
                    "stream_append: transaction cancelled: {:?}",
                    reasons.iter().map(|r| r.code()).collect::<Vec<_>>()
                )))
            }
        }
    }

    /// The offset the stream holds keyed chunk `key` at, if it does (one `GetItem`).
    async fn stored_key(
        &self,
        pk: &str,
        stream: &str,
        key: &str,
    ) -> Result<Option<u64>, StoreError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key(PK, s(pk))
            .key(SK, s(stream_key_sk(stream, key)))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| sdk("stream_key", e))?;
        Ok(out.item().and_then(|item| match item.get(OFFSET) {
            Some(AttributeValue::N(v)) => v.parse().ok(),
            _ => None,
        }))
    }

    async fn append_keyed(
        &self,
        pk: &str,
        stream: &str,
        chunk: &NewChunk,
        key: &str,
    ) -> Result<u64, StoreError> {
        let mut next = self.remembered(pk, stream);
        for _ in 0..RACE_ATTEMPTS {
            let first = match next {
                Some(first) => first,
                None => match self.end(pk, stream).await {
                    Ok(end) => end,
                    // An ended stream may hold this very chunk from before its end.
                    Err(StoreError::Gone(m)) => {
                        return match self.stored_key(pk, stream, key).await? {
                            Some(offset) => Ok(offset),
                            None => Err(StoreError::Gone(m)),
                        };
                    }
                    Err(e) => return Err(e),
                },
            };
            match self.write_keyed(pk, stream, first, chunk, key).await {
                Ok(Keyed::Written) => {
                    let ended = chunk.kind == ChunkKind::End;
                    self.remember(pk, stream, (!ended).then_some(first + 1));
                    return Ok(first);
                }
                Ok(Keyed::Duplicate(offset)) => return Ok(offset),
                Ok(Keyed::Taken) => next = None,
                Err(e) => {
                    self.remember(pk, stream, None);
                    return Err(e);
                }
            }
        }
        self.remember(pk, stream, None);
        Err(StoreError::Unavailable(format!(
            "stream_append: lost the race for stream '{stream}' {RACE_ATTEMPTS} times"
        )))
    }
}

#[async_trait]
impl StreamStore for DynamoStreams {
    async fn append(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        stream: &str,
        chunks: &[NewChunk],
    ) -> Result<u64, StoreError> {
        check_append(stream, chunks)?;
        let pk = run_pk(tenant, run_id);
        if let [chunk] = chunks
            && let Some(key) = &chunk.key
        {
            return self.append_keyed(&pk, stream, chunk, key).await;
        }
        let mut next = self.remembered(&pk, stream);
        for _ in 0..RACE_ATTEMPTS {
            let first = match next {
                Some(first) => first,
                None => self.end(&pk, stream).await?,
            };
            match self.write_at(&pk, stream, first, chunks).await {
                Ok(true) => {
                    let end = first + chunks.len() as u64;
                    // A stream that ended takes no more: forget it, so the next append
                    // reads the end and is refused.
                    let ended = chunks.iter().any(|c| c.kind == ChunkKind::End);
                    self.remember(&pk, stream, (!ended).then_some(end));
                    return Ok(first);
                }
                // Another writer took an offset: read where the stream ends now.
                Ok(false) => next = None,
                Err(e) => {
                    self.remember(&pk, stream, None);
                    return Err(e);
                }
            }
        }
        self.remember(&pk, stream, None);
        Err(StoreError::Unavailable(format!(
            "stream_append: lost the race for stream '{stream}' {RACE_ATTEMPTS} times"
        )))
    }

    async fn read(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        stream: &str,
        from: u64,
        limit: usize,
    ) -> Result<Vec<StreamChunk>, StoreError> {
        if !valid_stream_name(stream) {
            return Err(StoreError::Invalid(format!(
                "invalid stream name '{stream}'"
            )));
        }
        let pk = run_pk(tenant, run_id);
        let mut chunks = Vec::new();
        let mut start = None;
        while chunks.len() < limit {
            let out = self
                .client
                .query()
                .table_name(&self.table)
                .key_condition_expression("pk = :pk AND sk BETWEEN :from AND :to")
                .expression_attribute_values(":pk", s(&pk))
                .expression_attribute_values(":from", s(stream_sk(stream, from)))
                .expression_attribute_values(":to", s(stream_sk(stream, u64::MAX)))
                .consistent_read(true)
                .limit((limit - chunks.len()).min(1000) as i32)
                .set_exclusive_start_key(start.take())
                .return_consumed_capacity(ReturnConsumedCapacity::Total)
                .send()
                .await
                .map_err(|e| sdk("stream_read", e))?;
            self.capacity.add(false, out.consumed_capacity());
            for item in out.items() {
                chunks.push(chunk_from_item(item)?);
            }
            start = out.last_evaluated_key.filter(|k| !k.is_empty());
            if start.is_none() {
                break;
            }
        }
        Ok(chunks)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(kind: ChunkKind, data: serde_json::Value) -> NewChunk {
        NewChunk {
            kind,
            data,
            step: Some(Position::from("llm#0")),
            attempt: Some(2),
            at: Timestamp(1_700_000_000_000),
            key: None,
        }
    }

    #[test]
    fn a_chunk_item_reads_back_as_the_chunk_at_its_offset() {
        // GIVEN a chunk of a step's second attempt
        let c = chunk(ChunkKind::Data, serde_json::json!("Hel"));
        // WHEN it is laid out as an item at offset 7 and read back
        let item = chunk_item("R#t#r", "tokens", 7, &c, "w-1").unwrap();
        let back = chunk_from_item(&item).unwrap();
        // THEN it is the same chunk, at its key's offset
        assert_eq!(
            back,
            StreamChunk {
                offset: 7,
                chunk: c
            }
        );
        assert_eq!(item.get(SK), Some(&s(stream_sk("tokens", 7))));
        assert_eq!(item.get(WRITER), Some(&s("w-1")));
    }

    #[test]
    fn a_chunk_item_without_its_offset_is_corrupt() {
        let mut item = chunk_item(
            "R#t#r",
            "tokens",
            0,
            &chunk(ChunkKind::End, serde_json::Value::Null),
            "w",
        )
        .unwrap();
        item.remove(OFFSET);
        assert!(matches!(
            chunk_from_item(&item),
            Err(StoreError::Invalid(_))
        ));
    }
}
