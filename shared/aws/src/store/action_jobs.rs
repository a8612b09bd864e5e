//! Bulk actions' jobs on the table: a strongly consistent `GetItem` to read one, a
//! `Query` of the tenant's partition (backwards: newest first) to list them, a `Query`
//! of the active jobs' partition for the sweep, and the conditional put of
//! `layout/action_jobs.rs`'s plan (in a transaction when the job starts or ends).

use siesta::ports::*;
use siesta::*;

use super::DynamoStore;
use super::tx::TxOutcome;
use crate::item::*;
use crate::keys::*;
use crate::layout::{Role, action_job_key, action_job_of, action_job_plan, active_action_job_of};

impl DynamoStore {
    /// [`RunStore::put_action_job`].
    pub(super) async fn write_action_job(
        &self,
        job: &ActionJob,
        expected: u64,
    ) -> Result<u64, StoreError> {
        let plan = action_job_plan(job, expected)?;
        if plan.transaction().next().is_none() {
            let Some(write) = plan.of(Role::ActionJob) else {
                return Err(StoreError::Invalid("a job's plan without the job".into()));
            };
            return if self.put_plain("put_action_job", write).await? {
                Ok(expected + 1)
            } else {
                Err(StoreError::Conflict(None))
            };
        }
        match self.transact("put_action_job", &plan).await? {
            TxOutcome::Committed => Ok(expected + 1),
            TxOutcome::Cancelled(_) => Err(StoreError::Conflict(None)),
            TxOutcome::NotWritten(e) => Err(e),
        }
    }

    /// [`RunStore::get_action_job`].
    pub(super) async fn read_action_job(
        &self,
        tenant: &TenantId,
        id: &str,
    ) -> Result<Option<ActionJob>, StoreError> {
        self.get_item("get_action_job", action_job_key(tenant, id))
            .await?
            .map(|item| action_job_of(&item))
            .transpose()
    }

    /// [`RunStore::list_action_jobs`].
    pub(super) async fn tenant_action_jobs(
        &self,
        tenant: &TenantId,
        limit: usize,
    ) -> Result<Vec<ActionJob>, StoreError> {
        let pk = action_jobs_pk(tenant);
        self.query_pages(
            "list_action_jobs",
            |q| {
                q.key_condition_expression("#pk = :pk")
                    .expression_attribute_names("#pk", PK)
                    .expression_attribute_values(":pk", s(&pk))
                    .scan_index_forward(false)
                    .consistent_read(true)
            },
            Some(limit.max(1)),
        )
        .await?
        .iter()
        .take(limit)
        .map(action_job_of)
        .collect()
    }

    /// [`RunStore::active_action_jobs`].
    pub(super) async fn running_action_jobs(
        &self,
        limit: usize,
    ) -> Result<Vec<ActiveActionJob>, StoreError> {
        self.query_pages(
            "active_action_jobs",
            |q| {
                q.key_condition_expression("#pk = :pk")
                    .expression_attribute_names("#pk", PK)
                    .expression_attribute_values(":pk", s(ACTIVE_ACTION_JOBS_PK))
            },
            Some(limit.max(1)),
        )
        .await?
        .iter()
        .take(limit)
        .map(active_action_job_of)
        .collect()
    }
}
