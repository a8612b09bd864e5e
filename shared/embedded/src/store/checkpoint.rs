//! A checkpoint's records encoded once, on the caller's thread, and refused where
//! DynamoDB would refuse its transaction (too many items, too many bytes).

use siesta::ports::*;

use crate::{stored, to_json};

/// A checkpoint's records as stored, encoded once on the caller's thread: the writer
/// thread, which every write of the process goes through, only binds them.
pub(super) struct EncodedCheckpoint {
    pub(super) run: String,
    pub(super) journal: Vec<stored::StoredEntry>,
    pub(super) timeline: Vec<String>,
    pub(super) callbacks: Vec<String>,
    pub(super) tool_calls: Vec<String>,
}

impl EncodedCheckpoint {
    /// Encode `cp`, refusing a checkpoint DynamoDB would refuse: more than
    /// [`MAX_TRANSACTION_ITEMS`] items or [`MAX_TRANSACTION_BYTES`] in one transaction
    /// (sizes counted as the core's JSON, which DynamoDB stores), so the dev server
    /// fails exactly where AWS would.
    pub(super) fn of(cp: &Checkpoint) -> Result<Self, StoreError> {
        let items = cp.item_count();
        if items > MAX_TRANSACTION_ITEMS {
            return Err(StoreError::Invalid(format!(
                "checkpoint: {items} items exceed the {MAX_TRANSACTION_ITEMS} of one transaction"
            )));
        }
        let encoded = EncodedCheckpoint {
            run: stored::run_body(&cp.run)?,
            journal: cp
                .journal
                .iter()
                .map(stored::StoredEntry::of)
                .collect::<Result<_, _>>()?,
            timeline: cp
                .timeline
                .iter()
                .map(stored::event_body)
                .collect::<Result<_, _>>()?,
            callbacks: cp.callbacks.iter().map(to_json).collect::<Result<_, _>>()?,
            tool_calls: cp
                .tool_calls
                .iter()
                .map(to_json)
                .collect::<Result<_, _>>()?,
        };
        let mut bytes = encoded.run.len();
        for entry in &encoded.journal {
            bytes += entry.full_len();
        }
        for body in encoded
            .timeline
            .iter()
            .chain(&encoded.callbacks)
            .chain(&encoded.tool_calls)
        {
            bytes += body.len();
        }
        // The stored forms of the run and its events differ from their JSON by the
        // fields the row's columns hold (strings of any length, escaped at most 6 to
        // a char), field names and nulls: near the limit, count the JSON itself.
        let run_strings = cp.run.tenant.0.len() + cp.run.id.0.len() + cp.run.workflow.len();
        let slack = 512 + 6 * run_strings + 128 * cp.timeline.len();
        if bytes.abs_diff(MAX_TRANSACTION_BYTES) <= slack {
            bytes = bytes - encoded.run.len() + to_json(&cp.run)?.len();
            for (event, body) in cp.timeline.iter().zip(&encoded.timeline) {
                bytes = bytes - body.len() + to_json(event)?.len();
            }
        }
        for (child, started) in &cp.child_runs {
            bytes += to_json(child)?.len() + to_json(started)?.len();
        }
        if let Some(delivery) = &cp.parent_delivery {
            bytes += to_json(delivery)?.len();
        }
        if bytes > MAX_TRANSACTION_BYTES {
            return Err(StoreError::Invalid(format!(
                "checkpoint: {bytes} bytes exceed the {MAX_TRANSACTION_BYTES} of one transaction"
            )));
        }
        Ok(encoded)
    }
}
