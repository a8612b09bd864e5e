//! The count of a tenant's unfinished runs behind the `max_unfinished_runs` quota.

use siesta::ports::*;
use siesta::*;

use crate::Harness;
use crate::support::*;

async fn unfinished(h: &Harness, tenant: &TenantId) -> u64 {
    h.backend
        .store
        .unfinished_runs(tenant)
        .await
        .expect("unfinished_runs")
}

async fn create_within(h: &Harness, run: &Run, max: u64) -> Result<(), StoreError> {
    h.backend
        .store
        .create_run_within(run, &started(run), max)
        .await
}

/// Every created run counts until the checkpoint that finishes it, which releases it
/// exactly once (a later checkpoint of the finished run does not release it again);
/// child runs count from the checkpoint that starts them. `create_run_within` at the
/// limit is `OverQuota` and writes nothing; an existing id is still `AlreadyExists`.
pub async fn unfinished_runs_are_counted_and_released_once(h: Harness) {
    let tenant = tenant();
    assert_eq!(unfinished(&h, &tenant).await, 0, "a new tenant has none");
    let first = new_run(&h, &tenant, "quota");
    create_within(&h, &first, 2).await.expect("first of two");
    let second = create(&h, &tenant).await;
    assert_eq!(unfinished(&h, &tenant).await, 2);

    let refused = new_run(&h, &tenant, "quota");
    let got = create_within(&h, &refused, 2).await;
    assert!(
        matches!(got, Err(StoreError::OverQuota(_))),
        "a third run under a limit of 2: expected OverQuota, got {got:?}"
    );
    let stored = h.backend.store.get_run(&tenant, &refused.id).await;
    assert!(
        matches!(stored, Ok(None)),
        "a refused create writes nothing: {stored:?}"
    );
    let again = create_within(&h, &first, 2).await;
    assert!(
        matches!(again, Err(StoreError::AlreadyExists)),
        "an existing run at the limit: expected AlreadyExists, got {again:?}"
    );
    assert_eq!(unfinished(&h, &tenant).await, 2, "refusals count nothing");

    // Parked is not finished: the slot stays taken.
    let parked = finish(&h, &second, RunStatus::Parked).await;
    assert_eq!(
        unfinished(&h, &tenant).await,
        2,
        "a parked run still counts"
    );
    let done = finish(&h, &parked, RunStatus::Cancelled).await;
    assert_eq!(
        unfinished(&h, &tenant).await,
        1,
        "a cancelled run is released"
    );
    // Another write to the finished run (closing its callbacks, say) releases nothing.
    let cp = checkpoint_over(&h, &done, None, |_| {});
    write(&h, &cp).await;
    assert_eq!(unfinished(&h, &tenant).await, 1, "released once");
    create_within(&h, &refused, 2)
        .await
        .expect("the released slot is free again");
    assert_eq!(unfinished(&h, &tenant).await, 2);

    // A child started by a checkpoint counts, and is released when it finishes.
    let claimed = claim(&h, &first, "engine", LEASE).await;
    let mut cp = checkpoint_over(&h, &claimed, Some(claimed.epoch), |_| {});
    let mut child = new_run(&h, &tenant, "child");
    child.parent = Some(ParentLink {
        run_id: first.id.clone(),
        position: Position("invoke#0".into()),
        created_at: Some(first.created_at),
    });
    cp.child_runs.push((child.clone(), started(&child)));
    write(&h, &cp).await;
    assert_eq!(unfinished(&h, &tenant).await, 3, "a child run counts");
    finish(&h, &child, RunStatus::Completed).await;
    let completed = finish(&h, &cp.run, RunStatus::Completed).await;
    assert_eq!(completed.status, RunStatus::Completed);
    assert_eq!(unfinished(&h, &tenant).await, 1, "both released");
}

/// Creates racing for a tenant's last slot: exactly one wins, the others are
/// `OverQuota`, and the count is the limit.
pub async fn concurrent_creates_for_the_last_slot_exactly_one_wins(h: Harness) {
    let tenant = tenant();
    for round in 1..=3u64 {
        // `round - 1` runs exist: one slot is left under a limit of `round`.
        let tasks: Vec<_> = (0..4)
            .map(|_| {
                let store = h.backend.store.clone();
                let run = new_run(&h, &tenant, "quota");
                tokio::spawn(async move {
                    store
                        .create_run_within(&run, &started(&run), round)
                        .await
                        .map(|()| run.id)
                })
            })
            .collect();
        let mut winners = Vec::new();
        for task in futures::future::join_all(tasks).await {
            match task.expect("create task") {
                Ok(id) => winners.push(id),
                Err(StoreError::OverQuota(_)) => {}
                Err(e) => panic!("round {round}: a racing create failed with {e:?}"),
            }
        }
        assert_eq!(winners.len(), 1, "round {round}: exactly one create wins");
        assert_eq!(unfinished(&h, &tenant).await, round, "round {round}");
        get(&h, &tenant, &winners[0]).await;
    }
}
