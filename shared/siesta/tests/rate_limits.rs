//! Step rate limits: attempts naming a key start at most N per period across the
//! deployment, evenly spaced; an attempt before its turn waits durably (its run
//! suspends until the turn kept for it) and does not fail.

mod support;

use std::time::Duration;

use serde_json::json;
use siesta::*;
use support::world;

/// `paced`: one step under the rate limit `api`, 10 a second.
fn registry() -> Registry {
    let mut reg = Registry::new();
    reg.register("paced", |ctx: Context, _: serde_json::Value| async move {
        ctx.step("call", |_| async { Ok(()) })
            .rate("api", 10, Duration::from_secs(1))
            .await?;
        Ok(())
    });
    reg
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attempts_over_the_rate_wait_for_their_turn_and_never_pass_it_in_any_window() {
    let w = world(registry());
    let mut runs = Vec::new();
    for _ in 0..25 {
        runs.push(w.start("paced", json!(null)).await);
    }
    let waiting = w.run(&runs[24]).await;
    assert_eq!(
        waiting.status,
        RunStatus::Waiting,
        "the last waits for its turn"
    );
    assert!(waiting.lease.is_none(), "suspended: nothing runs for it");
    let timeline = w.timeline(&runs[24]).await;
    let delayed: Vec<_> = timeline
        .iter()
        .filter(|e| e.event_type == EventType::StepDelayed)
        .collect();
    assert_eq!(delayed.len(), 1, "the wait is in its timeline");
    assert_eq!(delayed[0].details["Reason"], json!("rate"));
    assert_eq!(delayed[0].details["Key"], json!("api"));
    assert_eq!(
        delayed[0].details["Until"],
        json!(w.now().0 + 2400),
        "its turn, 24 × 100 ms on"
    );
    for _ in 0..30 {
        w.advance(Duration::from_millis(100)).await;
    }
    // When each attempt ran: its step's outcome is recorded at the engine clock's time
    // (the harness's clock stands still while an attempt runs).
    let mut times = Vec::new();
    for run in &runs {
        assert_eq!(
            w.status(run).await,
            RunStatus::Completed,
            "{run} waited, then ran"
        );
        let ran: Vec<i64> = w
            .timeline(run)
            .await
            .iter()
            .filter(|e| e.event_type == EventType::StepSucceeded)
            .map(|e| e.at.0)
            .collect();
        assert_eq!(ran.len(), 1, "one attempt each");
        times.push(ran[0]);
    }
    times.sort();
    for (i, t) in times.iter().enumerate() {
        let in_window = times[i..].iter().take_while(|u| **u < t + 1000).count();
        assert!(
            in_window <= 10,
            "{in_window} attempts within a second from {t}: {times:?}"
        );
    }
    assert!(
        times[24] - times[0] >= 2400,
        "25 attempts at 10 a second span 2.4 s: {times:?}"
    );
}

/// The measure: 2 000 attempts against 100 a second, their instants recorded by
/// the steps themselves (outside the engine), never more than 100 in any second nor
/// 1 000 in any ten; none fails, each runs once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_thousand_attempts_at_100_a_second_never_pass_it_in_any_window() {
    use std::sync::{Arc, Mutex, OnceLock};
    let clock: Arc<OnceLock<Arc<ManualClock>>> = Arc::new(OnceLock::new());
    let ran: Arc<Mutex<Vec<i64>>> = Arc::new(Mutex::new(Vec::new()));
    let mut reg = Registry::new();
    let (seen, record) = (clock.clone(), ran.clone());
    reg.register("paced", move |ctx: Context, _: serde_json::Value| {
        let (seen, record) = (seen.clone(), record.clone());
        async move {
            ctx.step("call", move |_| {
                let (seen, record) = (seen.clone(), record.clone());
                async move {
                    let now = seen.get().map_or(0, |c| Clock::now(c.as_ref()).0);
                    record.lock().unwrap().push(now);
                    Ok(())
                }
            })
            .rate("provider", 100, Duration::from_secs(1))
            .await?;
            Ok(())
        }
    });
    let w = world(reg);
    clock.set(w.clock().clone()).ok();
    let mut runs = Vec::new();
    for _ in 0..2000 {
        runs.push(support::create(&w, "paced", json!(null)).await);
    }
    w.run_until_idle().await;
    for _ in 0..250 {
        w.advance(Duration::from_millis(100)).await;
    }
    for run in &runs {
        assert_eq!(w.status(run).await, RunStatus::Completed, "{run}");
    }
    let mut times = ran.lock().unwrap().clone();
    assert_eq!(times.len(), 2000, "each attempt ran once");
    times.sort();
    let most_within = |span: i64| {
        (0..times.len())
            .map(|i| {
                times[i..]
                    .iter()
                    .take_while(|u| **u < times[i] + span)
                    .count()
            })
            .max()
            .unwrap_or(0)
    };
    let (per_second, per_ten) = (most_within(1_000), most_within(10_000));
    println!(
        "2 000 attempts at 100/s: at most {per_second} in any 1 s, {per_ten} in any 10 s, over {} ms",
        times[1999] - times[0]
    );
    assert!(per_second <= 100, "{per_second} attempts within a second");
    assert!(per_ten <= 1000, "{per_ten} attempts within ten seconds");
    assert!(
        times[1999] - times[0] >= 19_990,
        "2 000 at 100 a second span ~20 s"
    );
}
