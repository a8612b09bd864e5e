//! What Siesta's four Lambda functions share, so that each function stays a thin
//! translation of its event into a call on the engine:
//!
//! - [`Settings`]: configuration from the environment, read once per container;
//! - [`Settings::engine`]: the AWS backend and the engine, built once per container;
//! - [`http`]: API Gateway HTTP API (payload v2) requests to [`siesta_api::ApiRequest`]
//!   and back, and the tenant from the JWT authorizer's claims;
//! - [`metrics`]: CloudWatch Embedded Metric Format lines;
//! - [`init_logging`]: `tracing` as JSON lines.

pub mod http;
pub mod metrics;
mod settings;

pub use settings::{Settings, SetupError};

/// Log `tracing` events as JSON lines (what CloudWatch Logs Insights queries), at the
/// level `RUST_LOG` names (default `info`). Spans' fields — the run id and the tenant —
/// are on every line inside them.
pub fn init_logging() {
    let _ = tracing_subscriber::fmt()
        .json()
        .with_current_span(true)
        .with_span_list(false)
        .with_target(false)
        .without_time()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .try_init();
}
