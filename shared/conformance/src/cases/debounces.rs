//! Starts held back until an instant: a debounce's entry per key (which run its starts
//! join), written only on the version read; a queued run's hold, read back as written,
//! due at its release, and released by one write on its version.
//!
//! A backend without debounces answers [`StoreError::Unsupported`]; its entry cases
//! are skipped, saying so.

use std::time::Duration;

use siesta::ports::*;
use siesta::*;

use crate::Harness;
use crate::support::*;

/// The entry's `keep_until` in these cases: far enough that nothing forgets it.
fn kept(h: &Harness) -> Timestamp {
    h.now().plus(Duration::from_secs(3600))
}

/// An entry not stored yet is `None`; one written on version 0 is stored at 1 and
/// reads back; a write on any version but the stored one is a conflict and changes
/// nothing; another tenant's, debounce's or key's entry is another entry.
pub async fn debounce_entry_round_trips_and_is_written_on_its_version(h: Harness) {
    let store = &h.backend.store;
    let (tenant, other) = (tenant(), tenant());
    let name = unique("orders");
    let (first, second) = (run_id(), run_id());
    match store.get_debounce_entry(&tenant, &name, "o-1").await {
        Ok(None) => {}
        Err(StoreError::Unsupported(why)) => {
            eprintln!("skipped: this backend has no debounces ({why})");
            return;
        }
        other => panic!("a new entry: {other:?}"),
    }
    let put = |t: &TenantId, key: &'static str, run: &RunId, expected: u64| {
        let (t, name, run) = (t.clone(), name.clone(), run.clone());
        let until = kept(&h);
        async move {
            store
                .put_debounce_entry(&t, &name, key, &run, expected, until)
                .await
        }
    };
    assert_eq!(put(&tenant, "o-1", &first, 0).await.unwrap(), 1);
    assert_eq!(
        store
            .get_debounce_entry(&tenant, &name, "o-1")
            .await
            .unwrap(),
        Some(DebounceEntry {
            run_id: first.clone(),
            version: 1
        })
    );
    assert!(
        matches!(
            put(&tenant, "o-1", &second, 0).await,
            Err(StoreError::Conflict(_))
        ),
        "a second first write conflicts"
    );
    assert_eq!(put(&tenant, "o-1", &second, 1).await.unwrap(), 2);
    assert!(
        matches!(
            put(&tenant, "o-1", &first, 1).await,
            Err(StoreError::Conflict(_))
        ),
        "a write on a stale version conflicts"
    );
    assert_eq!(
        store
            .get_debounce_entry(&tenant, &name, "o-1")
            .await
            .unwrap(),
        Some(DebounceEntry {
            run_id: second.clone(),
            version: 2
        }),
        "the stale write changed nothing"
    );
    assert_eq!(
        store
            .get_debounce_entry(&tenant, &name, "o-2")
            .await
            .unwrap(),
        None,
        "another key"
    );
    assert_eq!(
        store
            .get_debounce_entry(&other, &name, "o-1")
            .await
            .unwrap(),
        None,
        "another tenant"
    );
    assert_eq!(put(&other, "o-1", &first, 0).await.unwrap(), 1);
}

/// Of eight first writes of one entry at once, exactly one wins: the key's starts
/// agree on one run.
pub async fn concurrent_debounce_entry_writes_exactly_one_wins(h: Harness) {
    let store = &h.backend.store;
    let tenant = tenant();
    let name = unique("orders");
    let until = kept(&h);
    let writes = (0..8).map(|_| {
        let (tenant, name, run) = (tenant.clone(), name.clone(), run_id());
        async move {
            let put = store
                .put_debounce_entry(&tenant, &name, "k", &run, 0, until)
                .await;
            (run, put)
        }
    });
    let results = futures::future::join_all(writes).await;
    if results
        .iter()
        .any(|(_, r)| matches!(r, Err(StoreError::Unsupported(_))))
    {
        eprintln!("skipped: this backend has no debounces");
        return;
    }
    let won: Vec<&RunId> = results
        .iter()
        .filter(|(_, r)| r.is_ok())
        .map(|(run, _)| run)
        .collect();
    assert_eq!(won.len(), 1, "{results:?}");
    for (_, r) in &results {
        assert!(
            matches!(r, Ok(1) | Err(StoreError::Conflict(_))),
            "a loser conflicts: {r:?}"
        );
    }
    let entry = store.get_debounce_entry(&tenant, &name, "k").await.unwrap();
    assert_eq!(entry.map(|e| e.run_id), Some(won[0].clone()));
}

/// A queued run held until an instant reads back with its hold, is due at that
/// instant (not before), and is released by one control-plane write on its version;
/// a second write on the version it was read at conflicts.
pub async fn a_held_run_is_due_at_its_release_and_released_on_its_version(h: Harness) {
    let tenant = tenant();
    let mut run = new_run(&h, &tenant, "sync_order");
    let until = h.now().plus(Duration::from_secs(10));
    run.status = RunStatus::Queued;
    run.held = Some(HeldStart {
        reason: HoldReason::Debounce {
            name: "orders".into(),
            key: "o-1".into(),
            first_at: h.now(),
            starts: 1,
        },
        until,
    });
    run.due_at = Some(until);
    run.resend_after = None;
    create_run(&h, &run).await;
    let stored = h
        .backend
        .store
        .get_run(&tenant, &run.id)
        .await
        .unwrap()
        .expect("created");
    assert_eq!(stored.held, run.held, "the hold reads back as written");
    assert_eq!(stored.status, RunStatus::Queued);
    let due_now = h.backend.store.due_runs(h.now(), 1000).await.unwrap();
    assert!(
        !due_now.iter().any(|d| d.run_id == run.id),
        "not due before its release"
    );
    let due_then = h.backend.store.due_runs(until, 1000).await.unwrap();
    assert!(
        due_then.iter().any(|d| d.run_id == run.id),
        "due at its release"
    );

    let release = checkpoint_over(&h, &stored, None, |r| {
        r.status = RunStatus::Pending;
        r.held = None;
        r.due_at = Some(until);
    });
    write(&h, &release).await;
    let released = h
        .backend
        .store
        .get_run(&tenant, &run.id)
        .await
        .unwrap()
        .expect("there");
    assert_eq!(released.status, RunStatus::Pending);
    assert_eq!(released.held, None);
    let again = checkpoint_over(&h, &stored, None, |r| {
        r.held = None;
    });
    assert!(
        matches!(
            h.backend.store.checkpoint(&again).await,
            Err(StoreError::Conflict(_))
        ),
        "a second write on the version read conflicts"
    );
}
