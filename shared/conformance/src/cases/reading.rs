//! Reading: timeline pages, run listings, the due index.

use std::collections::BTreeSet;
use std::time::Duration;

use siesta::ports::*;
use siesta::*;

use crate::Harness;
use crate::support::*;

/// Every page of a listing, following cursors until the last page.
async fn list_all(
    h: &Harness,
    tenant: &TenantId,
    filter: &RunFilter,
    limit: usize,
) -> (Vec<Run>, usize) {
    let mut runs = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let page = h
            .backend
            .store
            .list_runs(tenant, filter, cursor.as_deref(), limit)
            .await
            .unwrap_or_else(|e| panic!("list_runs page {pages} ({filter:?}): {e}"));
        pages += 1;
        assert!(
            page.runs.len() <= limit,
            "a page holds at most {limit} runs, got {}",
            page.runs.len()
        );
        runs.extend(page.runs);
        match page.next_cursor {
            Some(next) => {
                assert!(pages < 100, "the listing never ends");
                // Clients put the cursor into a query string as they got it.
                assert!(
                    !next.is_empty()
                        && next
                            .bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b"-._~".contains(&b)),
                    "a cursor is URL-safe as it is (RFC 3986 unreserved characters): {next:?}"
                );
                cursor = Some(next);
            }
            None => return (runs, pages),
        }
    }
}

/// Assert `runs` are newest first and exactly `expected` (by id), each listed once and
/// as stored now.
async fn assert_listing(h: &Harness, runs: &[Run], expected: &[&Run], what: &str) {
    let ids: Vec<&RunId> = runs.iter().map(|r| &r.id).collect();
    let unique: BTreeSet<&RunId> = ids.iter().copied().collect();
    assert_eq!(
        unique.len(),
        ids.len(),
        "{what}: a run listed twice: {ids:?}"
    );
    assert_eq!(
        unique,
        expected.iter().map(|r| &r.id).collect::<BTreeSet<_>>(),
        "{what}: the runs listed"
    );
    assert!(
        runs.windows(2).all(|w| w[0].created_at >= w[1].created_at),
        "{what}: newest first, got {:?}",
        runs.iter().map(|r| r.created_at.0).collect::<Vec<_>>()
    );
    for run in runs {
        assert_eq!(
            run,
            &get(h, &run.tenant, &run.id).await,
            "{what}: a listed run is the run as stored"
        );
    }
}

/// `timeline(after, limit)` pages through the events oldest first; the seqs are
/// gapless from 1 to the run's `timeline_seq`.
pub async fn timeline_pages_are_gapless(h: Harness) {
    let tenant = tenant();
    let run = create(&h, &tenant).await;
    let held = claim(&h, &run, "engine-a", LEASE).await;
    let mut cp = checkpoint_over(&h, &held, Some(held.epoch), |_| {});
    for i in 0..9 {
        h.advance(Duration::from_millis(3)).await;
        push_event(
            &mut cp,
            op_event(
                h.now(),
                if i % 2 == 0 {
                    EventType::StepStarted
                } else {
                    EventType::StepSucceeded
                },
                SubType::Step,
                &format!("step#{}", i / 2),
                serde_json::json!({"Attempt": 1, "i": i}),
            ),
        );
    }
    write(&h, &cp).await;
    let mut expected = vec![started(&run)];
    expected.extend(cp.timeline.iter().cloned());
    for name in ["a", "b"] {
        let d = event_delivery(&h, &run, name);
        let after = deliver(&h, &d).await;
        expected.push(TimelineEvent {
            seq: after.timeline_seq,
            ..d.event
        });
    }
    assert_eq!(expected.len(), 12);

    let store = &h.backend.store;
    let mut paged = Vec::new();
    let mut after = 0;
    for pages in 0.. {
        assert!(pages <= expected.len(), "the timeline pages never end");
        let page = store
            .timeline(&tenant, &run.id, after, 5)
            .await
            .expect("timeline page");
        assert!(page.len() <= 5, "a page holds at most the limit");
        assert!(
            page.iter().all(|e| e.seq > after),
            "timeline(after = {after}) returns only later events, got seqs {:?}",
            page.iter().map(|e| e.seq).collect::<Vec<_>>()
        );
        match page.last() {
            Some(last) => after = last.seq,
            None => break,
        }
        paged.extend(page);
    }
    assert_eq!(paged, expected, "the pages put together are the timeline");
    assert_eq!(
        paged.iter().map(|e| e.seq).collect::<Vec<_>>(),
        (1..=12).collect::<Vec<_>>(),
        "gapless seqs from 1"
    );
    assert_eq!(get(&h, &tenant, &run.id).await.timeline_seq, 12);
    assert_eq!(
        store
            .timeline(&tenant, &run.id, 3, 2)
            .await
            .expect("timeline"),
        expected[3..5].to_vec(),
        "after 3, limit 2"
    );
    assert_eq!(
        store
            .timeline(&tenant, &run.id, 10, 100)
            .await
            .expect("timeline"),
        expected[10..].to_vec(),
        "a limit past the end"
    );
    assert_eq!(
        store
            .timeline(&tenant, &run.id, 12, 100)
            .await
            .expect("timeline"),
        vec![],
        "nothing after the last event"
    );
}

/// A timeline written by every kind of write — the run's creation, checkpoints with
/// several events, one event or none (a journal entry alone), deliveries between them —
/// reads back the same from any `after` with any `limit`.
pub async fn timeline_pages_from_every_point_across_checkpoints_and_deliveries(h: Harness) {
    let tenant = tenant();
    let run = create(&h, &tenant).await;
    let held = claim(&h, &run, "engine-a", LEASE).await;
    let mut expected = vec![started(&run)];
    let mut current = held.clone();
    // Events per checkpoint, a delivery after the checkpoints marked `true`: runs of
    // checkpoints without events, after a delivery and before one, that a page must
    // read past.
    let checkpoints = [
        (3, true),
        (0, false),
        (0, false),
        (0, false),
        (2, false),
        (0, true),
        (1, false),
    ];
    for (i, (events, then_deliver)) in checkpoints.into_iter().enumerate() {
        h.advance(Duration::from_millis(3)).await;
        let mut cp = checkpoint_over(&h, &current, Some(held.epoch), |_| {});
        cp.journal.push(entry(
            &h,
            &format!("step#{i}"),
            i as u32,
            succeeded(serde_json::json!(i)),
        ));
        for e in 0..events {
            push_event(
                &mut cp,
                op_event(
                    h.now(),
                    EventType::StepSucceeded,
                    SubType::Step,
                    &format!("step#{i}"),
                    serde_json::json!({"event": e}),
                ),
            );
        }
        write(&h, &cp).await;
        expected.extend(cp.timeline.iter().cloned());
        current = cp.run;
        if then_deliver {
            let d = event_delivery(&h, &current, &format!("after-{i}"));
            current = deliver(&h, &d).await;
            expected.push(TimelineEvent {
                seq: current.timeline_seq,
                ..d.event
            });
        }
    }
    let last = expected.len();
    assert_eq!(current.timeline_seq, last as u64);
    for after in 0..=last {
        for limit in 1..=3 {
            let page = h
                .backend
                .store
                .timeline(&tenant, &run.id, after as u64, limit)
                .await
                .expect("timeline page");
            assert_eq!(
                page,
                expected[after..(after + limit).min(last)].to_vec(),
                "timeline(after = {after}, limit = {limit})"
            );
        }
    }
    assert_eq!(
        snapshot(&h, &tenant, &run.id).await.journal.len(),
        checkpoints.len(),
        "every checkpoint's entry, events or none"
    );
}

/// `list_runs` lists a tenant's runs newest first; following cursors visits each run
/// exactly once, across pages, even when runs share a creation time.
pub async fn list_runs_newest_first_with_cursor_paging(h: Harness) {
    let tenant = tenant();
    let base = h.now();
    let mut runs = Vec::new();
    for offset in [0, 1, 1, 2, 3, 3, 4] {
        let mut run = new_run(&h, &tenant, "listed");
        run.created_at = base.plus(Duration::from_millis(offset));
        run.updated_at = run.created_at;
        create_run(&h, &run).await;
        runs.push(run);
    }
    let expected: Vec<&Run> = runs.iter().collect();

    let (listed, pages) = list_all(&h, &tenant, &RunFilter::default(), 3).await;
    assert!(
        pages >= 3,
        "7 runs, 3 a page: at least 3 pages, got {pages}"
    );
    assert_listing(&h, &listed, &expected, "limit 3").await;

    let (listed, pages) = list_all(&h, &tenant, &RunFilter::default(), 1).await;
    assert!(pages >= 7, "one run a page: at least 7 pages, got {pages}");
    assert_listing(&h, &listed, &expected, "limit 1").await;

    let (listed, pages) = list_all(&h, &tenant, &RunFilter::default(), 100).await;
    assert_eq!(pages, 1, "everything fits on one page");
    assert_listing(&h, &listed, &expected, "limit 100").await;
    assert_eq!(
        listed.first().map(|r| r.created_at),
        runs.last().map(|r| r.created_at)
    );
}

/// `list_runs` filters by status, by workflow, and by both; the filters follow status
/// changes, and filtered listings page like the rest.
pub async fn list_runs_filters_by_status_and_workflow(h: Harness) {
    let tenant = tenant();
    let base = h.now();
    let mut made = Vec::new();
    for (i, workflow) in ["alpha", "beta", "alpha", "beta", "alpha", "beta"]
        .into_iter()
        .enumerate()
    {
        let mut run = new_run(&h, &tenant, workflow);
        run.created_at = base.plus(Duration::from_millis(i as u64));
        create_run(&h, &run).await;
        made.push(run);
    }
    // alpha: pending, waiting, completed; beta: pending, running, completed.
    let a_pending = made[0].clone();
    let b_pending = made[1].clone();
    let a_waiting = {
        let held = claim(&h, &made[2], "engine-a", LEASE).await;
        let cp = checkpoint_over(&h, &held, Some(held.epoch), |r| {
            r.status = RunStatus::Waiting;
            r.lease = None;
        });
        write(&h, &cp).await;
        cp.run
    };
    let b_running = claim(&h, &made[3], "engine-b", LEASE).await;
    let a_done = finish(&h, &made[4], RunStatus::Completed).await;
    let b_done = finish(&h, &made[5], RunStatus::Completed).await;

    let filter = |status: Option<RunStatus>, workflow: Option<&str>| RunFilter {
        status,
        workflow: workflow.map(str::to_owned),
    };
    let cases: Vec<(RunFilter, Vec<&Run>)> = vec![
        (
            filter(Some(RunStatus::Pending), None),
            vec![&a_pending, &b_pending],
        ),
        (
            filter(Some(RunStatus::Completed), None),
            vec![&a_done, &b_done],
        ),
        (filter(Some(RunStatus::Running), None), vec![&b_running]),
        (filter(Some(RunStatus::Waiting), None), vec![&a_waiting]),
        (filter(Some(RunStatus::Failed), None), vec![]),
        (
            filter(None, Some("alpha")),
            vec![&a_pending, &a_waiting, &a_done],
        ),
        (
            filter(None, Some("beta")),
            vec![&b_pending, &b_running, &b_done],
        ),
        (
            filter(Some(RunStatus::Completed), Some("beta")),
            vec![&b_done],
        ),
        (filter(Some(RunStatus::Waiting), Some("beta")), vec![]),
        (filter(None, Some("gamma")), vec![]),
        (filter(None, None), made.iter().collect()),
    ];
    for (f, expected) in cases {
        let (listed, _) = list_all(&h, &tenant, &f, 2).await;
        assert_listing(&h, &listed, &expected, &format!("{f:?}")).await;
    }
}

/// A base time far in the past, different for each call, where only these cases put
/// due times: the due index is global, and other cases' runs fall due around now.
fn far_past(h: &Harness) -> Timestamp {
    const YEAR_MS: u128 = 365 * 24 * 3600 * 1000;
    let jitter = uuid::Uuid::new_v4().as_u128() % YEAR_MS;
    Timestamp(h.now().0 - (10 * YEAR_MS + jitter) as i64)
}

/// Create a run of `tenant` due at `due_at`.
async fn due_run(h: &Harness, tenant: &TenantId, due_at: Option<Timestamp>) -> Run {
    let mut run = new_run(h, tenant, "due");
    run.due_at = due_at;
    create_run(h, &run).await;
    run
}

/// Take `runs` out of the due index, so they do not linger in a shared one.
async fn clean_up(h: &Harness, runs: &[Run]) {
    for run in runs {
        let current = get(h, &run.tenant, &run.id).await;
        if current.due_at.is_some() {
            finish(h, &current, RunStatus::Cancelled).await;
        }
    }
}

/// `due_runs(before, limit)` returns runs due at or before `before`, earliest first,
/// at most `limit`, with their tenant and due time.
pub async fn due_runs_order_limit_and_bound(h: Harness) {
    let tenant = tenant();
    let base = far_past(&h);
    let at = |ms: u64| base.plus(Duration::from_millis(ms));
    // Created out of order, so the index cannot lean on insertion order.
    let r30 = due_run(&h, &tenant, Some(at(30))).await;
    let r10 = due_run(&h, &tenant, Some(at(10))).await;
    let r40 = due_run(&h, &tenant, Some(at(40))).await;
    let r20 = due_run(&h, &tenant, Some(at(20))).await;
    let r30b = due_run(&h, &tenant, Some(at(30))).await;
    let later = due_run(&h, &tenant, Some(at(3_600_000))).await;
    let all = vec![
        r30.clone(),
        r10.clone(),
        r40.clone(),
        r20.clone(),
        r30b.clone(),
        later.clone(),
    ];

    let store = &h.backend.store;
    let full = store.due_runs(at(30), 1000).await.expect("due_runs");
    // Other cases share the AWS table, and their runs may carry a `resend_after`: the
    // page is ordered by sweep time, which is the due time only for runs with no
    // wake-up on its way.
    assert!(
        full.iter().all(|d| d.sweep_at() <= at(30)),
        "nothing to sweep after `before`"
    );
    assert!(
        full.windows(2).all(|w| w[0].sweep_at() <= w[1].sweep_at()),
        "earliest sweep time first"
    );
    let ours: Vec<&DueRun> = full.iter().filter(|d| d.tenant == tenant).collect();
    assert_eq!(
        ours.iter().map(|d| d.due_at).collect::<Vec<_>>(),
        vec![at(10), at(20), at(30), at(30)],
        "our due runs, earliest first, `before` included"
    );
    assert_eq!(ours[0].run_id, r10.id);
    assert_eq!(ours[1].run_id, r20.id);
    assert_eq!(
        ours[2..].iter().map(|d| &d.run_id).collect::<BTreeSet<_>>(),
        [&r30.id, &r30b.id].into_iter().collect::<BTreeSet<_>>()
    );

    let limited = store.due_runs(at(30), 2).await.expect("due_runs");
    assert_eq!(limited.len(), 2, "at most `limit`, and that many are due");
    assert!(
        limited[0].sweep_at() <= limited[1].sweep_at(),
        "earliest sweep time first"
    );
    // Other cases write to the shared AWS table between two reads, so this page need
    // not be the first two of `full`; but ours due at 10 and 20 ms are there, so the
    // two earliest are due no later than the second of them.
    assert!(
        limited.iter().all(|d| d.sweep_at() <= at(20)),
        "the limit keeps the earliest"
    );

    let early = store.due_runs(at(9), 1000).await.expect("due_runs");
    assert!(
        early.iter().all(|d| d.tenant != tenant),
        "nothing of ours is due before the first"
    );
    let wide = store.due_runs(at(3_600_000), 1000).await.expect("due_runs");
    assert_eq!(
        wide.iter().filter(|d| d.tenant == tenant).count(),
        6,
        "a later bound takes in the later run"
    );
    clean_up(&h, &all).await;
}

/// The due index is sparse and follows the run: a run whose `due_at` is cleared leaves
/// it, a run whose `due_at` moves is found at its new time only.
pub async fn due_index_is_sparse(h: Harness) {
    let tenant = tenant();
    let base = far_past(&h);
    let at = |ms: u64| base.plus(Duration::from_millis(ms));
    let store = &h.backend.store;
    let ours = |due: Vec<DueRun>| -> Vec<(RunId, Timestamp)> {
        let mut v: Vec<_> = due
            .into_iter()
            .filter(|d| d.tenant == tenant)
            .map(|d| (d.run_id, d.due_at))
            .collect();
        v.sort();
        v
    };

    let never = due_run(&h, &tenant, None).await;
    let cleared = due_run(&h, &tenant, Some(at(5))).await;
    let moved = due_run(&h, &tenant, Some(at(5))).await;
    let mut expected = vec![(cleared.id.clone(), at(5)), (moved.id.clone(), at(5))];
    expected.sort();
    assert_eq!(
        ours(store.due_runs(at(5), 1000).await.expect("due_runs")),
        expected
    );

    finish(&h, &cleared, RunStatus::Cancelled).await;
    let cp = checkpoint_over(&h, &moved, None, |r| r.due_at = Some(at(500)));
    write(&h, &cp).await;
    let cp2 = checkpoint_over(&h, &never, None, |r| r.due_at = Some(at(7)));
    write(&h, &cp2).await;

    assert_eq!(
        ours(store.due_runs(at(5), 1000).await.expect("due_runs")),
        vec![],
        "a cleared due_at leaves the index; a moved one leaves its old time"
    );
    assert_eq!(
        ours(store.due_runs(at(7), 1000).await.expect("due_runs")),
        vec![(never.id.clone(), at(7))],
        "a run that gains a due_at enters the index"
    );
    let mut expected = vec![(never.id.clone(), at(7)), (moved.id.clone(), at(500))];
    expected.sort();
    assert_eq!(
        ours(store.due_runs(at(10_000), 1000).await.expect("due_runs")),
        expected,
        "the moved run is found at its new time, the cleared one nowhere"
    );
    clean_up(&h, &[never, cleared, moved]).await;
}

/// A run whose wake-up is on its way (`resend_after` not passed) is left out of
/// `due_runs` until its re-send time, then found with it; `set_resend_after` moves that
/// time (or clears it) only while the run is due when the caller saw it, without a
/// version bump; a claim clears it (the wake-up arrived) and a delivery to a waiting
/// run sets the delivery's.
pub async fn due_runs_leave_out_runs_whose_wake_up_is_on_its_way(h: Harness) {
    let tenant = tenant();
    let base = far_past(&h);
    let at = |ms: u64| base.plus(Duration::from_millis(ms));
    let store = &h.backend.store;
    let ours = |due: Vec<DueRun>| -> Vec<(RunId, Timestamp, Option<Timestamp>)> {
        due.into_iter()
            .filter(|d| d.tenant == tenant)
            .map(|d| (d.run_id, d.due_at, d.resend_after))
            .collect()
    };

    let mut queued = new_run(&h, &tenant, "due");
    queued.due_at = Some(at(10));
    queued.resend_after = Some(at(100));
    create_run(&h, &queued).await;
    let lost = due_run(&h, &tenant, Some(at(20))).await;

    assert_eq!(
        ours(store.due_runs(at(50), 1000).await.expect("due_runs")),
        vec![(lost.id.clone(), at(20), None)],
        "the run whose wake-up is on its way is left out"
    );
    assert_eq!(
        ours(store.due_runs(at(100), 1000).await.expect("due_runs")),
        vec![
            (lost.id.clone(), at(20), None),
            (queued.id.clone(), at(10), Some(at(100)))
        ],
        "found at its re-send time, ordered by it"
    );

    // The sweep sent it again: not before a later time.
    store
        .set_resend_after(&tenant, &queued.id, at(10), Some(at(1_000)))
        .await
        .expect("set_resend_after");
    let now = get(&h, &tenant, &queued.id).await;
    assert_eq!(now.resend_after, Some(at(1_000)));
    assert_eq!(now.version, queued.version, "no version bump");
    assert_eq!(
        ours(store.due_runs(at(999), 1000).await.expect("due_runs")),
        vec![(lost.id.clone(), at(20), None)]
    );
    // Seen due at another time: nothing changes.
    store
        .set_resend_after(&tenant, &queued.id, at(11), None)
        .await
        .expect("set_resend_after on a run no longer due then");
    assert_eq!(
        get(&h, &tenant, &queued.id).await.resend_after,
        Some(at(1_000))
    );
    // The send failed: due for the sweep at once.
    store
        .set_resend_after(&tenant, &queued.id, at(10), None)
        .await
        .expect("set_resend_after");
    assert_eq!(
        ours(store.due_runs(at(50), 1000).await.expect("due_runs")),
        vec![
            (queued.id.clone(), at(10), None),
            (lost.id.clone(), at(20), None)
        ]
    );
    store
        .set_resend_after(&tenant, &run_id(), at(10), Some(at(1)))
        .await
        .expect("set_resend_after on a missing run is no error");

    // A claim clears it.
    store
        .set_resend_after(&tenant, &lost.id, at(20), Some(at(1_000)))
        .await
        .expect("set_resend_after");
    let claimed = claim(&h, &lost, "claimer", Duration::from_secs(60)).await;
    assert_eq!(claimed.resend_after, None, "the wake-up arrived");
    assert_eq!(
        get(&h, &tenant, &lost.id).await.resend_after,
        None,
        "cleared in the store"
    );

    // A delivery to a waiting run sets the delivery's.
    let waiting = waiting_run(&h, &tenant).await;
    let mut d = event_delivery(&h, &waiting, "go");
    d.resend_after = Some(d.received_at.plus(Duration::from_secs(900)));
    store.deliver(&d).await.expect("deliver");
    let delivered = get(&h, &tenant, &waiting.id).await;
    assert_eq!(delivered.due_at, Some(d.received_at));
    assert_eq!(delivered.resend_after, d.resend_after);

    let claimed = get(&h, &tenant, &lost.id).await;
    clean_up(&h, &[queued, claimed, delivered]).await;
}
