//! Concurrency limits' slots: taken in the create's write, freed and handed to the
//! first in line in the finishing write, by the rule of `siesta::flow::slots`.
//!
//! A backend without limits answers [`StoreError::Unsupported`] to a create with
//! limits; its cases are skipped, saying so.

use siesta::flow::slots::{Admission, SlotBook};
use siesta::ports::*;
use siesta::*;

use crate::Harness;
use crate::support::*;

fn slot(limit: &str, key: &str, max: u32) -> LimitSlot {
    LimitSlot {
        limit: limit.to_owned(),
        key: key.to_owned(),
        max,
    }
}

fn limited(h: &Harness, tenant: &TenantId, slots: &[LimitSlot]) -> Run {
    let mut run = new_run(h, tenant, "limited");
    run.limits = slots.to_vec();
    run
}

/// Create `run` under its limits; `None` when the backend has none (the case is
/// skipped).
async fn admit(h: &Harness, run: &Run) -> Option<Run> {
    match h.backend.store.admit_run(run, &started(run), None).await {
        Ok(stored) => Some(stored),
        Err(StoreError::Unsupported(why)) => {
            eprintln!("skipped: this backend has no concurrency limits ({why})");
            None
        }
        Err(e) => panic!("admit_run {}: {e}", run.id),
    }
}

/// Finish `current` (completed, or cancelled when queued), answering whom it admitted.
async fn finish_admitting(h: &Harness, current: &Run) -> Vec<Run> {
    let status = if current.status == RunStatus::Queued {
        RunStatus::Cancelled
    } else {
        RunStatus::Completed
    };
    let mut cp = checkpoint_over(h, current, None, |r| {
        r.status = status;
        r.queued = None;
        r.lease = None;
        r.due_at = None;
        r.resend_after = None;
        r.output = Some(json(serde_json::json!("done")));
    });
    push_event(&mut cp, event(0, h.now(), EventType::ExecutionSucceeded));
    h.backend
        .store
        .checkpoint_admitting(&cp)
        .await
        .unwrap_or_else(|e| panic!("finishing checkpoint of {}: {e}", current.id))
}

async fn usage(h: &Harness, tenant: &TenantId) -> Vec<(String, String, u64, u64)> {
    h.backend
        .store
        .limit_usage(tenant)
        .await
        .expect("limit_usage")
        .into_iter()
        .map(|u| (u.limit, u.key, u.holders, u.waiters))
        .collect()
}

/// Under a limit of 2 per key, a third start of one key is created queued — not due,
/// first in its line — while another key's start is not held up; the finish of a
/// holder frees its slot in the same write and hands it to the first in line, which it
/// answers with, pending and due; the usage counts move with each write.
pub async fn a_start_over_its_limit_is_queued_and_a_finish_hands_its_slot_on(h: Harness) {
    let tenant = tenant();
    let two = [slot("per-customer", "acme", 2)];
    let first = limited(&h, &tenant, &two);
    let Some(first) = admit(&h, &first).await else {
        return;
    };
    assert_eq!(first.status, RunStatus::Pending, "the first holds a slot");
    let second = admit(&h, &limited(&h, &tenant, &two)).await.unwrap();
    assert_eq!(
        second.status,
        RunStatus::Pending,
        "the second holds the other"
    );
    let third = admit(&h, &limited(&h, &tenant, &two)).await.unwrap();
    assert_eq!(third.status, RunStatus::Queued, "a third waits");
    let at = third
        .queued
        .clone()
        .expect("a queued run says where it waits");
    assert_eq!(
        (at.limit.as_str(), at.key.as_str()),
        ("per-customer", "acme")
    );
    assert_eq!(third.due_at, None, "a queued run is not due");
    let stored = get(&h, &tenant, &third.id).await;
    assert_eq!(stored.status, RunStatus::Queued);
    assert_eq!(stored.queued, Some(at.clone()));
    let other = admit(
        &h,
        &limited(&h, &tenant, &[slot("per-customer", "globex", 2)]),
    )
    .await
    .unwrap();
    assert_eq!(
        other.status,
        RunStatus::Pending,
        "another key is not held up"
    );
    let position = h.backend.store.queue_position(&tenant, &at).await.unwrap();
    assert_eq!(position, 1, "the third is next in line");
    let fourth = admit(&h, &limited(&h, &tenant, &two)).await.unwrap();
    let fourth_at = fourth.queued.clone().unwrap();
    assert_eq!(
        h.backend
            .store
            .queue_position(&tenant, &fourth_at)
            .await
            .unwrap(),
        2
    );
    assert_eq!(
        usage(&h, &tenant).await,
        vec![
            ("per-customer".into(), "acme".into(), 2, 2),
            ("per-customer".into(), "globex".into(), 1, 0),
        ]
    );
    let due = h.backend.store.due_runs(h.now(), 1000).await.unwrap();
    assert!(
        !due.iter()
            .any(|d| d.run_id == third.id || d.run_id == fourth.id),
        "queued runs are not in the due index"
    );

    let admitted = finish_admitting(&h, &get(&h, &tenant, &first.id).await).await;
    assert_eq!(
        admitted.iter().map(|r| &r.id).collect::<Vec<_>>(),
        vec![&third.id],
        "the first in line, and only it, is admitted"
    );
    let now_third = get(&h, &tenant, &third.id).await;
    assert_eq!(now_third.status, RunStatus::Pending);
    assert_eq!(now_third.queued, None);
    assert!(now_third.due_at.is_some(), "an admitted run is due");
    assert_eq!(now_third.version, third.version + 1);
    assert_eq!(
        h.backend
            .store
            .queue_position(&tenant, &fourth_at)
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        usage(&h, &tenant).await,
        vec![
            ("per-customer".into(), "acme".into(), 2, 1),
            ("per-customer".into(), "globex".into(), 1, 0),
        ]
    );
    let again = finish_admitting(&h, &get(&h, &tenant, &first.id).await).await;
    assert!(again.is_empty(), "a finished run frees nothing twice");
}

/// A run under two limits takes them in order and holds the first while it waits for
/// the second; cancelled while queued, it leaves its line and its held slot goes to the
/// first in that line; nothing is left held by a finished run.
pub async fn a_cancelled_queued_run_frees_what_it_held_and_leaves_its_line(h: Harness) {
    let tenant = tenant();
    let b_holder = limited(&h, &tenant, &[slot("b", "", 1)]);
    let Some(b_holder) = admit(&h, &b_holder).await else {
        return;
    };
    let both = admit(
        &h,
        &limited(&h, &tenant, &[slot("a", "", 1), slot("b", "", 1)]),
    )
    .await
    .unwrap();
    assert_eq!(both.status, RunStatus::Queued);
    assert_eq!(
        both.queued.as_ref().map(|q| q.limit.as_str()),
        Some("b"),
        "holds a, waits at b"
    );
    let a_waiter = admit(&h, &limited(&h, &tenant, &[slot("a", "", 1)]))
        .await
        .unwrap();
    assert_eq!(
        a_waiter.status,
        RunStatus::Queued,
        "a is held by the run waiting at b"
    );

    let admitted = finish_admitting(&h, &get(&h, &tenant, &both.id).await).await;
    assert_eq!(
        admitted.iter().map(|r| &r.id).collect::<Vec<_>>(),
        vec![&a_waiter.id]
    );
    assert_eq!(
        get(&h, &tenant, &both.id).await.status,
        RunStatus::Cancelled
    );
    assert_eq!(
        usage(&h, &tenant).await,
        vec![
            ("a".into(), String::new(), 1, 0),
            ("b".into(), String::new(), 1, 0)
        ]
    );
    finish_admitting(&h, &get(&h, &tenant, &b_holder.id).await).await;
    finish_admitting(&h, &get(&h, &tenant, &a_waiter.id).await).await;
    assert!(
        usage(&h, &tenant).await.is_empty(),
        "nothing held by finished runs"
    );
}

/// Over a fixed pseudo-random history of starts and finishes on three limits (maxima
/// 1, 2 and 3, two keys each, one to three limits per run), the store admits and
/// queues exactly the runs the rule's book does, after every write.
pub async fn slots_follow_the_rule_over_a_long_history(h: Harness) {
    let tenant = tenant();
    let limits = [("a", 1), ("b", 2), ("c", 3)];
    let probe = limited(&h, &tenant, &[slot("a", "probe", 1)]);
    let Some(probe) = admit(&h, &probe).await else {
        return;
    };
    finish_admitting(&h, &probe).await;
    let mut book = SlotBook::new();
    let mut runs: Vec<Run> = Vec::new();
    let mut alive: Vec<usize> = Vec::new();
    let mut seed: u64 = 0x5eed_1e57;
    let mut next = move |n: u64| {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 33) % n
    };
    for _ in 0..60 {
        if alive.is_empty() || next(3) != 0 {
            let mut slots: Vec<LimitSlot> = Vec::new();
            for (l, max) in limits {
                if next(2) == 0 {
                    slots.push(slot(l, &next(2).to_string(), max));
                }
            }
            if slots.is_empty() {
                slots.push(slot("a", "0", 1));
            }
            let run = limited(&h, &tenant, &slots);
            let stored = admit(&h, &run).await.unwrap();
            let expected = book.admit(&run.id, &slots);
            match &expected {
                Admission::Admitted => assert_eq!(stored.status, RunStatus::Pending, "{}", run.id),
                Admission::Queued(at) => {
                    assert_eq!(stored.status, RunStatus::Queued, "{}", run.id);
                    assert_eq!(stored.queued.as_ref(), Some(at), "{}", run.id);
                }
            }
            alive.push(runs.len());
            runs.push(stored);
        } else {
            let i = alive.remove(next(alive.len() as u64) as usize);
            let current = get(&h, &tenant, &runs[i].id).await;
            let admitted: Vec<RunId> = finish_admitting(&h, &current)
                .await
                .into_iter()
                .map(|r| r.id)
                .collect();
            assert_eq!(
                admitted,
                book.release(&current.id),
                "admitted by the finish of {}",
                current.id
            );
        }
        for &i in &alive {
            let stored = get(&h, &tenant, &runs[i].id).await;
            assert_eq!(
                stored.queued,
                book.queued_at(&stored.id),
                "where {} waits",
                stored.id
            );
            let status = if stored.queued.is_some() {
                RunStatus::Queued
            } else {
                RunStatus::Pending
            };
            assert_eq!(stored.status, status, "{}", stored.id);
        }
        let mut expected: Vec<(String, String, u64, u64)> = book
            .lines()
            .map(|((l, k), line)| {
                (
                    l.clone(),
                    k.clone(),
                    line.holders.len() as u64,
                    line.waiters.len() as u64,
                )
            })
            .collect();
        expected.sort();
        assert_eq!(usage(&h, &tenant).await, expected);
    }
}

/// A holder of a step slot, for `run` as claimed.
fn step_holder(run: &Run, position: &str) -> StepSlotHolder {
    StepSlotHolder {
        tenant: run.tenant.clone(),
        run_id: run.id.clone(),
        position: Position(position.to_owned()),
        epoch: run.epoch,
    }
}

/// Step slots: at most `max` attempts hold a key; the next wait in line, each keeping
/// its place when it asks again; a slot given back goes to the first in line (granted
/// to it, its run answered for a wake-up), and a holder whose run's lease lapsed holds
/// nothing any more. Keys are shared across tenants (a deployment's model provider).
pub async fn step_slots_hold_at_most_max_and_hand_over_in_line(h: Harness) {
    let key = unique("model");
    let lease = std::time::Duration::from_secs(60);
    let grant = std::time::Duration::from_secs(30);
    let mut runs = Vec::new();
    for i in 0..4 {
        let tenant = if i % 2 == 0 {
            tenant()
        } else {
            TenantId::from("other-tenant")
        };
        let run = create(&h, &tenant).await;
        runs.push(claim(&h, &run, "suite", lease).await);
    }
    let now = h.now();
    let take = |i: usize, at: Timestamp| {
        let holder = step_holder(&runs[i], "call#0");
        let key = key.clone();
        let store = h.backend.store.clone();
        async move { store.take_step_slot(&key, 2, &holder, at, grant).await }
    };
    let first = match take(0, now).await {
        Err(StoreError::Unsupported(why)) => {
            eprintln!("skipped: this backend has no step limits ({why})");
            return;
        }
        other => other.expect("take_step_slot"),
    };
    assert_eq!(first.0, StepSlot::Held);
    assert_eq!(take(1, now).await.unwrap().0, StepSlot::Held);
    assert_eq!(
        take(2, now).await.unwrap().0,
        StepSlot::Queued { position: 1 }
    );
    assert_eq!(
        take(3, now).await.unwrap().0,
        StepSlot::Queued { position: 2 }
    );
    assert_eq!(
        take(2, now).await.unwrap().0,
        StepSlot::Queued { position: 1 },
        "asking again keeps its place"
    );
    assert_eq!(
        take(0, now).await.unwrap().0,
        StepSlot::Held,
        "a holder asking again holds"
    );

    let handed = h
        .backend
        .store
        .give_back_step_slot(&key, 2, &step_holder(&runs[0], "call#0"), now, grant)
        .await
        .unwrap();
    assert_eq!(
        handed,
        vec![HandedSlot {
            tenant: runs[2].tenant.clone(),
            run_id: runs[2].id.clone()
        }],
        "the first in line is handed the slot"
    );
    assert_eq!(
        take(2, now).await.unwrap().0,
        StepSlot::Held,
        "its run takes what it was handed"
    );
    assert_eq!(
        take(3, now).await.unwrap().0,
        StepSlot::Queued { position: 1 }
    );

    // Past the leases of every holder, their slots lapse: the last in line goes.
    let later = now.plus(lease + std::time::Duration::from_secs(1));
    let (slot, _) = take(3, later).await.unwrap();
    assert_eq!(
        slot,
        StepSlot::Held,
        "holders whose lease lapsed hold nothing"
    );
}

/// Rate turns: evenly spaced by the interval from the key's last; an attempt asking
/// again gets the turn kept for it, used once it has come; a newcomer goes after every
/// turn given.
pub async fn rate_turns_are_spaced_kept_and_used_once(h: Harness) {
    let key = unique("rpm");
    let every = std::time::Duration::from_millis(100);
    let tenant = tenant();
    let mut runs = Vec::new();
    for _ in 0..4 {
        runs.push(create(&h, &tenant).await);
    }
    let now = h.now();
    let turn = |i: usize, at: Timestamp| {
        let holder = step_holder(&runs[i], "call#0");
        let (key, store) = (key.clone(), h.backend.store.clone());
        async move { store.take_rate_turn(&key, every, &holder, at).await }
    };
    let first = match turn(0, now).await {
        Err(StoreError::Unsupported(why)) => {
            eprintln!("skipped: this backend has no rate limits ({why})");
            return;
        }
        other => other.expect("take_rate_turn"),
    };
    assert_eq!(first, RateTurn::Now);
    assert_eq!(turn(1, now).await.unwrap(), RateTurn::At(now.plus(every)));
    assert_eq!(
        turn(2, now).await.unwrap(),
        RateTurn::At(now.plus(every * 2))
    );
    assert_eq!(
        turn(1, now).await.unwrap(),
        RateTurn::At(now.plus(every)),
        "asking again gets the turn kept"
    );
    let later = now.plus(every);
    assert_eq!(
        turn(1, later).await.unwrap(),
        RateTurn::Now,
        "its turn has come"
    );
    assert_eq!(
        turn(3, later).await.unwrap(),
        RateTurn::At(now.plus(every * 3))
    );
    assert_eq!(
        turn(1, later).await.unwrap(),
        RateTurn::At(now.plus(every * 4)),
        "a used turn is not given twice: the same step asking again is a new attempt"
    );
}
