//! The operator's view of dead letters: the runs parked because a wake-up of theirs kept
//! failing and went to the dead-letter queue while it was their latest, listed and
//! redriven (resumed) one by one or all at once.
//!
//! The dead-letter queue itself is drained by every sweep ([`Engine::sweep`]): each dead
//! letter is handled once, then deleted. What an operator has to act on is what it left
//! behind — a parked run, with the reason in its error and the wake-up in its
//! `RunParked` event — so that is what these list: a dead letter here is a run, named by
//! its id. A dead letter that the run's progress had overtaken parked nothing and needs
//! nothing.

use crate::engine::{Engine, EngineError};
use crate::model::{Run, RunId, RunStatus, TenantId};
use crate::ports::RunFilter;

/// The error kind of a run parked for a dead-lettered wake-up.
pub const DEAD_LETTERED: &str = "DeadLettered";

/// How many pages of parked runs one listing call reads at most before it answers with
/// what it found (possibly fewer than asked for) and a cursor: runs parked for other
/// reasons are skipped, and a call's work stays bounded however many there are.
const MAX_PAGES_PER_CALL: usize = 8;

/// One page of dead letters, newest first.
#[derive(Debug, Clone, Default)]
pub struct DeadLetterPage {
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
    /// The tenant's dead letters (runs parked for one), newest first, at most `limit`,
    /// from `cursor` (a previous page's `next_cursor`). Reads at most a few pages of
    /// parked runs per call.
    pub async fn dead_letters(
        &self,
        tenant: &TenantId,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<DeadLetterPage, EngineError> {
        let filter = RunFilter {
            status: Some(RunStatus::Parked),
            workflow: None,
        };
        let mut page = DeadLetterPage::default();
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

    /// Redrive one dead letter: resume the run it parked (pending, due now, woken; see
    /// [`Engine::resume`]). [`EngineError::NotFound`] when the run is not parked for a
    /// dead letter (any more); `if_match` guards against a stale view.
    pub async fn redrive_dead_letter(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        if_match: Option<u64>,
    ) -> Result<Run, EngineError> {
        let run = self.get_run(tenant, run_id).await?;
        if !is_dead_lettered(&run) {
            return Err(EngineError::NotFound);
        }
        self.resume(tenant, run_id, if_match.or(Some(run.version)))
            .await
    }

    /// Redrive every dead letter of the tenant, at most `limit`; the runs resumed. A run
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
                .dead_letters(tenant, cursor.as_deref(), (limit - resumed.len()).min(100))
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
