//! The workflow context: the durable operations a workflow calls. This file is the
//! author's facade (`Context` and what it offers besides the operations, each of
//! which has a file of its own); the replay machinery underneath them is in `replay`
//! (positions, the journal read back, holding, suspending and checkpoints) and
//! `state` (a replay pass's shared state and its one checkpoint writer).
//!
//! Invariants this module keeps, and why:
//! - **Positions are minted at the call site**, synchronously, in creation order: the
//!   name plus a per-parent occurrence counter. Replay is correct because a workflow
//!   creates the same operations in the same order every time it runs.
//! - **An outcome is journaled before the workflow sees it.** Every operation that
//!   learns something (a step's result, a tool call's) commits it in one checkpoint and
//!   only then returns it. A wait's ending outside a combinator (a callback's payload, a
//!   timer firing, an event taken) is the exception: a replay derives it again from the
//!   stored delivery or the clock, so it is held for the next checkpoint — a step's
//!   closure may act on it first, and runs again, as after any crash mid-step, if that
//!   checkpoint is lost; a stream publish, which a replay does not redo, writes it
//!   first (see `coalesce`).
//! - **Suspension never reaches user code.** An operation that cannot complete yet
//!   records what it waits for and holds; the engine notices that every branch is
//!   blocked and checkpoints. It then either drops the workflow future or keeps it as a
//!   continuation (see `crate::continuation`): the next invocation re-arms `Shared`
//!   and every held branch re-evaluates what it waits for, exactly as a replay would
//!   from the journal. A branch that cannot re-evaluate (a stop, a failed checkpoint, a
//!   wait that does not loop) blocks for good and marks the pass as not continuable.
//! - **One writer.** Checkpoints of concurrent branches are serialised through one lock
//!   and each is conditioned on the run's version and the lease's fencing epoch; a
//!   concurrent delivery only moves the version, so the writer merges and retries, while
//!   a lost lease stops the invocation.

mod batch;
mod carried;
mod claim;
mod coalesce;
mod combinator;
mod invoke;
mod patch;
mod payload;
mod replay;
mod replayed;
mod state;
mod step;
mod stream;
mod wait;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use serde::de::DeserializeOwned;

pub use batch::{
    BatchBuilder, BatchItem, BatchOutcome, BatchResult, Branch, CompletionConfig, CompletionReason,
    branch,
};
pub use combinator::{Combinator, DurableFuture};
pub use invoke::{InvokeBuilder, child_run_id};
pub use step::{StepBuilder, StepContext, StepSemantics, ToolCallBuilder, idempotency_key};
pub use stream::{StepStream, Stream};
pub use wait::{
    Callback, CallbackBuilder, ConditionBuilder, ConditionCheck, EventBuilder, WaitBuilder,
    WaitForCallbackBuilder, WaitStrategy,
};
pub(crate) use wait::{expire_callbacks, held_callbacks_due};

use crate::error::{Error, ErrorKind};
use crate::model::*;
use crate::time::Timestamp;
pub(crate) use payload::{decode_payload, encode_payload};
pub(crate) use replay::Op;
pub(crate) use replayed::Replayed;
pub(crate) use state::{
    BlockGuard, BranchGuard, CommitError, ContextConfig, Delta, ExecState, LeaseWatch,
    PendingStart, Shared, Stop,
};

/// The handle a workflow uses for every durable operation.
///
/// Cheap to clone. Each branch of a `parallel`/`map` and each child context gets its
/// own, whose operations live under the branch's position.
#[derive(Clone)]
pub struct Context {
    pub(crate) shared: Arc<Shared>,
    path: Option<Position>,
    replaying: Arc<AtomicBool>,
    /// Unrecorded starts of this context and those around it, outermost first.
    starts: Vec<PendingStart>,
}

impl Context {
    /// The run's id.
    pub fn run_id(&self) -> &RunId {
        &self.shared.run_id
    }

    /// The run's tenant.
    pub fn tenant(&self) -> &TenantId {
        &self.shared.tenant
    }

    /// The current time, from the engine's clock. Use it for logging only: a workflow's
    /// decisions must come from durable results to replay the same way.
    pub fn now(&self) -> Timestamp {
        self.shared.now()
    }

    /// Whether this branch is still replaying recorded operations (and its log lines
    /// are therefore suppressed).
    pub fn is_replaying(&self) -> bool {
        self.replaying.load(Ordering::SeqCst)
    }

    /// Log at info level, once: a line written before a completed operation is not
    /// written again when the run replays.
    pub fn log(&self, message: impl AsRef<str>) {
        if !self.is_replaying() {
            tracing::info!(
                target: "siesta::workflow",
                tenant = %self.shared.tenant,
                run_id = %self.shared.run_id,
                "{}",
                message.as_ref()
            );
        }
    }

    /// Log at warn level, once (see [`Context::log`]).
    pub fn warn(&self, message: impl AsRef<str>) {
        if !self.is_replaying() {
            tracing::warn!(
                target: "siesta::workflow",
                tenant = %self.shared.tenant,
                run_id = %self.shared.run_id,
                "{}",
                message.as_ref()
            );
        }
    }

    /// Messages injected into the run and drained at step boundaries since the last
    /// call, oldest first. Deterministic on replay: the journal records at which step
    /// each message was drained.
    pub fn messages<T: DeserializeOwned>(&self) -> Result<Vec<T>, Error> {
        let payloads: Vec<Payload> = self
            .shared
            .state()
            .messages
            .drain(..)
            .map(|(_, p)| p)
            .collect();
        payloads
            .into_iter()
            .map(|p| match p {
                Payload::Inline(v) => serde_json::from_value(v).map_err(Error::from),
                Payload::Artifact(a) => Err(Error::new(
                    ErrorKind::Serialization,
                    format!(
                        "message stored as artifact {}; read it with get_artifact",
                        a.sha256
                    ),
                    None,
                )),
            })
            .collect()
    }

    /// Store `bytes` as an artifact of this run (content-addressed by SHA-256) and
    /// journal its reference.
    pub async fn put_artifact(
        &self,
        name: &str,
        bytes: impl Into<Bytes>,
        media_type: &str,
    ) -> Result<ArtifactRef, Error> {
        let op = self.mint(name, OperationKind::Artifact);
        let bytes = bytes.into();
        if let Some(entry) = self.lookup(&op).await {
            match entry.state {
                EntryState::Succeeded { value, .. } => return self.decode(&value).await,
                EntryState::Failed { error, .. } => return Err(Error::from_info(&error)),
                _ => {}
            }
        }
        self.go_live();
        self.boundary().await;
        // The artifact could carry a held callback's URL: it is made durable first.
        self.flush_openings().await;
        let artifact = match self
            .shared
            .backend
            .artifacts
            .put(&self.shared.tenant, &self.shared.run_id, media_type, bytes)
            .await
        {
            Ok(a) => a,
            Err(e) => {
                return Err(Error::new(
                    ErrorKind::Storage,
                    format!("artifact {name}: {e}"),
                    None,
                ));
            }
        };
        let value = Payload::Inline(serde_json::to_value(&artifact)?);
        let event = self.event(
            EventType::StepSucceeded,
            SubType::Artifact,
            &op,
            crate::timeline::EventDetails::StepSucceeded(crate::timeline::StepEnded {
                artifact: Some(serde_json::json!(artifact)),
                ..Default::default()
            }),
        );
        self.commit_or_suspend(Delta {
            journal: vec![op.entry(EntryState::Succeeded { value, attempt: 1 })],
            timeline: vec![event],
            ..Delta::default()
        })
        .await;
        Ok(artifact)
    }

    /// An artifact's content.
    pub async fn get_artifact(&self, artifact: &ArtifactRef) -> Result<Bytes, Error> {
        self.shared
            .backend
            .artifacts
            .get(artifact)
            .await
            .map_err(|e| {
                Error::new(
                    ErrorKind::Storage,
                    format!("artifact {}: {e}", artifact.sha256),
                    None,
                )
            })
    }
}
