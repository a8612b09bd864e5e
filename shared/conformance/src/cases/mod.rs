//! The cases, one contract each. Every case takes a fresh [`Harness`](crate::Harness)
//! and panics, naming what it expected and what it found, when the backend breaks the
//! contract.

mod action_jobs;
mod artifacts;
mod builds;
mod checkpoints;
mod debounces;
mod deliveries;
mod dropped_waits;
mod engine;
mod leases;
mod limits;
mod queue;
mod quotas;
mod reading;
mod restarts;
mod retention;
mod runs;
mod schedules;
mod streams;

pub use action_jobs::*;
pub use artifacts::*;
pub use builds::*;
pub use checkpoints::*;
pub use debounces::*;
pub use deliveries::*;
pub use dropped_waits::*;
pub use engine::*;
pub use leases::*;
pub use limits::*;
pub use queue::*;
pub use quotas::*;
pub use reading::*;
pub use restarts::*;
pub use retention::*;
pub use runs::*;
pub use schedules::*;
pub use streams::*;
