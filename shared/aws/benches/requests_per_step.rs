//! Benchmark: AWS requests, capacity and list-price cost per step and per
//! webhook-resumed wait, on the emulators (DynamoDB Local reports consumed capacity as
//! DynamoDB does). Figures, not assertions except the targets, which it checks
//! and reports: `cargo bench -p siesta-aws` with the emulators up (`./scripts/test`
//! starts them; by hand: `scripts/emulators start && eval "$(scripts/emulators env)"`).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

mod prices;
#[path = "../tests/support/mod.rs"]
mod support;

use prices::*;
use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::json;
use siesta::*;
use siesta_aws::{RequestCounter, WrittenItems};

const STEPS: u32 = 100;
const RUNS: usize = 5;
const WAITS: u32 = 10;
/// Runs started at once under a limit of one per key: one holds its slot, the others
/// wait in line, and each finish hands the slot to the next.
const LIMITED: u32 = 10;
/// Starts a debounce gathers into one run (a batch of this size, released when full).
const GATHERED: u32 = 5;
/// How long the long step (a model call, say) holds its run.
const LONG_STEP: std::time::Duration = std::time::Duration::from_millis(2_100);
/// The lease the long step is run under: renewed every two fifths of it, so about eight
/// renewals in the step.
const SHORT_LEASE: std::time::Duration = std::time::Duration::from_millis(600);

fn registry() -> Registry {
    let mut reg = Registry::new();
    reg.register("hundred", |ctx: Context, _: serde_json::Value| async move {
        let mut total = 0u64;
        for i in 0..STEPS {
            total += ctx
                .step("work", move |_| async move { Ok(u64::from(i)) })
                .await?;
        }
        Ok(total)
    });
    reg.register("waits", |ctx: Context, _: serde_json::Value| async move {
        let mut got = Vec::new();
        for _ in 0..WAITS {
            let cb = ctx
                .create_callback::<serde_json::Value>("approval")
                .timeout(std::time::Duration::from_secs(3600))
                .await?;
            got.push(cb.wait().await?);
        }
        Ok(got.len())
    });
    // The approval pattern: each answer acted on by a step.
    reg.register(
        "approve_then_act",
        |ctx: Context, _: serde_json::Value| async move {
            let mut acted = 0u32;
            for _ in 0..WAITS {
                let cb = ctx
                    .create_callback::<serde_json::Value>("approval")
                    .timeout(std::time::Duration::from_secs(3600))
                    .await?;
                let answer = cb.wait().await?;
                acted += ctx
                    .step(
                        "act",
                        move |_| async move { Ok(u32::from(!answer.is_null())) },
                    )
                    .await?;
            }
            Ok(acted)
        },
    );
    // One step that takes a while: its lease is renewed while it runs.
    reg.register(
        "long_step",
        |ctx: Context, _: serde_json::Value| async move {
            ctx.step("think", |_| async {
                tokio::time::sleep(LONG_STEP).await;
                Ok(1u32)
            })
            .await
        },
    );
    // One step, as itself and under a concurrency limit of one run per customer.
    for name in ["one_step", "one_step_limited"] {
        reg.register(name, |ctx: Context, _: serde_json::Value| async move {
            ctx.step("work", |_| async { Ok(1u32) }).await
        });
    }
    reg.limit(
        siesta::flow::RunLimit::new("bench-per-customer", 1)
            .key_from_input("/customer")
            .workflow("one_step_limited"),
    );
    // One step under a step limit (a slot taken before the attempt, given back after)
    // and one under a step rate (a turn), neither ever full: the cost of asking.
    reg.register(
        "one_step_slot",
        |ctx: Context, _: serde_json::Value| async move {
            ctx.step("work", |_| async { Ok(1u32) })
                .limit("bench-model", 1000)
                .await
        },
    );
    reg.register(
        "one_step_rated",
        |ctx: Context, _: serde_json::Value| async move {
            ctx.step("work", |_| async { Ok(1u32) })
                .rate("bench-rpm", 100_000, std::time::Duration::from_secs(1))
                .await
        },
    );
    // One step, its starts gathered by a debounce: GATHERED starts per run.
    reg.register(
        "one_step_debounced",
        |ctx: Context, _: serde_json::Value| async move {
            ctx.step("work", |_| async { Ok(1u32) }).await
        },
    );
    reg.debounce(
        Debounce::new("bench-gather", std::time::Duration::from_secs(3600))
            .batch(GATHERED)
            .key_from_input("/customer")
            .workflow("one_step_debounced"),
    );
    reg
}

struct Figures {
    ddb_writes: f64,
    ddb_reads: f64,
    /// Write units as DynamoDB Local reports them.
    wcu: f64,
    /// Write units as AWS bills them, from the items' sizes (see `print_written`).
    wcu_billed: f64,
    /// Bytes of the items written.
    bytes: f64,
    rcu: f64,
    sqs_sends: f64,
    sqs_other: f64,
    s3_puts: f64,
    s3_gets: f64,
}

impl Figures {
    fn per(counter: &RequestCounter, capacity: siesta_aws::ConsumedCapacity, n: f64) -> Self {
        let ddb = |ops: &[&str]| {
            ops.iter()
                .map(|o| counter.total("dynamodb", Some(o)))
                .sum::<u64>() as f64
                / n
        };
        let sqs_all = counter.total("sqs", None) as f64 / n;
        let sqs_sends = counter.total("sqs", Some("SendMessage")) as f64 / n;
        Figures {
            ddb_writes: ddb(&[
                "TransactWriteItems",
                "UpdateItem",
                "PutItem",
                "DeleteItem",
                "BatchWriteItem",
            ]),
            ddb_reads: ddb(&["GetItem", "BatchGetItem", "Query"]),
            wcu: capacity.write_units / n,
            wcu_billed: 0.0,
            bytes: 0.0,
            rcu: capacity.read_units / n,
            sqs_sends,
            sqs_other: sqs_all - sqs_sends,
            s3_puts: counter.total("s3", Some("PUT")) as f64 / n,
            s3_gets: counter.total("s3", Some("GET")) as f64 / n,
        }
    }

    /// At the write units AWS bills (estimated from the items' sizes).
    fn dollars_per_million(&self) -> f64 {
        self.dollars_per_million_at(self.wcu_billed)
    }

    fn dollars_per_million_at(&self, wcu: f64) -> f64 {
        1e6 * (wcu * WRITE_UNIT
            + self.rcu * READ_UNIT
            + (self.sqs_sends + self.sqs_other) * SQS_REQUEST
            + self.s3_puts * S3_PUT
            + self.s3_gets * S3_GET)
    }

    fn print(&self, what: &str) {
        println!("  per {what}:");
        println!(
            "    DynamoDB write requests {:>8.3}   WCU {:>8.3} as AWS bills them, {:.3} as DynamoDB Local reports them",
            self.ddb_writes, self.wcu_billed, self.wcu
        );
        println!("    bytes written           {:>8.0}", self.bytes);
        println!(
            "    DynamoDB read requests  {:>8.3}   RCU {:>8.3}",
            self.ddb_reads, self.rcu
        );
        println!(
            "    SQS requests            {:>8.3}   (SendMessage {:.3}; receive/delete {:.3})",
            self.sqs_sends + self.sqs_other,
            self.sqs_sends,
            self.sqs_other
        );
        println!(
            "    S3 requests             {:>8.3}   (PUT {:.3}, GET {:.3})",
            self.s3_puts + self.s3_gets,
            self.s3_puts,
            self.s3_gets
        );
        println!(
            "    cost per million {what}s at on-demand list prices: ${:.2} (${:.2} at DynamoDB Local's write units)",
            self.dollars_per_million(),
            self.dollars_per_million_at(self.wcu)
        );
    }
}

/// Where the write units went between two snapshots, per `what` (step or wait): the
/// items of each kind, their average size, the units they cost. Returns (write units,
/// bytes) per `what`.
///
/// The units are AWS's billing rules applied to the items' sizes: each item's size
/// rounded up to the next KB, twice over in a transaction; and the writes of the
/// table's indexes a run item's write makes (`<op>: <index> index`), one per KB of the
/// entry each ([`siesta_aws::index_writes`]). DynamoDB Local's own figure
/// for a transaction follows another rule (4 units for any transaction under 1 KB, one
/// item or eight), so it is shown beside, not used for the cost.
fn print_written(
    before: &BTreeMap<String, WrittenItems>,
    after: &BTreeMap<String, WrittenItems>,
    n: f64,
    what: &str,
) -> (f64, f64) {
    let mut bytes = 0u64;
    let mut units = 0.0;
    println!(
        "  items written per {what} (estimated units: size rounded up to 1 KB, x2 in a transaction; an index entry's write 1 per KB, see siesta_aws::index_writes):"
    );
    for (label, w) in after {
        let b = before.get(label).copied().unwrap_or_default();
        let items = w.items - b.items;
        if items == 0 {
            continue;
        }
        let item_bytes = w.bytes - b.bytes;
        bytes += item_bytes;
        units += w.write_units - b.write_units;
        let size = if item_bytes == 0 {
            "size unseen".to_owned()
        } else {
            format!("{:>5} B each", item_bytes / items)
        };
        println!(
            "    {label:<52} {:>6.3} items, {size}, {:>6.3} WCU",
            items as f64 / n,
            (w.write_units - b.write_units) / n
        );
    }
    (units / n, bytes as f64 / n)
}

/// What a lease renewal writes (the run item, and its `due` entry, which moves to the
/// new expiry), from the items written between `before` and `after`; and what holding
/// a run in a step costs a minute at the default lease (60 s, renewed every 24 s).
fn print_renewals(before: &BTreeMap<String, WrittenItems>, after: &BTreeMap<String, WrittenItems>) {
    let renewals: Vec<(&String, f64, f64)> = after
        .iter()
        .filter(|(label, _)| label.starts_with("renew_lease:"))
        .map(|(label, w)| {
            let b = before.get(label).copied().unwrap_or_default();
            (
                label,
                (w.items - b.items) as f64,
                w.write_units - b.write_units,
            )
        })
        .collect();
    let count = renewals
        .iter()
        .find(|(label, _, _)| label.as_str() == "renew_lease: Run")
        .map_or(0.0, |(_, items, _)| *items);
    println!(
        "a step of {:.1} s under a lease of {:.1} s (renewed every two fifths of it): {count} renewals",
        LONG_STEP.as_secs_f64(),
        SHORT_LEASE.as_secs_f64()
    );
    if count == 0.0 {
        return;
    }
    let mut units = 0.0;
    for (label, items, wcu) in &renewals {
        units += wcu;
        println!(
            "    {label:<52} {:>6.3} items, {:>6.3} WCU",
            items / count,
            wcu / count
        );
    }
    let per_renewal = units / count;
    // A renewal is one conditional UpdateItem (its index writes are in its units) and
    // reads nothing.
    // The engine renews a lease every two fifths of its TTL: 2.5 times a minute at 60 s.
    let per_minute = 2.5 * per_renewal;
    println!(
        "  per renewal: 1 write request, {per_renewal:.2} WCU; per minute a step holds its run at the default lease (60 s, 2.5 renewals): {per_minute:.1} WCU, ${:.2} per million step-minutes",
        1e6 * per_minute * WRITE_UNIT
    );
}

/// Start `workflow`, answer its `WAITS` callbacks one by one through the engine (as
/// the webhook does), each time running it until it waits again, and return the
/// figures per wait; `title` and the items written are printed.
async fn resumed_waits(
    engine: &Engine,
    aws: &siesta_aws::AwsBackend,
    observer: &siesta_aws::AwsBackend,
    counter: &RequestCounter,
    tenant: &TenantId,
    workflow: &str,
    title: &str,
) -> Figures {
    println!("{title}");
    counter.reset();
    let before = aws.consumed_capacity();
    let written_before = aws.written_items();
    let run = engine
        .start(tenant, workflow, json!(null), None)
        .await
        .expect("start");
    engine.run_until_idle(100).await.expect("work");
    for i in 0..WAITS {
        // Read through the observer: what the webhook's caller knows is not the
        // engine's cost.
        let callback = support::waiting_callback(&*observer.backend().store, tenant, &run.id)
            .await
            .expect("waiting on a callback");
        engine
            .complete_callback(
                &callback,
                None,
                Ok(json!({"n": i})),
                Some(DeliveryId(format!("hook-{i}"))),
            )
            .await
            .expect("webhook");
        engine.run_until_idle(100).await.expect("work");
    }
    let run = engine.get_run(tenant, &run.id).await.expect("run");
    assert_eq!(run.status, RunStatus::Completed, "{:?}", run.error);
    let after = aws.consumed_capacity();
    let capacity = siesta_aws::ConsumedCapacity {
        write_units: after.write_units - before.write_units,
        read_units: after.read_units - before.read_units,
    };
    let mut figures = Figures::per(counter, capacity, f64::from(WAITS));
    (figures.wcu_billed, figures.bytes) = print_written(
        &written_before,
        &aws.written_items(),
        f64::from(WAITS),
        "wait",
    );
    figures
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let Some(env) = support::emulators().await else {
        return;
    };
    let tenant = TenantId(format!("bench-{}", uuid::Uuid::new_v4().simple()));

    // A: back-to-back steps.
    let names = env.names(5).await;
    let (aws, counter) = env.counted_backend_with_names(names.clone());
    // Neither counted nor metered: the benchmark's own reads (which callback a run
    // waits on) go through it.
    let observer = siesta_aws::AwsBackend::new(&env.sdk, names);
    let engine = Engine::new(
        aws.backend(),
        Arc::new(SystemClock),
        registry(),
        EngineConfig::default(),
    );
    let before = aws.consumed_capacity();
    let written_before = aws.written_items();
    counter.reset();
    let started = std::time::Instant::now();
    for _ in 0..RUNS {
        let run = engine
            .start(&tenant, "hundred", json!(null), None)
            .await
            .expect("start");
        engine.run_until_idle(100).await.expect("work");
        let run = engine.get_run(&tenant, &run.id).await.expect("run");
        assert_eq!(run.status, RunStatus::Completed, "{:?}", run.error);
    }
    let elapsed = started.elapsed();
    let steps = f64::from(STEPS) * RUNS as f64;
    let after = aws.consumed_capacity();
    let capacity = siesta_aws::ConsumedCapacity {
        write_units: after.write_units - before.write_units,
        read_units: after.read_units - before.read_units,
    };
    let mut a = Figures::per(&counter, capacity, steps);
    let written_after = aws.written_items();
    println!(
        "AWS backend on the emulators: {RUNS} runs of a {STEPS}-step workflow ({steps} steps, {:.1} s)",
        elapsed.as_secs_f64()
    );
    (a.wcu_billed, a.bytes) = print_written(&written_before, &written_after, steps, "step");
    a.print("step");
    println!("  requests: {:?}", counter.snapshot());

    // B: webhook-resumed waits.
    let title = format!(
        "{WAITS} webhook-resumed waits in one run (the callback lookup, the delivery, the wake-up, the resume):"
    );
    let b = resumed_waits(&engine, &aws, &observer, &counter, &tenant, "waits", &title).await;
    b.print("wait");
    println!("  requests: {:?}", counter.snapshot());

    // C: webhook-resumed waits, each answer acted on by a step.
    let title =
        format!("{WAITS} webhook-resumed waits in one run, each answer acted on by a step:");
    let c = resumed_waits(
        &engine,
        &aws,
        &observer,
        &counter,
        &tenant,
        "approve_then_act",
        &title,
    )
    .await;
    c.print("acted-on wait");
    println!("  requests: {:?}", counter.snapshot());

    // D: a long step, whose run's lease is renewed while it runs.
    let long = Engine::new(
        aws.backend(),
        Arc::new(SystemClock),
        registry(),
        EngineConfig {
            lease_ttl: SHORT_LEASE,
            ..EngineConfig::default()
        },
    );
    let written_before = aws.written_items();
    let run = long
        .start(&tenant, "long_step", json!(null), None)
        .await
        .expect("start");
    long.run_until_idle(10).await.expect("work");
    let run = long.get_run(&tenant, &run.id).await.expect("run");
    assert_eq!(run.status, RunStatus::Completed, "{:?}", run.error);
    print_renewals(&written_before, &aws.written_items());

    // E: runs of one step, without a limit and under one (one per customer, all of one
    // customer: each start but the first queued, each finish handing its slot on).
    let mut per_run = Vec::new();
    for (workflow, title) in [
        ("one_step", format!("{LIMITED} runs of one step, no limit:")),
        (
            "one_step_limited",
            format!(
                "{LIMITED} runs of one step under a limit of one per key, started together (the first admitted, the others queued; each finish hands the slot to the next):"
            ),
        ),
    ] {
        println!("{title}");
        counter.reset();
        let before = aws.consumed_capacity();
        let written_before = aws.written_items();
        let customer = uuid::Uuid::new_v4().simple().to_string();
        let mut runs = Vec::new();
        for _ in 0..LIMITED {
            let run = engine
                .start(&tenant, workflow, json!({ "customer": customer }), None)
                .await
                .expect("start");
            runs.push(run.id);
        }
        engine.run_until_idle(1000).await.expect("work");
        for id in &runs {
            let run = engine.get_run(&tenant, id).await.expect("run");
            assert_eq!(run.status, RunStatus::Completed, "{id}: {:?}", run.error);
        }
        let after = aws.consumed_capacity();
        let capacity = siesta_aws::ConsumedCapacity {
            write_units: after.write_units - before.write_units,
            read_units: after.read_units - before.read_units,
        };
        let mut figures = Figures::per(&counter, capacity, f64::from(LIMITED));
        (figures.wcu_billed, figures.bytes) = print_written(
            &written_before,
            &aws.written_items(),
            f64::from(LIMITED),
            "run",
        );
        figures.print("run");
        println!("  requests: {:?}", counter.snapshot());
        per_run.push(figures);
    }
    // F: the same run, its step under a step limit or a step rate (never full): the
    // cost of asking for the slot or the turn.
    for (workflow, what) in [
        (
            "one_step_slot",
            "a step limit (a slot taken and given back)",
        ),
        (
            "one_step_rated",
            "a step rate (a turn taken; the runs start together, so some attempts find the turn taken within the millisecond and wait for the next, kept for them)",
        ),
    ] {
        println!("{LIMITED} runs of one step under {what}:");
        let figures = measure(&engine, &aws, &counter, &tenant, workflow, LIMITED, 1).await;
        let free = &per_run[0];
        println!(
            "  {what} costs per step: {:+.3} DynamoDB write requests, {:+.3} WCU, {:+.3} read requests: ${:+.2} per million steps",
            figures.ddb_writes - free.ddb_writes,
            figures.wcu_billed - free.wcu_billed,
            figures.ddb_reads - free.ddb_reads,
            figures.dollars_per_million() - free.dollars_per_million(),
        );
    }

    // G: starts gathered by a debounce (a batch of GATHERED), per start.
    println!(
        "{} starts of one step gathered by a debounce, {GATHERED} to a run (each start but the first joins; the last releases it):",
        LIMITED * GATHERED
    );
    let gathered = measure(
        &engine,
        &aws,
        &counter,
        &tenant,
        "one_step_debounced",
        LIMITED * GATHERED,
        GATHERED,
    )
    .await;
    println!(
        "  per start: {:.3} DynamoDB write requests, {:.3} read requests, {:.3} SQS requests: ${:.2} per million starts",
        gathered.ddb_writes,
        gathered.ddb_reads,
        gathered.sqs_sends + gathered.sqs_other,
        gathered.dollars_per_million()
    );

    // H: a schedule's tick fired by the sweep, and a sweep with no tick due.
    schedule_tick(&env, &tenant).await;

    let (free, limited) = (&per_run[0], &per_run[1]);
    println!(
        "  a limited run (its slot taken at its start, freed and handed on at its finish) costs beside a run without one: {:+.3} DynamoDB write requests, {:+.3} WCU, {:+.3} read requests, {:+.3} RCU, {:+.3} SQS requests: ${:+.2} per million runs (${:.2} against ${:.2})",
        limited.ddb_writes - free.ddb_writes,
        limited.wcu_billed - free.wcu_billed,
        limited.ddb_reads - free.ddb_reads,
        limited.rcu - free.rcu,
        (limited.sqs_sends + limited.sqs_other) - (free.sqs_sends + free.sqs_other),
        limited.dollars_per_million() - free.dollars_per_million(),
        limited.dollars_per_million(),
        free.dollars_per_million()
    );

    println!("targets:");
    for (what, figures, target) in [("step", &a, 1.50), ("wait", &b, 5.00)] {
        let cost = figures.dollars_per_million();
        println!(
            "  cost per million {what}s <= ${target:.2}: ${cost:.2} {}",
            if cost <= target { "met" } else { "MISSED" }
        );
    }
    println!(
        "  DynamoDB write requests per step <= 1.5: {:.3} {}",
        a.ddb_writes,
        if a.ddb_writes <= 1.5 { "met" } else { "MISSED" }
    );
    println!(
        "  no S3 request for values under the threshold: {} {}",
        a.s3_puts + a.s3_gets,
        if a.s3_puts + a.s3_gets == 0.0 {
            "met"
        } else {
            "MISSED"
        }
    );
    let sends_per_run = a.sqs_sends * f64::from(STEPS);
    println!(
        "  no SQS message between back-to-back steps: {sends_per_run:.2} SendMessage per {STEPS}-step run {}",
        if sends_per_run <= 1.0 {
            "met (the start's wake-up only)"
        } else {
            "MISSED"
        }
    );

    // I: a bulk restart of runs that failed for good at their third operation.
    bulk_restart(&env).await;
}

/// Start `starts` runs of `workflow` (`per_key` of them per customer), work them, and
/// print and answer the figures per start.
async fn measure(
    engine: &Engine,
    aws: &siesta_aws::AwsBackend,
    counter: &RequestCounter,
    tenant: &TenantId,
    workflow: &str,
    starts: u32,
    per_key: u32,
) -> Figures {
    counter.reset();
    let before = aws.consumed_capacity();
    let written_before = aws.written_items();
    let mut runs = Vec::new();
    let mut customer = String::new();
    for i in 0..starts {
        if i % per_key == 0 {
            customer = uuid::Uuid::new_v4().simple().to_string();
        }
        let run = engine
            .start(tenant, workflow, json!({ "customer": customer }), None)
            .await
            .expect("start");
        runs.push(run.id);
    }
    engine.run_until_idle(1000).await.expect("work");
    runs.dedup();
    for id in &runs {
        let run = engine.get_run(tenant, id).await.expect("run");
        assert_eq!(run.status, RunStatus::Completed, "{id}: {:?}", run.error);
    }
    let after = aws.consumed_capacity();
    let capacity = siesta_aws::ConsumedCapacity {
        write_units: after.write_units - before.write_units,
        read_units: after.read_units - before.read_units,
    };
    let mut figures = Figures::per(counter, capacity, f64::from(starts));
    (figures.wcu_billed, figures.bytes) = print_written(
        &written_before,
        &aws.written_items(),
        f64::from(starts),
        "start",
    );
    figures.print("start");
    println!("  requests: {:?}", counter.snapshot());
    figures
}

/// H: what a schedule costs the sweep: a sweep with no tick due, and one that fires a
/// tick (its run started, the tick recorded), on a clock moved by hand.
async fn schedule_tick(env: &support::Emulators, tenant: &TenantId) {
    let names = env.names(5).await;
    let (aws, counter) = env.counted_backend_with_names(names);
    let clock = Arc::new(ManualClock::default());
    clock.set(Timestamp(1_798_761_600_000)); // 2027-01-01T00:00:00Z, on a minute
    let mut reg = registry();
    reg.schedule(
        siesta::schedule::Schedule::new("bench-tick", "one_step", "* * * * *")
            .tenant(tenant.clone()),
    )
    .expect("the schedule");
    let engine = Engine::new(aws.backend(), clock.clone(), reg, EngineConfig::default());
    // The first sweep records the schedule; the next, within the minute, has nothing due.
    engine.fire_schedules().await;
    clock.advance(std::time::Duration::from_secs(10));
    counter.reset();
    let before = aws.consumed_capacity();
    engine.fire_schedules().await;
    let idle = Figures::per(&counter, capacity_since(&aws, before), 1.0);
    println!("A schedule with no tick due, looked at by one sweep:");
    idle.print("sweep");
    println!("  requests: {:?}", counter.snapshot());
    clock.advance(std::time::Duration::from_secs(50));
    counter.reset();
    let before = aws.consumed_capacity();
    let written_before = aws.written_items();
    let fired = engine.fire_schedules().await;
    assert_eq!(fired.started, 1, "one tick fired: {fired:?}");
    let mut tick = Figures::per(&counter, capacity_since(&aws, before), 1.0);
    println!(
        "A schedule's tick fired by the sweep (its run started, the tick recorded; the run's own work not counted):"
    );
    (tick.wcu_billed, tick.bytes) =
        print_written(&written_before, &aws.written_items(), 1.0, "tick");
    tick.print("tick");
    println!("  requests: {:?}", counter.snapshot());
}

/// Runs a bulk restart restarts in section I.
const RESTARTED: usize = 50;

/// I: `RESTARTED` runs of a workflow fail for good at their third operation; the fix is
/// made; one bulk action restarts them at its highest rate. Per restarted run: the AWS
/// requests and list-price cost of the job, the restart and the run going on to
/// completion (its failed step run again, its first two replayed); and the job's
/// throughput on the emulators (DynamoDB Local's, not DynamoDB's).
async fn bulk_restart(env: &support::Emulators) {
    use std::sync::atomic::{AtomicBool, Ordering};
    let names = env.names(5).await;
    let (aws, counter) = env.counted_backend_with_names(names);
    let fixed = Arc::new(AtomicBool::new(false));
    let mut reg = Registry::new();
    let fix = fixed.clone();
    reg.register("three", move |ctx: Context, _: serde_json::Value| {
        let fix = fix.clone();
        async move {
            ctx.step("fetch", |_| async { Ok(1u32) }).await?;
            ctx.step("search", |_| async { Ok(2u32) }).await?;
            ctx.step("notify", move |_| async move {
                if fix.load(Ordering::SeqCst) {
                    Ok(3u32)
                } else {
                    Err(StepError::from_http_status(400, "the receiver said 400"))
                }
            })
            .await
        }
    });
    let engine = Engine::new(
        aws.backend(),
        Arc::new(SystemClock),
        reg,
        EngineConfig::default(),
    );
    let tenant = TenantId(format!("bench-{}", uuid::Uuid::new_v4().simple()));
    let mut runs = Vec::new();
    for _ in 0..RESTARTED {
        let run = engine
            .start(&tenant, "three", json!(null), None)
            .await
            .expect("start");
        runs.push(run.id);
    }
    engine.run_until_idle(1000).await.expect("work");
    for id in &runs {
        let run = engine.get_run(&tenant, id).await.expect("run");
        assert_eq!(run.status, RunStatus::Failed, "{id}: {:?}", run.error);
    }
    fixed.store(true, Ordering::SeqCst);
    counter.reset();
    let before = aws.consumed_capacity();
    let written_before = aws.written_items();
    let started = std::time::Instant::now();
    let job = engine
        .start_action_job(
            &tenant,
            ActionRequest {
                action: BulkAction::Restart,
                filter: ActionFilter {
                    workflow: Some("three".into()),
                    status: Some(RunStatus::Failed),
                    ..ActionFilter::default()
                },
                restart: RestartOptions::default(),
                rate: Some(MAX_ACTION_RATE),
            },
            "bench",
        )
        .await
        .expect("the job");
    loop {
        engine.run_until_idle(1000).await.expect("work");
        let now = engine.action_job(&tenant, &job.id).await.expect("the job");
        if now.status != ActionJobStatus::Running {
            assert_eq!((now.done, now.failed), (RESTARTED as u64, 0), "{now:?}");
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    engine.run_until_idle(1000).await.expect("work");
    let elapsed = started.elapsed().as_secs_f64();
    for id in &runs {
        let run = engine.get_run(&tenant, id).await.expect("run");
        assert_eq!(run.status, RunStatus::Completed, "{id}: {:?}", run.error);
    }
    let n = RESTARTED as f64;
    let mut figures = Figures::per(&counter, capacity_since(&aws, before), n);
    println!(
        "A bulk restart of {RESTARTED} runs failed for good at their third operation, at the job's highest rate (the job, each restart, and each run going on to completion; {elapsed:.2} s, {:.0} runs/s on the emulators):",
        n / elapsed
    );
    (figures.wcu_billed, figures.bytes) =
        print_written(&written_before, &aws.written_items(), n, "restarted run");
    figures.print("restarted run");
    println!("  requests: {:?}", counter.snapshot());
}

/// The capacity consumed on `aws` since `before`.
fn capacity_since(
    aws: &siesta_aws::AwsBackend,
    before: siesta_aws::ConsumedCapacity,
) -> siesta_aws::ConsumedCapacity {
    let after = aws.consumed_capacity();
    siesta_aws::ConsumedCapacity {
        write_units: after.write_units - before.write_units,
        read_units: after.read_units - before.read_units,
    }
}
