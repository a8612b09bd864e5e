//! Dead letters and the runs they park. A *dead letter* is a wake-up that kept failing
//! and went to the dead-letter queue ([`DeadLetter`]); a *dead-lettered run* is the run
//! one parked, because the wake-up was still its latest.
//!
//! The dead-letter queue itself is drained by every sweep ([`Engine::sweep`]): each dead
//! letter is handled once, then deleted. What an operator has to act on is what it left
//! behind — a dead-lettered run, with the reason in its error and the wake-up in its
//! `RunParked` event — so that is what is listed ([`Engine::dead_lettered_runs`]) and
//! *redriven*: redriving resumes dead-lettered runs, one or all ([`Engine::resume`] of
//! each; SQS's word for moving messages off a dead-letter queue, here applied to the run,
//! since the message is already gone). A dead letter that the run's progress had
//! overtaken parked nothing and needs nothing.
//!
//! Handling the dead-letter queue itself ([`Engine::handle_dead_letters`], the first
//! move of every sweep) is here too.

use crate::timeline as tl;
use std::time::Duration;

use super::{Engine, EngineError};
use crate::lifecycle::{LifecycleEvent, decide};
use crate::model::*;
use crate::ports::*;

/// What handling the dead-letter queue did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeadLetterReport {
    /// Dead letters handled, each then deleted.
    pub handled: usize,
    /// Runs parked for one.
    pub parked: usize,
}

/// How long a dead letter taken by the sweep stays hidden: it is deleted once handled,
/// and comes back after this if the sweep stopped before.
const DEAD_LETTER_VISIBILITY: Duration = Duration::from_secs(300);

/// The error kind of a run parked for a dead-lettered wake-up.
pub const DEAD_LETTERED: &str = "DeadLettered";

/// How many pages of parked runs one listing call reads at most before it answers with
/// what it found (possibly fewer than asked for) and a cursor: runs parked for other
/// reasons are skipped, and a call's work stays bounded however many there are.
const MAX_PAGES_PER_CALL: usize = 8;

/// One page of dead-lettered runs, newest first.
#[derive(Debug, Clone, Default)]
pub struct DeadLetteredRunPage {
    /// The runs parked for a dead letter.
    pub runs: Vec<Run>,
    /// Pass back to get the next page; `None` on the last page. A page may hold fewer
    /// than asked for and still have a next one.
    pub next_cursor: Option<String>,
}

/// Whether `run` is parked because a wake-up of its own was dead-lettered.
pub fn is_dead_lettered(run: &Run) -> bool {
    run.status == RunStatus::Parked && run.error.as_ref().is_some_and(|e| e.kind == DEAD_LETTERED)
}

impl Engine {
    /// The tenant's dead-lettered runs (parked for a dead letter), newest first, at most `limit`,
    /// from `cursor` (a previous page's `next_cursor`). Reads at most a few pages of
    /// parked runs per call.
    pub async fn dead_lettered_runs(
        &self,
        tenant: &TenantId,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<DeadLetteredRunPage, EngineError> {
        let filter = RunFilter {
            status: Some(RunStatus::Parked),
            workflow: None,
        };
        let mut page = DeadLetteredRunPage::default();
        let mut cursor = cursor.map(str::to_owned);
        for _ in 0..MAX_PAGES_PER_CALL {
            // Never more than still fits: every run of the page can be kept, so the
            // store's cursor is where this page ends.
            let want = limit.saturating_sub(page.runs.len());
            if want == 0 {
                break;
            }
            let parked = self
                .backend()
                .store
                .list_runs(tenant, &filter, cursor.as_deref(), want)
                .await?;
            page.runs
                .extend(parked.runs.into_iter().filter(is_dead_lettered));
            cursor = parked.next_cursor;
            if cursor.is_none() {
                break;
            }
        }
        page.next_cursor = cursor;
        Ok(page)
    }

    /// Redrive one dead-lettered run: resume it (pending, due now, woken; see
    /// [`Engine::resume`]). [`EngineError::NotFound`] when the run is not parked for a
    /// dead letter (any more); `if_match` guards against a stale view.
    pub async fn redrive_dead_letter(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        if_match: Option<u64>,
    ) -> Result<Run, EngineError> {
        self.redrive_dead_letter_as(tenant, run_id, if_match, None)
            .await
    }

    /// [`Engine::redrive_dead_letter`] by `by` (the operator), named in the timeline's
    /// `RunResumed` (`ResolvedBy`).
    pub async fn redrive_dead_letter_as(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        if_match: Option<u64>,
        by: Option<&str>,
    ) -> Result<Run, EngineError> {
        let run = self.get_run(tenant, run_id).await?;
        if !is_dead_lettered(&run) {
            return Err(EngineError::NotFound);
        }
        self.resume_as(tenant, run_id, if_match.or(Some(run.version)), by)
            .await
    }

    /// Redrive every dead-lettered run of the tenant, at most `limit`; the runs resumed. A run
    /// that changed meanwhile (resumed or cancelled by someone else) is skipped.
    pub async fn redrive_dead_letters(
        &self,
        tenant: &TenantId,
        limit: usize,
    ) -> Result<Vec<Run>, EngineError> {
        let mut resumed = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let page = self
                .dead_lettered_runs(tenant, cursor.as_deref(), (limit - resumed.len()).min(100))
                .await?;
            for run in page.runs {
                match self.resume(tenant, &run.id, Some(run.version)).await {
                    Ok(run) => resumed.push(run),
                    Err(
                        EngineError::VersionMismatch { .. }
                        | EngineError::NotParked(_)
                        | EngineError::AlreadyFinished(_)
                        | EngineError::NotFound,
                    ) => {}
                    Err(e) => return Err(e),
                }
            }
            cursor = page.next_cursor;
            if cursor.is_none() || resumed.len() >= limit {
                return Ok(resumed);
            }
        }
    }
}

impl Engine {
    /// Handle every dead letter, up to `limit`, each once: the dead-letter queue is
    /// paged through (each page hidden while it is handled) and every dead letter is
    /// deleted once handled, so none is seen twice and none is missed however many
    /// there are.
    ///
    /// A dead letter parks its run — with the reason and the wake-up in its error and
    /// timeline, for an operator to see, fix and resume — only when the run is still
    /// where the wake-up left it: not finished or parked, no live lease (someone is
    /// working on it), and no progress since the wake-up was sent (`seq_hint`, when
    /// the sender knew it). A wake-up that the run's progress has overtaken parks
    /// nothing: the run went on without it. A resumed run has moved on past its old
    /// dead letters, so `resume` sticks.
    pub async fn handle_dead_letters(&self, limit: usize) -> Result<DeadLetterReport, EngineError> {
        let mut report = DeadLetterReport::default();
        while report.handled < limit {
            let page = self
                .backend
                .queue
                .dead_letters((limit - report.handled).min(10), DEAD_LETTER_VISIBILITY)
                .await?;
            if page.is_empty() {
                break;
            }
            for letter in page {
                // On an error the letter stays, and comes back after its visibility.
                let parked = self.handle_dead_letter(&letter.wake).await?;
                self.backend
                    .queue
                    .delete_dead_letter(&letter.receipt)
                    .await?;
                report.handled += 1;
                report.parked += usize::from(parked);
            }
        }
        Ok(report)
    }

    /// Park the run of one dead letter if the letter is still its latest wake-up;
    /// whether it parked it.
    async fn handle_dead_letter(&self, wake: &WakeUp) -> Result<bool, EngineError> {
        let Some(run) = self
            .backend
            .store
            .get_run(&wake.tenant, &wake.run_id)
            .await?
        else {
            return Ok(false);
        };
        if run.status.is_finished() || run.status == RunStatus::Parked {
            return Ok(false);
        }
        if wake.seq_hint.is_some_and(|seq| run.timeline_seq > seq) {
            tracing::info!(tenant = %run.tenant, run_id = %run.id, "a dead-lettered wake-up was overtaken by the run's progress; nothing to park");
            return Ok(false);
        }
        // Take the lease first: parking is then an ordinary fenced checkpoint, and a
        // run someone holds is not parked under them.
        let now = self.clock.now();
        let run = match self.claim_lease(wake, "dead-letter", now).await {
            Ok(run) => run,
            Err(StoreError::Conflict(_) | StoreError::NotFound) => return Ok(false),
            Err(e) => return Err(e.into()),
        };
        let status = decide(run.status, LifecycleEvent::Park)
            .map_err(|e| EngineError::Gone(e.to_string()))?;
        let reason = ErrorInfo::new(
            DEAD_LETTERED,
            "a wake-up of this run kept failing and went to the dead-letter queue; \
             fix the cause, then resume or cancel the run",
            false,
        );
        let mut next = run.clone();
        next.status = status;
        next.version += 1;
        next.updated_at = now;
        next.lease = None;
        next.due_at = None;
        next.resend_after = None;
        next.error = Some(reason.clone());
        next.timeline_seq += 1;
        let mut checkpoint = Checkpoint::new(next.clone(), run.version, Some(run.epoch));
        checkpoint.timeline.push(TimelineEvent {
            seq: next.timeline_seq,
            at: now,
            event_type: EventType::RunParked,
            sub_type: None,
            id: None,
            parent_id: None,
            name: Some(run.workflow.clone()),
            details: tl::EventDetails::RunParked(tl::RunParked {
                error: Some(reason.clone()),
                reason: None,
                wake_up: Some(serde_json::json!(wake)),
            })
            .to_value(),
        });
        match self.backend.store.checkpoint(&checkpoint).await {
            Ok(()) => {
                tracing::warn!(tenant = %run.tenant, run_id = %run.id, "run parked: its wake-up was dead-lettered");
                Ok(true)
            }
            Err(StoreError::Conflict(_)) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }
}
