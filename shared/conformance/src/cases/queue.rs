//! The wake-up queue: delivery, delays, visibility, dead letters.
//!
//! These cases acknowledge every message they receive that is not their own, and count
//! receptions of their own: they need the harness's queue to themselves.

use std::time::Duration;

use siesta::RunId;
use siesta::ports::*;

use crate::Harness;
use crate::support::*;

/// How long a received message stays hidden in these cases.
const VISIBILITY: Duration = Duration::from_secs(1);
/// Long enough for a one-second visibility timeout or delay to pass.
const PAST_ONE_SECOND: Duration = Duration::from_secs(2);
/// Receives to try before concluding a visible message is not there (a real queue may
/// answer a receive from a subset of its hosts).
const PRESENT_ATTEMPTS: usize = 5;
/// Receives to try when a message must not be there.
const ABSENT_ATTEMPTS: usize = 2;

/// A wake-up for a fresh run.
fn wake(reason: WakeReason) -> WakeUp {
    WakeUp {
        tenant: tenant(),
        run_id: run_id(),
        reason,
        epoch_hint: 7,
        seq_hint: None,
    }
}

/// Receive up to `attempts` times, keeping the messages for `wakes` (hidden for
/// `visibility`) and acknowledging any other; stops once `want` of ours have come.
async fn receive_ours(
    h: &Harness,
    wakes: &[&WakeUp],
    visibility: Duration,
    attempts: usize,
    want: usize,
) -> Vec<ReceivedWakeUp> {
    let mut ours = Vec::new();
    for _ in 0..attempts {
        let got = h
            .backend
            .queue
            .receive(10, visibility)
            .await
            .expect("receive");
        assert!(got.len() <= 10, "receive returns at most `max`");
        for m in got {
            if wakes.iter().any(|w| w.run_id == m.wake.run_id) {
                ours.push(m);
            } else {
                h.backend
                    .queue
                    .ack(&m.receipt)
                    .await
                    .expect("ack a stray message");
            }
        }
        if ours.len() >= want {
            break;
        }
    }
    ours
}

/// The one message for `w`, which must be visible now.
async fn receive_one(h: &Harness, w: &WakeUp, visibility: Duration, what: &str) -> ReceivedWakeUp {
    let mut got = receive_ours(h, &[w], visibility, PRESENT_ATTEMPTS, 1).await;
    assert_eq!(
        got.len(),
        1,
        "{what}: expected the wake-up once, got {got:?}"
    );
    let m = got.remove(0);
    assert_eq!(&m.wake, w, "{what}: the wake-up as sent");
    m
}

/// Assert that no message for `w` is visible now.
async fn assert_hidden(h: &Harness, w: &WakeUp, what: &str) {
    let got = receive_ours(h, &[w], VISIBILITY, ABSENT_ATTEMPTS, usize::MAX).await;
    assert!(got.is_empty(), "{what}: expected no message, got {got:?}");
}

/// A sent wake-up is received once (count 1) and hidden while received; acknowledged,
/// it is gone for good.
pub async fn queue_send_receive_ack(h: Harness) {
    let w = wake(WakeReason::Started);
    h.backend
        .queue
        .send(&w, Duration::ZERO)
        .await
        .expect("send");
    let m = receive_one(&h, &w, VISIBILITY, "a sent wake-up").await;
    assert_eq!(m.receive_count, 1, "the first reception counts 1");
    assert_hidden(&h, &w, "while received").await;
    h.backend.queue.ack(&m.receipt).await.expect("ack");
    h.advance(PAST_ONE_SECOND).await;
    assert_hidden(&h, &w, "after its ack, past its visibility timeout").await;
    h.backend
        .queue
        .ack(&m.receipt)
        .await
        .expect("a second ack is fine");
}

/// A wake-up sent with a delay is invisible until the delay has passed; one sent without
/// is visible at once.
pub async fn queue_delayed_message_is_invisible_until_due(h: Harness) {
    let now = wake(WakeReason::Delivery);
    let later = wake(WakeReason::Timer);
    h.backend
        .queue
        .send(&later, Duration::from_secs(1))
        .await
        .expect("send delayed");
    h.backend
        .queue
        .send(&now, Duration::ZERO)
        .await
        .expect("send");
    let got = receive_ours(
        &h,
        &[&now, &later],
        VISIBILITY,
        PRESENT_ATTEMPTS + 1,
        usize::MAX,
    )
    .await;
    assert!(
        got.iter().all(|m| m.wake != later),
        "a delayed wake-up is invisible before its delay: {got:?}"
    );
    assert_eq!(
        got.iter().filter(|m| m.wake == now).count(),
        1,
        "an undelayed wake-up is visible at once: {got:?}"
    );
    for m in &got {
        h.backend.queue.ack(&m.receipt).await.expect("ack");
    }
    h.advance(PAST_ONE_SECOND).await;
    let m = receive_one(&h, &later, VISIBILITY, "after its delay").await;
    assert_eq!(m.receive_count, 1);
    h.backend.queue.ack(&m.receipt).await.expect("ack");
}

/// A received wake-up that is not acknowledged comes back after its visibility
/// timeout, with `receive_count` 2.
pub async fn queue_visibility_timeout_redelivers(h: Harness) {
    let w = wake(WakeReason::Sweep);
    h.backend
        .queue
        .send(&w, Duration::ZERO)
        .await
        .expect("send");
    let first = receive_one(&h, &w, VISIBILITY, "the first reception").await;
    assert_eq!(first.receive_count, 1);
    assert_hidden(&h, &w, "within the visibility timeout").await;
    h.advance(PAST_ONE_SECOND).await;
    let second = receive_one(&h, &w, VISIBILITY, "after the visibility timeout").await;
    assert_eq!(second.receive_count, 2, "the second reception counts 2");
    h.backend.queue.ack(&second.receipt).await.expect("ack");
    h.advance(PAST_ONE_SECOND).await;
    assert_hidden(&h, &w, "after its ack").await;
}

/// `extend_visibility` keeps a received wake-up hidden past its first timeout; it comes
/// back once the extension has passed.
pub async fn queue_extend_visibility_keeps_it_hidden(h: Harness) {
    let w = wake(WakeReason::Continue);
    h.backend
        .queue
        .send(&w, Duration::ZERO)
        .await
        .expect("send");
    let first = receive_one(&h, &w, VISIBILITY, "the first reception").await;
    h.backend
        .queue
        .extend_visibility(&first.receipt, Duration::from_secs(3))
        .await
        .expect("extend_visibility");
    h.advance(PAST_ONE_SECOND).await;
    assert_hidden(&h, &w, "past the first timeout, within the extension").await;
    h.advance(PAST_ONE_SECOND).await;
    let second = receive_one(&h, &w, VISIBILITY, "past the extension").await;
    assert_eq!(second.receive_count, 2);
    h.backend.queue.ack(&second.receipt).await.expect("ack");
}

/// A wake-up received `max_receives` times without an ack is not handed out again: it
/// moves to the dead-letter queue.
pub async fn queue_dead_letters_after_max_receives(h: Harness) {
    assert!(
        h.max_receives >= 1,
        "the harness names the queue's receive limit"
    );
    let w = wake(WakeReason::Child);
    h.backend
        .queue
        .send(&w, Duration::ZERO)
        .await
        .expect("send");
    for n in 1..=h.max_receives {
        let m = receive_one(&h, &w, VISIBILITY, &format!("reception {n}")).await;
        assert_eq!(m.receive_count, n, "reception {n}");
        h.advance(PAST_ONE_SECOND).await;
    }
    assert_hidden(&h, &w, "after max_receives receptions").await;
    let dead = take_dead_letters(&h, &[&w], 1).await;
    assert_eq!(
        dead.iter().map(|d| &d.wake).collect::<Vec<_>>(),
        vec![&w],
        "the wake-up is in the dead-letter queue, once"
    );
    h.backend
        .queue
        .delete_dead_letter(&dead[0].receipt)
        .await
        .expect("delete_dead_letter");
    h.advance(PAST_ONE_SECOND).await;
    let again = take_dead_letters(&h, &[&w], 0).await;
    assert!(again.is_empty(), "a deleted dead letter is gone: {again:?}");
    h.backend
        .queue
        .delete_dead_letter(&dead[0].receipt)
        .await
        .expect("a second delete is fine");
}

/// Page through the dead-letter queue (each page hidden for [`VISIBILITY`]) until it
/// is empty, keeping the dead letters for `wakes` and leaving any other be; stops early
/// once `want` of ours have come.
async fn take_dead_letters(h: &Harness, wakes: &[&WakeUp], want: usize) -> Vec<DeadLetter> {
    let mut ours = Vec::new();
    let mut empty = 0;
    for _ in 0..(wakes.len() + 10) * 2 {
        let page = h
            .backend
            .queue
            .dead_letters(10, VISIBILITY)
            .await
            .expect("dead_letters");
        assert!(page.len() <= 10, "a page holds at most 10");
        if page.is_empty() {
            // The dead-letter move may lag a little on a real queue.
            empty += 1;
            if ours.len() >= want || empty >= PRESENT_ATTEMPTS {
                break;
            }
            h.advance(Duration::from_millis(200)).await;
            continue;
        }
        ours.extend(
            page.into_iter()
                .filter(|d| wakes.iter().any(|w| w.run_id == d.wake.run_id)),
        );
    }
    ours
}

/// Twelve dead letters — more than one page — are each taken once by paging through
/// the dead-letter queue; deleted, they are gone; not deleted, they come back after
/// their visibility timeout.
pub async fn queue_dead_letters_page_through_every_one_once(h: Harness) {
    let wakes: Vec<WakeUp> = (0..12).map(|_| wake(WakeReason::Delivery)).collect();
    let refs: Vec<&WakeUp> = wakes.iter().collect();
    for w in &wakes {
        h.backend.queue.send(w, Duration::ZERO).await.expect("send");
    }
    // Received max_receives times, never acknowledged, then once more: dead-lettered.
    for n in 0..=h.max_receives {
        let got = receive_ours(&h, &refs, VISIBILITY, PRESENT_ATTEMPTS * 3, wakes.len()).await;
        if n < h.max_receives {
            assert_eq!(got.len(), wakes.len(), "reception {}: {got:?}", n + 1);
        }
        h.advance(PAST_ONE_SECOND).await;
    }
    let dead = take_dead_letters(&h, &refs, wakes.len()).await;
    let mut ids: Vec<&RunId> = dead.iter().map(|d| &d.wake.run_id).collect();
    ids.sort();
    let mut want: Vec<&RunId> = wakes.iter().map(|w| &w.run_id).collect();
    want.sort();
    assert_eq!(ids, want, "every dead letter, each once");

    // Half deleted; the other half come back once hidden no more.
    let (deleted, kept) = dead.split_at(6);
    for d in deleted {
        h.backend
            .queue
            .delete_dead_letter(&d.receipt)
            .await
            .expect("delete_dead_letter");
    }
    h.advance(PAST_ONE_SECOND).await;
    let back = take_dead_letters(&h, &refs, kept.len()).await;
    let mut back_ids: Vec<&RunId> = back.iter().map(|d| &d.wake.run_id).collect();
    back_ids.sort();
    let mut kept_ids: Vec<&RunId> = kept.iter().map(|d| &d.wake.run_id).collect();
    kept_ids.sort();
    assert_eq!(
        back_ids, kept_ids,
        "the undeleted ones come back, the deleted do not"
    );
    for d in back {
        h.backend
            .queue
            .delete_dead_letter(&d.receipt)
            .await
            .expect("delete_dead_letter");
    }
}

/// Acknowledging a receipt the queue does not know is fine (the message may have been
/// acknowledged already).
pub async fn queue_ack_with_unknown_receipt_is_ok(h: Harness) {
    for receipt in [
        unique("receipt"),
        "1:00000000-0000-0000-0000-000000000000".to_owned(),
    ] {
        let got = h.backend.queue.ack(&receipt).await;
        assert!(
            got.is_ok(),
            "ack of an unknown receipt {receipt:?}: {got:?}"
        );
    }
}
