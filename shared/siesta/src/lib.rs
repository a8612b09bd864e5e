//! Siesta: durable execution for long-running workflows.
#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod error;
pub mod lifecycle;
pub mod model;
pub mod ports;
pub mod retry;
pub mod time;

pub use error::{Error, ErrorKind, StepError};
pub use model::*;
pub use retry::{Backoff, Jitter, RetryOn, RetryStrategy};
pub use time::{Clock, ManualClock, SystemClock, Timestamp};
