//! Starting runs and moving them: working what is due now, skipping the clock to the
//! next timer, driving a run until only the test can move it on.

use std::time::Duration;

use serde::Serialize;
use siesta::{EngineError, EntryState, Run, RunId, RunStatus, Timestamp, Wait, WaitKind};

use crate::TestEnv;

/// How many rounds of sweep-and-work one call may do before it stops; a run that keeps
/// falling due without progressing would otherwise hold a test forever.
const MAX_ROUNDS: usize = 1000;

/// How many times [`TestEnv::drive`] skips time before it gives up on a run.
const MAX_SKIPS: usize = 10_000;

impl TestEnv {
    /// Start a run of `workflow` with `input` and work it until nothing is due now
    /// (it finished, or waits for time or a delivery). Panics if the engine refuses
    /// the run; see [`TestEnv::try_start`].
    pub async fn start(&self, workflow: &str, input: impl Serialize) -> RunId {
        match self.try_start(workflow, input, None).await {
            Ok(id) => id,
            Err(e) => panic!("starting a run of '{workflow}': {e}"),
        }
    }

    /// Start a run and [`drive`](TestEnv::drive) it: the whole run, timers skipped, in
    /// one call, up to a wait for an event or a callback. What the run ended as is returned (completed, failed, cancelled,
    /// parked, or waiting for a delivery).
    pub async fn execute(&self, workflow: &str, input: impl Serialize) -> Run {
        let id = self.start(workflow, input).await;
        self.drive(&id).await
    }

    /// Start a run with the given id, or say why the engine refused it (unknown
    /// workflow, invalid input, the id is taken), and work it until nothing is due now.
    pub async fn try_start(
        &self,
        workflow: &str,
        input: impl Serialize,
        run_id: Option<RunId>,
    ) -> Result<RunId, EngineError> {
        let id = self.create(workflow, input, run_id).await?;
        self.run_until_idle().await;
        Ok(id)
    }

    /// Create a run without working the queue (to deliver something before its first
    /// step, or to start several runs at once).
    pub async fn create(
        &self,
        workflow: &str,
        input: impl Serialize,
        run_id: Option<RunId>,
    ) -> Result<RunId, EngineError> {
        let input = serde_json::to_value(input)
            .map_err(|e| EngineError::InvalidInput(format!("the input is not JSON: {e}")))?;
        Ok(self
            .engine()
            .start(&self.tenant, workflow, input, run_id)
            .await?
            .id)
    }

    /// Handle every wake-up that is due now, including runs the sweep finds due (a
    /// fired timer, a passed deadline, an expired lease), until nothing is left at this
    /// instant; the clock does not move. Returns how many wake-ups were handled.
    pub async fn run_until_idle(&self) -> usize {
        let engine = self.engine();
        let mut handled = 0;
        for _ in 0..MAX_ROUNDS {
            let n = engine
                .run_until_idle(MAX_ROUNDS)
                .await
                .expect("the in-memory queue failed");
            handled += n;
            // A crashed engine finds nothing due through its dead store; that is the
            // crash, not a failure of the test.
            let woken = engine
                .sweep(MAX_ROUNDS)
                .await
                .map_or(0, |r| r.woken + r.scheduled + r.action_jobs);
            if n == 0 && woken == 0 {
                break;
            }
        }
        handled
    }

    /// Move the clock forward by `d`, then [`run_until_idle`](TestEnv::run_until_idle).
    pub async fn advance(&self, d: Duration) -> usize {
        self.clock.advance(d);
        self.run_until_idle().await
    }

    /// When the next run falls due (a timer, a deadline, a retry, an expired lease),
    /// if any run is scheduled at all. A run already due whose wake-up is on its way
    /// counts from when the sweep would send it another (its wake-up may have been lost
    /// in a crash the test made).
    pub async fn next_due(&self) -> Option<Timestamp> {
        let now = self.now();
        self.backend()
            .store
            .due_runs(Timestamp(i64::MAX), 100_000)
            .await
            .expect("the in-memory store failed")
            .iter()
            .map(|d| {
                if d.due_at > now {
                    d.due_at
                } else {
                    d.sweep_at()
                }
            })
            .min()
    }

    /// Move the clock to the next moment a run falls due and work what is due then.
    /// Returns that moment, or `None` (the clock unmoved) when nothing is scheduled.
    pub async fn skip_to_next_timer(&self) -> Option<Timestamp> {
        let due = self.next_due().await?;
        if due > self.now() {
            self.clock.set(due);
        }
        self.run_until_idle().await;
        Some(due)
    }

    /// Work the run until it finishes, is parked, or waits for something only the test
    /// can deliver — an event or a callback, **even one with a timeout**: `drive` does
    /// not skip time to a delivery's deadline, since a test that means to deliver it
    /// would find it timed out. Time is skipped to each timer, backoff or lease expiry
    /// on the way. Returns the run as it then is. Other runs move with it. To let a
    /// wait time out, say so: [`TestEnv::drive_through_timeouts`].
    pub async fn drive(&self, run_id: &RunId) -> Run {
        self.drive_until(run_id, false).await
    }

    /// [`TestEnv::drive`], but time is skipped to the deadlines of waits for events and
    /// callbacks too, so a run waiting for a delivery that never comes times out.
    pub async fn drive_through_timeouts(&self, run_id: &RunId) -> Run {
        self.drive_until(run_id, true).await
    }

    async fn drive_until(&self, run_id: &RunId, through_timeouts: bool) -> Run {
        self.run_until_idle().await;
        for _ in 0..MAX_SKIPS {
            let run = self.run(run_id).await;
            if run.status.is_finished() || run.status == RunStatus::Parked {
                return run;
            }
            // Nothing of this run is scheduled (no timer, deadline, backoff or lease,
            // no child run in progress): only a delivery moves it on, and skipping
            // time for other runs' sake would time out their waits behind the test's back.
            if run.due_at.is_none() && !self.waits_on_child_run(run_id).await {
                return run;
            }
            // The next instant due is a deadline of a wait a delivery may end: skipping
            // to it times that wait out, which is for the test to ask. (A timer or a
            // backoff due before it is skipped to as ever.)
            if !through_timeouts
                && run.status == RunStatus::Waiting
                && let Some(due) = run.due_at
                && self
                    .delivery_deadlines(run_id)
                    .await
                    .iter()
                    .any(|deadline| *deadline <= due)
            {
                return run;
            }
            if self.skip_to_next_timer().await.is_none() {
                return run;
            }
        }
        panic!("run {run_id} kept falling due for {MAX_SKIPS} timer skips without finishing")
    }

    /// The deadlines of the run's open waits that a delivery ends (events, callbacks).
    async fn delivery_deadlines(&self, run_id: &RunId) -> Vec<Timestamp> {
        self.journal(run_id)
            .await
            .into_iter()
            .filter_map(|e| match e.state {
                EntryState::Waiting(Wait {
                    kind: WaitKind::Event { .. } | WaitKind::Callback { .. },
                    deadline,
                    ..
                }) => deadline,
                _ => None,
            })
            .collect()
    }

    async fn waits_on_child_run(&self, run_id: &RunId) -> bool {
        self.journal(run_id).await.iter().any(|e| {
            matches!(
                &e.state,
                EntryState::Waiting(Wait {
                    kind: WaitKind::Child { .. },
                    ..
                })
            )
        })
    }
}
