//! Streams: what a run publishes reaches its stream once, whatever replays, retries and
//! crashes happen; a failed attempt's chunks are marked void; a reader that reconnects
//! at any offset gets every chunk once, in order, and then the end.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use siesta::ports::{ChunkKind, StreamChunk};
use siesta::*;
use siesta_testing::{LEASE_TTL, TestEnv};
use support::world;

/// A run that publishes from its body around a step, a timer and an event wait, and
/// from a step that fails its first attempt after publishing half its text.
fn registry(attempts: Arc<AtomicU32>) -> Registry {
    let mut reg = Registry::new();
    reg.register("agent", move |ctx: Context, _: Value| {
        let attempts = attempts.clone();
        async move {
            let progress = ctx.stream("progress");
            progress.publish("started").await?;
            let answer: String = ctx
                .step("llm", move |step| async move {
                    let n = attempts.fetch_add(1, Ordering::SeqCst) + 1;
                    let tokens = step.stream("tokens");
                    if n == 1 {
                        tokens.publish("Hel").await?;
                        tokens.publish("p!").await?;
                        return Err(StepError::new("rate_limited", "429 from the model", true));
                    }
                    for t in ["Hel", "lo"] {
                        tokens.publish(t).await?;
                    }
                    Ok("Hello".to_owned())
                })
                .retry(RetryStrategy::fixed(3, Duration::from_secs(5)))
                .await?;
            progress.publish(&json!({"answered": answer})).await?;
            ctx.sleep(Duration::from_secs(60)).await?;
            progress.publish("slept").await?;
            let ok: bool = ctx.wait_for_event("approval").await?;
            progress.publish(&json!({"approved": ok})).await?;
            Ok(answer)
        }
    });
    reg
}

fn data(chunks: &[StreamChunk]) -> Vec<Value> {
    chunks
        .iter()
        .filter(|c| c.chunk.kind == ChunkKind::Data)
        .map(|c| c.chunk.data.clone())
        .collect()
}

async fn finished_run(w: &TestEnv) -> RunId {
    let id = w.start("agent", json!(null)).await;
    let run = w.drive(&id).await;
    assert_eq!(run.status, RunStatus::Waiting, "waits for the approval");
    w.deliver_event(&id, "approval", json!(true)).await;
    assert_eq!(w.status(&id).await, RunStatus::Completed);
    id
}

#[tokio::test]
async fn body_publishes_reach_the_stream_once_across_every_replay() {
    // GIVEN a run that replays after its step's retry, its timer and its event
    let w = world(registry(Arc::default()));
    // WHEN it runs to its end
    let id = finished_run(&w).await;
    // THEN each publish of its body is in the stream once, in order, untagged
    let progress = w.stream(&id, "progress").await;
    assert_eq!(
        data(&progress),
        vec![
            json!("started"),
            json!({"answered": "Hello"}),
            json!("slept"),
            json!({"approved": true})
        ]
    );
    assert!(
        progress
            .iter()
            .all(|c| c.chunk.step.is_none() && c.chunk.attempt.is_none())
    );
    let offsets: Vec<u64> = progress.iter().map(|c| c.offset).collect();
    assert_eq!(offsets, vec![0, 1, 2, 3], "gapless from 0");
}

#[tokio::test]
async fn a_failed_attempts_chunks_are_marked_void_and_the_retry_shows_its_own() {
    let w = world(registry(Arc::default()));
    let id = finished_run(&w).await;
    let tokens = w.stream(&id, "tokens").await;
    let shape: Vec<(ChunkKind, Value, Option<u32>)> = tokens
        .iter()
        .map(|c| (c.chunk.kind, c.chunk.data.clone(), c.chunk.attempt))
        .collect();
    // Attempt 1 opens the stream with a discard (nothing before it to void), publishes
    // half its text and fails: a discard after its last chunk. Attempt 2 opens with its
    // own discard and publishes the whole text.
    assert_eq!(
        shape,
        vec![
            (ChunkKind::Discard, Value::Null, Some(1)),
            (ChunkKind::Data, json!("Hel"), Some(1)),
            (ChunkKind::Data, json!("p!"), Some(1)),
            (ChunkKind::Discard, Value::Null, Some(1)),
            (ChunkKind::Discard, Value::Null, Some(2)),
            (ChunkKind::Data, json!("Hel"), Some(2)),
            (ChunkKind::Data, json!("lo"), Some(2)),
        ]
    );
    assert!(
        tokens
            .iter()
            .all(|c| c.chunk.step == Some(Position::from("llm#0"))),
        "every chunk names its step"
    );
    assert_eq!(
        w.stream_data(&id, "tokens").await,
        vec![json!("Hel"), json!("lo")],
        "a reader that honours discard shows only the attempt that succeeded"
    );
}

/// Work the run to its end, restarting the engine whenever the probe killed it;
/// whether it did.
async fn finish_through_crashes(w: &TestEnv, id: &RunId) -> bool {
    let mut crashed = false;
    for _ in 0..200 {
        if w.probe().is_dead() {
            crashed = true;
            w.restart();
            // The dead process's lease must lapse before anyone else may claim.
            w.advance(LEASE_TTL + Duration::from_secs(1)).await;
            continue;
        }
        w.run_until_idle().await;
        if w.probe().is_dead() {
            continue;
        }
        if w.run(id).await.status.is_finished() {
            return crashed;
        }
        w.advance(Duration::from_secs(5)).await;
    }
    panic!("the run did not finish");
}

#[tokio::test]
async fn a_crash_after_any_write_never_doubles_a_chunk_and_the_shown_text_is_the_last_attempts() {
    crash_at_every_write(false).await;
}

#[tokio::test]
async fn a_crash_before_any_write_never_doubles_a_chunk_and_the_shown_text_is_the_last_attempts() {
    crash_at_every_write(true).await;
}

/// For every checkpoint of the run, a crash right before or after it: the run is
/// finished by a new engine, and what a reader shows is what a run without a crash
/// shows, less at most a body chunk lost.
async fn crash_at_every_write(before: bool) {
    let when = if before { "before" } else { "after" };
    let expected = [
        json!("started"),
        json!({"answered": "Hello"}),
        json!("slept"),
        json!({"approved": true}),
    ];
    let mut n = 1;
    loop {
        let w = world(registry(Arc::default()));
        let id = support::create(&w, "agent", json!(null)).await;
        // The approval is there before the run reaches its wait.
        w.engine()
            .deliver_event(
                w.tenant(),
                &id,
                "approval",
                json!(true),
                Some(DeliveryId::from("approval-1")),
            )
            .await
            .unwrap();
        if before {
            w.probe().crash_before(i64::from(n));
        } else {
            w.probe().crash_after(i64::from(n));
        }
        let crashed = finish_through_crashes(&w, &id).await;
        assert_eq!(
            w.status(&id).await,
            RunStatus::Completed,
            "crash {when} write {n}"
        );
        assert_eq!(
            w.stream_data(&id, "tokens").await,
            vec![json!("Hel"), json!("lo")],
            "crash {when} write {n}: the text shown"
        );
        let progress = data(&w.stream(&id, "progress").await);
        // A crash may lose a body publish (at most once), never double or reorder one.
        let mut rest = expected.iter();
        for p in &progress {
            assert!(
                rest.any(|e| e == p),
                "crash {when} write {n}: doubled or out of order: {progress:?}"
            );
        }
        if !crashed {
            assert_eq!(
                progress,
                expected.to_vec(),
                "without a crash every publish is there"
            );
            break;
        }
        n += 1;
        assert!(n < 100, "the run kept crashing");
    }
    assert!(n > 3, "the run made several writes ({n})");
}

#[tokio::test]
async fn a_reader_reconnecting_at_every_offset_gets_every_chunk_once_and_the_end() {
    let w = world(registry(Arc::default()));
    let id = w.start("agent", json!(null)).await;
    w.drive(&id).await;
    let engine = w.engine();
    let tenant = w.tenant().clone();
    // While the run waits: pages up to the stream's current end, not closed.
    let open = engine
        .read_stream(&tenant, &id, "tokens", 0, 100)
        .await
        .unwrap();
    assert!(!open.closed, "a waiting run's stream is open");
    assert_eq!(open.next, 7);
    w.deliver_event(&id, "approval", json!(true)).await;

    let all = w.stream(&id, "tokens").await;
    for from in 0..=all.len() as u64 {
        for limit in [1, 2, 100] {
            // A reader from `from` follows `next` until the stream is closed.
            let mut got: Vec<StreamChunk> = Vec::new();
            let mut at = from;
            let mut pages = 0;
            loop {
                let page = engine
                    .read_stream(&tenant, &id, "tokens", at, limit)
                    .await
                    .unwrap();
                got.extend(page.chunks);
                at = page.next;
                pages += 1;
                if page.closed {
                    break;
                }
                assert!(pages < 100, "the stream never closed");
            }
            assert_eq!(
                got,
                all[from as usize..].to_vec(),
                "from {from}, limit {limit}"
            );
            assert_eq!(at, all.len() as u64, "ends at the stream's end");
        }
    }
    // A stream nothing was published to reads as empty and closed once the run finished.
    let none = engine
        .read_stream(&tenant, &id, "other", 0, 10)
        .await
        .unwrap();
    assert_eq!((none.chunks.len(), none.next, none.closed), (0, 0, true));
    // Another tenant has no such run.
    let other = engine
        .read_stream(&TenantId::from("other"), &id, "tokens", 0, 10)
        .await;
    assert!(matches!(other, Err(EngineError::NotFound)), "{other:?}");
}

#[tokio::test]
async fn a_closed_stream_reads_as_ended_before_the_run_finishes_and_refuses_more() {
    let refused: Arc<AtomicU32> = Arc::default();
    let seen = refused.clone();
    let mut reg = Registry::new();
    reg.register("closer", move |ctx: Context, _: Value| {
        let refused = refused.clone();
        async move {
            let s = ctx.stream("status");
            s.publish("working").await?;
            s.close().await?;
            // A publish's outcome is not journaled (on replay it is skipped and Ok): a
            // workflow must not decide on it. Counted here, outside the run.
            if s.publish("too late").await.is_err() {
                refused.fetch_add(1, Ordering::SeqCst);
            }
            ctx.wait_for_event::<bool>("done").await?;
            Ok(())
        }
    });
    let w = world(reg);
    let id = w.start("closer", json!(null)).await;
    w.drive(&id).await;
    let page = w
        .engine()
        .read_stream(w.tenant(), &id, "status", 0, 10)
        .await
        .unwrap();
    assert!(page.closed, "closed by the run while it waits");
    let kinds: Vec<ChunkKind> = page.chunks.iter().map(|c| c.chunk.kind).collect();
    assert_eq!(kinds, vec![ChunkKind::Data, ChunkKind::End]);
    w.deliver_event(&id, "done", json!(true)).await;
    assert_eq!(w.status(&id).await, RunStatus::Completed);
    assert_eq!(
        seen.load(Ordering::SeqCst),
        1,
        "the publish after the close failed, once"
    );
    assert_eq!(
        w.stream(&id, "status").await.len(),
        2,
        "the replay closed nothing twice"
    );
}
