//! Schedules' states: read back as written, written only on the version read, per
//! tenant.

use siesta::ports::*;
use siesta::*;

use crate::Harness;
use crate::support::*;

fn state(h: &Harness, version: u64) -> ScheduleState {
    ScheduleState {
        paused: false,
        through: h.now(),
        last_fired: Some(h.now()),
        buffered: None,
        version,
    }
}

/// A state not stored yet is `None`; one written on version 0 is stored at 1 and
/// reads back as written; a write on any version but the stored one is a conflict and
/// changes nothing; another tenant's schedule of the same name is another state.
pub async fn schedule_state_round_trips_and_is_written_on_its_version(h: Harness) {
    let store = &h.backend.schedules;
    let (tenant, other) = (tenant(), tenant());
    let name = unique("nightly");
    assert_eq!(
        store.get_schedule_state(&tenant, &name).await.unwrap(),
        None
    );

    let first = state(&h, 0);
    assert_eq!(
        store
            .put_schedule_state(&tenant, &name, &first)
            .await
            .unwrap(),
        1
    );
    let stored = store.get_schedule_state(&tenant, &name).await.unwrap();
    assert_eq!(
        stored,
        Some(ScheduleState {
            version: 1,
            ..first.clone()
        })
    );
    assert!(
        matches!(
            store.put_schedule_state(&tenant, &name, &first).await,
            Err(StoreError::Conflict(_))
        ),
        "a second first write conflicts"
    );

    let paused = ScheduleState {
        paused: true,
        buffered: Some(h.now()),
        ..state(&h, 1)
    };
    assert_eq!(
        store
            .put_schedule_state(&tenant, &name, &paused)
            .await
            .unwrap(),
        2
    );
    assert!(
        matches!(
            store
                .put_schedule_state(&tenant, &name, &state(&h, 1))
                .await,
            Err(StoreError::Conflict(_))
        ),
        "a write on a stale version conflicts"
    );
    assert_eq!(
        store.get_schedule_state(&tenant, &name).await.unwrap(),
        Some(ScheduleState {
            version: 2,
            ..paused
        })
    );
    assert_eq!(store.get_schedule_state(&other, &name).await.unwrap(), None);
}

/// Of several writes on the same version at once, exactly one is stored.
pub async fn concurrent_schedule_state_writes_exactly_one_wins(h: Harness) {
    let (tenant, name) = (tenant(), unique("hourly"));
    let writes = (0..6).map(|i| {
        let store = h.backend.schedules.clone();
        let (tenant, name) = (tenant.clone(), name.clone());
        let state = ScheduleState {
            through: Timestamp(h.now().millis() + i),
            ..state(&h, 0)
        };
        async move { store.put_schedule_state(&tenant, &name, &state).await }
    });
    let results = futures::future::join_all(writes).await;
    let won: Vec<_> = results.iter().filter(|r| r.is_ok()).collect();
    assert_eq!(won.len(), 1, "{results:?}");
    assert!(
        results
            .iter()
            .all(|r| matches!(r, Ok(1) | Err(StoreError::Conflict(_)))),
        "{results:?}"
    );
}

/// A workflow's pause: `None` until stored; written on version 0 it reads back at 1;
/// a write on another version is a conflict and changes nothing; a resume is a write
/// of it unpaused; another tenant's workflow of the same name is not paused; and it is
/// not a schedule's state (the same name is another record).
pub async fn workflow_pause_round_trips_and_is_written_on_its_version(h: Harness) {
    let store = &h.backend.schedules;
    let (tenant, other) = (tenant(), tenant());
    let workflow = unique("report");
    assert_eq!(
        store.get_workflow_pause(&tenant, &workflow).await.unwrap(),
        None
    );
    let mut pause = WorkflowPause {
        paused: true,
        starts: PausedStarts::Refuse,
        by: "ops".into(),
        at: h.now(),
        version: 0,
    };
    assert_eq!(
        store
            .put_workflow_pause(&tenant, &workflow, &pause)
            .await
            .unwrap(),
        1
    );
    let stored = store
        .get_workflow_pause(&tenant, &workflow)
        .await
        .unwrap()
        .expect("stored");
    assert_eq!(
        stored,
        WorkflowPause {
            version: 1,
            ..pause.clone()
        }
    );
    assert!(
        matches!(
            store.put_workflow_pause(&tenant, &workflow, &pause).await,
            Err(StoreError::Conflict(_))
        ),
        "version 0 again: the record exists"
    );
    pause.version = 1;
    pause.paused = false;
    assert_eq!(
        store
            .put_workflow_pause(&tenant, &workflow, &pause)
            .await
            .unwrap(),
        2
    );
    let resumed = store.get_workflow_pause(&tenant, &workflow).await.unwrap();
    assert_eq!(resumed.map(|p| (p.paused, p.version)), Some((false, 2)));
    assert_eq!(
        store.get_workflow_pause(&other, &workflow).await.unwrap(),
        None
    );
    assert_eq!(
        store.get_schedule_state(&tenant, &workflow).await.unwrap(),
        None
    );
}
