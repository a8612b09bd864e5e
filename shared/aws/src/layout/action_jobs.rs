//! A bulk action's job: one item per tenant and job (partition [`action_jobs_pk`], sort
//! key the job's id), its body the job's JSON and its version beside it, written whole
//! by a `PutItem` conditioned on the version read (on no item for a new job). While the
//! job runs it also has a small item in the deployment's list of active jobs
//! ([`ACTIVE_ACTION_JOBS_PK`]), put in one transaction with the job's first write and
//! deleted in one with the write that finishes it; the writes in between (a slice's
//! lease, its progress) are plain puts of the job alone. A finished job carries its
//! `expires_at` (DynamoDB's TTL): it is forgotten [`siesta::ACTION_JOB_RETENTION`]
//! after its last write.

use siesta::ports::StoreError;
use siesta::{ActionJob, ActiveActionJob, TenantId};

use super::{Action, Condition, PlannedWrite, Role, WritePlan, names};
use crate::item::*;
use crate::keys::*;

/// The key of `tenant`'s job `id`.
pub(crate) fn action_job_key(tenant: &TenantId, id: &str) -> Item {
    key(action_jobs_pk(tenant), id)
}

/// The writes that store `job` on the stored one being at `expected` (0: none): the
/// job at the next version, and — when the job starts running or finishes — its place
/// among the active jobs, in the same transaction.
pub(crate) fn action_job_plan(job: &ActionJob, expected: u64) -> Result<WritePlan, StoreError> {
    let mut item = action_job_key(&job.tenant, &job.id);
    item.insert(VERSION.to_owned(), n(expected + 1));
    item.insert(BODY.to_owned(), s(to_json(job)?));
    if let Some(keep_until) = job.keep_until() {
        // DynamoDB's TTL, in seconds: a finished job is forgotten after its retention.
        item.insert(
            EXPIRES_AT.to_owned(),
            n((keep_until.0.max(0) as u64).div_ceil(1000)),
        );
    }
    let condition = if expected == 0 {
        Condition::new_item()
    } else {
        Condition {
            expression: "#version = :version".into(),
            names: names(&[("#version", VERSION)]),
            values: Item::from([(":version".to_owned(), n(expected))]),
        }
    };
    let finished = job.status.is_finished();
    let starts = expected == 0 && !finished;
    // A finishing write deletes the job's place whether or not the stored job was
    // still running: deleting an item that is not there is no error, and saves a read.
    let marks = starts || finished;
    let mut writes = vec![PlannedWrite::put(
        Role::ActionJob,
        item,
        Some(condition),
        marks,
    )];
    let place = key(
        ACTIVE_ACTION_JOBS_PK.to_owned(),
        active_action_job_sk(&job.tenant, &job.id),
    );
    if starts {
        let mut place = place;
        let active = ActiveActionJob {
            tenant: job.tenant.clone(),
            id: job.id.clone(),
        };
        place.insert(BODY.to_owned(), s(to_json(&active)?));
        writes.push(PlannedWrite::put(Role::ActiveActionJob, place, None, true));
    } else if finished {
        writes.push(PlannedWrite {
            role: Role::ActiveActionJob,
            billed: super::Billed::Bytes(item_size(&place)),
            action: Action::Delete { key: place },
            condition: None,
            transactional: true,
            run_after: None,
        });
    }
    Ok(WritePlan { writes })
}

/// The job an item holds, with its version.
pub(crate) fn action_job_of(item: &Item) -> Result<ActionJob, StoreError> {
    let mut job: ActionJob = from_json(item, "action job")?;
    job.version = get_n(item, VERSION, "action job")?;
    Ok(job)
}

/// The active job a place in the list names.
pub(crate) fn active_action_job_of(item: &Item) -> Result<ActiveActionJob, StoreError> {
    from_json(item, "active action job")
}

#[cfg(test)]
mod tests {
    use super::*;
    use siesta::{ActionFilter, ActionJobStatus, BulkAction, RestartOptions, Timestamp};

    fn job(status: ActionJobStatus) -> ActionJob {
        ActionJob {
            tenant: TenantId::from("acme"),
            id: "job-1".into(),
            action: BulkAction::Cancel,
            restart: RestartOptions::default(),
            filter: ActionFilter {
                workflow: Some("order".into()),
                ..ActionFilter::default()
            },
            rate: 50,
            by: "dev".into(),
            status,
            matched: 0,
            done: 0,
            skipped: 0,
            failed: 0,
            skipped_sample: Vec::new(),
            failures: Vec::new(),
            cursor: None,
            created_at: Timestamp(1),
            updated_at: Timestamp(1),
            next_at: Timestamp(1),
            lease: None,
            errors_in_a_row: 0,
            error: None,
            cancelled_by: None,
            build: None,
            version: 0,
        }
    }

    #[test]
    fn a_new_job_is_put_with_its_place_among_the_active_ones_in_one_transaction() {
        let plan = action_job_plan(&job(ActionJobStatus::Running), 0).unwrap();
        assert_eq!(plan.transaction().count(), 2);
        let put = plan.of(Role::ActionJob).unwrap();
        assert_eq!(
            put.condition.as_ref().unwrap().expression,
            "attribute_not_exists(pk)"
        );
        let item = put.item().unwrap();
        assert_eq!(item[PK], s("J#acme"));
        assert_eq!(item[SK], s("job-1"));
        assert_eq!(item[VERSION], n(1));
        let place = plan.of(Role::ActiveActionJob).unwrap().item().unwrap();
        assert_eq!(place[PK], s(ACTIVE_ACTION_JOBS_PK));
        assert_eq!(
            active_action_job_of(place).unwrap(),
            ActiveActionJob {
                tenant: TenantId::from("acme"),
                id: "job-1".into()
            }
        );
    }

    #[test]
    fn progress_is_a_plain_put_on_the_version_read_and_the_end_leaves_the_list() {
        let progress = action_job_plan(&job(ActionJobStatus::Running), 3).unwrap();
        assert_eq!(progress.writes.len(), 1);
        assert_eq!(progress.plain().count(), 1);
        let condition = progress.writes[0].condition.as_ref().unwrap();
        assert_eq!(condition.expression, "#version = :version");
        assert_eq!(condition.values[":version"], n(3));
        assert!(
            !progress.writes[0].item().unwrap().contains_key(EXPIRES_AT),
            "a running job is kept"
        );
        let end = action_job_plan(&job(ActionJobStatus::Cancelled), 4).unwrap();
        assert_eq!(end.transaction().count(), 2);
        let expires = end.of(Role::ActionJob).unwrap().item().unwrap()[EXPIRES_AT].clone();
        assert_eq!(
            expires,
            n(1 + siesta::ACTION_JOB_RETENTION.as_secs()),
            "forgotten 30 days after its last write (TTL in seconds, rounded up)"
        );
        assert!(matches!(
            end.of(Role::ActiveActionJob).unwrap().action,
            Action::Delete { .. }
        ));
    }

    #[test]
    fn a_job_reads_back_as_written_at_the_next_version() {
        let plan = action_job_plan(&job(ActionJobStatus::Running), 6).unwrap();
        let read = action_job_of(plan.writes[0].item().unwrap()).unwrap();
        assert_eq!(read.version, 7);
        assert_eq!(read.id, "job-1");
        assert_eq!(read.filter.workflow.as_deref(), Some("order"));
    }
}
