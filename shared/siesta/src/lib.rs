//! Siesta: durable execution for long-running workflows.
#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod context;
pub mod engine;
pub mod error;
pub mod lifecycle;
pub mod model;
pub mod ports;
pub mod probe;
pub mod registry;
pub mod retry;
pub mod time;

pub use context::Context;
pub use engine::{Engine, EngineConfig, EngineError, SweepReport, WakeOutcome};
pub use error::{Error, ErrorKind, StepError};
pub use model::*;
pub use registry::Registry;
pub use retry::{Backoff, Jitter, RetryOn, RetryStrategy};
pub use time::{Clock, ManualClock, SystemClock, Timestamp};
