//! # Siesta: durable execution for long-running workflows
//!
//! A workflow is an ordinary async function over a [`Context`]. Every operation on the
//! context has a stable position (its name plus an occurrence counter) and its outcome
//! is written to the run's journal **before** the workflow sees it. When the run wakes
//! up, the function runs again from the top and completed operations return their
//! recorded outcome without executing (replay). A wait that is not satisfied yet
//! suspends the run inside the engine; user code never sees suspension.
//!
//! ```no_run
//! use siesta::prelude::*;
//!
//! #[derive(Deserialize)]
//! struct Order { item: String, amount: u64 }
//!
//! // What the callback accepts: a webhook of another shape is refused with 422.
//! #[derive(Deserialize, JsonSchema)]
//! struct Payment { status: String, transaction_id: String }
//!
//! async fn order(ctx: Context, input: Order) -> Result<String, Error> {
//!     let id: String = ctx.step("create_order", |_| async move { Ok(format!("ord-{}", input.item)) }).await?;
//!     let payment = ctx.create_callback::<Payment>("payment").timeout(Duration::from_secs(3600)).await?;
//!     let url = payment.url();
//!     ctx.tool_call("request_payment", &(&id, input.amount), |call| async move {
//!         let key = call.idempotency_key().unwrap().to_string();
//!         psp_charge(&url, &key).await.map_err(|e| StepError::from_http_status(e, "psp"))
//!     })
//!     .retry(RetryStrategy::exponential(5))
//!     .await?;
//!     let paid = payment.wait().await?;              // sleeps until the webhook or the timeout
//!     ctx.sleep(Duration::from_secs(600)).await?;    // a durable timer
//!     Ok(format!("{id}: {} ({})", paid.status, paid.transaction_id))
//! }
//! # async fn psp_charge(_: &str, _: &str) -> Result<(), u16> { Ok(()) }
//!
//! let mut registry = Registry::new();
//! registry.register("order", order);
//! ```
//!
//! ## The tour
//! - A workflow's module starts with `use siesta::prelude::*;` ([`prelude`]): the
//!   context, the errors, the registry, the strategies and the payload derives.
//! - Operations, on [`Context`]: [`step`](Context::step) (with a
//!   [`RetryStrategy`]; at-least-once or at-most-once per retry),
//!   [`tool_call`](Context::tool_call) (an idempotency key derived from its meaning;
//!   `running` recorded before the call, `unknown` parks the run),
//!   [`sleep`](Context::sleep)/[`wait`](Context::wait),
//!   [`create_callback`](Context::create_callback) and
//!   [`wait_for_callback`](Context::wait_for_callback),
//!   [`wait_for_event`](Context::wait_for_event) (their payload types derive
//!   [`JsonSchema`], checked on arrival; see [`accepts`]),
//!   [`wait_for_condition`](Context::wait_for_condition),
//!   [`run_in_child_context`](Context::run_in_child_context),
//!   [`parallel`](Context::parallel) and [`map`](Context::map),
//!   [`invoke`](Context::invoke), [`put_artifact`](Context::put_artifact),
//!   [`messages`](Context::messages) and the replay-aware [`log`](Context::log).
//! - The run lifecycle is a pure function, [`lifecycle::decide`].
//! - Storage is behind the [`ports`]: a run store, an artifact store, a wake-up queue,
//!   each operation one DynamoDB conditional write or transaction, one S3 conditional
//!   put, or one SQS message. `siesta-embedded` implements them on SQLite.
//! - The [`Engine`] is what the handlers call: start a run, handle a wake-up (claim,
//!   replay, checkpoint, release), deliver events and callback outcomes, cancel, sweep.
//!
//! ## Errors and panics
//! `?` works in steps and in workflow bodies on any `std::error::Error + Send + Sync`
//! and on `anyhow::Error`. In a step such an error is **retryable** (the step's
//! [`RetryStrategy`] decides); mark one fatal with `.fatal()` ([`StepResultExt`]),
//! [`StepError::fatal`], or by HTTP status with [`StepError::from_http_status`]. In a
//! workflow body it is the workflow's own error ([`ErrorKind::Workflow`]) and fails the
//! run. A **panic** in a step is a failed attempt of kind [`PANICKED`], retried like
//! any other; a panic in the workflow body outside a step parks the run (kind
//! `Panicked`) for an operator to fix the code and resume it. Neither reaches the
//! worker: the engine keeps serving other runs. [`Liveness`] lets a health check see a
//! background loop that stopped anyway.
//!
//! ## Determinism
//! Replay is correct only if the workflow creates the same operations in the same
//! order every time: decide from inputs and recorded results, never from the clock, a
//! random number or a `HashMap`'s order outside a step. A run whose code no longer
//! matches its journal is parked with a `NonDeterminism` error naming the position and
//! both operation kinds; it never silently diverges.
#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod accepts;
pub mod context;
pub mod cursor;
pub mod delivery;
pub mod engine;
pub mod error;
pub mod flow;
pub mod lifecycle;
pub mod liveness;
pub mod model;
mod notify;
pub mod ports;
pub mod prelude;
#[cfg(feature = "test-util")]
pub mod probe;
pub mod quota;
pub mod registry;
mod replay_cache;
pub mod retention;
pub mod retry;
pub mod schedule;
pub mod telemetry;
pub mod time;
pub mod timeline;

pub use context::Context;
pub use engine::dead_letters;

/// The build id of the crate that calls it: `name@version`, plus `+hash` when the
/// environment variable `SIESTA_BUILD_HASH` was set at compile time (a commit id from
/// CI, say). Hand it to [`EngineConfig::build_id`] so every run records the code it
/// started on.
///
/// ```
/// let config = siesta::EngineConfig { build_id: siesta::build_id!(), ..Default::default() };
/// assert!(config.build_id.starts_with("siesta@"));
/// ```
#[macro_export]
macro_rules! build_id {
    () => {
        match option_env!("SIESTA_BUILD_HASH") {
            Some(hash) => format!(
                "{}@{}+{}",
                env!("CARGO_PKG_NAME"),
                env!("CARGO_PKG_VERSION"),
                hash
            ),
            None => format!("{}@{}", env!("CARGO_PKG_NAME"), env!("CARGO_PKG_VERSION")),
        }
    };
}
pub use engine::streams::{StreamPage, visible};
pub use engine::worker::WorkerConfig;
pub use engine::{ActionRequest, DEFAULT_ACTION_RATE, MAX_ACTION_RATE};
pub use engine::{
    BatchReport, DeadLetterReport, DivergedRun, Divergence, Engine, EngineConfig, EngineError,
    LimitReport, OtherBuilds, ReplayCheck, RunExport, SkippedRun, StartOptions, Started,
    SweepReport, ToolCallResolution, UpgradeReport, WakeOutcome,
};
pub use engine::{PAUSE_CACHE_MS, WorkflowPaused};
pub use engine::{RestartRequest, Restarted, archived_position};
pub use engine::{ScheduleInfo, ScheduleReport, parse_schedule_names};
pub use error::{Error, ErrorKind, MAX_RETRY_AFTER, PANICKED, StepError, StepResultExt};
pub use flow::held::{Debounce, StartRate};
pub use flow::{KeySource, LimitOverrides, RunLimit};
pub use liveness::{Liveness, LoopGuard};
pub use model::*;
pub use notify::RunWatch;
pub use quota::{Quota, QuotaExceeded, QuotaLimit, Quotas};
pub use registry::{Registry, UpgradePolicy};
pub use replay_cache::ReplayCacheStats;
pub use retention::{RetentionPolicy, RetentionRules, Verdict, parse_retention};
pub use retry::{Backoff, Jitter, RetryOn, RetryStrategy};
pub use schedule::{CatchUp, Overlap, Schedule, ScheduleError};
/// Derive it (`#[derive(JsonSchema)]`, from the `schemars` crate) on the payload types of
/// callbacks and events, so a delivery of the wrong shape is refused when it arrives.
pub use schemars::{self, JsonSchema};
pub use time::{Clock, ManualClock, SystemClock, Timestamp};
