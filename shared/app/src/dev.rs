//! `dev`: the four handlers in one process on the embedded backend — an HTTP
//! server for the control API and webhooks, a queue worker standing in for the SQS
//! trigger, and a sweep ticker standing in for EventBridge.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use siesta::*;
use siesta_api::server::Limits;
use siesta_api::{ApiKeys, ControlApi, DEFAULT_MAX_BODY, WebhookReceiver, WebhookSource};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::background_runtime::BackgroundRuntime;
pub use crate::background_runtime::DEFAULT_WORKER_NICE;
use crate::metrics::Metrics;

/// How the dev server runs.
#[derive(Clone)]
pub struct DevOptions {
    /// Where the embedded backend keeps its file.
    pub data_dir: PathBuf,
    /// API keys and the tenant each maps to; empty: auth off, tenant `default`.
    pub api_keys: HashMap<String, TenantId>,
    /// How often the sweep runs.
    pub sweep_every: Duration,
    /// Largest webhook body accepted.
    pub max_webhook_body: usize,
    /// Configured webhook sources (`/hooks/sources/{source}`).
    pub sources: Vec<WebhookSource>,
    /// How long a lease lasts without renewal (how soon a crashed run is taken over).
    pub lease_ttl: Duration,
    /// The clock the engine and the backend read; `None`: the system clock. Tests pass
    /// a [`ManualClock`] to move past a deadline without waiting for it.
    pub clock: Option<Arc<dyn Clock>>,
    /// The backend to run on; `None`: the embedded one in `data_dir`. `siesta dev
    /// --backend aws` passes the AWS backend (DynamoDB, S3, SQS).
    pub backend: Option<siesta::ports::Backend>,
    /// Most wake-ups the worker handles at once.
    pub workers: usize,
    /// What an acknowledged write to the embedded backend survives (default: an OS
    /// crash, fsync before every acknowledgement).
    pub durability: siesta_embedded::Durability,
    /// The HTTP transport's timeouts and connection cap.
    pub limits: Limits,
    /// The build id every run started here records (the app sets it; default: the
    /// engine's, Siesta's own version).
    pub build_id: String,
    /// Per-tenant quotas (default: none).
    pub quotas: siesta::Quotas,
    /// This deployment's maxima of concurrency limits (default: as declared in code).
    pub concurrency_limits: siesta::LimitOverrides,
    /// Schedules this server does not fire, by name (default: none).
    pub disabled_schedules: std::collections::BTreeSet<String>,
    /// Journal entries of suspended runs the engine keeps in memory
    /// ([`EngineConfig::replay_cache_entries`]; 0 turns the cache off).
    pub replay_cache_entries: usize,
    /// Niceness of the threads the queue worker and the sweep run on (their own
    /// runtime, Linux); 0: they share the server's threads and priority.
    pub worker_nice: i32,
    /// Served at `GET /metrics` and fed by the sweep, the reaper and the webhook
    /// routes; the engine's spans reach it only through [`Metrics::layer`] in the
    /// process's subscriber (`siesta dev` puts it there).
    pub metrics: Metrics,
    /// The [`UpgradePolicy`] of workflows whose registration sets none. Default:
    /// [`UpgradePolicy::UpgradeWhenReplays`] — every edit is a new build, so at
    /// start-up the runs of other builds whose journal replays on this one move to it,
    /// and only the others wait for their build.
    pub upgrade_policy: UpgradePolicy,
    /// How long finished runs are kept before the reaper removes them, with
    /// everything they own (default: [`siesta::retention::DEFAULT_RETENTION`], 30
    /// days, for every workflow). A run that is not finished is never removed.
    pub retention: RetentionPolicy,
    /// How often the reaper looks for finished runs past their retention (default:
    /// every 30 s, so a run goes within a minute of its retention passing).
    pub reap_every: Duration,
    /// The AWS backend's reaper, when [`DevOptions::backend`] is the AWS backend
    /// (`siesta dev --backend aws`): it removes finished runs in the engine's place,
    /// which the AWS store leaves to it (it deletes S3 objects too). Made with the same
    /// [`DevOptions::retention`] and quotas.
    pub aws_reaper: Option<siesta_aws::retention::Reaper>,
}

impl std::fmt::Debug for DevOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DevOptions")
            .field("data_dir", &self.data_dir)
            .field("api_keys", &self.api_keys.len())
            .field("sweep_every", &self.sweep_every)
            .field("max_webhook_body", &self.max_webhook_body)
            .field("sources", &self.sources)
            .field("lease_ttl", &self.lease_ttl)
            .field("workers", &self.workers)
            .field("durability", &self.durability)
            .field(
                "clock",
                &self.clock.as_ref().map_or("system", |_| "injected"),
            )
            .field(
                "backend",
                &self.backend.as_ref().map_or("embedded", |_| "given"),
            )
            .field("concurrency_limits", &self.concurrency_limits)
            .field("disabled_schedules", &self.disabled_schedules)
            .field("quotas", &self.quotas)
            .field("limits", &self.limits)
            .field("replay_cache_entries", &self.replay_cache_entries)
            .field("worker_nice", &self.worker_nice)
            .field("metrics", &self.metrics)
            .field("upgrade_policy", &self.upgrade_policy)
            .field("retention", &self.retention)
            .field("reap_every", &self.reap_every)
            .field("aws_reaper", &self.aws_reaper.is_some())
            .finish_non_exhaustive()
    }
}

impl DevOptions {
    /// Defaults for `data_dir`: no API keys, a sweep every 5 s, 1 MiB webhooks, 60 s
    /// leases.
    pub fn new(data_dir: PathBuf) -> Self {
        DevOptions {
            data_dir,
            api_keys: HashMap::new(),
            sweep_every: Duration::from_secs(5),
            max_webhook_body: DEFAULT_MAX_BODY,
            lease_ttl: Duration::from_secs(60),
            sources: Vec::new(),
            clock: None,
            backend: None,
            workers: WorkerConfig::default().concurrency,
            durability: siesta_embedded::Durability::Full,
            limits: Limits::default(),
            build_id: EngineConfig::default().build_id,
            quotas: siesta::Quotas::default(),
            concurrency_limits: siesta::LimitOverrides::default(),
            disabled_schedules: std::collections::BTreeSet::new(),
            replay_cache_entries: EngineConfig::default().replay_cache_entries,
            worker_nice: DEFAULT_WORKER_NICE,
            metrics: Metrics::default(),
            upgrade_policy: UpgradePolicy::UpgradeWhenReplays,
            retention: RetentionPolicy::default(),
            reap_every: Duration::from_secs(30),
            aws_reaper: None,
        }
    }

    /// Run on the AWS backend over `names` and reap it (`siesta dev --backend aws
    /// --reap`), as the deployment's functions do (`Settings::aws_backend`): finished
    /// runs enter the reap index at the shortest retention of [`DevOptions::retention`]
    /// and the tenants' quotas (set those first; `aws.retention` is replaced), and the
    /// AWS backend's reaper removes them ([`DevOptions::aws_reaper`]).
    pub fn use_aws(
        &mut self,
        sdk: &aws_config::SdkConfig,
        names: siesta_aws::ResourceNames,
        aws: siesta_aws::AwsOptions,
    ) {
        let rules = RetentionRules {
            policy: self.retention.clone(),
            quotas: self.quotas.clone(),
        };
        let aws = siesta_aws::AwsOptions {
            retention: rules.shortest(),
            ..aws
        };
        let backend = siesta_aws::AwsBackend::with_options(sdk, names, aws);
        self.aws_reaper = Some(backend.reaper(rules));
        self.backend = Some(backend.backend());
    }

    /// Parse `key=tenant,key2=tenant2` (the `SIESTA_API_KEYS` format).
    pub fn parse_api_keys(spec: &str) -> anyhow::Result<HashMap<String, TenantId>> {
        spec.split(',')
            .filter(|s| !s.trim().is_empty())
            .map(|pair| {
                let (key, tenant) = pair
                    .split_once('=')
                    .with_context(|| format!("'{pair}' is not key=tenant"))?;
                anyhow::ensure!(
                    !key.trim().is_empty() && !tenant.trim().is_empty(),
                    "'{pair}' is not key=tenant"
                );
                Ok((key.trim().to_owned(), TenantId::from(tenant.trim())))
            })
            .collect()
    }
}

/// A running dev server.
pub struct DevServer {
    /// Where it listens.
    pub addr: SocketAddr,
    /// The engine it runs.
    pub engine: Engine,
    /// Whether its worker and sweep loops still run (what `/healthz` reports).
    pub liveness: Liveness,
    /// What it found at start-up of the runs other builds started, and did with them.
    pub other_builds: Vec<OtherBuildAtStart>,
    tasks: Vec<JoinHandle<()>>,
    /// The worker's and the sweep's own runtime, when they run at a lower priority;
    /// dropping it drops their tasks.
    background: Option<BackgroundRuntime>,
}

impl DevServer {
    /// Stop serving, working and sweeping.
    pub fn stop(self) {
        for t in self.tasks {
            t.abort();
        }
        drop(self.background);
    }
}

/// The worker's and the sweep's runtime at `nice`, or `None` (the server's own
/// runtime) when `nice` is 0 or the runtime cannot be built.
fn background_runtime(nice: i32) -> Option<BackgroundRuntime> {
    if nice == 0 {
        return None;
    }
    let threads = std::thread::available_parallelism().map_or(2, usize::from);
    match BackgroundRuntime::new(threads, nice) {
        Ok(runtime) => Some(runtime),
        Err(e) => {
            tracing::warn!(error = %e, "could not start the worker's own runtime; it shares the server's");
            None
        }
    }
}

/// The unfinished runs of one tenant on another build, as the dev server found them at
/// start-up, and what it did with each.
#[derive(Debug, Clone, PartialEq)]
pub struct OtherBuildAtStart {
    /// The tenant whose runs these are.
    pub tenant: TenantId,
    /// The build they started on.
    pub build_id: String,
    /// How many were unfinished, by status, before any moved.
    pub unfinished: std::collections::BTreeMap<RunStatus, u64>,
    /// Runs whose journal replays on this build and whose workflow upgrades when it
    /// replays: moved to this build, which serves them from now on.
    pub upgraded: Vec<RunId>,
    /// Runs whose journal replays on this build but whose workflow is pinned: they
    /// wait for their build (or an upgrade asked for by hand).
    pub pinned: Vec<RunId>,
    /// Runs whose journal does not replay on this build: they wait for their build.
    pub diverged: Vec<DivergedRun>,
    /// Runs left for another reason (busy, storage): they wait for their build.
    pub skipped: Vec<SkippedRun>,
}

/// The tenants the dev server serves: those its API keys map to, or `default`.
fn tenants(options: &DevOptions) -> Vec<TenantId> {
    let mut tenants: Vec<TenantId> = options.api_keys.values().cloned().collect();
    if tenants.is_empty() {
        tenants.push(TenantId::from("default"));
    }
    tenants.sort_by(|a, b| a.as_str().cmp(b.as_str()));
    tenants.dedup();
    tenants
}

/// For each tenant and each other build with unfinished runs: check every such run's
/// journal on this build's code; move the ones that replay cleanly when their
/// workflow's policy is [`UpgradePolicy::UpgradeWhenReplays`], leave the others to
/// their build. A backend that cannot list builds is skipped with a
/// warning: its runs wait for their build all the same.
pub async fn other_builds_at_start(
    engine: &Engine,
    tenants: &[TenantId],
) -> Vec<OtherBuildAtStart> {
    let serving = engine.config().build_id.clone();
    let mut found = Vec::new();
    for tenant in tenants {
        let builds = match engine.backend().store.builds(tenant).await {
            Ok(builds) => builds,
            Err(e) => {
                tracing::warn!(tenant = %tenant, error = %e, "could not list the builds of the runs in flight");
                continue;
            }
        };
        for build in builds {
            if build.build_id == serving || build.unfinished.is_empty() {
                continue;
            }
            let mut report = OtherBuildAtStart {
                tenant: tenant.clone(),
                build_id: build.build_id.clone(),
                unfinished: build.unfinished,
                upgraded: Vec::new(),
                pinned: Vec::new(),
                diverged: Vec::new(),
                skipped: Vec::new(),
            };
            let runs = match engine
                .unfinished_runs_of(tenant, Some(&build.build_id))
                .await
            {
                Ok(runs) => runs,
                Err(e) => {
                    tracing::warn!(tenant = %tenant, build = %build.build_id, error = %e, "could not list the runs of a build");
                    found.push(report);
                    continue;
                }
            };
            for run in runs {
                let id = run.id.clone();
                let outcome =
                    if engine.upgrade_policy(&run.workflow) == UpgradePolicy::UpgradeWhenReplays {
                        engine.upgrade(tenant, &id, None).await.map(|_| None)
                    } else {
                        engine
                            .check_replay(tenant, &id)
                            .await
                            .and_then(|check| match check {
                                ReplayCheck::Clean { .. } => Ok(Some(())),
                                ReplayCheck::Diverged(d) => Err(EngineError::Diverged(d)),
                            })
                    };
                match outcome {
                    Ok(None) => report.upgraded.push(id),
                    Ok(Some(())) => report.pinned.push(id),
                    Err(EngineError::Diverged(divergence)) => report.diverged.push(DivergedRun {
                        run_id: id,
                        divergence,
                    }),
                    // Finished meanwhile: nothing waits.
                    Err(EngineError::AlreadyFinished(_) | EngineError::NotFound) => {}
                    Err(e) => report.skipped.push(SkippedRun {
                        run_id: id,
                        reason: e.to_string(),
                    }),
                }
            }
            found.push(report);
        }
    }
    found
}

/// Start the dev server on `listener` with `registry`'s workflows.
pub async fn start(
    listener: TcpListener,
    options: DevOptions,
    registry: Registry,
) -> anyhow::Result<DevServer> {
    let addr = listener.local_addr()?;
    let clock: Arc<dyn Clock> = options
        .clock
        .clone()
        .unwrap_or_else(|| Arc::new(SystemClock));
    // The embedded backend this server opened, whose queue `/metrics` reports.
    let mut embedded = None;
    let backend = match options.backend.clone() {
        Some(backend) => backend,
        None => {
            let opened = siesta_embedded::EmbeddedBackend::open_with_options(
                options.data_dir.join("siesta.db"),
                clock.clone(),
                siesta_embedded::EmbeddedOptions {
                    durability: options.durability,
                    ..siesta_embedded::EmbeddedOptions::default()
                },
            )
            .with_context(|| {
                format!(
                    "opening the embedded backend in {}",
                    options.data_dir.display()
                )
            })?;
            let backend = opened.backend();
            embedded = Some(opened);
            backend
        }
    };
    let config = EngineConfig {
        callback_base_url: format!("http://{addr}"),
        lease_ttl: options.lease_ttl,
        build_id: options.build_id.clone(),
        quotas: options.quotas.clone(),
        limits: options.concurrency_limits.clone(),
        disabled_schedules: options.disabled_schedules.clone(),
        replay_cache_entries: options.replay_cache_entries,
        upgrade_policy: options.upgrade_policy,
        // This process serves its own build only: other builds' runs wait for theirs.
        sweep_other_builds: OtherBuilds::Leave,
        ..EngineConfig::default()
    };
    let engine = Engine::new(backend, clock, registry, config);
    // Before the worker starts, so that the runs moved here are served at once.
    let other_builds = other_builds_at_start(&engine, &tenants(&options)).await;
    let liveness = Liveness::new();
    let hooks =
        WebhookReceiver::new(options.max_webhook_body).with_sources(options.sources.clone());
    // Control-API bodies (a run's input) may be larger than a webhook's.
    let router = ControlApi::new(engine.clone())
        .authenticate(ApiKeys::new(options.api_keys.clone()))
        .webhooks(hooks)
        .max_body(options.max_webhook_body.saturating_mul(4))
        .with_liveness(liveness.clone())
        .merge(siesta_ui::router())
        .router();
    let router = options
        .metrics
        .serve(router, engine.clone(), tenants(&options), embedded);
    let limits = options.limits;
    let server = tokio::spawn(async move {
        if let Err(e) = siesta_api::server::serve(listener, router, limits).await {
            tracing::error!(error = %e, "dev server stopped");
        }
    });
    let background = background_runtime(options.worker_nice);
    let spawner = background
        .as_ref()
        .map_or_else(tokio::runtime::Handle::current, |b| b.handle().clone());
    let worker = {
        let engine = engine.clone();
        let config = WorkerConfig {
            concurrency: options.workers,
            ..WorkerConfig::default()
        };
        let alive = liveness.register("worker");
        spawner.spawn(async move {
            let _alive = alive;
            engine.work(config).await
        })
    };
    let sweeper = {
        let engine = engine.clone();
        let every = options.sweep_every;
        let alive = liveness.register("sweep");
        let metrics = options.metrics.clone();
        spawner.spawn(async move {
            let _alive = alive;
            loop {
                tokio::time::sleep(every).await;
                let report = engine.sweep(1000).await;
                if let Ok(report) = &report {
                    metrics.sweep(report);
                }
                match report {
                    // Whenever it found something: `siesta bench` adds these up.
                    Ok(report) if report.due > 0 || report.dead_letters > 0 => tracing::info!(
                        due = report.due,
                        woken = report.woken,
                        lost_wakeups = report.lost_wakeups,
                        due_waits = report.due_waits,
                        already_queued = report.already_queued,
                        other_builds = report.other_builds,
                        dead_letters = report.dead_letters,
                        "sweep"
                    ),
                    Ok(_) => {}
                    Err(e) => tracing::warn!(error = %e, "sweep"),
                }
            }
        })
    };
    let rules = RetentionRules {
        policy: options.retention.clone(),
        quotas: options.quotas.clone(),
    };
    let reaping = Reaping {
        engine: engine.clone(),
        rules,
        aws: options.aws_reaper.clone(),
    };
    let reaper = spawner.spawn(reap(reaping, options.reap_every, options.metrics.clone()));
    Ok(DevServer {
        addr,
        engine,
        liveness,
        other_builds,
        tasks: vec![server, worker, sweeper, reaper],
        background,
    })
}

/// Runs removed per page: each page is one write of the embedded backend's writer, so
/// live writes wait behind one page at most, however large the backlog.
const REAP_PAGE: usize = 100;

/// Who removes finished runs past their retention: the engine, through its store (the
/// embedded backend), by these rules — or, on the AWS backend (`siesta dev --backend
/// aws --reap`), the AWS backend's reaper, which the deployment's sweep function also runs (the
/// AWS store leaves reaping to it), on the engine's clock.
struct Reaping {
    engine: Engine,
    rules: RetentionRules,
    aws: Option<siesta_aws::retention::Reaper>,
}

impl Reaping {
    /// Bring forward the runs put back under a longer retention than today's (the
    /// embedded backend; the AWS reap index is keyed by the shortest retention).
    async fn rearm(&self) -> Result<(), EngineError> {
        match &self.aws {
            Some(_) => Ok(()),
            None => self.engine.rearm_reaping(&self.rules).await,
        }
    }

    /// One page: how many runs it removed, and whether more may be due.
    async fn page(&self) -> Result<(usize, bool), EngineError> {
        match &self.aws {
            Some(reaper) => {
                let report = reaper.reap(self.engine.clock().now(), REAP_PAGE).await?;
                Ok((report.removed.len(), report.more))
            }
            None => {
                let report = self.engine.reap(&self.rules, REAP_PAGE).await?;
                Ok((report.removed.len(), report.more))
            }
        }
    }
}

/// The reaper: every `every`, remove the finished runs past their retention (their
/// workflow's, their tenant's `retention_days`, or the server's), a page at a time
/// until none is left. First, runs put back under a longer retention than today's are
/// brought forward. Stops, saying so, on a backend that cannot remove runs.
async fn reap(reaping: Reaping, every: Duration, metrics: Metrics) {
    if let Err(e) = reaping.rearm().await {
        tracing::warn!(error = %e, "retention: bringing forward the runs put back");
    }
    loop {
        tokio::time::sleep(every).await;
        let mut removed = 0;
        loop {
            match reaping.page().await {
                Ok((page, more)) => {
                    removed += page;
                    metrics.reaped(page);
                    if !more {
                        break;
                    }
                }
                Err(EngineError::Store(siesta::ports::StoreError::Unsupported(why))) => {
                    tracing::info!(%why, "retention: this backend does not remove finished runs here (on AWS: the deployment's sweep function does, or `siesta dev --reap`); the reaper stops");
                    return;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "retention");
                    break;
                }
            }
            // Between pages, the writer serves what waits.
            tokio::task::yield_now().await;
        }
        if removed > 0 {
            tracing::info!(
                removed,
                "retention: finished runs past their retention removed"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Poll `check` until it holds: the reaper is a background task on its own tick,
    /// with nothing to await; time in the runs is the manual clock's.
    async fn eventually(what: &str, mut check: impl AsyncFnMut() -> bool) {
        for _ in 0..1000 {
            if check().await {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("never: {what}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_reaper_removes_a_finished_run_once_its_retention_or_its_tenants_passes_and_keeps_a_waiting_one()
     {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::default());
        let mut options = DevOptions::new(dir.path().to_path_buf());
        options.clock = Some(clock.clone());
        options.retention = RetentionPolicy::keep_for(Some(Duration::from_secs(3600)));
        options.quotas =
            Quotas::parse(r#"{"tenants": {"keeper": {"retention_days": 2}}}"#).unwrap();
        options.reap_every = Duration::from_millis(20);
        options.worker_nice = 0;
        let mut registry = Registry::new();
        registry.register("quick", |_: Context, _: serde_json::Value| async move {
            Ok(serde_json::json!("done"))
        });
        registry.register("patient", |ctx: Context, _: serde_json::Value| async move {
            ctx.wait_for_event::<serde_json::Value>("go").await
        });
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let server = start(listener, options, registry).await.unwrap();
        let engine = server.engine.clone();
        let tenant = TenantId::from("default");
        let quick = engine
            .start(&tenant, "quick", serde_json::json!({}), None)
            .await
            .unwrap();
        let patient = engine
            .start(&tenant, "patient", serde_json::json!({}), None)
            .await
            .unwrap();
        let keeper = TenantId::from("keeper");
        let kept = engine
            .start(&keeper, "quick", serde_json::json!({}), None)
            .await
            .unwrap();
        let status_of = |tenant: TenantId, id: RunId| {
            let engine = engine.clone();
            async move {
                engine
                    .backend()
                    .store
                    .get_run(&tenant, &id)
                    .await
                    .unwrap()
                    .map(|r| r.status)
            }
        };
        let status = |id: RunId| status_of(tenant.clone(), id);
        eventually("both runs went as far as they go", async || {
            status(quick.id.clone()).await == Some(RunStatus::Completed)
                && status(patient.id.clone()).await == Some(RunStatus::Waiting)
                && status_of(keeper.clone(), kept.id.clone()).await == Some(RunStatus::Completed)
        })
        .await;

        clock.advance(Duration::from_secs(2 * 3600));
        eventually("the finished run is removed", async || {
            status(quick.id.clone()).await.is_none()
        })
        .await;
        assert_eq!(
            status(patient.id.clone()).await,
            Some(RunStatus::Waiting),
            "a waiting run is never removed"
        );
        assert_eq!(
            status_of(keeper.clone(), kept.id.clone()).await,
            Some(RunStatus::Completed),
            "the tenant kept two days keeps its run past the server's hour"
        );
        clock.advance(Duration::from_secs(2 * 86_400));
        eventually(
            "the tenant's run is removed after its two days",
            async || status_of(keeper.clone(), kept.id.clone()).await.is_none(),
        )
        .await;
        assert_eq!(status(patient.id.clone()).await, Some(RunStatus::Waiting));
        server.stop();
    }

    /// One HTTP/1.1 request over a fresh connection; the status and the body.
    async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let request =
            format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).await.unwrap();
        let status = response[9..12].parse().unwrap();
        let body = response
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_owned())
            .unwrap_or_default();
        (status, body)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_dev_server_serves_metrics_without_the_api_key_its_runs_need() {
        let dir = tempfile::tempdir().unwrap();
        let mut options = DevOptions::new(dir.path().to_path_buf());
        options.api_keys = HashMap::from([("sk_dev".to_owned(), TenantId::from("acme"))]);
        options.worker_nice = 0;
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let server = start(listener, options, Registry::new()).await.unwrap();

        let (status, _) = get(server.addr, "/runs").await;
        assert_eq!(status, 401, "the control API needs the key");
        let (status, body) = get(server.addr, "/metrics").await;
        assert_eq!(status, 200, "{body}");
        assert!(
            body.lines()
                .any(|l| l == r#"siesta_runs{tenant="acme",status="pending"} 0"#),
            "{body}"
        );
        server.stop();
    }
}
