//! Step limits' slots: the key's partition read (its line item first, then a `Query`
//! of the whole partition: holders and waiters), the items of the runs the plan of
//! [`crate::layout`]'s `step_slots.rs` asks for (one `GetItem` each), the plan sent in
//! one `TransactWriteItems`, and, when another writer changed the line first (its
//! `rev` moved), read and planned again.

use std::time::Duration;

use siesta::ports::*;
use siesta::*;

use super::DynamoStore;
use super::limits::{LINE_ATTEMPTS, fresh_rev, line_backoff};
use super::tx::TxOutcome;
use crate::item::*;
use crate::keys::*;
use crate::layout::{self, STEP_REV, StepPlanned, StepSlotReads, step_slot_reads};

/// How many runs one plan may ask for before the store gives up on it.
const PLAN_READS: usize = 200;

impl DynamoStore {
    /// Read `key`'s line, plan by `plan` (from the reads and a fresh `rev`) and send
    /// it, again while another writer changes the line first.
    async fn on_step_line(
        &self,
        op: &str,
        key: &str,
        plan: impl Fn(&StepSlotReads, u64) -> Result<StepPlanned, StoreError>,
    ) -> Result<(StepSlot, Vec<HandedSlot>), StoreError> {
        let pk = step_slot_pk(key);
        for attempt in 0..LINE_ATTEMPTS {
            if attempt > 0 {
                line_backoff(attempt).await;
            }
            // The line item before the rest: an unchanged `rev` at the write means the
            // holders and waiters read are the line's.
            let line = self
                .get_item(op, crate::item::key(pk.clone(), RECORD_SK))
                .await?;
            let items = self
                .query_pages(
                    op,
                    |q| {
                        q.key_condition_expression("pk = :pk")
                            .expression_attribute_values(":pk", s(&pk))
                            .consistent_read(true)
                    },
                    None,
                )
                .await?;
            let mut reads = step_slot_reads(&items)?;
            reads.rev = line
                .map(|item| get_n(&item, STEP_REV, "step slot"))
                .transpose()?;
            let rev = fresh_rev();
            let planned = loop {
                match plan(&reads, rev)? {
                    StepPlanned::Ready(planned) => break planned,
                    StepPlanned::NeedRun(tenant, run_id) => {
                        if reads.runs.len() >= PLAN_READS {
                            return Err(StoreError::Unavailable(format!(
                                "{op}: the plan of {key} asked for more than {PLAN_READS} runs"
                            )));
                        }
                        let item = self
                            .get_item(op, crate::item::key(run_pk(&tenant, &run_id), RUN_SK))
                            .await?;
                        let run = item
                            .map(|i| Ok::<_, StoreError>((run_from_item(&i)?, item_size(&i))))
                            .transpose()?;
                        reads.runs.insert((tenant.0, run_id.0), run);
                    }
                }
            };
            if planned.plan.writes.is_empty() {
                return Ok((planned.slot, planned.handed));
            }
            match self.transact(op, &planned.plan).await? {
                TxOutcome::Committed => return Ok((planned.slot, planned.handed)),
                TxOutcome::Cancelled(_) => continue,
                TxOutcome::NotWritten(e) => return Err(e),
            }
        }
        Err(StoreError::Unavailable(format!(
            "{op}: the line of {key} kept being changed by others ({LINE_ATTEMPTS} attempts)"
        )))
    }

    /// [`RunStore::take_step_slot`].
    pub(super) async fn take_step_slot(
        &self,
        key: &str,
        max: u32,
        holder: &StepSlotHolder,
        now: Timestamp,
        grant_for: Duration,
    ) -> Result<(StepSlot, Vec<HandedSlot>), StoreError> {
        self.on_step_line("take_step_slot", key, |reads, rev| {
            layout::take_step_slot(key, max, holder, now, grant_for, reads, rev, self.retention)
        })
        .await
    }

    /// [`RunStore::give_back_step_slot`].
    pub(super) async fn give_back_step_slot(
        &self,
        key: &str,
        max: u32,
        holder: &StepSlotHolder,
        now: Timestamp,
        grant_for: Duration,
    ) -> Result<Vec<HandedSlot>, StoreError> {
        let (_, handed) = self
            .on_step_line("give_back_step_slot", key, |reads, rev| {
                layout::give_back_step_slot(
                    key,
                    max,
                    holder,
                    now,
                    grant_for,
                    reads,
                    rev,
                    self.retention,
                )
            })
            .await?;
        Ok(handed)
    }
}
