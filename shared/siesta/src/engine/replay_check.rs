//! The replay check: does a run's journal replay on this engine's code?
//!
//! The workflow runs from the top over the run's journal and deliveries exactly as a
//! wake-up would replay it, with one difference: the pass is *checking*
//! ([`Shared::checking`]). Wherever the code would do something the journal does not
//! hold — run a step, call a tool or a model, start a child, create a callback, start a
//! wait, consume a delivery — the branch stops there (the run replayed cleanly so far)
//! instead of doing it, and where the code asks for an operation the journal does not
//! have at that position, the divergence is recorded instead of parking the run.
//! Nothing is written, sent or claimed: the store is only read (the run, its replay input,
//! the artifacts of offloaded values).

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::task::Poll;

use serde::{Deserialize, Serialize};

use super::finish::{first_unvisited, unvisited_message};
use super::wakeup::{WokenFlag, WorkflowFuture};
use super::{Engine, EngineError};
use crate::context::{Context, LeaseWatch, Shared, decode_payload};
use crate::error::panic_message;
pub use crate::model::Divergence;
use crate::model::*;
use crate::ports::ReplayInput;
use crate::time::Timestamp;

/// What a replay check found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum ReplayCheck {
    /// The code replays every journal entry it reached; `replayed` of them. It stopped
    /// where the journal ends (or the run waits), or at the workflow's end.
    Clean {
        /// Journal entries replayed.
        replayed: usize,
    },
    /// The code left the journal.
    Diverged(Divergence),
}

impl ReplayCheck {
    /// Whether the journal replays.
    pub fn is_clean(&self) -> bool {
        matches!(self, ReplayCheck::Clean { .. })
    }
}

/// A run and its replay input as one JSON document (`GET /runs/{id}/export`), for a
/// replay check away from the store (`myapp replay --export FILE`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunExport {
    /// The document's format: [`RunExport::FORMAT`].
    pub format: String,
    /// The run.
    pub run: Run,
    /// Every journal entry.
    pub journal: Vec<JournalEntry>,
    /// Every delivery, in `seq` order.
    pub deliveries: Vec<Delivery>,
}

impl RunExport {
    /// The format this version writes and reads.
    pub const FORMAT: &'static str = "siesta.run-export.v1";

    /// The export of `run` with its replay input.
    pub fn new(run: Run, replay_input: ReplayInput) -> RunExport {
        RunExport {
            format: RunExport::FORMAT.to_owned(),
            run,
            journal: replay_input.journal,
            deliveries: replay_input.deliveries,
        }
    }

    /// The run and its replay input, to check.
    pub fn into_parts(self) -> (Run, ReplayInput) {
        (
            self.run,
            ReplayInput {
                journal: self.journal,
                deliveries: self.deliveries,
            },
        )
    }
}

impl Engine {
    /// The run (of this tenant) and its replay input as one document. Values offloaded to
    /// the artifact store (the input, step results, delivered payloads...) are read
    /// and put inline, so the document replays with no access to the store.
    pub async fn export_run(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
    ) -> Result<RunExport, EngineError> {
        let mut run = self.get_run(tenant, run_id).await?;
        let mut replay_input = self.backend.store.load_replay_input(tenant, run_id).await?;
        self.inline(&mut run.input).await?;
        if let Some(output) = &mut run.output {
            self.inline(output).await?;
        }
        for entry in &mut replay_input.journal {
            match &mut entry.state {
                EntryState::Succeeded { value, .. } => self.inline(value).await?,
                EntryState::Polling { state, .. } => self.inline(state).await?,
                _ => {}
            }
        }
        for delivery in &mut replay_input.deliveries {
            match &mut delivery.body {
                DeliveryBody::CallbackSucceeded { value, .. }
                | DeliveryBody::Event { value, .. }
                | DeliveryBody::Message { value } => self.inline(value).await?,
                DeliveryBody::ChildFinished {
                    outcome: Ok(value), ..
                } => self.inline(value).await?,
                _ => {}
            }
        }
        Ok(RunExport::new(run, replay_input))
    }

    /// Replace an offloaded value by its content: replay decodes both the same way.
    async fn inline(&self, payload: &mut Payload) -> Result<(), EngineError> {
        if let Payload::Artifact(_) = payload {
            let value: serde_json::Value =
                decode_payload(&self.backend, payload).await.map_err(|e| {
                    EngineError::Store(crate::ports::StoreError::Unavailable(e.to_string()))
                })?;
            *payload = Payload::Inline(value);
        }
        Ok(())
    }

    /// Check that the run's journal replays on this engine's code, with no side effect
    /// and no write (see the module docs). A finished run is checked too: its whole
    /// journal must replay.
    pub async fn check_replay(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
    ) -> Result<ReplayCheck, EngineError> {
        let run = self.get_run(tenant, run_id).await?;
        let replay_input = self.backend.store.load_replay_input(tenant, run_id).await?;
        self.check_replay_input(run, replay_input).await
    }

    /// [`Engine::check_replay`] over a run and its replay input given whole (an exported
    /// run, say): the store is not read, except for the artifacts of values the
    /// journal offloaded.
    pub async fn check_replay_input(
        &self,
        run: Run,
        replay_input: ReplayInput,
    ) -> Result<ReplayCheck, EngineError> {
        let Some(workflow) = self.registry.get(&run.workflow).cloned() else {
            return Err(EngineError::UnknownWorkflow(run.workflow.clone()));
        };
        let input: serde_json::Value = decode_payload(&self.backend, &run.input)
            .await
            .map_err(|e| EngineError::InvalidInput(e.to_string()))?;
        let mut run = run;
        // A cancellation would stop the pass at its first boundary; the check asks only
        // whether the journal replays.
        run.cancel_requested = false;
        let shared = Arc::new(
            Shared::new(
                self.backend.clone(),
                self.clock.clone(),
                self.context_config(),
                run,
                replay_input.into(),
                Timestamp(i64::MAX),
                Arc::new(LeaseWatch::default()),
            )
            .checking(),
        );
        let fut = workflow.start(Context::root(shared.clone()), input);
        let finished = drive(&shared, fut).await;
        let st = shared.state();
        if let Some(divergence) = &st.divergence {
            return Ok(ReplayCheck::Diverged(divergence.clone()));
        }
        match finished {
            Driven::Panicked(message) => Ok(ReplayCheck::Diverged(Divergence {
                position: first_unvisited(&st)
                    .map(|e| e.position.clone())
                    .unwrap_or_else(|| Position::from("")),
                journal_kind: None,
                code_kind: None,
                message: format!("the workflow panicked outside a step on replay: {message}"),
            })),
            Driven::Finished => match first_unvisited(&st) {
                Some(entry) => Ok(ReplayCheck::Diverged(Divergence {
                    position: entry.position.clone(),
                    journal_kind: Some(entry.kind),
                    code_kind: None,
                    message: unvisited_message(entry),
                })),
                None => Ok(ReplayCheck::Clean {
                    replayed: st.visited.len(),
                }),
            },
            // Reached and found in the journal: a position the code reached where the
            // journal ends (where it would go on) is not a replayed entry.
            Driven::Stopped => Ok(ReplayCheck::Clean {
                replayed: st
                    .visited
                    .iter()
                    .filter(|p| st.journal.contains_key(*p))
                    .count(),
            }),
        }
    }
}

enum Driven {
    Finished,
    Stopped,
    Panicked(String),
}

/// Poll the checked workflow until it finishes or every branch has stopped.
async fn drive(shared: &Arc<Shared>, mut fut: WorkflowFuture) -> Driven {
    let woken = Arc::new(WokenFlag::default());
    let woken_waker = futures::task::waker(woken.clone());
    std::future::poll_fn(|cx| {
        woken.arm(cx.waker());
        let mut inner = std::task::Context::from_waker(&woken_waker);
        match std::panic::catch_unwind(AssertUnwindSafe(|| fut.as_mut().poll(&mut inner))) {
            Ok(Poll::Ready(_)) => return Poll::Ready(Driven::Finished),
            Ok(Poll::Pending) => {}
            Err(payload) => return Poll::Ready(Driven::Panicked(panic_message(payload.as_ref()))),
        }
        if shared.state().running <= 0 && !woken.woken() {
            Poll::Ready(Driven::Stopped)
        } else {
            Poll::Pending
        }
    })
    .await
}
