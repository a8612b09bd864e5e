//! On DynamoDB (the emulator): what a stream's chunks cost in requests — one `PutItem`
//! a chunk once the writer knows where the stream ends, one `TransactWriteItems` for
//! several — and two writers (two processes) on one stream keep its offsets gapless.

mod support;

use serde_json::json;
use siesta::ports::*;
use siesta::*;
use siesta_aws::RequestCounter;

fn chunk(v: serde_json::Value) -> NewChunk {
    NewChunk {
        kind: ChunkKind::Data,
        data: v,
        step: Some(Position::from("llm#0")),
        attempt: Some(1),
        at: Timestamp(1_800_000_000_000),
        key: None,
    }
}

async fn counted(env: &support::Emulators) -> (Backend, RequestCounter) {
    let (aws, counter) = env.counted_backend(3).await;
    (aws.backend(), counter)
}

fn fresh() -> (TenantId, RunId) {
    let id = uuid::Uuid::new_v4().simple().to_string();
    (
        TenantId(format!("streams-{id}")),
        RunId(format!("run-{id}")),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_aws_a_chunk_costs_one_put_item_once_the_writer_knows_where_the_stream_ends() {
    let Some(env) = support::emulators().await else {
        return;
    };
    let (backend, counter) = counted(&env).await;
    let (tenant, run) = fresh();
    // The first append reads where the stream ends (one Query), then puts.
    let first = backend
        .streams
        .append(&tenant, &run, "tokens", &[chunk(json!("Hel"))])
        .await
        .unwrap();
    assert_eq!(first, 0);
    assert_eq!(counter.total("dynamodb", Some("Query")), 1);
    assert_eq!(counter.total("dynamodb", Some("PutItem")), 1);
    counter.reset();
    // Then each chunk is one PutItem and nothing else.
    for i in 1..=10u64 {
        let at = backend
            .streams
            .append(&tenant, &run, "tokens", &[chunk(json!(i))])
            .await
            .unwrap();
        assert_eq!(at, i);
    }
    assert_eq!(
        counter.total("dynamodb", None),
        10,
        "{:?}",
        counter.snapshot()
    );
    assert_eq!(counter.total("dynamodb", Some("PutItem")), 10);
    counter.reset();
    // Several chunks at once: one TransactWriteItems.
    let batch: Vec<NewChunk> = (0..3).map(|i| chunk(json!(["b", i]))).collect();
    assert_eq!(
        backend
            .streams
            .append(&tenant, &run, "tokens", &batch)
            .await
            .unwrap(),
        11
    );
    assert_eq!(
        counter.total("dynamodb", None),
        1,
        "{:?}",
        counter.snapshot()
    );
    assert_eq!(counter.total("dynamodb", Some("TransactWriteItems")), 1);
    // A page is one Query.
    counter.reset();
    let all = backend
        .streams
        .read(&tenant, &run, "tokens", 0, 100)
        .await
        .unwrap();
    assert_eq!(all.len(), 14);
    assert_eq!(counter.total("dynamodb", None), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_aws_two_processes_writing_one_stream_keep_its_offsets_gapless() {
    let Some(env) = support::emulators().await else {
        return;
    };
    // Two backends: two processes, each remembering where the stream ends.
    let (a, _) = counted(&env).await;
    let (b, counter_b) = counted(&env).await;
    let (tenant, run) = fresh();
    a.streams
        .append(&tenant, &run, "tokens", &[chunk(json!("a0"))])
        .await
        .unwrap();
    b.streams
        .append(&tenant, &run, "tokens", &[chunk(json!("b0"))])
        .await
        .unwrap();
    // A still thinks the stream ends at 1: its put loses, it reads the end and retries.
    let at = a
        .streams
        .append(&tenant, &run, "tokens", &[chunk(json!("a1"))])
        .await
        .unwrap();
    assert_eq!(at, 2, "after b's chunk");
    counter_b.reset();
    b.streams
        .append(&tenant, &run, "tokens", &[chunk(json!("b1"))])
        .await
        .unwrap();
    assert_eq!(
        counter_b.total("dynamodb", Some("Query")),
        1,
        "b's remembered end was stale: one read of the end"
    );
    let all = a
        .streams
        .read(&tenant, &run, "tokens", 0, 100)
        .await
        .unwrap();
    let data: Vec<serde_json::Value> = all.iter().map(|c| c.chunk.data.clone()).collect();
    assert_eq!(
        data,
        vec![json!("a0"), json!("b0"), json!("a1"), json!("b1")]
    );
    let offsets: Vec<u64> = all.iter().map(|c| c.offset).collect();
    assert_eq!(offsets, vec![0, 1, 2, 3]);
    // An end closes it for both.
    b.streams
        .append(
            &tenant,
            &run,
            "tokens",
            &[NewChunk {
                kind: ChunkKind::End,
                ..chunk(serde_json::Value::Null)
            }],
        )
        .await
        .unwrap();
    let late = a
        .streams
        .append(&tenant, &run, "tokens", &[chunk(json!("late"))])
        .await;
    assert!(matches!(late, Err(StoreError::Gone(_))), "{late:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_aws_a_keyed_chunk_is_one_transaction_and_its_second_publish_writes_nothing() {
    let Some(env) = support::emulators().await else {
        return;
    };
    let (backend, counter) = counted(&env).await;
    let (tenant, run) = fresh();
    let keyed = NewChunk {
        key: Some("#0".into()),
        step: None,
        attempt: None,
        ..chunk(json!("started"))
    };
    let first = backend
        .streams
        .append(&tenant, &run, "progress", std::slice::from_ref(&keyed))
        .await
        .unwrap();
    assert_eq!(first, 0);
    assert_eq!(counter.total("dynamodb", Some("TransactWriteItems")), 1);
    counter.reset();
    // A replay publishes it again: the key's record refuses it, nothing is written.
    let again = backend
        .streams
        .append(&tenant, &run, "progress", &[keyed])
        .await
        .unwrap();
    assert_eq!(again, 0);
    assert_eq!(counter.total("dynamodb", Some("TransactWriteItems")), 1);
    let all = backend
        .streams
        .read(&tenant, &run, "progress", 0, 100)
        .await
        .unwrap();
    assert_eq!(all.len(), 1, "stored once");
}
