//! Traces exported by the standard OpenTelemetry settings, for the dev server and the
//! Lambda roles alike.
//!
//! Off, and free, unless `OTEL_EXPORTER_OTLP_ENDPOINT` or
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set. Then the `tracing` spans go to an OTLP
//! collector over HTTP (`OTEL_EXPORTER_OTLP_PROTOCOL` = `http/protobuf`, the default,
//! or `http/json`) or gRPC (`grpc`, with the `grpc` feature, on by default; without
//! it `grpc` turns export off with a warning), named by `OTEL_SERVICE_NAME`, and every wake-up's `durable_execution` span is put in its
//! run's trace (see [`siesta::telemetry`]): the core's spans come through the
//! `tracing` layer, and what the core asks of an exporter (parents, links, a step's
//! context, waits' spans, a finished run's root span) through
//! [`siesta::telemetry::Exporter`].

use std::cell::Cell;
use std::sync::OnceLock;

use opentelemetry::KeyValue;
use opentelemetry::trace::{
    Span as _, SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState, Tracer as _,
    TracerProvider as _,
};
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator, SdkTracer, SdkTracerProvider};
use siesta::RunStatus;
use siesta::telemetry::{RunSpan, TraceParent, WaitSpan};
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::registry::LookupSpan;

static PROVIDER: OnceLock<SdkTracerProvider> = OnceLock::new();

/// The OpenTelemetry layer when the environment asks for export, else `None` (a `None`
/// layer does nothing). `default_service` names the service when `OTEL_SERVICE_NAME`
/// is unset. Installs the core's exporter, which puts each wake-up's span in its run's
/// trace.
pub fn layer_from_env<S>(
    default_service: &str,
) -> Option<impl tracing_subscriber::Layer<S> + use<S>>
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
{
    let set = |name: &str| std::env::var(name).is_ok_and(|v| !v.trim().is_empty());
    if !set("OTEL_EXPORTER_OTLP_ENDPOINT") && !set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
        return None;
    }
    let protocol = std::env::var("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        .or_else(|_| std::env::var("OTEL_EXPORTER_OTLP_PROTOCOL"))
        .unwrap_or_default();
    let grpc = protocol.trim() == "grpc";
    if grpc && !cfg!(feature = "grpc") {
        eprintln!(
            "siesta: OTEL_EXPORTER_OTLP_PROTOCOL=grpc is not built in (siesta-lambda's `grpc` feature); traces are not exported (use http/protobuf or http/json)"
        );
        return None;
    }
    let exporter = move || {
        #[cfg(feature = "grpc")]
        if grpc {
            return grpc_exporter(|builder| builder);
        }
        opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .build()
    };
    Some(install(provider(exporter, default_service)))
}

/// The OpenTelemetry layer exporting OTLP over gRPC to `endpoint` (`http://host:port`),
/// as `service` unless `OTEL_SERVICE_NAME` says otherwise: for tests and tools that
/// pick their collector themselves. Installs the same exporter as [`layer_from_env`].
#[cfg(feature = "grpc")]
pub fn layer_to_grpc<S>(endpoint: &str, service: &str) -> impl tracing_subscriber::Layer<S> + use<S>
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
{
    use opentelemetry_otlp::WithExportConfig;
    let exporter = || grpc_exporter(|builder| builder.with_endpoint(endpoint));
    install(provider(exporter, service))
}

/// The gRPC exporter `configure` makes of the environment's. tonic's channel runs its
/// connection on the Tokio runtime it is built in, while the batch processor exports
/// from a thread of its own with no runtime: so the channel gets a runtime of its own,
/// one worker thread for the process's life. Not the caller's: that one may be a
/// test's, gone after it, or a single-threaded one busy elsewhere; the flush before a
/// Lambda invocation returns waits on the export, which needs the connection served.
#[cfg(feature = "grpc")]
fn grpc_exporter(configure: impl FnOnce(GrpcBuilder) -> GrpcBuilder) -> Exporter {
    static RUNTIME: OnceLock<std::io::Result<tokio::runtime::Runtime>> = OnceLock::new();
    let runtime = RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("siesta-otlp-grpc")
            .enable_all()
            .build()
    });
    let runtime = runtime.as_ref().map_err(|e| {
        opentelemetry_otlp::ExporterBuildError::InternalFailure(format!(
            "no runtime for the gRPC exporter: {e}"
        ))
    })?;
    let _entered = runtime.enter();
    configure(opentelemetry_otlp::SpanExporter::builder().with_tonic()).build()
}

/// The OpenTelemetry layer exporting OTLP over HTTP protobuf to `endpoint` (the full
/// URL, `…/v1/traces`), as `service` unless `OTEL_SERVICE_NAME` says otherwise: for
/// tests and tools that pick their collector themselves. Installs the same exporter as
/// [`layer_from_env`].
pub fn layer_to<S>(endpoint: &str, service: &str) -> impl tracing_subscriber::Layer<S> + use<S>
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
{
    use opentelemetry_otlp::WithExportConfig;
    let exporter = || {
        opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_endpoint(endpoint)
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
            .build()
    };
    install(provider(exporter, service))
}

#[cfg(feature = "grpc")]
type GrpcBuilder =
    opentelemetry_otlp::SpanExporterBuilder<opentelemetry_otlp::TonicExporterBuilderSet>;

type Exporter = Result<opentelemetry_otlp::SpanExporter, opentelemetry_otlp::ExporterBuildError>;

/// The layer over `provider`, and the core's [`siesta::telemetry::Exporter`] over it.
fn install<S>(provider: SdkTracerProvider) -> impl tracing_subscriber::Layer<S> + use<S>
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
{
    use tracing_subscriber::Layer as _;
    let tracer = provider.tracer("siesta");
    siesta::telemetry::set_exporter(CoreExporter {
        tracer: tracer.clone(),
    });
    // The level filter sits on the layer itself, inside the caller's `Option`: a
    // per-layer filter wrapped around a `None` layer still registers its interest in
    // every info callsite, so each info span and event of the engine was built for a
    // layer that does not exist (the dev bench's steps paid for it with export off).
    tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_filter(tracing_subscriber::filter::LevelFilter::INFO)
}

/// The process's one tracer provider, built at the first call with the exporter
/// `exporter` makes.
fn provider(exporter: impl FnOnce() -> Exporter, service: &str) -> SdkTracerProvider {
    PROVIDER
        .get_or_init(|| build_provider(exporter(), service))
        .clone()
}

fn build_provider(exporter: Exporter, default_service: &str) -> SdkTracerProvider {
    let mut provider = SdkTracerProvider::builder();
    // The exporter's builder reads the endpoint, protocol, headers and timeout from the
    // environment; a setting it cannot use leaves export off rather than the process.
    match exporter {
        Ok(exporter) => provider = provider.with_batch_exporter(exporter),
        Err(e) => eprintln!("siesta: traces are not exported: {e}"),
    }
    provider = provider.with_id_generator(Ids::default());
    let mut resource = opentelemetry_sdk::Resource::builder();
    if std::env::var("OTEL_SERVICE_NAME").is_err() {
        resource = resource.with_service_name(default_service.to_owned());
    }
    provider.with_resource(resource.build()).build()
}

thread_local! {
    /// The id the next span started on this thread takes: one the core named before
    /// the span was emitted ([`WaitSpan::span_id`], [`RunSpan::span_id`]), set just
    /// around its start.
    static NEXT_SPAN_ID: Cell<Option<SpanId>> = const { Cell::new(None) };
    /// The trace id the next root span started on this thread takes: a run's
    /// ([`RunSpan::trace_id`]), set just around its start.
    static NEXT_TRACE_ID: Cell<Option<TraceId>> = const { Cell::new(None) };
}

/// The SDK's random ids, but for a span whose ids were named before ([`NEXT_SPAN_ID`],
/// [`NEXT_TRACE_ID`]): the SDK's span builder takes no id of its own.
#[derive(Debug, Default)]
struct Ids(RandomIdGenerator);

impl IdGenerator for Ids {
    fn new_trace_id(&self) -> TraceId {
        NEXT_TRACE_ID
            .with(Cell::take)
            .unwrap_or_else(|| self.0.new_trace_id())
    }

    fn new_span_id(&self) -> SpanId {
        NEXT_SPAN_ID
            .with(Cell::take)
            .unwrap_or_else(|| self.0.new_span_id())
    }
}

/// Send the spans ended so far, waiting for the collector's answer (on a blocking
/// thread): a Lambda role calls it before its invocation returns, since a frozen
/// container sends nothing. Nothing to do when export is off.
pub async fn flush() {
    let Some(provider) = PROVIDER.get() else {
        return;
    };
    let provider = provider.clone();
    let flushed = tokio::task::spawn_blocking(move || provider.force_flush()).await;
    if let Ok(Err(e)) = flushed {
        tracing::warn!(error = %e, "flushing traces failed");
    }
}

/// [`flush`] as a response mapper, for the HTTP roles' routers
/// (`axum::middleware::map_response(flush_after)`).
pub async fn flush_after<R>(response: R) -> R {
    flush().await;
    response
}

/// What the core asks of the exporter (it depends on no OpenTelemetry crate): parent a
/// span on a remote context (a wake-up on its run's trace, a request on its caller's),
/// link one, read one's context, and emit a wait's span and a finished run's root span
/// whole.
struct CoreExporter {
    tracer: SdkTracer,
}

fn span_context(parent: TraceParent) -> SpanContext {
    SpanContext::new(
        TraceId::from_bytes(parent.trace_id),
        SpanId::from_bytes(parent.span_id),
        if parent.sampled {
            TraceFlags::SAMPLED
        } else {
            TraceFlags::default()
        },
        true,
        TraceState::default(),
    )
}

fn system_time(at: siesta::Timestamp) -> std::time::SystemTime {
    std::time::UNIX_EPOCH + std::time::Duration::from_millis(at.0.max(0) as u64)
}

impl siesta::telemetry::Exporter for CoreExporter {
    fn set_parent(&self, span: &tracing::Span, parent: TraceParent) {
        let cx = opentelemetry::Context::new().with_remote_span_context(span_context(parent));
        // A span already entered keeps its parent: the core only parents new ones.
        let _ = span.set_parent(cx);
    }

    fn add_link(&self, span: &tracing::Span, to: TraceParent) {
        span.add_link(span_context(to));
    }

    fn context(&self, span: &tracing::Span) -> Option<TraceParent> {
        let cx = span.context();
        let sc = cx.span().span_context().clone();
        sc.is_valid().then(|| TraceParent {
            trace_id: sc.trace_id().to_bytes(),
            span_id: sc.span_id().to_bytes(),
            sampled: sc.is_sampled(),
        })
    }

    fn wait_ended(&self, parent: &tracing::Span, wait: &WaitSpan) {
        let cx = parent.context();
        if !cx.span().span_context().is_valid() {
            return;
        }
        let mut attributes = vec![
            KeyValue::new("operationId", wait.position.clone()),
            KeyValue::new("name", wait.name.clone()),
            KeyValue::new("kind", wait.kind),
            KeyValue::new("subType", wait.sub_type),
            KeyValue::new("isReplay", false),
            KeyValue::new("outcome", wait.outcome),
        ];
        if let Some(kind) = &wait.error_kind {
            attributes.push(KeyValue::new("error.kind", kind.clone()));
        }
        if let Some(attempt) = wait.attempt {
            attributes.push(KeyValue::new("attempt", i64::from(attempt)));
        }
        let builder = self
            .tracer
            .span_builder(siesta::telemetry::OPERATION_SPAN)
            .with_start_time(system_time(wait.started_at))
            .with_attributes(attributes);
        // An invoke's id was named before: its child run's wake-ups hang under it.
        if let Some(id) = wait.span_id {
            NEXT_SPAN_ID.with(|next| next.set(Some(SpanId::from_bytes(id))));
        }
        let mut span = builder.start_with_context(&self.tracer, &cx);
        // Taken by the start; left only if the provider was shut down and started none.
        NEXT_SPAN_ID.with(Cell::take);
        span.end_with_timestamp(system_time(wait.ended_at));
    }

    fn run_finished(&self, run: &RunSpan) {
        let mut attributes = vec![
            KeyValue::new("tenant", run.tenant.clone()),
            KeyValue::new("run_id", run.run_id.clone()),
            KeyValue::new("workflow", run.workflow.clone()),
            KeyValue::new("status", run.status.as_str()),
            KeyValue::new(
                siesta::telemetry::TRACE_ID_FIELD,
                TraceId::from_bytes(run.trace_id).to_string(),
            ),
        ];
        if let Some(build) = &run.build_id {
            attributes.push(KeyValue::new("build_id", build.clone()));
        }
        if let Some(kind) = &run.error_kind {
            attributes.push(KeyValue::new("error.kind", kind.clone()));
        }
        let builder = self
            .tracer
            .span_builder(siesta::telemetry::RUN_SPAN)
            .with_start_time(system_time(run.started_at))
            .with_attributes(attributes);
        // A root: no parent, whatever span is current; the ids its wake-ups named.
        NEXT_TRACE_ID.with(|next| next.set(Some(TraceId::from_bytes(run.trace_id))));
        NEXT_SPAN_ID.with(|next| next.set(Some(SpanId::from_bytes(run.span_id))));
        let mut span = builder.start_with_context(&self.tracer, &opentelemetry::Context::new());
        NEXT_TRACE_ID.with(Cell::take);
        NEXT_SPAN_ID.with(Cell::take);
        // A failed run is an error; a cancelled one is an operator's choice, not one.
        if let (RunStatus::Failed, Some(kind)) = (run.status, &run.error_kind) {
            span.set_status(opentelemetry::trace::Status::error(kind.clone()));
        }
        span.end_with_timestamp(system_time(run.ended_at));
    }
}
