//! A whole run item written over the stored one, as a delivery and a checkpoint write
//! it: an `UpdateItem` that sets every attribute of the run and removes the ones it no
//! longer has ([`run_update`]), so that what the run model does not know of — the tail,
//! the callback states — stays unless the write says otherwise; conditioned on the
//! version read and, for a writer under a lease, its fencing epoch.

use std::collections::HashMap;

use siesta::ports::Checkpoint;
use siesta::{FencingEpoch, Timestamp};

use super::{Action, Billed, Condition, PlannedWrite, Role};
use crate::index_writes::indexed_part;
use crate::item::*;
use crate::keys::*;

/// What a write of a whole run item expects of the run item it writes over.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Expected {
    /// The version read.
    pub(crate) version: u64,
    /// The writer's fencing epoch, if it holds a lease.
    pub(crate) epoch: Option<FencingEpoch>,
    /// The seq of the first event it writes: the run's timeline must not reach it yet.
    pub(crate) first_event: Option<u64>,
    /// The lease expiry the run must still have (`Some(None)`: no lease), for a writer
    /// without the lease that writes the run's lease back as it read it (a delivery):
    /// a lease renewal moves it without a new version, and must not be undone.
    pub(crate) lease_expires: Option<Option<Timestamp>>,
}

impl Expected {
    /// What a checkpoint expects. One without an epoch (the control plane's) that
    /// writes a lease writes it back as it read it: the run must still have it.
    pub(crate) fn of(cp: &Checkpoint) -> Self {
        Expected {
            version: cp.expected_version,
            epoch: cp.epoch,
            first_event: cp.timeline.first().map(|e| e.seq),
            lease_expires: match (cp.epoch, &cp.run.lease) {
                (None, Some(lease)) => Some(Some(lease.expires_at)),
                _ => None,
            },
        }
    }

    /// The condition expression, with its names and values.
    pub(crate) fn condition(&self) -> Condition {
        let mut values = HashMap::from([(":v".to_owned(), n(self.version))]);
        let mut expression = "#version = :v".to_owned();
        let mut names = HashMap::from([("#version".to_owned(), VERSION.to_owned())]);
        if let Some(epoch) = self.epoch {
            expression.push_str(" AND #lease_epoch = :e");
            values.insert(":e".into(), n(epoch.0));
            names.insert("#lease_epoch".into(), LEASE_EPOCH.into());
        }
        if let Some(first) = self.first_event {
            expression.push_str(" AND #timeline_seq < :first");
            values.insert(":first".into(), n(first));
            names.insert("#timeline_seq".into(), TIMELINE_SEQ.into());
        }
        if let Some(lease_expires) = self.lease_expires {
            names.insert("#lease_expires".into(), LEASE_EXPIRES.into());
            match lease_expires {
                Some(at) => {
                    expression.push_str(" AND #lease_expires = :lease_expires");
                    values.insert(":lease_expires".into(), n(at.0));
                }
                None => expression.push_str(" AND attribute_not_exists(#lease_expires)"),
            }
        }
        Condition {
            expression,
            names,
            values,
        }
    }
}

/// What a write of a whole run item does with the callback states the stored item holds
/// ([`crate::callback_state`]), which [`run_item`] knows nothing of, and the sizes they
/// add for the cost breakdown.
#[derive(Debug, Default)]
pub(crate) struct StatesKept {
    /// The states it removes (the callbacks it closes).
    pub(crate) removed: Vec<String>,
    /// The bytes of the states it keeps, beside the item it writes.
    pub(crate) kept_bytes: usize,
    /// The size of the item it writes over, when known (billed if larger).
    pub(crate) before_bytes: usize,
    /// The bytes of the states it adds (in the item it writes, not in the one before).
    pub(crate) added_bytes: usize,
}

/// What a write of a whole run item does with the tail the item holds.
#[derive(Debug, Clone, Copy)]
pub(crate) enum TailKept {
    /// Keeps it.
    Kept,
    /// Removes it (it was written into checkpoint items beside), its size known.
    Dropped {
        /// The tail's size in the run item.
        bytes: usize,
    },
}

/// The write of the whole run `item` over the one stored, on the condition `expected`,
/// keeping its tail or dropping it and the callback states as `states` says; billed by
/// the item before or after, whichever is larger.
pub(crate) fn run_write(
    role: Role,
    item: &Item,
    expected: &Expected,
    tail: TailKept,
    states: &StatesKept,
    transactional: bool,
) -> Result<PlannedWrite, siesta::ports::StoreError> {
    let tail_bytes = match tail {
        TailKept::Kept => 0,
        TailKept::Dropped { bytes } => bytes,
    };
    // The item before: as read when known, else the item written with the tail it
    // drops and without the states it adds.
    let after = item_size(item) + states.kept_bytes;
    let before = match states.before_bytes {
        0 => after + tail_bytes - states.added_bytes.min(after),
        read => read,
    };
    let (expression, names, values) = run_update(
        item,
        matches!(tail, TailKept::Dropped { .. }),
        &states.removed,
    );
    Ok(PlannedWrite {
        role,
        action: Action::Update {
            key: key(get_s(item, PK, "run")?.to_owned(), RUN_SK),
            expression,
            names,
            values,
        },
        condition: Some(expected.condition()),
        transactional,
        billed: Billed::Bytes(after.max(before)),
        run_after: Some((indexed_part(item), false)),
    })
}
