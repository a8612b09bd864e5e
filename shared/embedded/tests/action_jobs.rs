//! Bulk actions' jobs on the embedded backend beyond the port's contract: a finished
//! job is forgotten once its retention has passed (the writes after it drop it), a
//! running one never is.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

use std::sync::Arc;
use std::time::Duration;

use siesta::*;
use siesta_embedded::EmbeddedBackend;

fn job(id: &str, status: ActionJobStatus, at: Timestamp) -> ActionJob {
    ActionJob {
        tenant: TenantId::from("acme"),
        id: id.to_owned(),
        action: BulkAction::Cancel,
        restart: RestartOptions::default(),
        filter: ActionFilter {
            workflow: Some("order".into()),
            ..ActionFilter::default()
        },
        rate: 50,
        by: "ops".into(),
        status,
        matched: 0,
        done: 0,
        skipped: 0,
        failed: 0,
        skipped_sample: Vec::new(),
        failures: Vec::new(),
        cursor: None,
        created_at: at,
        updated_at: at,
        next_at: at,
        lease: None,
        errors_in_a_row: 0,
        error: None,
        cancelled_by: None,
        build: None,
        version: 0,
    }
}

#[tokio::test]
async fn a_finished_job_is_forgotten_after_its_retention_and_a_running_one_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::default());
    let store = EmbeddedBackend::open(dir.path().join("siesta.db"), clock.clone())
        .unwrap()
        .backend()
        .store;
    let tenant = TenantId::from("acme");
    let now = clock.now();
    store
        .put_action_job(&job("job-1", ActionJobStatus::Done, now), 0)
        .await
        .unwrap();
    store
        .put_action_job(&job("job-2", ActionJobStatus::Running, now), 0)
        .await
        .unwrap();

    clock.advance(ACTION_JOB_RETENTION - Duration::from_secs(1));
    store
        .put_action_job(&job("job-3", ActionJobStatus::Running, clock.now()), 0)
        .await
        .unwrap();
    assert!(
        store
            .get_action_job(&tenant, "job-1")
            .await
            .unwrap()
            .is_some(),
        "kept until its retention ends"
    );

    clock.advance(Duration::from_secs(2));
    store
        .put_action_job(&job("job-4", ActionJobStatus::Running, clock.now()), 0)
        .await
        .unwrap();
    assert_eq!(store.get_action_job(&tenant, "job-1").await.unwrap(), None);
    assert!(
        store
            .get_action_job(&tenant, "job-2")
            .await
            .unwrap()
            .is_some(),
        "a running job is kept, however old"
    );
}
