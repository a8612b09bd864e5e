//! The sweep: wake every run that is due and whose wake-up is not on its way.

use std::time::Duration;

use futures::StreamExt;

use super::{Engine, EngineError, OtherBuilds};
use crate::model::*;
use crate::ports::*;

/// What one sweep did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SweepReport {
    /// Due runs found.
    pub due: usize,
    /// Wake-ups sent.
    pub woken: usize,
    /// Of those, runs whose holder's lease expired (a crashed step).
    pub expired_leases: usize,
    /// Of those, waiting runs whose timer, deadline, heartbeat timeout or retry fell due,
    /// or that received a delivery.
    pub due_waits: usize,
    /// Of those, runnable runs whose wake-up was lost.
    pub lost_wakeups: usize,
    /// Due runs not woken because a wake-up for them waits in the queue already.
    pub already_queued: usize,
    /// Due runs not woken because another build started them and this engine leaves
    /// those to their build's sweep ([`OtherBuilds::Leave`]).
    pub other_builds: usize,
    /// Dead letters handled (and deleted from the dead-letter queue).
    pub dead_letters: usize,
    /// Of those, runs parked because a wake-up of theirs kept failing and was
    /// dead-lettered while it was their latest.
    pub parked_dead_letters: usize,
    /// Runs started for schedules' ticks ([`Engine::fire_schedules`]).
    pub scheduled: usize,
    /// Wake-ups sent for bulk actions' jobs whose progress had stalled (a lost
    /// wake-up, a process that died acting on one).
    pub action_jobs: usize,
}

/// Why the sweep sent a due run no wake-up.
enum Left {
    /// One waits in the queue already.
    Queued,
    /// Another build started it, and this engine leaves it to that build.
    OtherBuild,
    /// The send failed; the next sweep tries again.
    SendFailed,
}

/// How many wake-ups the sweep sends at once.
const SWEEP_SENDS_IN_FLIGHT: usize = 16;

impl Engine {
    /// Handle the dead-letter queue (see [`Engine::handle_dead_letters`]), then wake
    /// every run that is due — fired timers, passed deadlines, expired leases, lost
    /// wake-ups — and whose wake-up is not on its way: the due index leaves out runs
    /// whose `resend_after` has not passed (a wake-up sent for them may merely wait
    /// behind others), and a queue that can tell (the embedded one) is asked whether it
    /// holds one: if it does, the run's `resend_after` is pushed a margin out and
    /// nothing is sent; if it does not, a wake-up is sent at once. Each wake-up sent
    /// pushes the run's `resend_after` out, so the next sweep does not send another
    /// while this one waits in the queue. Bounded by
    /// `limit`; idempotent (a duplicate wake-up is a no-op).
    ///
    /// A due run of another build is woken like any other under [`OtherBuilds::Wake`]
    /// (the wake-up's handler forwards it to its build). Under [`OtherBuilds::Leave`]
    /// it is sent nothing — this engine would only answer its wake-up with
    /// [`WakeOutcome::OtherBuild`](super::WakeOutcome::OtherBuild) — and its
    /// `resend_after` is pushed out as if a wake-up had been sent, so it leaves the
    /// due index's next pages to this build's runs: a sweep that skipped such runs in
    /// place would read the same ones every tick, and a page full of them would starve
    /// the runs it serves. The run's own build wakes it: the embedded store clears
    /// the mark when the file is opened (no wake-up for it is queued), otherwise its
    /// build's sweep finds it once the mark has passed.
    ///
    /// First of all, schedules' due ticks are fired ([`Engine::fire_schedules`]), and
    /// bulk actions' jobs that stalled are woken again (`actions/`).
    pub async fn sweep(&self, limit: usize) -> Result<SweepReport, EngineError> {
        let scheduled = self.fire_schedules().await.started;
        let action_jobs = self.resend_stale_action_jobs().await;
        let dead = self.handle_dead_letters(limit).await?;
        let now = self.clock.now();
        let due = self.backend.store.due_runs(now, limit).await?;
        let mut report = SweepReport {
            due: due.len(),
            dead_letters: dead.handled,
            parked_dead_letters: dead.parked,
            scheduled,
            action_jobs,
            ..SweepReport::default()
        };
        // Checks and sends go out concurrently: a page of hundreds of due runs would
        // otherwise cost hundreds of round trips in a row.
        let sent: Vec<(RunStatus, Option<Left>)> = futures::stream::iter(due)
            .map(|run| async move {
                let queue = &self.backend.queue;
                if self.config.sweep_other_builds == OtherBuilds::Leave
                    && run
                        .build_id
                        .as_deref()
                        .is_some_and(|b| b != self.config.build_id)
                {
                    let waited = run.due_at.until(now);
                    let later = now.plus(waited.max(self.config.resend_margin));
                    if let Err(e) = self
                        .backend
                        .store
                        .set_resend_after(&run.tenant, &run.run_id, run.due_at, Some(later))
                        .await
                    {
                        tracing::warn!(run_id = %run.run_id, error = %e, "could not set aside a run of another build");
                    }
                    return (run.status, Some(Left::OtherBuild));
                }
                match queue.holds(&run.tenant, &run.run_id, run.due_at).await {
                    Ok(Some(true)) => {
                        // On its way: look again only after another margin, so the run
                        // leaves the due index's next pages instead of filling them.
                        let later = now.plus(self.config.resend_margin);
                        if let Err(e) = self
                            .backend
                            .store
                            .set_resend_after(&run.tenant, &run.run_id, run.due_at, Some(later))
                            .await
                        {
                            tracing::warn!(run_id = %run.run_id, error = %e, "could not note the queued wake-up");
                        }
                        return (run.status, Some(Left::Queued));
                    }
                    Ok(_) => {}
                    // Unknown: better a harmless duplicate than a lost wake-up.
                    Err(e) => tracing::warn!(run_id = %run.run_id, error = %e, "could not look for a queued wake-up"),
                }
                let wake = WakeUp::new(run.tenant.clone(), run.run_id.clone(), WakeReason::Sweep);
                if queue.send(&wake, Duration::ZERO).await.is_err() {
                    return (run.status, Some(Left::SendFailed));
                }
                // The longer the run has waited for its wake-up, the longer the next
                // one is given: a long backlog costs a duplicate per doubling, not one
                // per sweep.
                let waited = run.due_at.until(now);
                let resend_after = now.plus(waited.max(self.config.resend_margin));
                if let Err(e) = self
                    .backend
                    .store
                    .set_resend_after(&run.tenant, &run.run_id, run.due_at, Some(resend_after))
                    .await
                {
                    // The next sweep sends another: a duplicate, nothing lost.
                    tracing::warn!(run_id = %run.run_id, error = %e, "could not note the wake-up sent");
                }
                (run.status, None)
            })
            .buffer_unordered(SWEEP_SENDS_IN_FLIGHT)
            .collect()
            .await;
        for (status, left) in sent {
            match left {
                Some(Left::Queued) => {
                    report.already_queued += 1;
                    continue;
                }
                Some(Left::OtherBuild) => {
                    report.other_builds += 1;
                    continue;
                }
                Some(Left::SendFailed) => continue,
                None => {}
            }
            report.woken += 1;
            match status {
                RunStatus::Running => report.expired_leases += 1,
                RunStatus::Waiting => report.due_waits += 1,
                _ => report.lost_wakeups += 1,
            }
        }
        Ok(report)
    }
}
