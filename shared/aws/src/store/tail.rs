//! A checkpoint kept in the run item as its tail, as [`crate::layout::in_tail`] plans
//! it: the previous tail archived by a plain put, then one conditional `UpdateItem` of
//! the run item holding the new one. And what the store remembers of the tails it read and
//! wrote, so that a run's next step need not read its run item again to archive one.

use std::collections::HashMap;
use std::sync::Mutex;

use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use siesta::ports::*;
use siesta::{Run, Timestamp};

use super::DynamoStore;
use crate::callback_state::state_attrs;
use crate::error::sdk;
use crate::history_item::{archived_tail, tail_grew_from};
use crate::item::*;
use crate::keys::*;
use crate::layout::{self, Role};

/// How many runs' tails a store remembers; past it, it forgets them all (a forgotten
/// tail costs one read of its run item).
const REMEMBERED: usize = 4096;

/// What the store knows of a run item at one version: the history tail it holds, as
/// the checkpoint item it is archived as, and the callback states it holds
/// ([`crate::callback_state`]), if known.
#[derive(Clone)]
struct Known {
    version: u64,
    tail: Option<Item>,
    callback_states: Option<Vec<String>>,
}

/// The history tails of the runs whose run item the store read or wrote last, by
/// partition key and creation time (a run id comes back after its run was removed, when
/// an `Idempotency-Key` is replayed past the retention). A run item at a given version
/// never changes, so what is remembered stays true; it is only ever stale by version.
#[derive(Default)]
pub(crate) struct Tails(Mutex<HashMap<(String, Timestamp), Known>>);

impl Tails {
    fn put(&self, run: (String, Timestamp), known: Known) {
        let mut tails = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if tails.len() >= REMEMBERED {
            tails.clear();
        }
        tails.insert(run, known);
    }

    /// Remember the tail of `run_item`, as stored (read, or returned by a write).
    pub(super) fn remember(&self, run_item: &Item) -> Result<(), StoreError> {
        self.remember_as(
            remembered_as(run_item)?,
            run_item,
            Some(state_attrs(run_item)),
        )
    }

    /// Remember the tail of `run_item` as written over the run item at version
    /// `before` (the whole run, which holds no callback state: those kept are the ones
    /// known at `before`, if any).
    pub(super) fn remember_written(&self, run_item: &Item, before: u64) -> Result<(), StoreError> {
        let run = remembered_as(run_item)?;
        let states = self.at(&run, before).and_then(|k| k.callback_states);
        self.remember_as(run, run_item, states)
    }

    /// Remember `run_item`, of `run`, with `callback_states`.
    fn remember_as(
        &self,
        run: (String, Timestamp),
        run_item: &Item,
        callback_states: Option<Vec<String>>,
    ) -> Result<(), StoreError> {
        let known = Known {
            version: get_n(run_item, VERSION, "run")?,
            tail: archived_tail(run_item)?,
            callback_states,
        };
        self.put(run, known);
        Ok(())
    }

    /// Remember that the run item at `version` holds no tail, having held one or not
    /// before at the version it was written over, and the callback states `opened`
    /// beside those it held, but `closed`: a transaction's write.
    pub(super) fn emptied(&self, run: &Run, before: u64, opened: &[String], closed: &[String]) {
        let key = (run_pk(&run.tenant, &run.id), run.created_at);
        let Some(known) = self.at(&key, before) else {
            return;
        };
        let callback_states = known.callback_states.map(|mut states| {
            states.retain(|s| !closed.contains(s));
            states.extend(opened.iter().cloned());
            states
        });
        self.put(
            key,
            Known {
                version: run.version,
                tail: None,
                callback_states,
            },
        );
    }

    fn at(&self, run: &(String, Timestamp), version: u64) -> Option<Known> {
        let tails = self.0.lock().unwrap_or_else(|e| e.into_inner());
        tails.get(run).filter(|k| k.version == version).cloned()
    }
}

/// The key a run item's run is remembered under: its partition key and creation time.
fn remembered_as(run_item: &Item) -> Result<(String, Timestamp), StoreError> {
    Ok((
        get_s(run_item, PK, "run")?.to_owned(),
        Timestamp(get_n(run_item, CREATED_AT, "run")?),
    ))
}

impl DynamoStore {
    /// The tail of `run`'s item at `version`, as the item it is archived as: from
    /// memory, else read. `None` when the run is no longer at `version` (a write
    /// conditioned on it then fails anyway).
    pub(super) async fn tail_at(
        &self,
        run: &Run,
        version: u64,
    ) -> Result<Option<Option<Item>>, StoreError> {
        let known = self.known_at(run, version).await?;
        Ok(known.map(|k| k.tail))
    }

    /// The callback states `run`'s item holds at `version`, as far as the store knows
    /// from what it read and wrote, without reading (`None`: not known).
    pub(super) fn callback_states_at(&self, run: &Run, version: u64) -> Option<Vec<String>> {
        let remembered = (run_pk(&run.tenant, &run.id), run.created_at);
        self.tails.at(&remembered, version)?.callback_states
    }

    /// What is known of `run`'s item at `version`: from memory, else read.
    async fn known_at(&self, run: &Run, version: u64) -> Result<Option<Known>, StoreError> {
        let pk = run_pk(&run.tenant, &run.id);
        let remembered = (pk.clone(), run.created_at);
        if let Some(known) = self.tails.at(&remembered, version) {
            return Ok(Some(known));
        }
        if let Some(item) = self
            .get_item("checkpoint: read the history tail", key(pk, RUN_SK))
            .await?
        {
            self.tails.remember(&item)?;
        }
        Ok(self.tails.at(&remembered, version))
    }
}

/// [`RunStore::checkpoint`] of a checkpoint kept in the run item as its tail
/// ([`layout::in_tail`]): the tail it replaces archived by a plain put, then one
/// conditional `UpdateItem`. Whether it could: not when the run moved on from the
/// version the checkpoint expects, or the checkpoint needs more than one item (the
/// caller writes a transaction).
pub(super) async fn checkpoint_in_tail(
    store: &DynamoStore,
    cp: &Checkpoint,
) -> Result<bool, StoreError> {
    let Some(previous) = store.tail_at(&cp.run, cp.expected_version).await? else {
        return Ok(false);
    };
    // What the run item holds beside what this write sets: the callback states it keeps
    // (a deadline each, a number of up to 8 bytes), as far as known.
    let kept = store
        .callback_states_at(&cp.run, cp.expected_version)
        .unwrap_or_default()
        .iter()
        .map(|state| state.len() + 8)
        .sum::<usize>();
    let Some(planned) = layout::in_tail(cp, previous, kept, store.retention)? else {
        return Ok(false);
    };
    for archive in planned
        .plan
        .plain()
        .filter(|w| w.role == Role::TailArchived)
    {
        store.put_plain("checkpoint", archive).await?;
    }
    let Some(write) = planned.plan.of(Role::RunWithTail) else {
        return Err(StoreError::Invalid(
            "checkpoint: no run item planned".into(),
        ));
    };
    let item = &planned.run_item;
    match store.update_plain("checkpoint", write).await? {
        Ok(_) => {
            store.tails.remember_written(item, cp.expected_version)?;
            Ok(true)
        }
        Err(e) => match e.as_service_error() {
            Some(UpdateItemError::ConditionalCheckFailedException(c)) => {
                let Some(current) = c.item() else {
                    return Err(StoreError::NotFound);
                };
                // The SDK's retry of a write that applied, its answer lost, finds the
                // run holding this very write's tail — perhaps at a later version, a
                // delivery or the control plane having written since, which keep the
                // tail. The tail's key names the version this write made, and only the
                // run's own next step replaces it: found, it is this write's.
                // A delivery since may have added its event to the tail, under its key.
                let run = run_from_item(current)?;
                let ours = tail_grew_from(current, item)?
                    && cp
                        .epoch
                        .is_none_or(|e| run.lease.as_ref().is_some_and(|l| l.epoch == e));
                if ours {
                    // Its answer lost, so was the capacity it reported: counted here at
                    // its size, as any write is in the cost breakdown.
                    store.capacity.note_planned("checkpoint", write, None);
                    store.tails.remember(current)?;
                    return Ok(true);
                }
                Err(StoreError::Conflict(Some(Box::new(run))))
            }
            _ => Err(sdk("checkpoint", e)),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use siesta::{Payload, RunId, TenantId};

    fn run_item_at(created_at: i64, version: u64) -> Item {
        let mut run = Run::new(
            TenantId("t".into()),
            RunId("r".into()),
            "order",
            Payload::Inline(json!(null)),
            Timestamp(created_at),
        );
        run.version = version;
        let mut item = run_item(&run, std::time::Duration::ZERO).unwrap();
        crate::history_item::TailWrite {
            sk: checkpoint_sk(3, version, 0),
            packed: vec![1, 2, 3],
            archive: None,
        }
        .put_in(&mut item);
        item
    }

    #[test]
    fn the_callback_states_known_follow_the_writes_over_the_item_read() {
        let tails = Tails::default();
        let mut read = run_item_at(1_000, 5);
        read.insert("c#cb_1".into(), n(0));
        tails.remember(&read).unwrap();
        let pk = run_pk(&TenantId("t".into()), &RunId("r".into()));
        let states = |v| {
            tails
                .at(&(pk.clone(), Timestamp(1_000)), v)
                .unwrap()
                .callback_states
        };
        assert_eq!(states(5), Some(vec!["c#cb_1".to_owned()]));
        // A transaction opens one and closes the other.
        let mut run = run_from_item(&read).unwrap();
        run.version = 6;
        tails.emptied(&run, 5, &["c#cb_2".into()], &["c#cb_1".into()]);
        assert_eq!(states(6), Some(vec!["c#cb_2".to_owned()]));
        // A step's write over it keeps them.
        tails.remember_written(&run_item_at(1_000, 7), 6).unwrap();
        assert_eq!(states(7), Some(vec!["c#cb_2".to_owned()]));
        // Written over a version not known: not known.
        tails.remember_written(&run_item_at(1_000, 9), 8).unwrap();
        assert_eq!(states(9), None);
    }

    #[test]
    fn a_tail_remembered_is_of_that_run_at_that_version_only() {
        let tails = Tails::default();
        tails.remember(&run_item_at(1_000, 5)).unwrap();
        let pk = run_pk(&TenantId("t".into()), &RunId("r".into()));
        let known = tails.at(&(pk.clone(), Timestamp(1_000)), 5).unwrap();
        assert!(known.tail.is_some());
        assert!(tails.at(&(pk.clone(), Timestamp(1_000)), 6).is_none());
        // The same run id, a run created later (the first removed, its idempotency key
        // replayed): nothing known of it.
        assert!(tails.at(&(pk, Timestamp(2_000)), 5).is_none());
    }
}
