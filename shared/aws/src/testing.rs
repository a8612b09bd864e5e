//! For tests against the emulators (or a real account): find them, create the shared
//! table and bucket once per process from the declared resources
//! ([`crate::bootstrap::Plan::declared`]), and a fresh queue pair
//! per backend. Without `AWS_ENDPOINT_URL_DYNAMODB` the tests skip, saying how to start
//! the emulators — unless `SIESTA_AWS_TESTS=required` (the test command sets it), in
//! which case they fail instead.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test tooling: a failed unwrap is a failed assertion"
)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use siesta::ports::{RunStore, WakeQueue};
use siesta::{
    CallbackId, EntryState, Payload, Run, RunId, RunStatus, TenantId, TimelineEvent, Timestamp,
    Wait, WaitKind,
};
use tokio::sync::OnceCell;

use crate::bootstrap::{NewResources, Plan};
use crate::{AwsBackend, AwsOptions, RequestCounter, RequestCounts, ResourceNames};

/// The emulators' SDK configuration and the shared table and bucket.
#[derive(Clone)]
pub struct Emulators {
    /// The SDK configuration the tests use.
    pub sdk: aws_config::SdkConfig,
    /// The shared table.
    pub table: String,
    /// The shared bucket.
    pub bucket: String,
}

static SHARED: OnceCell<(String, String)> = OnceCell::const_new();

/// Whether the test command requires the AWS tests to run.
pub fn required() -> bool {
    std::env::var("SIESTA_AWS_TESTS").as_deref() == Ok("required")
}

/// The emulators, or `None` (with instructions on stderr) when they are not configured
/// and the test command did not require them.
///
/// # Panics
/// When `SIESTA_AWS_TESTS=required` and they are not configured, or when the shared
/// resources cannot be created: a test run that needs them must fail, not skip.
pub async fn emulators() -> Option<Emulators> {
    if std::env::var_os("AWS_ENDPOINT_URL_DYNAMODB").is_none() {
        assert!(
            !required(),
            "SIESTA_AWS_TESTS=required but AWS_ENDPOINT_URL_DYNAMODB is not set: \
             start the emulators (scripts/emulators start) and export scripts/emulators env"
        );
        eprintln!(
            "skipped: the AWS emulators are not running; start them with \
             `scripts/emulators start && eval \"$(scripts/emulators env)\"` \
             (./scripts/test does this itself)"
        );
        return None;
    }
    let sdk = crate::sdk_config_from_env().await;
    let (table, bucket) = SHARED
        .get_or_init(|| async {
            let names = NewResources::with_prefix(&format!("siesta-test-{}", short_id()));
            let plan = test_plan();
            // Clients made here belong to this test's runtime; only names are shared.
            let sdk = crate::sdk_config_from_env().await;
            plan.create_table(&aws_sdk_dynamodb::Client::new(&sdk), &names.table)
                .await
                .expect("create the test table");
            plan.create_bucket(&crate::s3_client(&sdk, &[]), &names.bucket, &sdk)
                .await
                .expect("create the test bucket");
            (names.table, names.bucket)
        })
        .await
        .clone();
    Some(Emulators { sdk, table, bucket })
}

/// The declared plan, but the tables it makes can be deleted (tests that make their
/// own table give it back to the in-memory DynamoDB Local when done).
pub fn test_plan() -> Plan {
    let mut plan = Plan::declared();
    plan.table.deletion_protection = false;
    plan
}

fn short_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..12].to_owned()
}

impl Emulators {
    /// A backend on the shared table and bucket with a fresh queue pair whose receive
    /// limit is `max_receives`.
    pub async fn backend(&self, max_receives: u32) -> AwsBackend {
        self.backend_with(max_receives, AwsOptions::default()).await
    }

    /// Like [`Emulators::backend`], with `options`.
    pub async fn backend_with(&self, max_receives: u32, options: AwsOptions) -> AwsBackend {
        let names = self.names(max_receives).await;
        AwsBackend::with_options(&self.sdk, names, options)
    }

    /// Like [`Emulators::backend`], its requests counted by a new [`RequestCounter`].
    pub async fn counted_backend(&self, max_receives: u32) -> (AwsBackend, RequestCounter) {
        let names = self.names(max_receives).await;
        self.counted_backend_with_names(names)
    }

    /// A backend on `names` (from [`Emulators::names`]), its requests counted by a new
    /// [`RequestCounter`].
    pub fn counted_backend_with_names(&self, names: ResourceNames) -> (AwsBackend, RequestCounter) {
        let counter = RequestCounter::new();
        let aws = AwsBackend::with_options(
            &self.sdk,
            names,
            AwsOptions {
                interceptors: vec![counter.interceptor()],
                ..AwsOptions::default()
            },
        );
        (aws, counter)
    }

    /// Deletes the queue pair of `names`, for a test that leaves wake-ups in it unhandled
    /// (a failure is ignored: a queue left behind fails no test).
    pub async fn delete_queues(&self, names: &ResourceNames) {
        let sqs = aws_sdk_sqs::Client::new(&self.sdk);
        for url in [&names.queue_url, &names.dead_letter_queue_url] {
            let _ = sqs.delete_queue().queue_url(url).send().await;
        }
    }

    /// Like [`Emulators::backend_with`], with clients built from `sdk` (a faulty HTTP
    /// client, short timeouts).
    pub async fn backend_on(
        &self,
        sdk: &aws_config::SdkConfig,
        max_receives: u32,
        options: AwsOptions,
    ) -> AwsBackend {
        let names = self.names(max_receives).await;
        AwsBackend::with_options(sdk, names, options)
    }

    /// The same emulators with a table of its own, for a test that reads the global due
    /// index and must not see the runs of tests running beside it.
    pub async fn with_own_table(&self) -> Emulators {
        let table = format!("siesta-test-{}-runs", short_id());
        test_plan()
            .create_table(&aws_sdk_dynamodb::Client::new(&self.sdk), &table)
            .await
            .expect("create a test table");
        Emulators {
            table,
            ..self.clone()
        }
    }

    /// Run `test` on a table of its own ([`Emulators::with_own_table`]) and give the
    /// table back afterwards, passed or failed (DynamoDB Local keeps its tables in
    /// memory); a panic of `test` is raised again once the table is gone.
    pub async fn in_own_table<F, Fut>(&self, test: F)
    where
        F: FnOnce(Emulators) -> Fut,
        Fut: std::future::Future<Output = ()>,
    {
        use futures::FutureExt;
        let env = self.with_own_table().await;
        let outcome = std::panic::AssertUnwindSafe(test(env.clone()))
            .catch_unwind()
            .await;
        let _ = aws_sdk_dynamodb::Client::new(&env.sdk)
            .delete_table()
            .table_name(&env.table)
            .send()
            .await;
        if let Err(e) = outcome {
            std::panic::resume_unwind(e);
        }
    }

    /// The shared table and bucket with a fresh queue pair as declared.
    pub async fn names(&self, max_receives: u32) -> ResourceNames {
        let plan = test_plan();
        let name = format!("siesta-test-{}", short_id());
        let (queue_url, dead_letter_queue_url) = plan
            .create_queues(
                &aws_sdk_sqs::Client::new(&self.sdk),
                &name,
                &format!("{name}-dlq"),
                Some(max_receives),
            )
            .await
            .expect("create a test queue pair");
        ResourceNames {
            table: self.table.clone(),
            bucket: self.bucket.clone(),
            queue_url,
            dead_letter_queue_url,
        }
    }
}

/// Receives every wake-up of `queue` without acknowledging any, round after round (each
/// past the 1 s visibility timeout it receives with), until SQS has moved them all to
/// the dead-letter queue: two rounds in a row find nothing, after enough rounds for
/// every one to have been received `max_receives` times (at most 30 rounds). LocalStack
/// sometimes hides a message with a group id for a round longer than its visibility
/// timeout. The wait between rounds is SQS's own clock, not one a test can move.
pub async fn fail_all_until_dead_lettered(queue: &Arc<dyn WakeQueue>, max_receives: u32) {
    let (mut rounds, mut empty_rounds) = (0, 0);
    while rounds < 30 && empty_rounds < 2 {
        let mut got = 0;
        loop {
            let page = queue.receive(10, Duration::from_secs(1)).await.unwrap();
            if page.is_empty() {
                break;
            }
            got += page.len();
        }
        rounds += 1;
        if got == 0 && rounds > max_receives {
            empty_rounds += 1;
        } else {
            empty_rounds = 0;
        }
        tokio::time::sleep(Duration::from_millis(1300)).await;
    }
}

/// Writes in flight at once while [`seed_waiting_runs`] writes its backlog.
const SEED_IN_FLIGHT: usize = 64;

/// Writes each of `ids` as a run of `workflow` started at `now` would stand waiting on
/// one deadline, `deadline`, with nothing on its way: one `create_run` each, instead of
/// starting it and driving it to its wait through the engine (six requests a run, the
/// slow part on DynamoDB Local). Past SQS's 15-minute delay, only the sweep wakes them.
/// Says on stderr how far it got every 10 000 runs.
///
/// # Panics
/// When a write fails: the backlog is the test's set-up.
pub async fn seed_waiting_runs(
    store: &dyn RunStore,
    tenant: &TenantId,
    ids: &[RunId],
    workflow: &str,
    now: Timestamp,
    deadline: Timestamp,
) {
    let started = Instant::now();
    let seeded = AtomicUsize::new(0);
    futures::stream::iter(ids)
        .for_each_concurrent(SEED_IN_FLIGHT, |id| {
            let seeded = &seeded;
            async move {
                let mut run = Run::new(
                    tenant.clone(),
                    id.clone(),
                    workflow,
                    Payload::Inline(serde_json::Value::Null),
                    now,
                );
                run.status = RunStatus::Waiting;
                run.due_at = Some(deadline);
                run.timeline_seq = 1;
                let event = TimelineEvent::execution_started(
                    now,
                    workflow,
                    serde_json::json!({"Workflow": workflow}),
                );
                store.create_run(&run, &event).await.expect("seed");
                let n = seeded.fetch_add(1, Ordering::Relaxed) + 1;
                if n.is_multiple_of(10_000) {
                    eprintln!(
                        "{n} runs waiting after {:.0} s",
                        started.elapsed().as_secs_f64()
                    );
                }
            }
        })
        .await;
}

/// `counts` divided by `units` (runs, fired deadlines, ...), by service and operation,
/// each to `decimals` places: "dynamodb Query 0.040, sqs SendMessage 1.000".
pub fn requests_per(counts: &RequestCounts, units: usize, decimals: usize) -> String {
    counts
        .iter()
        .map(|((service, op), n)| format!("{service} {op} {:.decimals$}", *n as f64 / units as f64))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The callback `run` waits on: the first journal entry waiting on a callback, if any.
///
/// # Panics
/// When the run's history cannot be read.
pub async fn waiting_callback(
    store: &dyn RunStore,
    tenant: &TenantId,
    run: &RunId,
) -> Option<CallbackId> {
    let history = store.load_replay_input(tenant, run).await.expect("history");
    history.journal.iter().find_map(|e| match &e.state {
        EntryState::Waiting(Wait {
            kind: WaitKind::Callback { callback_id, .. },
            ..
        }) => Some(callback_id.clone()),
        _ => None,
    })
}
