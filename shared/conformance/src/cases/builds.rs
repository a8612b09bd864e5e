//! The builds a tenant's runs started on, with their unfinished runs by status.

use std::collections::BTreeMap;
use std::time::Duration;

use siesta::ports::*;
use siesta::*;

use crate::Harness;
use crate::support::*;

async fn builds(h: &Harness, tenant: &TenantId) -> Vec<BuildSummary> {
    h.backend.store.builds(tenant).await.expect("builds")
}

/// Create a pending run of `tenant` on `build` (`None`: one that records no build).
async fn on_build(h: &Harness, tenant: &TenantId, build: Option<&str>) -> Run {
    let mut run = new_run(h, tenant, "conformance");
    run.build_id = build.map(str::to_owned);
    create_run(h, &run).await;
    run
}

fn counts(of: &[(RunStatus, u64)]) -> BTreeMap<RunStatus, u64> {
    of.iter().copied().collect()
}

/// Each build that started a run of the tenant is listed once, by build id, with its
/// unfinished runs by status (finished ones not counted, a parked one counted) and the
/// creation times of its first and latest run; runs that record no build and other
/// tenants' runs are left out; a run moved to another build (an upgrade: a checkpoint
/// that changes its build and carries `RunUpgraded`) counts there,
/// and a build whose runs all finished is still listed, with none.
pub async fn builds_count_unfinished_runs_by_status_per_build(h: Harness) {
    let (tenant, other) = (tenant(), tenant());
    let v1 = unique("app@1+");
    let v2 = unique("app@2+");
    assert_eq!(builds(&h, &tenant).await, [], "a new tenant has none");

    let first = on_build(&h, &tenant, Some(&v1)).await;
    h.advance(Duration::from_secs(1)).await;
    let waiting = on_build(&h, &tenant, Some(&v1)).await;
    let waiting = write_status(&h, &waiting, RunStatus::Waiting).await;
    let done = on_build(&h, &tenant, Some(&v1)).await;
    finish(&h, &done, RunStatus::Completed).await;
    h.advance(Duration::from_secs(1)).await;
    let newer = on_build(&h, &tenant, Some(&v2)).await;
    let parked = on_build(&h, &tenant, Some(&v2)).await;
    finish(&h, &parked, RunStatus::Parked).await;
    on_build(&h, &tenant, None).await;
    on_build(&h, &other, Some(&v1)).await;

    let mut expected = vec![
        BuildSummary {
            build_id: v1.clone(),
            first_seen: first.created_at,
            last_seen: done.created_at,
            unfinished: counts(&[(RunStatus::Pending, 1), (RunStatus::Waiting, 1)]),
        },
        BuildSummary {
            build_id: v2.clone(),
            first_seen: newer.created_at,
            last_seen: parked.created_at,
            unfinished: counts(&[(RunStatus::Pending, 1), (RunStatus::Parked, 1)]),
        },
    ];
    expected.sort_by(|a, b| a.build_id.cmp(&b.build_id));
    assert_eq!(builds(&h, &tenant).await, expected);
    let others = builds(&h, &other).await;
    assert_eq!(
        others
            .iter()
            .map(|b| (&b.build_id, &b.unfinished))
            .collect::<Vec<_>>(),
        [(&v1, &counts(&[(RunStatus::Pending, 1)]))],
        "another tenant's runs are its own"
    );

    // An upgrade moves the first run to v2, the waiting one finishes: v1 has none left.
    let mut cp = checkpoint_over(&h, &first, None, |r| r.build_id = Some(v2.clone()));
    push_event(&mut cp, event(0, h.now(), EventType::RunUpgraded));
    write(&h, &cp).await;
    finish(&h, &waiting, RunStatus::Failed).await;
    let after = builds(&h, &tenant).await;
    let of = |build: &str| {
        after
            .iter()
            .find(|b| b.build_id == build)
            .unwrap_or_else(|| panic!("{build} is listed: {after:?}"))
            .clone()
    };
    assert_eq!(
        of(&v1).unfinished,
        counts(&[]),
        "v1's runs all moved or finished"
    );
    assert_eq!(
        (of(&v1).first_seen, of(&v1).last_seen),
        (first.created_at, done.created_at)
    );
    assert_eq!(
        of(&v2).unfinished,
        counts(&[(RunStatus::Pending, 2), (RunStatus::Parked, 1)])
    );
    assert_eq!(
        of(&v2).first_seen,
        first.created_at,
        "the run moved to v2 is v2's earliest"
    );
}

/// Move `current` to `status` without a lease; the run after the write.
async fn write_status(h: &Harness, current: &Run, status: RunStatus) -> Run {
    let cp = checkpoint_over(h, current, None, |r| {
        r.status = status;
        r.lease = None;
        r.due_at = Some(h.now().plus(Duration::from_secs(3600)));
    });
    write(h, &cp).await;
    cp.run
}
