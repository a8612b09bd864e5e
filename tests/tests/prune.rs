//! `builds prune` on AWS, against the emulators and a stub of Lambda's version API
//! (`ListVersionsByFunction`, `GetAlias`, `DeleteFunction` on `AWS_ENDPOINT_URL_LAMBDA`):
//! a step version whose build has an unfinished run is kept, one whose build has none is
//! deleted with its build registry item, the alias's version and newer ones are kept,
//! the other functions' versions older than the alias go; `--dry-run` deletes nothing.
//! And the sweep's drain check, which counts the unfinished runs of builds no longer
//! deployed.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_lambda_events::event::sqs::SqsEvent;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde_json::{Value, json};
use siesta::{Context, Engine, Registry, RunId, RunStatus, TenantId};
use siesta_aws::builds::BuildRegistry;
use siesta_aws::prune::{AppFunctions, Done, Pruner, plan};
use siesta_lambda::Settings;

const BUILD_OLD: &str = "shop@0.9.0+cccc";
const BUILD_A: &str = "shop@1.0.0+aaaa";
const BUILD_B: &str = "shop@1.0.1+bbbb";

fn registry() -> Registry {
    let mut reg = Registry::new();
    reg.register("approval", |ctx: Context, _: Value| async move {
        let approved: bool = ctx.wait_for_event("approval").await?;
        Ok(approved)
    });
    reg.register("quick", |_ctx: Context, _: Value| async move { Ok(1u32) });
    reg
}

/// Per function: its published versions and the version its alias `live` points at.
type Functions = BTreeMap<String, (BTreeSet<u64>, u64)>;

/// Lambda's version API over [`Functions`].
#[derive(Clone, Default)]
struct StubLambda {
    functions: Arc<Mutex<Functions>>,
}

impl StubLambda {
    fn versions(&self, function: &str) -> Vec<u64> {
        self.functions.lock().unwrap()[function]
            .0
            .iter()
            .copied()
            .collect()
    }
}

fn not_found(what: &str) -> axum::response::Response {
    (
        StatusCode::NOT_FOUND,
        [("x-amzn-errortype", "ResourceNotFoundException")],
        axum::Json(json!({"Type": "User", "Message": format!("Function not found: {what}")})),
    )
        .into_response()
}

async fn list_versions(
    State(stub): State<StubLambda>,
    Path(name): Path<String>,
) -> axum::response::Response {
    let functions = stub.functions.lock().unwrap();
    let Some((versions, _)) = functions.get(&name) else {
        return not_found(&name);
    };
    let mut listed = vec![json!({"FunctionName": name, "Version": "$LATEST"})];
    listed.extend(
        versions
            .iter()
            .map(|v| json!({"FunctionName": name, "Version": v.to_string()})),
    );
    axum::Json(json!({"Versions": listed})).into_response()
}

async fn get_alias(
    State(stub): State<StubLambda>,
    Path((name, alias)): Path<(String, String)>,
) -> axum::response::Response {
    let functions = stub.functions.lock().unwrap();
    match functions.get(&name) {
        Some((_, target)) if alias == "live" => axum::Json(json!({
            "Name": alias,
            "FunctionVersion": target.to_string(),
            "AliasArn": format!("arn:aws:lambda:us-east-1:000000000000:function:{name}:{alias}"),
        }))
        .into_response(),
        _ => not_found(&format!("{name}:{alias}")),
    }
}

async fn delete_function(
    State(stub): State<StubLambda>,
    Path(name): Path<String>,
    Query(query): Query<BTreeMap<String, String>>,
) -> axum::response::Response {
    let mut functions = stub.functions.lock().unwrap();
    let Some((versions, target)) = functions.get_mut(&name) else {
        return not_found(&name);
    };
    let Some(version) = query.get("Qualifier").and_then(|q| q.parse::<u64>().ok()) else {
        panic!("the prune deletes versions, never a whole function: {query:?}");
    };
    assert_ne!(version, *target, "the alias's version is never deleted");
    if !versions.remove(&version) {
        return not_found(&format!("{name}:{version}"));
    }
    StatusCode::NO_CONTENT.into_response()
}

fn deadline() -> u64 {
    siesta_lambda::now_ms() as u64 + 60_000
}

/// Receive what is on the queue and hand it to `engine`'s step function, deleting what
/// it did not report failed, until `run` reaches `status`.
async fn step_until(
    sqs: &aws_sdk_sqs::Client,
    queue_url: &str,
    engine: &Engine,
    tenant: &TenantId,
    run: &RunId,
    status: RunStatus,
) {
    for _ in 0..40 {
        let out = sqs
            .receive_message()
            .queue_url(queue_url)
            .max_number_of_messages(10)
            .wait_time_seconds(1)
            .visibility_timeout(1)
            .send()
            .await
            .unwrap();
        let records: Vec<Value> = out
            .messages()
            .iter()
            .map(|m| {
                json!({
                    "messageId": m.message_id().unwrap(),
                    "receiptHandle": m.receipt_handle().unwrap(),
                    "body": m.body().unwrap(),
                    "attributes": {"ApproximateReceiveCount": "1"},
                    "messageAttributes": {},
                    "eventSource": "aws:sqs",
                })
            })
            .collect();
        let event: SqsEvent = serde_json::from_value(json!({ "Records": records })).unwrap();
        let response = siesta_step::handle(engine, event, deadline(), Duration::from_secs(2)).await;
        for m in out.messages() {
            let id = m.message_id().unwrap();
            if !response
                .batch_item_failures
                .iter()
                .any(|f| f.item_identifier == id)
            {
                sqs.delete_message()
                    .queue_url(queue_url)
                    .receipt_handle(m.receipt_handle().unwrap())
                    .send()
                    .await
                    .unwrap();
            }
        }
        if engine.get_run(tenant, run).await.unwrap().status == status {
            return;
        }
    }
    panic!("run {run} never reached {status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prune_deletes_only_versions_no_unfinished_run_needs_and_their_registry_items() {
    let Some(env) = siesta_aws::testing::emulators().await else {
        return;
    };
    let env = env.with_own_table().await;
    let names = env.names(5).await;
    let settings = |build: &str| Settings {
        resources: names.clone(),
        tenant_claim: "tenant".into(),
        callback_base_url: "https://a1b2c3d4e5.execute-api.us-east-1.amazonaws.com".into(),
        lease_ttl: Duration::from_secs(30),
        safety_margin: Duration::from_secs(2),
        retention: siesta::RetentionPolicy::keep_for(Some(Duration::from_secs(86_400))),
        reap_page: 100,
        sweep_page: 100,
        webhook_sources: "[]".into(),
        webhook_sources_parameter: None,
        build_id: build.into(),
        quotas: siesta::Quotas::default(),
        quotas_parameter: None,
        limits: siesta::LimitOverrides::default(),
        disabled_schedules: Default::default(),
    };
    let sqs = aws_sdk_sqs::Client::new(&env.sdk);
    let tenant = TenantId::from("acme");
    let other = TenantId::from("globex");

    // The oldest build's one run finished; build A's run (of another tenant) waits for
    // its approval; B is the build the alias serves.
    let old = settings(BUILD_OLD).engine(&env.sdk, registry()).await;
    let done = old
        .start(&tenant, "quick", json!(null), None)
        .await
        .unwrap()
        .id;
    step_until(
        &sqs,
        &names.queue_url,
        &old,
        &tenant,
        &done,
        RunStatus::Completed,
    )
    .await;
    let a = settings(BUILD_A).engine(&env.sdk, registry()).await;
    let waiting = a
        .start(&other, "approval", json!(null), None)
        .await
        .unwrap()
        .id;
    step_until(
        &sqs,
        &names.queue_url,
        &a,
        &other,
        &waiting,
        RunStatus::Waiting,
    )
    .await;

    let builds = BuildRegistry::from_sdk(&env.sdk, names.table.clone());
    builds.register(BUILD_OLD, "shop-step:1", 1).await.unwrap();
    builds
        .register(
            BUILD_A,
            "arn:aws:lambda:us-east-1:000000000000:function:shop-step:2",
            2,
        )
        .await
        .unwrap();
    builds.register(BUILD_B, "shop-step:3", 3).await.unwrap();
    // Registered once, its version since deleted by hand.
    builds
        .register("shop@0.1.0+gone", "shop-step:0", 0)
        .await
        .unwrap();

    let stub = StubLambda::default();
    {
        let mut functions = stub.functions.lock().unwrap();
        // Step 4 is being deployed: published, the alias not moved yet.
        functions.insert("shop-step".into(), ([1, 2, 3, 4].into(), 3));
        for f in ["shop-start", "shop-webhook", "shop-sweep"] {
            functions.insert(f.into(), ([1, 2, 3].into(), 3));
        }
    }
    let app = axum::Router::new()
        .route(
            "/2015-03-31/functions/{name}/versions",
            axum::routing::get(list_versions),
        )
        .route(
            "/2015-03-31/functions/{name}/aliases/{alias}",
            axum::routing::get(get_alias),
        )
        .route(
            "/2015-03-31/functions/{name}",
            axum::routing::delete(delete_function),
        )
        .with_state(stub.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    // What AWS_ENDPOINT_URL_LAMBDA does, for the Lambda client only.
    let lambda_sdk = env
        .sdk
        .to_builder()
        .endpoint_url(format!("http://{addr}"))
        .build();
    let pruner = Pruner::from_parts(
        &lambda_sdk,
        BuildRegistry::from_sdk(&env.sdk, names.table.clone()),
    );
    let functions = AppFunctions::of_stack("shop");

    let inventory = pruner.inventory(&functions).await.unwrap();
    assert_eq!(inventory.unfinished.get(BUILD_A), Some(&1), "{inventory:?}");
    assert_eq!(
        inventory.unfinished.get(BUILD_OLD),
        None,
        "its run finished"
    );
    let planned = plan(&inventory);

    // A dry run says what would go and deletes nothing.
    let (dry, _) = pruner.apply(&planned, &inventory, true).await;
    assert!(dry.iter().any(|(_, d)| *d == Done::WouldDelete));
    assert_eq!(stub.versions("shop-step"), [1, 2, 3, 4]);
    assert_eq!(builds.all().await.unwrap().len(), 4);

    let (done, stale) = pruner.apply(&planned, &inventory, false).await;
    let report = report_of(&done);
    assert!(
        done.iter()
            .all(|(_, d)| *d != Done::WouldDelete && !matches!(d, Done::Failed(_))),
        "{report}"
    );
    assert_eq!(
        stub.versions("shop-step"),
        [2, 3, 4],
        "A's run is unfinished, 3 is the alias's, 4 is newer: {report}"
    );
    for f in ["shop-start", "shop-webhook", "shop-sweep"] {
        assert_eq!(stub.versions(f), [3], "{f}: {report}");
    }
    let kept_a = done
        .iter()
        .find(|(d, _)| d.function == "shop-step" && d.version == 2)
        .unwrap();
    assert_eq!(kept_a.1, Done::Kept);
    assert_eq!(kept_a.0.build.as_deref(), Some(BUILD_A));
    assert!(kept_a.0.reason.contains("1 unfinished run"), "{report}");
    assert_eq!(stale.len(), 1);
    assert_eq!(stale[0].0.build_id, "shop@0.1.0+gone");
    assert_eq!(stale[0].1, Done::Deleted);

    let left: Vec<String> = builds
        .all()
        .await
        .unwrap()
        .into_iter()
        .map(|b| b.build_id)
        .collect();
    assert_eq!(
        left,
        [BUILD_A, BUILD_B],
        "the deleted version's build and the stale item are unregistered"
    );
    let deployed = builds
        .deployed(&[BUILD_OLD.into(), BUILD_A.into()])
        .await
        .unwrap();
    assert!(!deployed[BUILD_OLD] && deployed[BUILD_A]);

    // Once A's run finishes, a second prune takes A's version too.
    a.deliver_event(&other, &waiting, "approval", json!(true), None)
        .await
        .unwrap();
    step_until(
        &sqs,
        &names.queue_url,
        &a,
        &other,
        &waiting,
        RunStatus::Completed,
    )
    .await;
    let inventory = pruner.inventory(&functions).await.unwrap();
    let (done, _) = pruner.apply(&plan(&inventory), &inventory, false).await;
    assert_eq!(stub.versions("shop-step"), [3, 4], "{}", report_of(&done));
}

fn report_of(done: &[(siesta_aws::prune::Decision, Done)]) -> String {
    done.iter()
        .map(|(d, o)| format!("{}:{} {o:?} {}\n", d.function, d.version, d.reason))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_drain_check_counts_unfinished_runs_of_builds_no_version_serves() {
    let Some(env) = siesta_aws::testing::emulators().await else {
        return;
    };
    let env = env.with_own_table().await;
    let names = env.names(5).await;
    let settings = |build: &str| Settings {
        resources: names.clone(),
        tenant_claim: "tenant".into(),
        callback_base_url: "https://a1b2c3d4e5.execute-api.us-east-1.amazonaws.com".into(),
        lease_ttl: Duration::from_secs(30),
        safety_margin: Duration::from_secs(2),
        retention: siesta::RetentionPolicy::keep_for(Some(Duration::from_secs(86_400))),
        reap_page: 100,
        sweep_page: 100,
        webhook_sources: "[]".into(),
        webhook_sources_parameter: None,
        build_id: build.into(),
        quotas: siesta::Quotas::default(),
        quotas_parameter: None,
        limits: siesta::LimitOverrides::default(),
        disabled_schedules: Default::default(),
    };
    let sqs = aws_sdk_sqs::Client::new(&env.sdk);
    let a = settings(BUILD_A).engine(&env.sdk, registry()).await;
    let b = settings(BUILD_B).engine(&env.sdk, registry()).await;
    let mut waiting = Vec::new();
    for tenant in [TenantId::from("acme"), TenantId::from("globex")] {
        let run = a
            .start(&tenant, "approval", json!(null), None)
            .await
            .unwrap()
            .id;
        step_until(
            &sqs,
            &names.queue_url,
            &a,
            &tenant,
            &run,
            RunStatus::Waiting,
        )
        .await;
        waiting.push(run);
    }
    let tenant = TenantId::from("acme");
    let own = b
        .start(&tenant, "approval", json!(null), None)
        .await
        .unwrap()
        .id;
    step_until(
        &sqs,
        &names.queue_url,
        &b,
        &tenant,
        &own,
        RunStatus::Waiting,
    )
    .await;
    let builds = BuildRegistry::from_sdk(&env.sdk, names.table.clone());

    // B serves (its step version need not have registered yet); A is registered by none.
    let counts = siesta_sweep::check_builds(&builds, BUILD_B).await.unwrap();
    assert_eq!(counts["runs_on_undeployed_builds"], 2, "{counts}");
    assert_eq!(counts["undeployed"], json!({BUILD_A: 2}), "{counts}");
    assert_eq!(
        counts["unfinished_by_build"],
        json!({BUILD_A: 2, BUILD_B: 1}),
        "every tenant's runs: {counts}"
    );

    // A's version registers (its code deployed again): nothing is undeployed.
    builds.register(BUILD_A, "shop-step:7", 7).await.unwrap();
    let counts = siesta_sweep::check_builds(&builds, BUILD_B).await.unwrap();
    assert_eq!(counts["runs_on_undeployed_builds"], 0, "{counts}");
    assert_eq!(counts["undeployed"], json!({}), "{counts}");
}
