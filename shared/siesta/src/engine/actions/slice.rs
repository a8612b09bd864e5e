//! One slice of a job: take its lease, act on the next runs its filter matches, write
//! its progress back, and send the wake-up of the next slice after the pause its rate
//! asks for.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::act::Acted;
use super::filter::{is_past_the_end, matches, store_filter};
use crate::engine::{Engine, EngineError, WakeOutcome};
use crate::model::*;
use crate::ports::*;
use crate::time::Timestamp;

/// The most runs one slice acts on, whatever the rate.
///
/// A slice is a second's runs at the job's rate: SQS delays a message by whole
/// seconds (a shorter delay rounds up to one), so a slice of less would pace the job
/// below its rate on AWS. The runs of a slice are acted on one after the other, which
/// spreads them over the slice's own time.
const MAX_SLICE: u32 = 200;

/// The most pages of runs one slice lists: runs the store's filter lists but the rest
/// of the filter leaves out cost a page each, and a slice's work stays bounded.
const MAX_PAGES_PER_SLICE: usize = 8;

/// How early a job's wake-up may arrive and still take its slice: a queue's delay is
/// counted on its own clock, so a wake-up for an instant can be handed out a moment
/// before it by another process's clock. One dropped for being early would leave the
/// job to the sweep, a minute or more later. A duplicate wake-up takes a slice at most
/// this much before its time: under the pause after a full slice (200 runs at 1 000 a
/// second: 200 ms).
const EARLY_SLACK: Duration = Duration::from_millis(100);

/// Every how many runs a slice reads its job again, to stop once it is cancelled: a
/// cancel takes effect within this many runs, for one read per this many.
const CANCEL_CHECK_EVERY: usize = 10;

/// Slices in a row that may stop on an error before the job fails.
const MAX_ERRORS_IN_A_ROW: u32 = 5;

/// How many runs one slice of a job at `rate` acts on at most: a second's.
fn slice_size(rate: u32) -> usize {
    rate.clamp(1, MAX_SLICE) as usize
}

/// When the slice after one that began at `began` and acted on `acted` runs may
/// begin: `acted` runs at `rate` per second take that long.
fn next_slice_at(began: Timestamp, acted: usize, rate: u32) -> Timestamp {
    let ms = (acted as u64 * 1000).div_ceil(u64::from(rate.max(1)));
    began.plus(Duration::from_millis(ms))
}

impl Engine {
    /// Handle a job's wake-up ([`WakeReason::Action`]): one slice, if the job is
    /// running, due and not held by another invocation.
    pub(crate) async fn advance_action_job(
        &self,
        tenant: &TenantId,
        id: &str,
    ) -> Result<WakeOutcome, EngineError> {
        let now = self.clock.now();
        let Some(job) = self.backend.store.get_action_job(tenant, id).await? else {
            return Ok(WakeOutcome::NotFound);
        };
        if job.status.is_finished() || job.next_at > now.plus(EARLY_SLACK) {
            // Finished, or a duplicate well before its time: the job's own wake-up
            // comes then (none is sent from here: duplicates would multiply).
            return Ok(WakeOutcome::NothingToDo);
        }
        if job.is_leased(now) {
            return Ok(WakeOutcome::Busy);
        }
        if let Some(build) = job.build.as_ref().filter(|b| **b != self.config.build_id) {
            // Another build's upgrade or restart: this engine's code is not the one the
            // runs must replay on. The wake-up's handler forwards it to that build (on
            // AWS), or that build's own engines take it.
            return Ok(WakeOutcome::OtherBuild {
                build_id: build.clone(),
            });
        }
        let owner = format!(
            "{}#action-{}",
            self.config.owner,
            self.invocations.fetch_add(1, Ordering::Relaxed)
        );
        let mut claimed = job.clone();
        claimed.lease = Some(ActionJobLease {
            owner: owner.clone(),
            until: now.plus(self.config.lease_ttl),
        });
        claimed.version = match self
            .backend
            .store
            .put_action_job(&claimed, job.version)
            .await
        {
            Ok(version) => version,
            Err(StoreError::Conflict(_)) => return Ok(WakeOutcome::Busy),
            Err(e) => return Err(e.into()),
        };
        let mut progressed = claimed.clone();
        let (acted, error) = match self.act_on_slice(&mut progressed).await {
            Ok(acted) => (acted, None),
            Err((acted, e)) => (acted, Some(e)),
        };
        match &error {
            None => {
                progressed.errors_in_a_row = 0;
                progressed.error = None;
            }
            Some(e) => {
                progressed.errors_in_a_row += 1;
                progressed.error = Some(e.to_string());
                if progressed.errors_in_a_row >= MAX_ERRORS_IN_A_ROW {
                    progressed.status = ActionJobStatus::Failed;
                }
            }
        }
        progressed.next_at = next_slice_at(now, acted, progressed.rate);
        if error.is_some() {
            // Storage in trouble: give it room, longer each time.
            let backoff = Duration::from_secs(1 << progressed.errors_in_a_row.min(6));
            progressed.next_at = progressed.next_at.max(now.plus(backoff));
        }
        let Some(recorded) = self.record_slice(claimed, progressed, &owner).await? else {
            // Another invocation took the job over (this one's lease lapsed): its
            // slice is the one that counts.
            return Ok(WakeOutcome::Busy);
        };
        if recorded.status == ActionJobStatus::Running {
            // What the slice took counts towards its pause.
            let delay = self.clock.now().until(recorded.next_at);
            self.send_action_wake(&recorded, delay).await;
        } else {
            tracing::info!(tenant = %tenant, job = %id, status = recorded.status.as_str(), matched = recorded.matched, done = recorded.done, skipped = recorded.skipped, failed = recorded.failed, "bulk action ended");
        }
        // Handled either way: an error is in the job's record, and its next slice
        // (already sent) tries again, or the job failed for good.
        Ok(WakeOutcome::NothingToDo)
    }

    /// Act on the runs of one slice of `job`, noting each in it and moving its cursor
    /// page by page; the job is done when the listing ends. Answers how many runs it
    /// acted on; a listing that fails stops the slice, with the pages before it noted.
    async fn act_on_slice(&self, job: &mut ActionJob) -> Result<usize, (usize, EngineError)> {
        let size = slice_size(job.rate);
        let listed_by = store_filter(&job.filter);
        let mut acted = 0;
        for _ in 0..MAX_PAGES_PER_SLICE {
            // Never more than the slice still has room for: every run of the page is
            // looked at, so the store's cursor is where the slice ends.
            let want = size.saturating_sub(acted);
            if want == 0 {
                break;
            }
            let page = self
                .backend
                .store
                .list_runs(&job.tenant, &listed_by, job.cursor.as_deref(), want)
                .await
                .map_err(|e| (acted, e.into()))?;
            let mut ended = false;
            for run in &page.runs {
                if is_past_the_end(&job.filter, run) {
                    ended = true;
                    break;
                }
                if !matches(&job.filter, run) {
                    continue;
                }
                if acted > 0 && acted % CANCEL_CHECK_EVERY == 0 && self.is_cancelled(job).await {
                    // Where the listing stood no longer matters: the job ends here.
                    return Ok(acted);
                }
                acted += 1;
                match self.act_on(job, run).await {
                    Acted::Done => job.note_done(),
                    Acted::Skipped(why) => job.note_skipped(run.id.clone(), why),
                    Acted::Failed(why) => job.note_failed(run.id.clone(), why),
                }
            }
            job.cursor = page.next_cursor;
            if ended || job.cursor.is_none() {
                job.status = ActionJobStatus::Done;
                break;
            }
        }
        Ok(acted)
    }

    /// Whether `job` has been cancelled (or finished otherwise) since its slice began;
    /// a read that fails says no, and the slice goes on.
    async fn is_cancelled(&self, job: &ActionJob) -> bool {
        matches!(
            self.backend.store.get_action_job(&job.tenant, &job.id).await,
            Ok(Some(stored)) if stored.status.is_finished()
        )
    }

    /// Write a slice's progress (`progressed`) over the job as its lease took it
    /// (`claimed`), the lease let go. A cancel written meanwhile keeps the job
    /// cancelled, with the slice's progress added; a job another invocation took over
    /// (`owner`'s lease lapsed) is left to it: `None`.
    async fn record_slice(
        &self,
        claimed: ActionJob,
        mut progressed: ActionJob,
        owner: &str,
    ) -> Result<Option<ActionJob>, EngineError> {
        let mut expected = claimed.version;
        for _ in 0..8 {
            progressed.lease = None;
            progressed.updated_at = self.clock.now();
            match self
                .backend
                .store
                .put_action_job(&progressed, expected)
                .await
            {
                Ok(version) => {
                    progressed.version = version;
                    return Ok(Some(progressed));
                }
                Err(StoreError::Conflict(_)) => {}
                Err(e) => return Err(e.into()),
            }
            let Some(stored) = self
                .backend
                .store
                .get_action_job(&progressed.tenant, &progressed.id)
                .await?
            else {
                return Ok(None);
            };
            if stored.lease.as_ref().is_none_or(|l| l.owner != owner) {
                return Ok(None);
            }
            if stored.status.is_finished() {
                progressed.status = stored.status;
                progressed.cancelled_by = stored.cancelled_by.clone();
            }
            expected = stored.version;
        }
        Err(EngineError::Store(StoreError::Unavailable(
            "the job kept changing while its progress was written".to_owned(),
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slice_is_a_seconds_runs_within_bounds() {
        assert_eq!(slice_size(50), 50);
        assert_eq!(slice_size(1), 1);
        assert_eq!(slice_size(0), 1);
        assert_eq!(slice_size(1000), 200);
    }

    #[test]
    fn the_next_slice_waits_what_the_runs_acted_on_take_at_the_rate() {
        assert_eq!(next_slice_at(Timestamp(1_000), 10, 50), Timestamp(1_200));
        assert_eq!(next_slice_at(Timestamp(1_000), 0, 50), Timestamp(1_000));
        assert_eq!(next_slice_at(Timestamp(1_000), 1, 3), Timestamp(1_334));
    }
}
