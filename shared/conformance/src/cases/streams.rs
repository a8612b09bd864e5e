//! Streams: chunks appended at gapless offsets, read from any offset, closed by an end.

use std::collections::BTreeSet;

use siesta::ports::*;
use siesta::*;

use crate::Harness;
use crate::support::*;

fn data(h: &Harness, v: serde_json::Value) -> NewChunk {
    NewChunk {
        kind: ChunkKind::Data,
        data: v,
        step: None,
        attempt: None,
        at: h.now(),
        key: None,
    }
}

fn of_step(h: &Harness, kind: ChunkKind, v: serde_json::Value, attempt: u32) -> NewChunk {
    NewChunk {
        kind,
        data: v,
        step: Some(Position::from("llm#0")),
        attempt: Some(attempt),
        at: h.now(),
        key: None,
    }
}

async fn read_all(h: &Harness, tenant: &TenantId, run: &RunId, stream: &str) -> Vec<StreamChunk> {
    h.backend
        .streams
        .read(tenant, run, stream, 0, 10_000)
        .await
        .expect("read a stream")
}

/// The first append of a stream starts at offset 0; each append returns the offset of
/// its first chunk and the next starts right after its last; a read returns every
/// chunk as appended (kind, data, step, attempt, time), in offset order.
pub async fn stream_appends_get_gapless_offsets_from_zero(h: Harness) {
    let tenant = tenant();
    let run = create(&h, &tenant).await;
    let streams = &h.backend.streams;
    let one = data(&h, serde_json::json!("Hel"));
    let first = streams
        .append(&tenant, &run.id, "tokens", std::slice::from_ref(&one))
        .await
        .expect("append one chunk");
    assert_eq!(first, 0, "a stream's first chunk is at offset 0");
    let two = vec![
        of_step(&h, ChunkKind::Discard, serde_json::Value::Null, 2),
        of_step(&h, ChunkKind::Data, serde_json::json!({"text": "lo"}), 2),
    ];
    let second = streams
        .append(&tenant, &run.id, "tokens", &two)
        .await
        .expect("append two chunks");
    assert_eq!(
        second, 1,
        "the next append starts right after the last chunk"
    );
    let third = streams
        .append(
            &tenant,
            &run.id,
            "tokens",
            &[data(&h, serde_json::json!(3))],
        )
        .await
        .expect("append after a batch");
    assert_eq!(third, 3, "an append of two chunks takes two offsets");

    let all = read_all(&h, &tenant, &run.id, "tokens").await;
    let offsets: Vec<u64> = all.iter().map(|c| c.offset).collect();
    assert_eq!(offsets, vec![0, 1, 2, 3], "offsets are gapless from 0");
    assert_eq!(all[0].chunk, one, "a chunk reads back as appended");
    assert_eq!(
        all[1].chunk, two[0],
        "a marker reads back with its step and attempt"
    );
    assert_eq!(all[2].chunk, two[1], "so does a step's data chunk");
}

/// A read from any offset returns the chunks from there, at most `limit`; from past
/// the end it is empty.
pub async fn stream_reads_from_any_offset_with_a_limit(h: Harness) {
    let tenant = tenant();
    let run = create(&h, &tenant).await;
    let chunks: Vec<NewChunk> = (0..7).map(|i| data(&h, serde_json::json!(i))).collect();
    h.backend
        .streams
        .append(&tenant, &run.id, "progress", &chunks)
        .await
        .expect("append seven chunks");
    for from in 0..=8u64 {
        for limit in [1usize, 3, 100] {
            let page = h
                .backend
                .streams
                .read(&tenant, &run.id, "progress", from, limit)
                .await
                .expect("read a page");
            let want: Vec<u64> = (from..7).take(limit).collect();
            let got: Vec<u64> = page.iter().map(|c| c.offset).collect();
            assert_eq!(got, want, "read from {from} with limit {limit}");
            for c in &page {
                assert_eq!(
                    c.chunk.data,
                    serde_json::json!(c.offset),
                    "the chunk at its offset"
                );
            }
        }
    }
}

/// Writers appending to one stream at once never share an offset and leave no gap:
/// every chunk is stored once.
pub async fn concurrent_stream_appends_never_share_an_offset(h: Harness) {
    let tenant = tenant();
    let run = create(&h, &tenant).await;
    let mut tasks = Vec::new();
    for writer in 0..4u32 {
        let (h, tenant, run_id) = (h.clone(), tenant.clone(), run.id.clone());
        tasks.push(tokio::spawn(async move {
            for i in 0..5u32 {
                let chunk = data(&h, serde_json::json!([writer, i]));
                h.backend
                    .streams
                    .append(&tenant, &run_id, "tokens", &[chunk])
                    .await
                    .expect("a concurrent append");
            }
        }));
    }
    for t in tasks {
        t.await.expect("a writer");
    }
    let all = read_all(&h, &tenant, &run.id, "tokens").await;
    let offsets: Vec<u64> = all.iter().map(|c| c.offset).collect();
    assert_eq!(
        offsets,
        (0..20).collect::<Vec<u64>>(),
        "20 chunks at offsets 0..20"
    );
    let distinct: BTreeSet<String> = all.iter().map(|c| c.chunk.data.to_string()).collect();
    assert_eq!(distinct.len(), 20, "each chunk stored once: {distinct:?}");
}

/// A stream that ends with an `End` chunk takes no more: a later append is `Gone` and
/// writes nothing; other streams of the run are not affected.
pub async fn an_ended_stream_takes_no_more_chunks(h: Harness) {
    let tenant = tenant();
    let run = create(&h, &tenant).await;
    let streams = &h.backend.streams;
    streams
        .append(
            &tenant,
            &run.id,
            "tokens",
            &[data(&h, serde_json::json!("a"))],
        )
        .await
        .expect("append");
    let end = NewChunk {
        kind: ChunkKind::End,
        ..data(&h, serde_json::Value::Null)
    };
    assert_eq!(
        streams
            .append(&tenant, &run.id, "tokens", &[end])
            .await
            .expect("end"),
        1
    );
    let after = streams
        .append(
            &tenant,
            &run.id,
            "tokens",
            &[data(&h, serde_json::json!("b"))],
        )
        .await;
    assert!(
        matches!(after, Err(StoreError::Gone(_))),
        "an append after the end: expected Gone, got {after:?}"
    );
    assert_eq!(
        read_all(&h, &tenant, &run.id, "tokens").await.len(),
        2,
        "nothing written after the end"
    );
    let other = streams
        .append(
            &tenant,
            &run.id,
            "progress",
            &[data(&h, serde_json::json!("c"))],
        )
        .await;
    assert_eq!(other.ok(), Some(0), "another stream of the run is open");
}

/// Streams are keyed by tenant, run and name: another tenant's run of the same id,
/// another run, and another name each have streams of their own; an invalid name or an
/// empty or oversized append is `Invalid` and writes nothing.
pub async fn streams_are_per_tenant_run_and_name(h: Harness) {
    let (a, b) = (tenant(), tenant());
    let run = create(&h, &a).await;
    let mut same_id = new_run(&h, &b, "order");
    same_id.id = run.id.clone();
    create_run(&h, &same_id).await;
    let other = create(&h, &a).await;
    let streams = &h.backend.streams;
    streams
        .append(
            &a,
            &run.id,
            "tokens",
            &[data(&h, serde_json::json!("mine"))],
        )
        .await
        .expect("append");
    assert!(
        read_all(&h, &b, &run.id, "tokens").await.is_empty(),
        "another tenant's run of the same id sees nothing"
    );
    assert!(
        read_all(&h, &a, &other.id, "tokens").await.is_empty(),
        "another run sees nothing"
    );
    assert!(
        read_all(&h, &a, &run.id, "token").await.is_empty(),
        "another name sees nothing"
    );
    assert_eq!(
        streams
            .append(
                &b,
                &run.id,
                "tokens",
                &[data(&h, serde_json::json!("theirs"))]
            )
            .await
            .ok(),
        Some(0),
        "the other tenant's stream starts at 0"
    );

    for bad in ["", "a/b", "a#b", "tokens?", &"x".repeat(65)] {
        let r = streams
            .append(&a, &run.id, bad, &[data(&h, serde_json::json!(1))])
            .await;
        assert!(
            matches!(r, Err(StoreError::Invalid(_))),
            "name {bad:?}: expected Invalid, got {r:?}"
        );
    }
    let empty = streams.append(&a, &run.id, "tokens", &[]).await;
    assert!(
        matches!(empty, Err(StoreError::Invalid(_))),
        "an empty append: {empty:?}"
    );
    let big = data(&h, serde_json::json!("x".repeat(MAX_CHUNK_BYTES)));
    let big = streams.append(&a, &run.id, "tokens", &[big]).await;
    assert!(
        matches!(big, Err(StoreError::Invalid(_))),
        "an oversized chunk: {big:?}"
    );
    assert_eq!(
        read_all(&h, &a, &run.id, "tokens").await.len(),
        1,
        "refused appends wrote nothing"
    );
}

/// A keyed chunk (a workflow body's, which a replay may publish again) is stored once:
/// appending its key again writes nothing and answers the offset it holds, even after
/// the stream ended; a keyed chunk is appended alone.
pub async fn a_keyed_chunk_is_appended_once(h: Harness) {
    let tenant = tenant();
    let run = create(&h, &tenant).await;
    let streams = &h.backend.streams;
    let keyed = |v: serde_json::Value, key: &str| NewChunk {
        key: Some(key.to_owned()),
        ..data(&h, v)
    };
    assert_eq!(
        streams
            .append(
                &tenant,
                &run.id,
                "progress",
                &[keyed(serde_json::json!("started"), "#0")]
            )
            .await
            .expect("a keyed append"),
        0
    );
    streams
        .append(
            &tenant,
            &run.id,
            "progress",
            &[data(&h, serde_json::json!("other"))],
        )
        .await
        .expect("an append");
    let again = streams
        .append(
            &tenant,
            &run.id,
            "progress",
            &[keyed(serde_json::json!("started"), "#0")],
        )
        .await;
    assert_eq!(
        again.ok(),
        Some(0),
        "the same key answers where it is stored"
    );
    assert_eq!(
        streams
            .append(
                &tenant,
                &run.id,
                "progress",
                &[keyed(serde_json::json!("next"), "#1")]
            )
            .await
            .ok(),
        Some(2),
        "another key is appended"
    );
    let pair = [
        keyed(serde_json::json!(1), "#2"),
        data(&h, serde_json::json!(2)),
    ];
    let pair = streams.append(&tenant, &run.id, "progress", &pair).await;
    assert!(
        matches!(pair, Err(StoreError::Invalid(_))),
        "a keyed chunk with another: {pair:?}"
    );
    let end = NewChunk {
        kind: ChunkKind::End,
        ..keyed(serde_json::Value::Null, "#3")
    };
    streams
        .append(&tenant, &run.id, "progress", &[end])
        .await
        .expect("a keyed end");
    let after_end = streams
        .append(
            &tenant,
            &run.id,
            "progress",
            &[keyed(serde_json::json!("next"), "#1")],
        )
        .await;
    assert_eq!(
        after_end.ok(),
        Some(2),
        "a stored key answers even after the end"
    );
    let data: Vec<serde_json::Value> = read_all(&h, &tenant, &run.id, "progress")
        .await
        .into_iter()
        .map(|c| c.chunk.data)
        .collect();
    assert_eq!(
        data,
        vec![
            serde_json::json!("started"),
            serde_json::json!("other"),
            serde_json::json!("next"),
            serde_json::Value::Null
        ],
        "each key stored once"
    );
}
