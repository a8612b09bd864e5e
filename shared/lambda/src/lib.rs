//! What Siesta's four Lambda functions share, so that each function stays a thin
//! translation of its event into a call on the engine:
//!
//! - [`Settings`]: configuration from the environment, read once per container;
//! - [`Settings::engine`]: the AWS backend and the engine, built once per container;
//! - [`http`]: the tenant from the JWT authorizer's claim, for `siesta_api`'s router
//!   served through `lambda_http`;
//! - [`metrics`]: CloudWatch Embedded Metric Format lines;
//! - [`init_logging`]: `tracing` as JSON lines, and spans to OpenTelemetry when the
//!   standard settings ask for it ([`otel`]).

pub mod http;
pub mod metrics;
pub mod otel;
mod settings;

pub use settings::{AwsArgs, Settings, SetupError, SharedArgs};

/// Log `tracing` events as JSON lines (what CloudWatch Logs Insights queries), at the
/// level `RUST_LOG` names, else the function's log level (`AWS_LAMBDA_LOG_LEVEL`, set by
/// Lambda's logging configuration), else `info`. The innermost span's fields — the tenant and
/// run id of the wake-up, request or invocation being handled — are on every line inside
/// it, as `span.tenant` and `span.run_id`. With `OTEL_EXPORTER_OTLP_ENDPOINT` set, the
/// spans at info level and above are exported too, whatever the log level ([`otel`]);
/// call [`otel::flush`] before an invocation returns.
pub fn init_logging() {
    use tracing_subscriber::Layer;
    use tracing_subscriber::layer::SubscriberExt;
    let filter =
        tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    let service = std::env::var("AWS_LAMBDA_FUNCTION_NAME").unwrap_or_else(|_| "siesta".to_owned());
    let subscriber = tracing_subscriber::registry()
        .with(json_layer(std::io::stdout).with_filter(filter))
        .with(otel::layer_from_env(&service));
    let _ = tracing::subscriber::set_global_default(subscriber);
}

/// When to stop taking new work: `margin` before the deadline — but never in the first
/// half of the time left, so a function whose timeout is shorter than twice the margin
/// still makes progress instead of handing over at once, forever.
pub fn stop_at(now_ms: i64, deadline_ms: i64, margin: std::time::Duration) -> i64 {
    let left = (deadline_ms - now_ms).max(0);
    (deadline_ms - margin.as_millis() as i64).max(now_ms + left / 2)
}

/// Milliseconds since the epoch, now (the unit of `Context::deadline`).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

fn json_layer<W, S>(writer: W) -> impl tracing_subscriber::Layer<S> + Send + Sync
where
    W: for<'w> tracing_subscriber::fmt::MakeWriter<'w> + Send + Sync + 'static,
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    tracing_subscriber::fmt::layer()
        .json()
        .with_current_span(true)
        .with_span_list(false)
        .with_target(false)
        .without_time()
        .with_writer(writer)
}

#[cfg(test)]
fn json_subscriber<W>(
    writer: W,
    filter: tracing_subscriber::EnvFilter,
) -> impl tracing::Subscriber + Send + Sync
where
    W: for<'w> tracing_subscriber::fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    use tracing_subscriber::Layer;
    use tracing_subscriber::layer::SubscriberExt;
    tracing_subscriber::registry().with(json_layer(writer).with_filter(filter))
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use serde_json::Value;

    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Buffer {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn every_line_inside_a_run_span_is_json_carrying_the_tenant_and_run_id() {
        let buffer = Buffer::default();
        let writer = buffer.clone();
        let subscriber = super::json_subscriber(move || writer.clone(), "info".into());
        tracing::subscriber::with_default(subscriber, || {
            let _wake = tracing::info_span!("wake", tenant = "acme", run_id = "run_1").entered();
            tracing::info!("claimed");
            let _inner =
                tracing::info_span!("invocation", tenant = "acme", run_id = "run_1", epoch = 3)
                    .entered();
            tracing::warn!(step = "charge", "retrying");
        });
        let text = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).expect("a JSON line"))
            .collect();
        assert_eq!(lines.len(), 2, "{text}");
        for line in &lines {
            assert_eq!(line["span"]["tenant"], "acme", "{line}");
            assert_eq!(line["span"]["run_id"], "run_1", "{line}");
        }
        assert_eq!(lines[1]["fields"]["message"], "retrying");
        assert_eq!(lines[1]["level"], "WARN");
    }

    #[test]
    fn work_stops_a_safety_margin_before_the_deadline() {
        assert_eq!(
            super::stop_at(0, 900_000, std::time::Duration::from_secs(10)),
            890_000
        );
    }

    #[test]
    fn a_timeout_shorter_than_twice_the_margin_still_leaves_half_the_time_for_work() {
        assert_eq!(
            super::stop_at(1_000, 7_000, std::time::Duration::from_secs(10)),
            4_000
        );
        assert_eq!(
            super::stop_at(5_000, 4_000, std::time::Duration::from_secs(10)),
            5_000,
            "already late"
        );
    }
}
