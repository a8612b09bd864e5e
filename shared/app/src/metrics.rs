//! `GET /metrics` of `siesta dev`: Prometheus text, names prefixed `siesta_`, the
//! counterparts of the EMF metrics the Lambda roles print (docs/telemetry.md has the
//! table).
//!
//! The core stays free of it. The counts come from where the dev server already
//! reports: the engine's `durable_execution` and `durable_operation` spans (a
//! [`tracing`] layer times them), the webhook routes' answers (a layer on the router),
//! the sweep's and the reaper's reports; runs by status, runs due and the wake-up lag
//! are read from the store when scraped, each read bounded.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::extract::{MatchedPath, Request, State};
use axum::http::header::CONTENT_TYPE;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use siesta::ports::RunFilter;
use siesta::telemetry::{EXECUTION_SPAN, OPERATION_SPAN};
use siesta::{Engine, RunStatus, SweepReport, TenantId};
use siesta_api::Received;
use siesta_embedded::EmbeddedBackend;
use tracing::Subscriber;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;

/// Runs counted per tenant and status at a scrape, at most: a scrape reads pages of the
/// run list, never more than this many runs per series.
pub const RUNS_COUNTED_AT_MOST: usize = 10_000;

/// Due runs read at a scrape, at most (one read of the due index, as one sweep does).
pub const DUE_READ_AT_MOST: usize = 1_000;

const RUN_STATUSES: [RunStatus; 8] = [
    RunStatus::Queued,
    RunStatus::Pending,
    RunStatus::Running,
    RunStatus::Waiting,
    RunStatus::Completed,
    RunStatus::Failed,
    RunStatus::Cancelled,
    RunStatus::Parked,
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OperationLabels {
    kind: String,
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VerdictLabels {
    verdict: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ActionLabels {
    action: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueueLabels {
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LimitLabels {
    tenant: String,
    limit: String,
    key: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RunLabels {
    tenant: String,
    status: String,
}

fn latency_histogram() -> Histogram {
    // 1 ms to about 33 s, doubling: a replayed pass takes a millisecond, a model call
    // tens of seconds.
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

struct Inner {
    registry: Registry,
    wakeups: Family<OutcomeLabels, Histogram>,
    operations: Family<OperationLabels, Histogram>,
    webhooks: Family<VerdictLabels, Counter>,
    sweep: Family<ActionLabels, Counter>,
    reaped: Counter,
    runs: Family<RunLabels, Gauge>,
    due: Gauge,
    lag_ms: Gauge,
    idempotent_replays: Counter,
    queue: Family<QueueLabels, Gauge>,
    queue_lag_ms: Gauge,
    limit_holders: Family<LimitLabels, Gauge>,
    limit_waiters: Family<LimitLabels, Gauge>,
}

/// The dev server's metrics: a registry of its own (no process-wide recorder), fed by
/// [`Metrics::layer`], [`Metrics::serve`]'s webhook counting, [`Metrics::sweep`] and
/// [`Metrics::reaped`].
#[derive(Clone)]
pub struct Metrics(Arc<Inner>);

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

impl Metrics {
    /// Every series registered, none observed yet.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("siesta");
        let wakeups = Family::<OutcomeLabels, Histogram>::new_with_constructor(
            latency_histogram as fn() -> Histogram,
        );
        let operations = Family::<OperationLabels, Histogram>::new_with_constructor(
            latency_histogram as fn() -> Histogram,
        );
        let webhooks = Family::<VerdictLabels, Counter>::default();
        let sweep = Family::<ActionLabels, Counter>::default();
        let reaped = Counter::default();
        let runs = Family::<RunLabels, Gauge>::default();
        let due = Gauge::default();
        let lag_ms = Gauge::default();
        let idempotent_replays = Counter::default();
        let queue = Family::<QueueLabels, Gauge>::default();
        let queue_lag_ms = Gauge::default();
        let limit_holders = Family::<LimitLabels, Gauge>::default();
        let limit_waiters = Family::<LimitLabels, Gauge>::default();
        registry.register(
            "limit_holders",
            "Runs holding a slot of a concurrency limit, by tenant, limit and key, at the scrape",
            limit_holders.clone(),
        );
        registry.register(
            "limit_waiters",
            "Runs queued for a slot of a concurrency limit, by tenant, limit and key, at the scrape",
            limit_waiters.clone(),
        );
        registry.register(
            "wakeup_duration_seconds",
            "Each wake-up's handling (a durable_execution span), by the run's status after it",
            wakeups.clone(),
        );
        registry.register(
            "operation_duration_seconds",
            "Each operation attempt that ran (a durable_operation span), by kind and outcome",
            operations.clone(),
        );
        registry.register(
            "webhooks",
            "Webhook deliveries answered, by verdict: accepted, duplicate, refused",
            webhooks.clone(),
        );
        registry.register(
            "sweep_actions",
            "What the sweep did, by action",
            sweep.clone(),
        );
        registry.register(
            "reap_removed",
            "Finished runs removed past their retention",
            reaped.clone(),
        );
        registry.register(
            "runs",
            "Runs by tenant and status at the scrape (counted up to 10000 per series)",
            runs.clone(),
        );
        registry.register(
            "runs_due",
            "Runs owed a wake-up the sweep has not handed out, at the scrape (read up to 1000)",
            due.clone(),
        );
        registry.register(
            "wakeup_lag_milliseconds",
            "How long the longest-due of those runs has been due, at the scrape (0: none)",
            lag_ms.clone(),
        );
        registry.register(
            "idempotent_replays",
            "Starts answered from their Idempotency-Key (no new run)",
            idempotent_replays.clone(),
        );
        registry.register(
            "queue_depth",
            "Wake-ups in the embedded queue at the scrape, by state: visible, in_flight, delayed",
            queue.clone(),
        );
        registry.register(
            "queue_lag_milliseconds",
            "How long the oldest receivable wake-up has waited to be received, at the scrape (0: none)",
            queue_lag_ms.clone(),
        );
        Metrics(Arc::new(Inner {
            registry,
            wakeups,
            operations,
            webhooks,
            sweep,
            reaped,
            runs,
            due,
            lag_ms,
            idempotent_replays,
            queue,
            queue_lag_ms,
            limit_holders,
            limit_waiters,
        }))
    }

    /// A [`tracing`] layer timing the engine's spans: each `durable_execution` span
    /// into `siesta_wakeup_duration_seconds`, each `durable_operation` span into
    /// `siesta_operation_duration_seconds`, from its creation to its close.
    ///
    /// The layer is filtered to those two span names, so every other callsite of the
    /// engine stays disabled (and costs nothing) when no other layer wants it.
    pub fn layer<S>(&self) -> impl tracing_subscriber::Layer<S> + use<S>
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
        use tracing_subscriber::Layer as _;
        let timed = tracing_subscriber::filter::filter_fn(|metadata| {
            metadata.is_span() && matches!(metadata.name(), EXECUTION_SPAN | OPERATION_SPAN)
        })
        .with_max_level_hint(tracing::Level::INFO);
        SpanTimer(self.clone()).with_filter(timed)
    }

    /// Count one sweep's report.
    pub fn sweep(&self, report: &SweepReport) {
        for (action, n) in [
            ("woken", report.woken),
            ("expired_leases", report.expired_leases),
            ("due_waits", report.due_waits),
            ("lost_wakeups", report.lost_wakeups),
            ("dead_letters", report.dead_letters),
            ("parked_dead_letters", report.parked_dead_letters),
            ("scheduled", report.scheduled),
            ("action_jobs", report.action_jobs),
        ] {
            self.0
                .sweep
                .get_or_create(&ActionLabels {
                    action: action.into(),
                })
                .inc_by(n as u64);
        }
    }

    /// Count finished runs the reaper removed.
    pub fn reaped(&self, removed: usize) {
        self.0.reaped.inc_by(removed as u64);
    }

    /// `router` with `GET /metrics` beside its routes, and its webhook routes' answers
    /// and idempotent replays counted; `queue`, the embedded backend whose wake-up
    /// queue to report (`None`: another backend, no queue series). The route takes no
    /// API key, as `/healthz` does not: it says how many runs there are per tenant and
    /// status, never what a run holds.
    pub fn serve(
        &self,
        router: Router,
        engine: Engine,
        tenants: Vec<TenantId>,
        queue: Option<EmbeddedBackend>,
    ) -> Router {
        let scrape = Scrape {
            metrics: self.clone(),
            engine,
            tenants: Arc::new(tenants),
            queue,
        };
        router
            .layer(middleware::from_fn_with_state(self.clone(), count_answers))
            .merge(
                Router::new()
                    .route("/metrics", get(metrics_text))
                    .with_state(scrape),
            )
    }

    /// The text of every series now.
    pub fn render(&self) -> String {
        let mut text = String::new();
        // Writing to a String cannot fail.
        let _ = encode(&mut text, &self.0.registry);
        text
    }

    /// Read the embedded queue's depth and lag.
    async fn read_queue(&self, queue: &EmbeddedBackend, now: siesta::Timestamp) {
        match queue.queue_depth(now).await {
            Ok(depth) => {
                for (state, n) in [
                    ("visible", depth.visible),
                    ("in_flight", depth.in_flight),
                    ("delayed", depth.delayed),
                ] {
                    self.0
                        .queue
                        .get_or_create(&QueueLabels {
                            state: state.into(),
                        })
                        .set(n as i64);
                }
                self.0.queue_lag_ms.set(
                    depth
                        .oldest_visible_at
                        .map_or(0, |at| (now.millis() - at.millis()).max(0)),
                );
            }
            Err(e) => tracing::warn!(error = %e, "metrics: reading the queue's depth"),
        }
    }

    /// Read each tenant's concurrency limits: holders and waiters per key. The series
    /// are rebuilt at each scrape, so a key no run holds or waits for any more leaves
    /// them (keys come and go with the input: customers, teams) instead of piling up.
    async fn read_limits(&self, engine: &Engine, tenants: &[TenantId]) {
        for family in [&self.0.limit_holders, &self.0.limit_waiters] {
            family.clear();
        }
        for tenant in tenants {
            let usage = match engine.backend().store.limit_usage(tenant).await {
                Ok(usage) => usage,
                Err(e) => {
                    tracing::warn!(error = %e, "metrics: reading the concurrency limits");
                    continue;
                }
            };
            for keyed in usage {
                let labels = LimitLabels {
                    tenant: tenant.to_string(),
                    limit: keyed.limit,
                    key: keyed.key,
                };
                self.0
                    .limit_holders
                    .get_or_create(&labels)
                    .set(keyed.holders as i64);
                self.0
                    .limit_waiters
                    .get_or_create(&labels)
                    .set(keyed.waiters as i64);
            }
        }
    }

    /// Read runs by status, runs due and the wake-up lag from the store.
    async fn read_store(&self, engine: &Engine, tenants: &[TenantId]) {
        let store = &engine.backend().store;
        for tenant in tenants {
            for status in RUN_STATUSES {
                let filter = RunFilter {
                    status: Some(status),
                    workflow: None,
                };
                let mut counted = 0usize;
                let mut cursor: Option<String> = None;
                loop {
                    let page = match store
                        .list_runs(tenant, &filter, cursor.as_deref(), 1000)
                        .await
                    {
                        Ok(page) => page,
                        Err(e) => {
                            tracing::warn!(error = %e, "metrics: listing runs");
                            break;
                        }
                    };
                    counted += page.runs.len();
                    cursor = page.next_cursor;
                    if cursor.is_none() || counted >= RUNS_COUNTED_AT_MOST {
                        break;
                    }
                }
                self.0
                    .runs
                    .get_or_create(&RunLabels {
                        tenant: tenant.to_string(),
                        status: status.to_string(),
                    })
                    .set(counted.min(RUNS_COUNTED_AT_MOST) as i64);
            }
        }
        self.read_limits(engine, tenants).await;
        let now = engine.clock().now();
        match store.due_runs(now, DUE_READ_AT_MOST).await {
            Ok(due) => {
                self.0.due.set(due.len() as i64);
                let oldest = due.iter().map(|d| d.due_at.millis()).min();
                self.0
                    .lag_ms
                    .set(oldest.map_or(0, |at| (now.millis() - at).max(0)));
            }
            Err(e) => tracing::warn!(error = %e, "metrics: reading the due runs"),
        }
    }
}

#[derive(Clone)]
struct Scrape {
    metrics: Metrics,
    engine: Engine,
    tenants: Arc<Vec<TenantId>>,
    queue: Option<EmbeddedBackend>,
}

async fn metrics_text(State(scrape): State<Scrape>) -> Response {
    scrape
        .metrics
        .read_store(&scrape.engine, &scrape.tenants)
        .await;
    if let Some(queue) = &scrape.queue {
        scrape
            .metrics
            .read_queue(queue, scrape.engine.clock().now())
            .await;
    }
    (
        [(
            CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        scrape.metrics.render(),
    )
        .into_response()
}

/// The verdict of each answer of a `/hooks/…` route: refused (not 2xx), a duplicate
/// delivery, or accepted, named by the route's template, never by a token; and each
/// start answered from its `Idempotency-Key` (the `Idempotent-Replayed` header, which
/// the start function's EMF count reads too).
async fn count_answers(State(metrics): State<Metrics>, request: Request, next: Next) -> Response {
    let hook = request
        .extensions()
        .get::<MatchedPath>()
        .is_some_and(|p| p.as_str().starts_with("/hooks/"));
    let response = next.run(request).await;
    if response.headers().contains_key("idempotent-replayed") {
        metrics.0.idempotent_replays.inc();
    }
    if hook {
        let verdict = if !response.status().is_success() {
            "refused"
        } else if response
            .extensions()
            .get::<Received>()
            .is_some_and(|r| r.duplicate)
        {
            "duplicate"
        } else {
            "accepted"
        };
        metrics
            .0
            .webhooks
            .get_or_create(&VerdictLabels {
                verdict: verdict.into(),
            })
            .inc();
    }
    response
}

/// The [`tracing`] layer of [`Metrics::layer`].
pub struct SpanTimer(Metrics);

/// What the layer keeps on a timed span until it closes.
struct Timed {
    execution: bool,
    started: Instant,
    kind: String,
    outcome: String,
}

impl Visit for Timed {
    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "kind" => self.kind = value.to_owned(),
            "outcome" => self.outcome = value.to_owned(),
            _ => {}
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if matches!(field.name(), "kind" | "outcome") {
            let mut text = String::new();
            let _ = write!(text, "{value:?}");
            self.record_str(field, text.trim_matches('"'));
        }
    }
}

impl<S> tracing_subscriber::Layer<S> for SpanTimer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let name = attrs.metadata().name();
        let execution = name == EXECUTION_SPAN;
        if !execution && name != OPERATION_SPAN {
            return;
        }
        let mut timed = Timed {
            execution,
            started: Instant::now(),
            kind: String::new(),
            outcome: String::new(),
        };
        attrs.record(&mut timed);
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(timed);
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id)
            && let Some(timed) = span.extensions_mut().get_mut::<Timed>()
        {
            values.record(timed);
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(&id) else { return };
        let Some(timed) = span.extensions_mut().remove::<Timed>() else {
            return;
        };
        let seconds = timed.started.elapsed().as_secs_f64();
        let outcome = if timed.outcome.is_empty() {
            "unknown".to_owned()
        } else {
            timed.outcome
        };
        let inner = &(self.0).0;
        if timed.execution {
            inner
                .wakeups
                .get_or_create(&OutcomeLabels { outcome })
                .observe(seconds);
        } else {
            inner
                .operations
                .get_or_create(&OperationLabels {
                    kind: timed.kind,
                    outcome,
                })
                .observe(seconds);
        }
    }
}
