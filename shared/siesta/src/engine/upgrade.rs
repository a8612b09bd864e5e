//! Upgrade: move an unfinished run to this engine's build, only when its journal
//! replays on this build's code at that moment (see `replay_check`).
//!
//! One conditional write (on the version the check read) sets the run's `build_id`
//! and appends `RunUpgraded` (`From`, `To`, `Replayed`), then a wake-up lets the new
//! build take whatever the run had waiting. A run parked for `NonDeterminism` (or for
//! a panic of its workflow body) whose journal now replays is resumed by the same
//! write, as [`Engine::resume`] would: one call fixes it.

use crate::timeline as tl;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::replay_check::{Divergence, ReplayCheck};
use super::{Engine, EngineError};
use crate::error::PANICKED;
use crate::model::*;
use crate::ports::*;

/// What upgrading every unfinished run of a build did.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UpgradeReport {
    /// The build the runs were on.
    pub from: String,
    /// This engine's build, the runs' new build.
    pub to: String,
    /// Runs moved to this build.
    pub upgraded: Vec<RunId>,
    /// Runs left on their build: their journal does not replay here.
    pub diverged: Vec<DivergedRun>,
    /// Runs left on their build for another reason (running right now, changed
    /// while being upgraded, storage): try them again.
    pub skipped: Vec<SkippedRun>,
}

/// A run an upgrade left on its build because its journal does not replay.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DivergedRun {
    /// The run.
    pub run_id: RunId,
    /// Where its journal and this build's code part ways.
    pub divergence: Divergence,
}

/// A run an upgrade did not move for a reason other than its journal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SkippedRun {
    /// The run.
    pub run_id: RunId,
    /// Why.
    pub reason: String,
}

/// Whether a run parked for this reason is resumed by an upgrade that replays it.
fn parked_for_code(error: Option<&ErrorInfo>) -> bool {
    error.is_some_and(|e| e.kind == "NonDeterminism" || e.kind == PANICKED)
}

impl Engine {
    /// Move the unfinished run to this engine's build if its journal replays cleanly
    /// here now ([`Engine::check_replay`]); otherwise [`EngineError::Diverged`] and the
    /// run is left as it was. `if_match` guards against a stale view (the run's
    /// version); without it a run that changes between the check and the write is
    /// checked again. A run already on this build is returned unchanged, unless it is
    /// parked for non-determinism (then it is checked, and resumed when it replays).
    pub async fn upgrade(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        if_match: Option<u64>,
    ) -> Result<Run, EngineError> {
        self.upgrade_as(tenant, run_id, if_match, None).await
    }

    /// [`Engine::upgrade`] by `by` (the operator), named in the timeline's `RunUpgraded`
    /// (`UpgradedBy`).
    pub async fn upgrade_as(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        if_match: Option<u64>,
        by: Option<&str>,
    ) -> Result<Run, EngineError> {
        for _ in 0..4 {
            let run = self.run_at(tenant, run_id, if_match).await?;
            if run.status.is_finished() {
                return Err(EngineError::AlreadyFinished(run.status));
            }
            let resume = run.status == RunStatus::Parked && parked_for_code(run.error.as_ref());
            let to = self.config.build_id.clone();
            if run.build_id.as_deref() == Some(to.as_str()) && !resume {
                return Ok(run);
            }
            let now = self.clock.now();
            if run.is_leased(now) {
                return Err(EngineError::Leased);
            }
            let replay_input = self.backend.store.load_replay_input(tenant, run_id).await?;
            let replayed = match self.check_replay_input(run.clone(), replay_input).await? {
                ReplayCheck::Clean { replayed } => replayed,
                ReplayCheck::Diverged(divergence) => {
                    return Err(EngineError::Diverged(divergence));
                }
            };
            let mut next = run.clone();
            next.version += 1;
            next.updated_at = now;
            next.build_id = Some(to.clone());
            let mut timeline = vec![TimelineEvent {
                seq: 0,
                at: now,
                event_type: EventType::RunUpgraded,
                sub_type: None,
                id: None,
                parent_id: None,
                name: Some(run.workflow.clone()),
                details: tl::EventDetails::RunUpgraded(tl::RunUpgraded {
                    from: run.build_id.clone(),
                    to: to.to_string(),
                    replayed: replayed as u64,
                    upgraded_by: by.map(str::to_owned),
                })
                .to_value(),
            }];
            if resume {
                timeline.push(self.resume_parked(&run, &mut next, now)?);
            }
            for event in &mut timeline {
                next.timeline_seq += 1;
                event.seq = next.timeline_seq;
            }
            let mut checkpoint = Checkpoint::new(next.clone(), run.version, None);
            checkpoint.timeline = timeline;
            match self.backend.store.checkpoint(&checkpoint).await {
                Ok(()) => {}
                Err(StoreError::Conflict(current)) => {
                    // The run moved since the check read it (a delivery, a claim): the
                    // check may be stale, so it is made again, or the caller told.
                    // At the version the caller named, the conflict was a lease
                    // renewal in between (it moves no version): read again.
                    let current = current.map_or(run.version + 1, |c| c.version);
                    if if_match.is_some_and(|expected| expected != current) {
                        return Err(EngineError::VersionMismatch { current });
                    }
                    continue;
                }
                Err(e) => return Err(e.into()),
            }
            self.watchers.changed(tenant, run_id);
            self.send_wake(
                WakeUp {
                    tenant: tenant.clone(),
                    run_id: run_id.clone(),
                    reason: WakeReason::Delivery,
                    epoch_hint: 0,
                    seq_hint: Some(next.timeline_seq),
                },
                Duration::ZERO,
                next.due_at.filter(|_| resume),
            )
            .await;
            return Ok(next);
        }
        Err(EngineError::Store(StoreError::Unavailable(
            "the run kept changing while being upgraded".to_owned(),
        )))
    }

    /// Upgrade every unfinished run of `build` (of this tenant) that replays on this
    /// engine's build; report the others with where they diverge. Runs that cannot be
    /// moved right now (running, changing) are reported as skipped.
    pub async fn upgrade_build(
        &self,
        tenant: &TenantId,
        build: &str,
    ) -> Result<UpgradeReport, EngineError> {
        let mut report = UpgradeReport {
            from: build.to_owned(),
            to: self.config.build_id.clone(),
            ..UpgradeReport::default()
        };
        for run in self.unfinished_runs_of(tenant, Some(build)).await? {
            match self.upgrade(tenant, &run.id, None).await {
                Ok(_) => report.upgraded.push(run.id),
                Err(EngineError::Diverged(divergence)) => report.diverged.push(DivergedRun {
                    run_id: run.id,
                    divergence,
                }),
                // Finished meanwhile: nothing to move.
                Err(EngineError::AlreadyFinished(_) | EngineError::NotFound) => {}
                Err(e) => report.skipped.push(SkippedRun {
                    run_id: run.id,
                    reason: e.to_string(),
                }),
            }
        }
        Ok(report)
    }

    /// The tenant's unfinished runs, of `build` when given (`""` picks runs that
    /// recorded no build), oldest first.
    pub async fn unfinished_runs_of(
        &self,
        tenant: &TenantId,
        build: Option<&str>,
    ) -> Result<Vec<Run>, EngineError> {
        let mut runs = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let page = self
                .backend
                .store
                .list_runs(tenant, &RunFilter::default(), cursor.as_deref(), 500)
                .await?;
            runs.extend(page.runs.into_iter().filter(|r| {
                !r.status.is_finished()
                    && build.is_none_or(|b| r.build_id.as_deref().unwrap_or("") == b)
            }));
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        runs.reverse();
        Ok(runs)
    }
}
