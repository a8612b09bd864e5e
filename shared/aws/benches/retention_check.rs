//! Benchmark: the retention check on the emulators. Runs finish (each with a value
//! offloaded to S3, a stream, a tool call, a webhook-completed callback; and runs of ten
//! steps), one run waits; past the retention the reaper runs; the bench prints what is
//! left per finished run — items without expiry, items expiring by TTL, objects — and
//! what the reaper cost per run in requests, write units and dollars, beside what
//! keeping the run would cost. Figures, not assertions, except that nothing is left
//! without expiry and the waiting run is untouched, which it checks and reports:
//! `cargo bench -p siesta-aws --bench retention_check` with the emulators up.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

mod prices;
#[path = "../tests/support/mod.rs"]
mod support;

use prices::*;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use serde_json::json;
use siesta::*;
use siesta_aws::index_writes::index_writes;
use siesta_aws::retention::RetentionRules;
use siesta_aws::{AwsOptions, RequestCounter};

/// Finished runs of each kind.
const RUNS: usize = 20;
const STEPS: u32 = 10;
const DAY: Duration = Duration::from_secs(86_400);
const T0: Timestamp = Timestamp(1_800_000_000_000);

type Item = HashMap<String, AttributeValue>;

fn registry() -> Registry {
    let mut reg = Registry::new();
    reg.register("order", |ctx: Context, _: serde_json::Value| async move {
        let big: String = ctx
            .step("big", |_| async move { Ok("x".repeat(40_000)) })
            .await?;
        let stream = ctx.stream("progress");
        for i in 0..5u32 {
            stream.publish(&json!({"done": i})).await?;
        }
        let charged: serde_json::Value = ctx
            .tool_call("charge", &json!({"amount": 5}), |_| async move {
                Ok(json!("charged"))
            })
            .await?;
        let cb = ctx
            .create_callback::<serde_json::Value>("approval")
            .timeout(Duration::from_secs(3600))
            .await?;
        let approved = cb.wait().await?;
        Ok(json!({"big": big.len(), "charged": charged, "approved": approved}))
    });
    reg.register(
        "ten_steps",
        |ctx: Context, _: serde_json::Value| async move {
            let mut total = 0u32;
            for i in 0..STEPS {
                total += ctx.step("work", move |_| async move { Ok(i) }).await?;
            }
            Ok(total)
        },
    );
    reg.register(
        "wait_forever",
        |ctx: Context, _: serde_json::Value| async move {
            let big: String = ctx
                .step("big", |_| async move { Ok("y".repeat(40_000)) })
                .await?;
            let v: serde_json::Value = ctx.wait_for_event("never").await?;
            Ok(json!({"big": big.len(), "v": v}))
        },
    );
    reg
}

/// An item's size as DynamoDB bills it (names and values; numbers about a byte per
/// two digits).
fn size(item: &Item) -> usize {
    item.iter()
        .map(|(name, v)| {
            name.len()
                + match v {
                    AttributeValue::S(s) => s.len(),
                    AttributeValue::N(n) => n.len().div_ceil(2) + 1,
                    _ => 1,
                }
        })
        .sum()
}

fn string(item: &Item, name: &str) -> String {
    match item.get(name) {
        Some(AttributeValue::S(s)) => s.clone(),
        _ => String::new(),
    }
}

async fn everything(env: &support::Emulators) -> Vec<Item> {
    let client = aws_sdk_dynamodb::Client::new(&env.sdk);
    let mut items = Vec::new();
    let mut start = None;
    loop {
        let out = client
            .scan()
            .table_name(&env.table)
            .consistent_read(true)
            .set_exclusive_start_key(start.take())
            .send()
            .await
            .expect("scan");
        items.extend(out.items.unwrap_or_default());
        start = out.last_evaluated_key.filter(|k| !k.is_empty());
        if start.is_none() {
            return items;
        }
    }
}

/// (objects, bytes) in the bucket under `prefix`.
async fn objects(env: &support::Emulators, prefix: &str) -> (usize, i64) {
    let s3 = aws_sdk_s3::Client::from_conf(
        aws_sdk_s3::config::Builder::from(&env.sdk)
            .force_path_style(true)
            .build(),
    );
    let out = s3
        .list_objects_v2()
        .bucket(&env.bucket)
        .prefix(prefix)
        .send()
        .await
        .expect("list");
    (
        out.contents().len(),
        out.contents().iter().filter_map(|o| o.size()).sum(),
    )
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let Some(env) = support::emulators().await else {
        return;
    };
    // A table of its own: the bench scans it to find whatever is left.
    env.in_own_table(|env| async move { bench(&env).await })
        .await;
}

async fn bench(env: &support::Emulators) {
    let counter = RequestCounter::new();
    let aws = env
        .backend_with(
            5,
            AwsOptions {
                retention: 30 * DAY,
                interceptors: vec![counter.interceptor()],
            },
        )
        .await;
    let clock = Arc::new(ManualClock::new(T0));
    let engine = Engine::new(
        aws.backend(),
        clock.clone(),
        registry(),
        EngineConfig::default(),
    );
    let tenant = TenantId(format!("bench-{}", uuid::Uuid::new_v4().simple()));
    let waiting = engine
        .start(&tenant, "wait_forever", json!(null), None)
        .await
        .expect("start");
    let mut finished = Vec::new();
    for _ in 0..RUNS {
        for workflow in ["order", "ten_steps"] {
            finished.push(
                engine
                    .start(&tenant, workflow, json!(null), None)
                    .await
                    .expect("start")
                    .id,
            );
        }
    }
    engine.run_until_idle(500).await.expect("work");
    for run in &finished {
        let callback = support::waiting_callback(&*aws.backend().store, &tenant, run).await;
        if let Some(callback) = callback {
            engine
                .complete_callback(&callback, None, Ok(json!("yes")), None)
                .await
                .expect("webhook");
        }
    }
    engine.run_until_idle(500).await.expect("work");
    for run in &finished {
        let run = engine.get_run(&tenant, run).await.expect("run");
        assert_eq!(run.status, RunStatus::Completed, "{:?}", run.error);
    }
    let n = finished.len() as f64;
    let waiting_pk = siesta_aws::keys::run_pk(&tenant, &waiting.id);
    let tenant_prefix = siesta::ports::artifact_location(&tenant, &RunId(String::new()), "");
    let tenant_prefix = tenant_prefix.trim_end_matches('/').trim_end_matches('/');
    let waiting_prefix = siesta::ports::artifact_location(&tenant, &waiting.id, "");

    // Before: what the finished runs hold.
    let before = everything(env).await;
    let of_finished = |items: &[Item]| -> Vec<Item> {
        items
            .iter()
            .filter(|i| {
                let pk = string(i, "pk");
                pk != waiting_pk && !pk.starts_with("Q#") && !pk.starts_with("B#")
            })
            .cloned()
            .collect()
    };
    let held = of_finished(&before);
    let in_partitions = held
        .iter()
        .filter(|i| string(i, "pk").starts_with("R#"))
        .count();
    let bytes: usize = held.iter().map(size).sum();
    let (all_objects, all_object_bytes) = objects(env, &format!("{tenant_prefix}/")).await;
    let (waiting_objects, waiting_object_bytes) = objects(env, &waiting_prefix).await;
    let objects_held = all_objects - waiting_objects;
    let object_bytes = all_object_bytes - waiting_object_bytes;
    let waiting_before: Vec<Item> = before
        .iter()
        .filter(|i| string(i, "pk") == waiting_pk)
        .cloned()
        .collect();
    println!(
        "retention check on the emulators: {} finished runs ({RUNS} orders — a value in S3, 5 stream chunks, a tool call, a webhook-completed callback — and {RUNS} runs of {STEPS} steps), one run waiting, retention 30 days",
        finished.len()
    );
    println!(
        "  before, per finished run: {:.1} items ({:.1} in its partition, {:.1} outside it), {:.0} bytes; {:.2} S3 objects ({:.0} bytes)",
        held.len() as f64 / n,
        in_partitions as f64 / n,
        (held.len() - in_partitions) as f64 / n,
        bytes as f64 / n,
        objects_held as f64 / n,
        object_bytes as f64 / n,
    );

    // Past the retention: the reaper, page after page.
    let reaper = aws.reaper(RetentionRules::new(RetentionPolicy::default()));
    let past = Timestamp(T0.0 + (31 * DAY).as_millis() as i64);
    let capacity_before = aws.consumed_capacity();
    counter.reset();
    let started = std::time::Instant::now();
    let (mut removed, mut pages) = (0, 0);
    loop {
        let report = reaper.reap(past, 25).await.expect("reap");
        pages += 1;
        removed += report.removed.len();
        if !report.more {
            break;
        }
    }
    let elapsed = started.elapsed();
    let capacity_after = aws.consumed_capacity();
    let wcu = (capacity_after.write_units - capacity_before.write_units) / n;
    let rcu = (capacity_after.read_units - capacity_before.read_units) / n;
    let ddb = |op: &str| counter.total("dynamodb", Some(op)) as f64 / n;
    let writes = ddb("BatchWriteItem") + ddb("DeleteItem") + ddb("UpdateItem");
    let reads = ddb("Query") + ddb("GetItem");
    let s3_list = counter.total("s3", Some("GET")) as f64 / n;
    let s3_delete = counter.total("s3", Some("POST")) as f64 / n;
    println!(
        "  the reaper at 31 days: {removed} runs removed in {pages} pages of 25, {:.2} s",
        elapsed.as_secs_f64()
    );

    // After: what is left.
    let after = everything(env).await;
    let left = of_finished(&after);
    let by = past.0 / 1000;
    let expires = |i: &Item| match i.get("expires_at") {
        Some(AttributeValue::N(v)) => v.parse::<i64>().ok(),
        _ => None,
    };
    let without_expiry = left
        .iter()
        .filter(|i| expires(i).is_none_or(|e| e > by))
        .count();
    let with_expiry = left.len() - without_expiry;
    // As AWS bills them: each deleted item's size rounded up per KB, and the claim (an
    // UpdateItem of the run item).
    let kept: std::collections::BTreeSet<(String, String)> = left
        .iter()
        .map(|i| (string(i, "pk"), string(i, "sk")))
        .collect();
    let units = |i: &Item| size(i).div_ceil(1024).max(1);
    let billed_deletes: usize = held
        .iter()
        .filter(|i| !kept.contains(&(string(i, "pk"), string(i, "sk"))))
        .map(units)
        .sum();
    let billed_claims: usize = held
        .iter()
        .filter(|i| string(i, "sk") == "RUN")
        .map(units)
        .sum();
    // And the index writes they make (siesta_aws::index_writes): the claim moves the run
    // item's `reap_at`, the reap index's sort key; the delete removes its entries.
    let billed_index: u32 = held
        .iter()
        .filter(|i| string(i, "sk") == "RUN")
        .map(|run| {
            let mut claimed = run.clone();
            claimed.insert("reap_at".into(), AttributeValue::N(i64::MAX.to_string()));
            index_writes(Some(run), Some(&claimed))
                .iter()
                .chain(&index_writes(Some(run), None))
                .map(|w| w.writes)
                .sum::<u32>()
        })
        .sum();
    let (all_objects_after, _) = objects(env, &format!("{tenant_prefix}/")).await;
    let (waiting_objects_after, _) = objects(env, &waiting_prefix).await;
    let objects_left = all_objects_after - waiting_objects_after;
    let waiting_after: Vec<Item> = after
        .iter()
        .filter(|i| string(i, "pk") == waiting_pk)
        .cloned()
        .collect();
    println!("  left per finished run:");
    println!(
        "    items without expiry  {:>6.2}   (target 0: {})",
        without_expiry as f64 / n,
        if without_expiry == 0 { "met" } else { "MISSED" }
    );
    println!(
        "    items expiring by TTL {:>6.2}   (finished tool-call records, stamped when written)",
        with_expiry as f64 / n
    );
    println!(
        "    S3 objects            {:>6.2}   (target 0: {})",
        objects_left as f64 / n,
        if objects_left == 0 { "met" } else { "MISSED" }
    );
    println!(
        "  the waiting run, as old: {} items and {} objects before, {} and {} after: {}",
        waiting_before.len(),
        waiting_objects,
        waiting_after.len(),
        waiting_objects_after,
        if waiting_before == waiting_after && waiting_objects == waiting_objects_after {
            "untouched"
        } else {
            "TOUCHED"
        }
    );
    let billed = (billed_deletes + billed_claims) as f64 / n + f64::from(billed_index) / n;
    println!("  the reaper's cost per finished run:");
    println!(
        "    DynamoDB write requests {writes:>7.2}   (BatchWriteItem {:.2}, DeleteItem {:.2}, UpdateItem {:.2})",
        ddb("BatchWriteItem"),
        ddb("DeleteItem"),
        ddb("UpdateItem")
    );
    println!(
        "    WCU                     {wcu:>7.2} as DynamoDB Local reports; {billed:.2} as AWS bills the deletes and the claim (each item's size rounded up per KB) and their index writes ({:.2})",
        f64::from(billed_index) / n
    );
    println!(
        "    DynamoDB read requests  {reads:>7.2}   (Query {:.2}, GetItem {:.2}), RCU {rcu:.2}",
        ddb("Query"),
        ddb("GetItem")
    );
    println!(
        "    S3 requests             {:>7.2}   (ListObjectsV2 {s3_list:.2}, DeleteObjects {s3_delete:.2}; deletes are free)",
        s3_list + s3_delete
    );
    let dollars = billed * WRITE_UNIT + rcu * READ_UNIT + s3_list * S3_LIST;
    println!(
        "    cost per million finished runs at on-demand list prices: ${:.2}",
        1e6 * dollars
    );
    let keep_month =
        bytes as f64 / n / 1e9 * DYNAMODB_GB_MONTH + object_bytes as f64 / n / 1e9 * S3_GB_MONTH;
    println!(
        "  keeping one such run costs ${:.2} per million runs per month ({:.0} bytes in DynamoDB, {:.0} in S3): reaping costs what {:.1} months of keeping it would",
        1e6 * keep_month,
        bytes as f64 / n,
        object_bytes as f64 / n,
        dollars / keep_month
    );
}
