//! The forms a checkpoint item holds its entries and events in: tagged JSON grouped into
//! parts, and deflated together when that costs fewer write units.

use std::io::{Read, Write};

use aws_sdk_dynamodb::types::AttributeValue;
use flate2::Compression;
use flate2::read::DeflateDecoder;
use flate2::write::DeflateEncoder;
use serde::de::DeserializeOwned;
use siesta::ports::StoreError;
use siesta::*;

use super::{CHECKPOINT_ITEM_BYTES, PACKED};
use crate::error::corrupt;
use crate::item::{Item, to_json};

/// A checkpoint's entries and events as JSON, in that order, each tagged with whether
/// it is an entry (else an event): what [`in_parts`] groups.
pub(super) fn tagged_json<'a>(
    journal: &'a [JournalEntry],
    events: &'a [TimelineEvent],
) -> impl Iterator<Item = Result<(String, bool), StoreError>> + 'a {
    journal
        .iter()
        .map(|e| to_json(e).map(|j| (j, true)))
        .chain(events.iter().map(|e| to_json(e).map(|j| (j, false))))
}

/// One part of [`tagged_json`]: its entries' JSON, its events' JSON.
pub(super) fn entries_and_events(part: Vec<(String, bool)>) -> (Vec<String>, Vec<String>) {
    let (entries, events): (Vec<_>, Vec<_>) = part.into_iter().partition(|(_, e)| *e);
    let json = |v: Vec<(String, bool)>| v.into_iter().map(|(j, _)| j).collect();
    (json(entries), json(events))
}

/// `jsons`, in order, in groups of at most [`CHECKPOINT_ITEM_BYTES`] of JSON each (one
/// larger alone in its group), each JSON with its tag.
pub(super) fn in_parts<T>(
    jsons: impl Iterator<Item = Result<(String, T), StoreError>>,
) -> Result<Vec<Vec<(String, T)>>, StoreError> {
    let mut parts = Vec::new();
    let mut part = Vec::new();
    let mut bytes = 0;
    for json in jsons {
        let (json, tag) = json?;
        if !part.is_empty() && bytes + json.len() > CHECKPOINT_ITEM_BYTES {
            parts.push(std::mem::take(&mut part));
            bytes = 0;
        }
        bytes += json.len() + 1;
        part.push((json, tag));
    }
    if !part.is_empty() {
        parts.push(part);
    }
    Ok(parts)
}

/// The deflated JSON object `{"journal": [...], "events": [...]}` of already serialized
/// entries and events; a checkpoint tail's with `"checkpoints": n` too ([`PackedTail`](super::tail::PackedTail)).
pub(super) fn pack(
    entries: &[String],
    events: &[String],
    checkpoints: Option<u64>,
) -> Result<Vec<u8>, StoreError> {
    let count = checkpoints.map_or(String::new(), |n| format!(",\"checkpoints\":{n}"));
    let json = format!(
        "{{\"journal\":[{}],\"events\":[{}]{count}}}",
        entries.join(","),
        events.join(",")
    );
    let mut deflate = DeflateEncoder::new(Vec::new(), Compression::default());
    deflate
        .write_all(json.as_bytes())
        .and_then(|()| deflate.finish())
        .map_err(|e| StoreError::Invalid(format!("deflating a checkpoint item: {e}")))
}

/// What a packed checkpoint item holds, as its JSON object; `T` picks what is parsed.
pub(super) fn unpack<T: DeserializeOwned>(
    item: &Item,
    what: &str,
) -> Result<Option<T>, StoreError> {
    let Some(packed) = item.get(PACKED) else {
        return Ok(None);
    };
    let AttributeValue::B(blob) = packed else {
        return Err(corrupt(what, format!("{PACKED} is not binary")));
    };
    inflate(blob.as_ref(), what).map(Some)
}

/// The JSON object deflated in `bytes` ([`pack`]); `T` picks what is parsed.
pub(super) fn inflate<T: DeserializeOwned>(bytes: &[u8], what: &str) -> Result<T, StoreError> {
    let mut json = Vec::new();
    DeflateDecoder::new(bytes)
        .read_to_end(&mut json)
        .map_err(|e| corrupt(what, e))?;
    serde_json::from_slice(&json).map_err(|e| corrupt(what, e))
}
