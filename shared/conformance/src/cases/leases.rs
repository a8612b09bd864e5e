//! Claims, lease expiry, fencing epochs and renewals.

use std::time::Duration;

use siesta::ports::*;
use siesta::*;

use crate::Harness;
use crate::support::*;

/// What `claim` must make of `before`, for the claim `c`; `updated_at` is the writer's.
fn claimed_from(before: &Run, c: &Claim, updated_at: Timestamp) -> Run {
    let mut expected = before.clone();
    let epoch = before.epoch.next();
    expected.epoch = epoch;
    expected.lease = Some(Lease {
        owner: c.owner.clone(),
        expires_at: c.expires_at,
        epoch,
    });
    expected.status = RunStatus::Running;
    expected.due_at = Some(c.expires_at);
    expected.version = before.version + 1;
    expected.updated_at = updated_at;
    expected
}

/// `claim` sets the lease (owner, expiry, epoch + 1), bumps the run's epoch and version,
/// makes it running and due at the lease expiry, and returns the run as stored.
pub async fn claim_takes_the_lease(h: Harness) {
    let tenant = tenant();
    let run = create(&h, &tenant).await;
    let c = claim_for(&h, "engine-a", LEASE);
    let got = h
        .backend
        .store
        .claim(&tenant, &run.id, &c)
        .await
        .expect("claim of a pending run");
    assert_eq!(
        got,
        claimed_from(&run, &c, got.updated_at),
        "the claimed run"
    );
    assert_eq!(got.epoch, FencingEpoch(1), "the first epoch is 1");
    assert_eq!(
        get(&h, &tenant, &run.id).await,
        got,
        "claim returns the run as stored"
    );
    assert_eq!(
        timeline(&h, &tenant, &run.id).await.len(),
        1,
        "a claim writes no timeline event"
    );
}

/// A waiting run without a lease can be claimed; it becomes running.
pub async fn claim_resumes_a_waiting_run(h: Harness) {
    let tenant = tenant();
    let run = waiting_run(&h, &tenant).await;
    assert_eq!(run.status, RunStatus::Waiting);
    let c = claim_for(&h, "engine-b", LEASE);
    let got = h
        .backend
        .store
        .claim(&tenant, &run.id, &c)
        .await
        .expect("claim of a waiting run");
    assert_eq!(
        got,
        claimed_from(&run, &c, got.updated_at),
        "the claimed run"
    );
    assert_eq!(got.epoch, FencingEpoch(2), "the second claim's epoch");
    assert_eq!(get(&h, &tenant, &run.id).await, got);
}

/// While a lease is live, another claim is a `Conflict` carrying the current run (the
/// holder's lease), and changes nothing.
pub async fn claim_conflicts_while_the_lease_is_live(h: Harness) {
    let tenant = tenant();
    let run = create(&h, &tenant).await;
    let held = claim(&h, &run, "engine-a", LEASE).await;
    let second = h
        .backend
        .store
        .claim(&tenant, &run.id, &claim_for(&h, "engine-b", LEASE))
        .await;
    let current = conflict(second, "claim while leased");
    assert_eq!(current, held, "the conflict carries the run as it is");
    // The holder cannot claim twice either: a claim is not a renewal.
    let again = h
        .backend
        .store
        .claim(&tenant, &run.id, &claim_for(&h, "engine-a", LEASE))
        .await;
    conflict(again, "a second claim by the holder");
    assert_eq!(get(&h, &tenant, &run.id).await, held, "nothing changed");
}

/// Once the lease has expired, another claim takes the run over with a higher epoch.
pub async fn claim_after_lease_expiry_takes_over(h: Harness) {
    let tenant = tenant();
    let run = create(&h, &tenant).await;
    let first = claim(&h, &run, "engine-a", Duration::from_secs(1)).await;
    h.advance(Duration::from_secs(2)).await;
    let c = claim_for(&h, "engine-b", LEASE);
    let second = h
        .backend
        .store
        .claim(&tenant, &run.id, &c)
        .await
        .expect("claim after the lease expired");
    assert_eq!(second, claimed_from(&first, &c, second.updated_at));
    assert!(second.epoch > first.epoch, "the epoch moves on");
    assert_eq!(second.epoch, FencingEpoch(2));
    assert_eq!(get(&h, &tenant, &run.id).await, second);
}

/// Claims racing for one run: exactly one wins, the others conflict.
pub async fn concurrent_claims_exactly_one_wins(h: Harness) {
    let tenant = tenant();
    for round in 0..3 {
        let run = create(&h, &tenant).await;
        let tasks: Vec<_> = (0..4)
            .map(|i| {
                let store = h.backend.store.clone();
                let (tenant, run_id) = (tenant.clone(), run.id.clone());
                let c = claim_for(&h, &format!("engine-{i}"), LEASE);
                tokio::spawn(async move { store.claim(&tenant, &run_id, &c).await })
            })
            .collect();
        let mut winners = Vec::new();
        for task in futures::future::join_all(tasks).await {
            match task.expect("claim task") {
                Ok(run) => winners.push(run),
                Err(StoreError::Conflict(_)) => {}
                Err(e) => panic!("round {round}: a racing claim failed with {e:?}"),
            }
        }
        assert_eq!(winners.len(), 1, "round {round}: exactly one claim wins");
        let stored = get(&h, &tenant, &run.id).await;
        assert_eq!(
            stored, winners[0],
            "round {round}: the winner's lease is stored"
        );
        assert_eq!(stored.epoch, FencingEpoch(1));
        assert_eq!(stored.version, run.version + 1);
    }
}

/// Finished and parked runs cannot be claimed.
pub async fn claim_conflicts_on_finished_and_parked_runs(h: Harness) {
    let tenant = tenant();
    for status in [
        RunStatus::Completed,
        RunStatus::Failed,
        RunStatus::Cancelled,
        RunStatus::Parked,
    ] {
        let run = create(&h, &tenant).await;
        let done = finish(&h, &run, status).await;
        let got = h
            .backend
            .store
            .claim(&tenant, &run.id, &claim_for(&h, "engine-a", LEASE))
            .await;
        let current = conflict(got, &format!("claim of a {status} run"));
        assert_eq!(current, done, "the conflict carries the {status} run");
        assert_eq!(
            get(&h, &tenant, &run.id).await,
            done,
            "{status}: nothing changed"
        );
    }
}

/// Claiming a run that does not exist is `NotFound`.
pub async fn claim_on_missing_run_is_not_found(h: Harness) {
    let got = h
        .backend
        .store
        .claim(&tenant(), &run_id(), &claim_for(&h, "engine-a", LEASE))
        .await;
    assert!(
        matches!(got, Err(StoreError::NotFound)),
        "claim of a missing run: expected NotFound, got {got:?}"
    );
}

/// `renew_lease` with the holder's epoch extends the lease and `due_at`, keeps the
/// version, and returns the run as stored.
pub async fn renew_lease_extends_without_a_version_bump(h: Harness) {
    let tenant = tenant();
    let run = create(&h, &tenant).await;
    let held = claim(&h, &run, "engine-a", LEASE).await;
    let later = h.now().plus(LEASE * 3);
    let renewed = renew(&h, &held, later).await;
    let lease = renewed.lease.clone().expect("a renewed run has a lease");
    assert_eq!(lease.expires_at, later, "the lease is extended");
    assert_eq!(lease.owner, "engine-a", "the owner stays");
    assert_eq!(lease.epoch, held.epoch, "the epoch stays");
    assert_eq!(renewed.due_at, Some(later), "due_at follows the lease");
    assert_eq!(
        renewed.version, held.version,
        "a renewal does not bump the version"
    );
    assert_eq!(renewed.epoch, held.epoch);
    assert_eq!(renewed.status, RunStatus::Running);
    assert_eq!(
        get(&h, &tenant, &run.id).await,
        renewed,
        "renew returns the run as stored"
    );

    // A checkpoint read before the renewal still fits: only the lease moved.
    let cp = checkpoint_over(&h, &held, Some(held.epoch), |r| {
        r.lease = Some(lease.clone())
    });
    write(&h, &cp).await;
}

/// `renew_lease` with an epoch that is not the current lease's is a `Conflict` and
/// changes nothing.
pub async fn renew_lease_with_a_stale_epoch_conflicts(h: Harness) {
    let tenant = tenant();
    let run = create(&h, &tenant).await;
    let first = claim(&h, &run, "engine-a", Duration::from_secs(1)).await;
    h.advance(Duration::from_secs(2)).await;
    let second = claim(&h, &run, "engine-b", LEASE).await;
    let later = h.now().plus(LEASE * 3);
    let zombie = h
        .backend
        .store
        .renew_lease(&tenant, &run.id, first.epoch, later)
        .await;
    let current = conflict(zombie, "renew with a superseded epoch");
    assert_eq!(current, second, "the conflict carries the current run");
    let future = h
        .backend
        .store
        .renew_lease(&tenant, &run.id, second.epoch.next(), later)
        .await;
    conflict(future, "renew with an epoch never granted");
    assert_eq!(get(&h, &tenant, &run.id).await, second, "nothing changed");
}
