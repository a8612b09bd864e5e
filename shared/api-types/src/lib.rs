//! The request bodies, queries and views of Siesta's HTTP API, in one place for the
//! server (`siesta-api`, which derives its OpenAPI document from them) and its clients
//! (`siesta-client`), so both read and write the same definition. Serde types with their
//! OpenAPI schemas (utoipa's `ToSchema`/`IntoParams` derives) and nothing of HTTP: no
//! web framework, no HTTP client.
//!
//! How the engine's records become these views (a run and its journal, a timeline event
//! with its large values and times) is the server's business and lives in `siesta-api`.
//!
//! A file per family of routes, as in the server's `routes/`:
//!
//! | file | what the routes take and answer |
//! |---|---|
//! | `runs.rs` | [`StartRun`], [`RunListQuery`], [`TimelineQuery`]; [`RunView`], [`RunPage`], [`RunResult`], [`Timeline`] |
//! | `control.rs` | [`Resolution`] (a tool call's outcome, given by an operator) |
//! | `actions.rs` | [`StartRunsAction`] (an action and a filter); [`RunsActionView`], [`RunsActionList`] |
//! | `deliveries.rs` | [`CallbackFailure`]; [`Accepted`], [`Received`] |
//! | `dead_letters.rs` | [`DeadLetteredRunQuery`]; [`DeadLetteredRunPage`], [`Redriven`] |
//! | `streams.rs` | [`StreamQuery`]; [`StreamPageView`], [`StreamChunkView`] |
//! | `replay.rs` | [`ReplayCheckView`] |
//! | `builds.rs` | [`BuildList`] |
//! | `schedules.rs` | [`ScheduleList`], [`ScheduleView`] |
//! | `meta.rs` | [`ErrorBody`] (every error answer), [`Health`] |
//!
//! and what they share: times ([`Rfc3339`]), large values and path segments
//! ([`ValueRef`], [`path_segment`]), and the schemas of the core's types they carry
//! ([`schema`]).

mod actions;
mod builds;
mod control;
mod dead_letters;
mod deliveries;
mod limits;
mod meta;
mod replay;
mod restart;
mod runs;
mod schedules;
pub mod schema;
mod streams;
mod time;
mod values;
mod workflows;

pub use actions::{
    RunsActionFilter, RunsActionKind, RunsActionList, RunsActionNote, RunsActionStatus,
    RunsActionView, StartRunsAction,
};
pub use builds::{BuildList, BuildView};
pub use control::{Resolution, ResolvedError};
pub use dead_letters::{DeadLetteredRunPage, DeadLetteredRunQuery, DeadLetteredRunView, Redriven};
pub use deliveries::{Accepted, CallbackFailure, FailureBody, Received};
pub use limits::{LimitKeyView, LimitList, LimitView};
pub use meta::{ErrorBody, ErrorDetail, Health};
pub use replay::ReplayCheckView;
pub use restart::{RestartBody, RestartView};
pub use runs::{
    OperationsSummary, QueuedView, RunListQuery, RunPage, RunResult, RunView, StartRun, Timeline,
    TimelineEventView, TimelineQuery, WaitView,
};
pub use schedules::{ScheduleList, ScheduleView};
pub use streams::{StreamChunkView, StreamPageView, StreamQuery};
pub use time::{NotATime, Rfc3339};
pub use values::{VALUE_REF, ValueRef, path_segment, value_path};
pub use workflows::{PauseWorkflowBody, WorkflowPauseView};
