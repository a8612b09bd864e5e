//! Retention on DynamoDB and S3 (the emulators): the reaper removes a finished run past
//! its retention with every item and object that was its own, never a run that is not
//! finished, honours each workflow's and each tenant's retention, and a reaper killed
//! half-way resumes without losing its place or touching a live run.
//!
//! DynamoDB Local does not delete expired items, so what the reaper leaves is checked
//! item by item: each test has a table of its own, which it may scan — whatever is left
//! is a live run's, a tenant's (its count of unfinished runs, its build records), or
//! carries an `expires_at` no later than the retention's end.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::context::BeforeTransmitInterceptorContextRef;
use aws_smithy_runtime_api::client::interceptors::{Intercept, SharedInterceptor};
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::config_bag::ConfigBag;
use serde_json::json;
use siesta::*;
use siesta_aws::retention::{CLAIM, FOREVER_RECHECK, RetentionRules};
use siesta_aws::{AwsBackend, AwsOptions};

const T0: Timestamp = Timestamp(1_800_000_000_000);
const HOUR: Duration = Duration::from_secs(3600);
const DAY: Duration = Duration::from_secs(86_400);

type Item = std::collections::HashMap<String, AttributeValue>;

fn at(after: Duration) -> Timestamp {
    Timestamp(T0.0 + after.as_millis() as i64)
}

fn registry() -> Registry {
    let mut reg = Registry::new();
    // Everything a run can own: a value offloaded to S3, a stream, a tool-call record,
    // a callback record and the delivery that completed it.
    reg.register("order", |ctx: Context, _: serde_json::Value| async move {
        let big: String = ctx
            .step("big", |_| async move { Ok("x".repeat(40_000)) })
            .await?;
        ctx.stream("progress").publish(&"looking it up").await?;
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
    // Waits for an event that never comes, after offloading a value of its own.
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
    reg.register("quick", |ctx: Context, _: serde_json::Value| async move {
        ctx.step("one", |_| async move { Ok(1u32) }).await
    });
    reg.register("ping", |ctx: Context, _: serde_json::Value| async move {
        ctx.step("pong", |_| async move { Ok(2u32) }).await
    });
    // Many items in its partition: a stream of 60 chunks.
    reg.register("chatty", |ctx: Context, _: serde_json::Value| async move {
        let stream = ctx.stream("tokens");
        for i in 0..60u32 {
            stream.publish(&i).await?;
        }
        Ok(60u32)
    });
    // Starts a child, then waits for ever.
    reg.register("parent", |ctx: Context, _: serde_json::Value| async move {
        let n: u32 = ctx.invoke("child", "quick", json!(null)).await?;
        let v: serde_json::Value = ctx.wait_for_event("never").await?;
        Ok(json!({"n": n, "v": v}))
    });
    reg
}

fn tenant(what: &str) -> TenantId {
    TenantId(format!("{what}-{}", uuid::Uuid::new_v4().simple()))
}

fn rules(policy: RetentionPolicy) -> RetentionRules {
    RetentionRules::new(policy)
}

/// A backend on `env`'s table whose finished runs enter the reap index `shortest` after
/// they finish, with `interceptors`.
async fn backend(
    env: &support::Emulators,
    shortest: Duration,
    interceptors: Vec<SharedInterceptor>,
) -> AwsBackend {
    env.backend_with(
        5,
        AwsOptions {
            retention: shortest,
            interceptors,
        },
    )
    .await
}

fn engine(aws: &AwsBackend, clock: &Arc<ManualClock>) -> Engine {
    Engine::new(
        aws.backend(),
        clock.clone(),
        registry(),
        EngineConfig::default(),
    )
}

fn pk_of(tenant: &TenantId, run: &RunId) -> String {
    siesta_aws::keys::run_pk(tenant, run)
}

/// Every item of the partition `pk`.
async fn partition(env: &support::Emulators, pk: &str) -> Vec<Item> {
    let client = aws_sdk_dynamodb::Client::new(&env.sdk);
    let mut items = Vec::new();
    let mut start = None;
    loop {
        let out = client
            .query()
            .table_name(&env.table)
            .key_condition_expression("pk = :pk")
            .expression_attribute_values(":pk", AttributeValue::S(pk.to_owned()))
            .consistent_read(true)
            .set_exclusive_start_key(start.take())
            .send()
            .await
            .unwrap();
        items.extend(out.items.unwrap_or_default());
        start = out.last_evaluated_key.filter(|k| !k.is_empty());
        if start.is_none() {
            return items;
        }
    }
}

/// Every item of the test's own table.
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
            .unwrap();
        items.extend(out.items.unwrap_or_default());
        start = out.last_evaluated_key.filter(|k| !k.is_empty());
        if start.is_none() {
            return items;
        }
    }
}

fn string(item: &Item, name: &str) -> String {
    match item.get(name) {
        Some(AttributeValue::S(s)) => s.clone(),
        other => panic!("{name}: {other:?}"),
    }
}

fn seconds(item: &Item, name: &str) -> Option<i64> {
    match item.get(name) {
        Some(AttributeValue::N(n)) => Some(n.parse().unwrap()),
        _ => None,
    }
}

/// The objects under the run's prefix.
async fn objects(env: &support::Emulators, tenant: &TenantId, run: &RunId) -> Vec<String> {
    let prefix = siesta::ports::artifact_location(tenant, run, "");
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
        .unwrap();
    out.contents()
        .iter()
        .filter_map(|o| o.key().map(str::to_owned))
        .collect()
}

/// What is left in the table that is neither in `live` partitions nor a tenant's own
/// (`Q#`, `B#`) nor expiring by `by` (seconds since the epoch).
fn left_without_expiry(all: &[Item], live: &BTreeSet<String>, by: i64) -> Vec<(String, String)> {
    all.iter()
        .filter(|i| {
            let pk = string(i, "pk");
            !live.contains(&pk)
                && !pk.starts_with("Q#")
                && !pk.starts_with("B#")
                && seconds(i, "expires_at").is_none_or(|e| e > by)
        })
        .map(|i| (string(i, "pk"), string(i, "sk")))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_run_past_its_retention_leaves_nothing_and_a_waiting_run_of_its_age_is_untouched()
 {
    let Some(env) = support::emulators().await else {
        return;
    };
    env.in_own_table(|env| async move {
        let clock = Arc::new(ManualClock::new(T0));
        let aws = backend(&env, 30 * DAY, Vec::new()).await;
        let engine = engine(&aws, &clock);
        let tenant = tenant("retention");
        // An input too large for the run's first event to be held in its run item: the
        // event has a timeline item of its own, for the reaper to remove too.
        let input = json!(
            (0..30)
                .map(|_| uuid::Uuid::new_v4().to_string())
                .collect::<Vec<_>>()
        );
        let order = engine
            .start(&tenant, "order", input, Some(RunId("order-1".into())))
            .await
            .unwrap();
        let waiting = engine
            .start(&tenant, "wait_forever", json!(null), None)
            .await
            .unwrap();
        engine.run_until_idle(50).await.unwrap();
        let callback = support::waiting_callback(&*aws.backend().store, &tenant, &order.id)
            .await
            .expect("waiting on a callback");
        engine
            .complete_callback(
                &callback,
                None,
                Ok(json!("yes")),
                Some(DeliveryId("hook-1".into())),
            )
            .await
            .unwrap();
        engine.run_until_idle(50).await.unwrap();
        let done = engine.get_run(&tenant, &order.id).await.unwrap();
        assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
        assert_eq!(
            engine.get_run(&tenant, &waiting.id).await.unwrap().status,
            RunStatus::Waiting
        );
        let order_pk = pk_of(&tenant, &order.id);
        let waiting_pk = pk_of(&tenant, &waiting.id);
        let before = partition(&env, &order_pk).await;
        let kinds: BTreeSet<String> = before
            .iter()
            .map(|i| string(i, "sk").split('#').next().unwrap().to_owned())
            .collect();
        for kind in ["RUN", "H", "T", "S"] {
            assert!(kinds.contains(kind), "the run has {kind} items: {kinds:?}");
        }
        assert!(!objects(&env, &tenant, &order.id).await.is_empty());
        let waiting_items = partition(&env, &waiting_pk).await;
        let waiting_objects = objects(&env, &tenant, &waiting.id).await;
        assert!(!waiting_objects.is_empty());
        let callback_key = siesta_aws::keys::callback_pk(&callback);
        assert!(
            everything(&env)
                .await
                .iter()
                .any(|i| string(i, "pk") == callback_key)
        );

        let reaper = aws.reaper(rules(RetentionPolicy::default()));
        // A day before its retention passes: nothing is due.
        let report = reaper
            .reap(
                Timestamp(done.updated_at.0 + (29 * DAY).as_millis() as i64),
                100,
            )
            .await
            .unwrap();
        assert_eq!(report.looked_at, 0, "{report:?}");
        assert_eq!(partition(&env, &order_pk).await.len(), before.len());

        // Past it: the finished run goes, with everything that was its own.
        let past = Timestamp(done.updated_at.0 + (31 * DAY).as_millis() as i64);
        let report = reaper.reap(past, 100).await.unwrap();
        assert_eq!(
            report.removed,
            vec![(tenant.clone(), order.id.clone())],
            "{report:?}"
        );
        assert_eq!(report.items_deleted, before.len());
        assert_eq!(report.records_deleted, 1, "the callback record");
        assert!(report.objects_deleted >= 1);
        assert!(partition(&env, &order_pk).await.is_empty());
        assert!(objects(&env, &tenant, &order.id).await.is_empty());
        let by = past.0 / 1000;
        let left = left_without_expiry(
            &everything(&env).await,
            &BTreeSet::from([waiting_pk.clone()]),
            by,
        );
        assert!(left.is_empty(), "left behind without expiry: {left:?}");
        assert!(
            matches!(
                engine.get_run(&tenant, &order.id).await,
                Err(EngineError::NotFound)
            ),
            "the run answers 404"
        );

        // The waiting run, as old, is exactly as it was; the reaper never looks at it.
        assert_eq!(partition(&env, &waiting_pk).await, waiting_items);
        assert_eq!(objects(&env, &tenant, &waiting.id).await, waiting_objects);
        let report = reaper.reap(at(3650 * DAY), 100).await.unwrap();
        assert_eq!(report.looked_at, 0, "{report:?}");
        assert_eq!(partition(&env, &waiting_pk).await, waiting_items);

        // The run's id is free again: a start with it (an Idempotency-Key replayed after
        // the retention) is a new start.
        clock.set(past);
        let again = engine
            .start(&tenant, "order", json!(null), Some(order.id.clone()))
            .await
            .unwrap();
        assert_eq!(again.created_at, past);
        assert!(!again.status.is_finished());
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_workflow_and_each_tenant_keeps_its_finished_runs_for_its_own_retention() {
    let Some(env) = support::emulators().await else {
        return;
    };
    env.in_own_table(|env| async move {
        let (plain, acme, bank) = (tenant("plain"), tenant("acme"), tenant("bank"));
        let quota = |days| Quota {
            retention_days: Some(days),
            ..Quota::default()
        };
        let rules = RetentionRules {
            policy: RetentionPolicy::keep_for(Some(30 * DAY)).with_workflow("ping", Some(HOUR)),
            quotas: Quotas {
                default: Quota::default(),
                tenants: BTreeMap::from([
                    (acme.as_str().to_owned(), quota(2)),
                    (bank.as_str().to_owned(), quota(0)),
                ]),
            },
        };
        let clock = Arc::new(ManualClock::new(T0));
        let aws = backend(&env, rules.shortest(), Vec::new()).await;
        assert_eq!(rules.shortest(), HOUR);
        let engine = engine(&aws, &clock);
        let mut runs = BTreeMap::new();
        for (t, workflow) in [
            (&plain, "quick"),
            (&plain, "ping"),
            (&acme, "quick"),
            (&acme, "ping"),
            (&bank, "quick"),
        ] {
            let run = engine.start(t, workflow, json!(null), None).await.unwrap();
            runs.insert((t.as_str().to_owned(), workflow), run.id);
        }
        engine.run_until_idle(50).await.unwrap();
        for ((t, _), id) in &runs {
            let run = engine.get_run(&TenantId(t.clone()), id).await.unwrap();
            assert_eq!(run.status, RunStatus::Completed);
        }
        let exists = |t: &TenantId, w: &'static str| {
            let id = runs[&(t.as_str().to_owned(), w)].clone();
            let env = env.clone();
            let t = t.clone();
            async move { !partition(&env, &pk_of(&t, &id)).await.is_empty() }
        };
        let reaper = aws.reaper(rules.clone());

        // Two hours on: both pings go (the workflow's hour beats acme's two days); the
        // others are put back at their own retention's end, bank's run a year on.
        let report = reaper.reap(at(2 * HOUR), 100).await.unwrap();
        assert_eq!(report.removed.len(), 2, "{report:?}");
        assert_eq!(report.rescheduled, 2, "{report:?}");
        assert_eq!(report.kept_for_ever, 1, "{report:?}");
        assert!(!exists(&plain, "ping").await && !exists(&acme, "ping").await);
        assert!(exists(&plain, "quick").await && exists(&acme, "quick").await);

        // Three days on: acme's two days have passed, the deployment's thirty have not.
        let report = reaper.reap(at(3 * DAY), 100).await.unwrap();
        assert_eq!(report.removed.len(), 1, "{report:?}");
        assert_eq!(report.removed[0].0, acme);
        assert!(exists(&plain, "quick").await);

        // Thirty-one days on: the rest of the deployment's; bank keeps its run for ever,
        // looked at once a year and no more.
        let report = reaper.reap(at(31 * DAY), 100).await.unwrap();
        assert_eq!(report.removed.len(), 1, "{report:?}");
        assert_eq!(report.removed[0].0, plain);
        let report = reaper.reap(at(365 * DAY), 100).await.unwrap();
        assert_eq!(report.looked_at, 0, "{report:?}");
        let report = reaper.reap(at(366 * DAY), 100).await.unwrap();
        assert_eq!(
            (report.looked_at, report.kept_for_ever),
            (1, 1),
            "{report:?}"
        );
        assert!(exists(&bank, "quick").await);

        // Bank given a retention later: its run kept so far goes at its next look, within
        // a year, though the index was never re-armed.
        let mut shorter = rules.clone();
        shorter
            .quotas
            .tenants
            .insert(bank.as_str().to_owned(), quota(30));
        let report = aws
            .reaper(shorter)
            .reap(at(366 * DAY + FOREVER_RECHECK), 100)
            .await
            .unwrap();
        assert_eq!(
            report.removed,
            vec![(
                bank.clone(),
                runs[&(bank.as_str().to_owned(), "quick")].clone()
            )],
            "{report:?}"
        );
        assert!(!exists(&bank, "quick").await);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_child_run_is_kept_while_its_parent_exists() {
    let Some(env) = support::emulators().await else {
        return;
    };
    env.in_own_table(|env| async move {
        let clock = Arc::new(ManualClock::new(T0));
        let aws = backend(&env, 30 * DAY, Vec::new()).await;
        let engine = engine(&aws, &clock);
        let tenant = tenant("family");
        let parent = engine
            .start(&tenant, "parent", json!(null), None)
            .await
            .unwrap();
        engine.run_until_idle(50).await.unwrap();
        let parent_now = engine.get_run(&tenant, &parent.id).await.unwrap();
        assert_eq!(parent_now.status, RunStatus::Waiting);
        let listed = aws
            .backend()
            .store
            .list_runs(&tenant, &siesta::ports::RunFilter::default(), None, 10)
            .await
            .unwrap();
        let child = listed
            .runs
            .iter()
            .find(|r| r.id != parent.id)
            .expect("the child run");
        assert_eq!(child.status, RunStatus::Completed);
        let reaper = aws.reaper(rules(RetentionPolicy::default()));
        let report = reaper.reap(at(31 * DAY), 100).await.unwrap();
        assert_eq!(report.waiting_for_parent, 1, "{report:?}");
        assert!(report.removed.is_empty());
        assert!(!partition(&env, &pk_of(&tenant, &child.id)).await.is_empty());
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_child_of_a_parent_kept_a_year_is_not_looked_at_daily_and_goes_after_it() {
    let Some(env) = support::emulators().await else {
        return;
    };
    env.in_own_table(|env| async move {
        let rules = rules(
            RetentionPolicy::keep_for(Some(30 * DAY)).with_workflow("parent", Some(365 * DAY)),
        );
        let clock = Arc::new(ManualClock::new(T0));
        let aws = backend(&env, rules.shortest(), Vec::new()).await;
        let engine = engine(&aws, &clock);
        let tenant = tenant("kept");
        let parent = engine
            .start(&tenant, "parent", json!(null), None)
            .await
            .unwrap();
        engine.run_until_idle(50).await.unwrap();
        engine
            .deliver_event(&tenant, &parent.id, "never", json!(1), None)
            .await
            .unwrap();
        engine.run_until_idle(50).await.unwrap();
        let parent = engine.get_run(&tenant, &parent.id).await.unwrap();
        assert_eq!(parent.status, RunStatus::Completed);
        let child = context::child_run_id(&parent, &Position::from("child#0"));
        let reaper = aws.reaper(rules);

        // Both first looked at after the shortest retention; the child, found with its
        // parent still there, is put back (once more if it was looked at before the
        // parent was put back at its year's end).
        reaper.reap(at(31 * DAY), 100).await.unwrap();
        reaper.reap(at(33 * DAY), 100).await.unwrap();
        let report = reaper.reap(at(200 * DAY), 100).await.unwrap();
        assert_eq!(
            report.looked_at, 0,
            "looked at before its parent is due: {report:?}"
        );

        // A year on the parent goes, and the child after it.
        let mut removed = Vec::new();
        for day in [366, 368] {
            removed.extend(reaper.reap(at(day * DAY), 100).await.unwrap().removed);
        }
        assert_eq!(removed.len(), 2, "{removed:?}");
        assert!(partition(&env, &pk_of(&tenant, &child)).await.is_empty());
        assert!(
            partition(&env, &pk_of(&tenant, &parent.id))
                .await
                .is_empty()
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_child_goes_once_its_parent_went_though_a_new_run_took_the_parents_id() {
    let Some(env) = support::emulators().await else {
        return;
    };
    env.in_own_table(|env| async move {
        let clock = Arc::new(ManualClock::new(T0));
        let aws = backend(&env, 30 * DAY, Vec::new()).await;
        let engine = engine(&aws, &clock);
        let tenant = tenant("reused");
        let id = RunId::generate();
        let child_of = |parent: &Run| context::child_run_id(parent, &Position::from("child#0"));
        let first = engine
            .start(&tenant, "parent", json!(null), Some(id.clone()))
            .await
            .unwrap();
        engine.run_until_idle(50).await.unwrap();
        let first_child = child_of(&first);
        engine.cancel(&tenant, &id, None).await.unwrap();
        let reaper = aws.reaper(rules(RetentionPolicy::default()));
        let report = reaper.reap(at(31 * DAY), 100).await.unwrap();
        assert_eq!(
            report.removed,
            vec![(tenant.clone(), id.clone())],
            "{report:?}"
        );
        assert_eq!(report.waiting_for_parent, 1, "{report:?}");

        // The same id again (an `Idempotency-Key` replayed after the first run went).
        clock.set(at(31 * DAY));
        let second = engine
            .start(&tenant, "parent", json!(null), Some(id.clone()))
            .await
            .unwrap();
        engine.run_until_idle(50).await.unwrap();
        let second_child = child_of(&second);
        assert_ne!(second_child, first_child);
        assert_eq!(
            engine.get_run(&tenant, &second_child).await.unwrap().status,
            RunStatus::Completed
        );

        // The first child, looked at again a day later, is not the new run's: it goes.
        // The new run's child stays while its parent waits.
        let report = reaper.reap(at(62 * DAY), 100).await.unwrap();
        assert_eq!(
            report.removed,
            vec![(tenant.clone(), first_child.clone())],
            "{report:?}"
        );
        assert!(
            partition(&env, &pk_of(&tenant, &first_child))
                .await
                .is_empty()
        );
        assert!(
            !partition(&env, &pk_of(&tenant, &second_child))
                .await
                .is_empty()
        );
    })
    .await;
}

/// Fails every DynamoDB and S3 request once `allowed` `BatchWriteItem` requests have
/// gone: the process died there.
#[derive(Debug, Clone)]
struct KillAfter {
    allowed: usize,
    seen: Arc<AtomicUsize>,
}

impl Intercept for KillAfter {
    fn name(&self) -> &'static str {
        "kill-after"
    }

    fn read_before_transmit(
        &self,
        context: &BeforeTransmitInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        _: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let batch = context
            .request()
            .headers()
            .get("x-amz-target")
            .is_some_and(|t| t.ends_with(".BatchWriteItem"));
        let seen = if batch {
            self.seen.fetch_add(1, Ordering::SeqCst) + 1
        } else {
            self.seen.load(Ordering::SeqCst)
        };
        if seen > self.allowed {
            return Err("killed".into());
        }
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reaper_killed_mid_page_resumes_without_losing_its_place_or_touching_a_live_run() {
    let Some(env) = support::emulators().await else {
        return;
    };
    env.in_own_table(|env| async move {
        const RUNS: usize = 6;
        let clock = Arc::new(ManualClock::new(T0));
        let aws = backend(&env, 30 * DAY, Vec::new()).await;
        let engine = engine(&aws, &clock);
        let tenant = tenant("killed");
        let mut finished = Vec::new();
        for _ in 0..RUNS {
            finished.push(
                engine
                    .start(&tenant, "chatty", json!(null), None)
                    .await
                    .unwrap()
                    .id,
            );
        }
        let waiting = engine
            .start(&tenant, "wait_forever", json!(null), None)
            .await
            .unwrap();
        engine.run_until_idle(100).await.unwrap();
        for id in &finished {
            assert_eq!(
                engine.get_run(&tenant, id).await.unwrap().status,
                RunStatus::Completed
            );
        }
        let waiting_pk = pk_of(&tenant, &waiting.id);
        let waiting_items = partition(&env, &waiting_pk).await;
        let sizes: Vec<usize> = futures::future::join_all(
            finished
                .iter()
                .map(|id| async { partition(&env, &pk_of(&tenant, id)).await.len() }),
        )
        .await;
        assert!(sizes.iter().all(|n| *n > 60), "{sizes:?}");

        // Killed after its third batch of deletes, some runs half-removed.
        let now = at(31 * DAY);
        let killer = KillAfter {
            allowed: 3,
            seen: Arc::default(),
        };
        let doomed = backend(&env, 30 * DAY, vec![SharedInterceptor::new(killer)]).await;
        let err = doomed
            .reaper(rules(RetentionPolicy::default()))
            .reap(now, 100)
            .await;
        assert!(err.is_err(), "{err:?}");
        let mut half = 0;
        for (id, n) in finished.iter().zip(&sizes) {
            let left = partition(&env, &pk_of(&tenant, id)).await;
            if !left.is_empty() && left.len() < *n {
                half += 1;
                assert!(
                    left.iter().any(|i| string(i, "sk") == "RUN"),
                    "the run item goes last"
                );
            }
        }
        let lefts: Vec<usize> = futures::future::join_all(
            finished
                .iter()
                .map(|id| async { partition(&env, &pk_of(&tenant, id)).await.len() }),
        )
        .await;
        assert!(
            half >= 1,
            "the reaper died in the middle of a run: {sizes:?} → {lefts:?}, {err:?}"
        );

        // Another reaper at once leaves the claimed runs to their claim; once it has run
        // out, it finishes them.
        let reaper = aws.reaper(rules(RetentionPolicy::default()));
        let report = reaper.reap(now, 100).await.unwrap();
        assert!(report.removed.len() < RUNS, "{report:?}");
        let later = Timestamp(now.0 + CLAIM.as_millis() as i64 + 1000);
        let report = reaper.reap(later, 100).await.unwrap();
        assert!(!report.more, "{report:?}");
        for id in &finished {
            assert!(
                partition(&env, &pk_of(&tenant, id)).await.is_empty(),
                "{id} removed"
            );
        }
        let left = left_without_expiry(
            &everything(&env).await,
            &BTreeSet::from([waiting_pk.clone()]),
            later.0 / 1000,
        );
        assert!(left.is_empty(), "left behind without expiry: {left:?}");
        assert_eq!(partition(&env, &waiting_pk).await, waiting_items);
        assert_eq!(
            engine.get_run(&tenant, &waiting.id).await.unwrap().status,
            RunStatus::Waiting
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_cancelled_with_a_tool_call_of_unknown_outcome_leaves_no_tool_call_record() {
    let Some(env) = support::emulators().await else {
        return;
    };
    env.in_own_table(|env| async move {
        let clock = Arc::new(ManualClock::new(T0));
        let aws = backend(&env, 30 * DAY, Vec::new()).await;
        let started = Arc::new(tokio::sync::Notify::new());
        let mut reg = Registry::new();
        let calling = started.clone();
        reg.register("charge", move |ctx: Context, _: serde_json::Value| {
            let calling = calling.clone();
            async move {
                let v: serde_json::Value = ctx
                    .tool_call("charge", &json!({"amount": 5}), move |_| async move {
                        calling.notify_one();
                        // The process dies here, the call's outcome never known.
                        std::future::pending::<()>().await;
                        Ok(json!("charged"))
                    })
                    .await?;
                Ok(v)
            }
        });
        let engine = Engine::new(aws.backend(), clock.clone(), reg, EngineConfig::default());
        let tenant = tenant("unknown");
        let run = engine
            .start(&tenant, "charge", json!(null), None)
            .await
            .unwrap();
        tokio::select! {
            _ = engine.run_until_idle(10) => panic!("the call never returns"),
            _ = started.notified() => {}
        }
        // Past the dead holder's lease, the sweep wakes the run: the call is found
        // started, its outcome unknown, and the run parked; an operator cancels it.
        clock.advance(Duration::from_secs(120));
        engine.sweep(10).await.unwrap();
        engine.run_until_idle(10).await.unwrap();
        assert_eq!(
            engine.get_run(&tenant, &run.id).await.unwrap().status,
            RunStatus::Parked
        );
        engine.cancel(&tenant, &run.id, None).await.unwrap();
        engine.run_until_idle(10).await.unwrap();
        let cancelled = engine.get_run(&tenant, &run.id).await.unwrap();
        assert_eq!(cancelled.status, RunStatus::Cancelled);
        let records = |all: &[Item]| {
            all.iter()
                .filter(|i| string(i, "pk").starts_with("K#"))
                .count()
        };
        assert_eq!(records(&everything(&env).await), 1, "the call's record");

        let past = Timestamp(cancelled.updated_at.0 + (31 * DAY).as_millis() as i64);
        let report = aws
            .reaper(rules(RetentionPolicy::default()))
            .reap(past, 10)
            .await
            .unwrap();
        assert_eq!(report.removed.len(), 1, "{report:?}");
        let all = everything(&env).await;
        assert_eq!(records(&all), 0, "the reaper found it through the journal");
        let left = left_without_expiry(&all, &BTreeSet::new(), past.0 / 1000);
        assert!(left.is_empty(), "left behind without expiry: {left:?}");
    })
    .await;
}
