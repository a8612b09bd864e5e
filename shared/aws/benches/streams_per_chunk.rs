//! Benchmark: DynamoDB requests, capacity and list-price cost per 1 000 stream chunks
//! written (one step publishing them) and per 1 000 read (a reader paging through the
//! stream with `Engine::read_stream`), for a token-sized chunk and a 1 KB one, on the
//! emulators (DynamoDB Local reports consumed capacity as DynamoDB does). Figures, not
//! assertions: `cargo bench -p siesta-aws --bench streams_per_chunk` with the emulators
//! up (`scripts/emulators start && eval "$(scripts/emulators env)"`).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

mod prices;
#[path = "../tests/support/mod.rs"]
mod support;

use prices::*;
use std::sync::Arc;

use serde_json::json;
use siesta::*;
use siesta_aws::RequestCounter;

/// The figures are per 1 000 chunks: this many.
const CHUNKS: u64 = 1000;
/// A reader's page, as a long-polling client asks for it.
const PAGE: usize = 100;

fn registry() -> Registry {
    let mut reg = Registry::new();
    reg.register(
        "publish",
        |ctx: Context, input: serde_json::Value| async move {
            let n = input["n"].as_u64().unwrap_or(0);
            let size = input["size"].as_u64().unwrap_or(1) as usize;
            ctx.step("llm", move |step| async move {
                let tokens = step.stream("tokens");
                let chunk = "x".repeat(size);
                for _ in 0..n {
                    tokens.publish(&chunk).await?;
                }
                Ok(n)
            })
            .await
        },
    );
    reg
}

/// DynamoDB requests and capacity over a stretch of the bench.
#[derive(Clone, Copy, Default)]
struct Cost {
    writes: f64,
    reads: f64,
    wcu: f64,
    rcu: f64,
}

impl Cost {
    fn minus(self, o: Cost) -> Cost {
        Cost {
            writes: self.writes - o.writes,
            reads: self.reads - o.reads,
            wcu: self.wcu - o.wcu,
            rcu: self.rcu - o.rcu,
        }
    }

    fn print(&self, what: &str) {
        println!(
            "    per 1 000 chunks {what}: DynamoDB write requests {:>7.1} ({:>7.1} WCU), read requests {:>6.1} ({:>6.1} RCU); list price ${:.6}",
            self.writes,
            self.wcu,
            self.reads,
            self.rcu,
            self.wcu * WRITE_UNIT + self.rcu * READ_UNIT
        );
    }
}

struct Meter<'a> {
    counter: &'a RequestCounter,
    aws: &'a siesta_aws::AwsBackend,
    before: siesta_aws::ConsumedCapacity,
}

impl<'a> Meter<'a> {
    fn start(counter: &'a RequestCounter, aws: &'a siesta_aws::AwsBackend) -> Self {
        counter.reset();
        Meter {
            counter,
            aws,
            before: aws.consumed_capacity(),
        }
    }

    fn stop(self) -> Cost {
        let ddb = |ops: &[&str]| {
            ops.iter()
                .map(|o| self.counter.total("dynamodb", Some(o)))
                .sum::<u64>() as f64
        };
        let after = self.aws.consumed_capacity();
        Cost {
            writes: ddb(&[
                "TransactWriteItems",
                "UpdateItem",
                "PutItem",
                "DeleteItem",
                "BatchWriteItem",
            ]),
            reads: ddb(&["GetItem", "BatchGetItem", "Query"]),
            wcu: after.write_units - self.before.write_units,
            rcu: after.read_units - self.before.read_units,
        }
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let Some(env) = support::emulators().await else {
        return;
    };
    let tenant = TenantId(format!("bench-{}", uuid::Uuid::new_v4().simple()));
    let (aws, counter) = env.counted_backend(5).await;
    let engine = Engine::new(
        aws.backend(),
        Arc::new(SystemClock),
        registry(),
        EngineConfig::default(),
    );
    let run = |n: u64, size: u64| {
        let engine = &engine;
        let tenant = &tenant;
        async move {
            let run = engine
                .start(tenant, "publish", json!({"n": n, "size": size}), None)
                .await
                .expect("start");
            engine.run_until_idle(100).await.expect("work");
            let done = engine.get_run(tenant, &run.id).await.expect("run");
            assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
            run.id
        }
    };
    println!(
        "AWS backend on the emulators: one step publishing {CHUNKS} chunks, read back in pages of {PAGE}"
    );
    for size in [20u64, 1024] {
        // The same run publishing nothing: what the run itself costs, taken off.
        let meter = Meter::start(&counter, &aws);
        run(0, size).await;
        let baseline = meter.stop();
        let meter = Meter::start(&counter, &aws);
        let run_id = run(CHUNKS, size).await;
        let written = meter.stop().minus(baseline);
        let requests = counter.snapshot();

        let meter = Meter::start(&counter, &aws);
        let mut from = 0;
        let mut read = 0u64;
        let mut pages = 0u64;
        loop {
            let page = engine
                .read_stream(&tenant, &run_id, "tokens", from, PAGE)
                .await
                .expect("read");
            pages += 1;
            read += page
                .chunks
                .iter()
                .filter(|c| c.chunk.kind == siesta::ports::ChunkKind::Data)
                .count() as u64;
            from = page.next;
            if page.closed {
                break;
            }
        }
        let reading = meter.stop();
        assert_eq!(read, CHUNKS, "every chunk read once");
        println!("  chunks of {size} bytes of text ({pages} pages read):");
        written.print("written");
        println!("      the run's requests, its own included: {requests:?}");
        reading.print("read");
    }
}
