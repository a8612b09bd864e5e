//! The ports: what the engine needs from storage, queues and blobs.
//!
//! Each operation that must be atomic maps onto exactly one DynamoDB conditional write
//! or one `TransactWriteItems` (≤ 100 items), one S3 conditional put, or one SQS
//! message. The contract of each method says which, and every backend (the embedded
//! SQLite one, the AWS one) honours it; `siesta-conformance` checks that they do.
//!
//! Conditions that fail are [`StoreError::Conflict`] carrying the run as it is now, so
//! the caller can tell a lost lease (the epoch moved on) from a concurrent delivery (only
//! the version moved on). Throttling, 5xx and timeouts are [`StoreError::Unavailable`]:
//! the outcome may be unknown, and the engine resolves it by re-reading, never by
//! writing again blindly.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::model::*;
use crate::time::Timestamp;

mod artifacts;
mod errors;
mod queue;
mod schedules;
mod store;
mod streams;

pub use artifacts::*;
pub use errors::*;
pub use queue::*;
pub use schedules::*;
pub use store::*;
pub use streams::*;

/// The adapters a backend provides.
#[derive(Clone)]
pub struct Backend {
    /// Runs, journals, deliveries, timelines.
    pub store: Arc<dyn RunStore>,
    /// Artifacts and large values.
    pub artifacts: Arc<dyn ArtifactStore>,
    /// Wake-ups.
    pub queue: Arc<dyn WakeQueue>,
    /// Streams of chunks that runs publish.
    pub streams: Arc<dyn StreamStore>,
    /// Schedules' states (paused, the ticks dealt with).
    pub schedules: Arc<dyn ScheduleStore>,
}
