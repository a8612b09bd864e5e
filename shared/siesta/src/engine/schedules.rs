//! Schedules as the engine runs them: firing due ticks from the sweep, and what an
//! operator sees and does (list, pause, resume, trigger now). The rules are the
//! [`schedule`](crate::schedule) module's; the state is the
//! [`ScheduleStore`]'s.
//!
//! One sweep, per schedule: read its state (a schedule seen for the first time is
//! recorded as starting now); start the buffered tick's run if the run before it has
//! finished; then for each tick [`Schedule::due_ticks`] gives, start its run (its id
//! derived from the tick, so a start that finds the id taken is the same tick fired
//! before — by a concurrent sweep, or by one that died before writing the state)
//! unless the [`Overlap`] policy says otherwise; last, write the state, conditioned on
//! the version read. A write that loses to another sweep is dropped: the runs it
//! started are the other sweep's too. A start that fails leaves its tick and the ones
//! after it for the next sweep (by then, perhaps, missed ones).

use std::collections::BTreeSet;

use super::{Engine, EngineError};
use crate::model::*;
use crate::ports::*;
use crate::schedule::{Overlap, Schedule, tick_run_id, trigger_run_id, valid_schedule_name};
use crate::time::Timestamp;

/// A schedule as an operator sees it: its declaration, its state and its next tick.
#[derive(Debug, Clone, PartialEq)]
pub struct ScheduleInfo {
    /// Its name.
    pub name: String,
    /// The workflow it starts.
    pub workflow: String,
    /// Its cron pattern.
    pub cron: String,
    /// Its time zone (IANA name).
    pub timezone: String,
    /// The tenant its runs belong to.
    pub tenant: TenantId,
    /// The next tick that will fire; `None` while paused or disabled.
    pub next: Option<Timestamp>,
    /// Paused by an operator, or disabled on this deployment.
    pub paused: bool,
    /// Disabled on this deployment ([`EngineConfig::disabled_schedules`](super::EngineConfig::disabled_schedules)).
    pub disabled: bool,
    /// The last tick whose run was started.
    pub last_fired: Option<Timestamp>,
    /// The run of that tick.
    pub last_run: Option<RunId>,
    /// A tick waiting for that run to finish.
    pub buffered: Option<Timestamp>,
    /// Its overlap policy's wire name.
    pub overlap: &'static str,
    /// Its catch-up policy's wire name.
    pub catch_up: &'static str,
}

/// What the sweep did with schedules.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScheduleReport {
    /// Runs started for ticks.
    pub started: usize,
    /// Ticks dropped because the previous tick's run was unfinished.
    pub skipped: usize,
    /// Ticks buffered behind an unfinished run.
    pub buffered: usize,
}

/// How many times a pause or resume reads again after losing a write to a sweep.
const STATE_WRITE_TRIES: usize = 5;

impl Engine {
    /// Fire every schedule's due ticks (see the module): what [`Engine::sweep`] does
    /// first. A schedule whose state cannot be read or written is logged and left to
    /// the next sweep; the others go on.
    pub async fn fire_schedules(&self) -> ScheduleReport {
        let mut report = ScheduleReport::default();
        for schedule in self.registry.schedules() {
            if self.schedule_disabled(schedule.name()) {
                continue;
            }
            if let Err(e) = self.fire_schedule(schedule, &mut report).await {
                tracing::warn!(schedule = schedule.name(), error = %e, "schedule not fired; the next sweep tries again");
            }
        }
        report
    }

    async fn fire_schedule(
        &self,
        schedule: &Schedule,
        report: &mut ScheduleReport,
    ) -> Result<(), EngineError> {
        let tenant = schedule.tenant_id();
        let store = &self.backend.schedules;
        let now = self.clock.now();
        let Some(mut state) = store.get_schedule_state(tenant, schedule.name()).await? else {
            // Seen for the first time: its ticks begin after now.
            let first = ScheduleState {
                through: now,
                ..ScheduleState::default()
            };
            return self.save_schedule_state(schedule, &first).await;
        };
        if state.paused {
            return Ok(());
        }
        let (due, through) = schedule.due_ticks(state.through, now);
        if due.is_empty() && state.buffered.is_none() {
            // Nothing to do: no write. The ticks dropped as missed, if any, stay
            // dropped at every later sweep.
            return Ok(());
        }
        let before = state.clone();
        let mut previous_unfinished = self.previous_unfinished(schedule, &state).await?;
        if let Some(tick) = state.buffered
            && !previous_unfinished
        {
            match self.start_tick(schedule, tick).await {
                Ok(_) => {
                    report.started += 1;
                    state.last_fired = Some(tick);
                    previous_unfinished = true;
                }
                // Refused while its workflow is paused: the buffered tick is dropped,
                // as a tick due now would be skipped.
                Err(EngineError::WorkflowPaused(_)) => report.skipped += 1,
                Err(e) => return Err(e),
            }
            state.buffered = None;
        }
        let any_due = !due.is_empty();
        for tick in due {
            if let Err(e) = self
                .fire_tick(schedule, tick, &mut state, &mut previous_unfinished, report)
                .await
            {
                // The ticks before it are dealt with; it and the rest wait.
                if state != before {
                    self.save_schedule_state(schedule, &state).await?;
                }
                return Err(e);
            }
            state.through = tick;
        }
        if any_due {
            state.through = through.max(state.through);
        }
        if state != before {
            self.save_schedule_state(schedule, &state).await?;
        }
        Ok(())
    }

    /// Deal with one due tick under the schedule's overlap policy.
    async fn fire_tick(
        &self,
        schedule: &Schedule,
        tick: Timestamp,
        state: &mut ScheduleState,
        previous_unfinished: &mut bool,
        report: &mut ScheduleReport,
    ) -> Result<(), EngineError> {
        let run_id = tick_run_id(schedule.name(), tick);
        // Fired already by a sweep that did not get to write the state.
        let fired = self
            .backend
            .store
            .get_run(schedule.tenant_id(), &run_id)
            .await?;
        if fired.is_none() && *previous_unfinished {
            match schedule.overlap_policy() {
                Overlap::Allow => {}
                Overlap::Skip => {
                    tracing::info!(
                        schedule = schedule.name(),
                        tick = tick.millis(),
                        "tick skipped: the previous tick's run is unfinished"
                    );
                    report.skipped += 1;
                    return Ok(());
                }
                Overlap::BufferOne => {
                    if state.buffered.is_none() {
                        state.buffered = Some(tick);
                        report.buffered += 1;
                    } else {
                        report.skipped += 1;
                    }
                    return Ok(());
                }
            }
        }
        let run = match fired {
            Some(run) => run,
            None => match self.start_tick(schedule, tick).await {
                Ok(run) => {
                    report.started += 1;
                    run
                }
                // Its workflow is paused and refuses starts: the tick is skipped, as
                // one overlapping an unfinished run is (one that queues them had its
                // run created paused by the start).
                Err(EngineError::WorkflowPaused(why)) => {
                    tracing::info!(
                        schedule = schedule.name(),
                        tick = tick.millis(),
                        "tick skipped: workflow {why} is paused"
                    );
                    report.skipped += 1;
                    return Ok(());
                }
                Err(e) => return Err(e),
            },
        };
        state.last_fired = Some(tick);
        *previous_unfinished = !run.status.is_finished();
        Ok(())
    }

    /// Start the run of `schedule`'s `tick`; a start that finds it started already
    /// answers that run (its wake-up sent again if it has not begun).
    async fn start_tick(&self, schedule: &Schedule, tick: Timestamp) -> Result<Run, EngineError> {
        let run_id = tick_run_id(schedule.name(), tick);
        let tenant = schedule.tenant_id();
        match self
            .start(
                tenant,
                schedule.workflow(),
                schedule.run_input().clone(),
                Some(run_id.clone()),
            )
            .await
        {
            Ok(run) => {
                tracing::info!(schedule = schedule.name(), run_id = %run.id, "tick fired");
                Ok(run)
            }
            Err(EngineError::AlreadyExists) => self.ensure_started(tenant, &run_id).await,
            Err(e) => Err(e),
        }
    }

    /// Whether the run of the schedule's last fired tick is unfinished (a run that is
    /// gone, removed by retention, is not).
    async fn previous_unfinished(
        &self,
        schedule: &Schedule,
        state: &ScheduleState,
    ) -> Result<bool, EngineError> {
        let Some(tick) = state.last_fired else {
            return Ok(false);
        };
        let run = self
            .backend
            .store
            .get_run(schedule.tenant_id(), &tick_run_id(schedule.name(), tick))
            .await?;
        Ok(run.is_some_and(|r| !r.status.is_finished()))
    }

    async fn save_schedule_state(
        &self,
        schedule: &Schedule,
        state: &ScheduleState,
    ) -> Result<(), EngineError> {
        match self
            .backend
            .schedules
            .put_schedule_state(schedule.tenant_id(), schedule.name(), state)
            .await
        {
            Ok(_) => Ok(()),
            Err(StoreError::Conflict(_)) => {
                // Another sweep wrote it first; what this one started, that one
                // started or will find started (the runs' ids are the ticks').
                tracing::info!(
                    schedule = schedule.name(),
                    "schedule state written by another sweep first"
                );
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Whether the deployment disabled the schedule `name`.
    fn schedule_disabled(&self, name: &str) -> bool {
        self.config.disabled_schedules.contains(name)
    }

    /// `tenant`'s schedule `name`, or [`EngineError::NotFound`].
    fn tenant_schedule(&self, tenant: &TenantId, name: &str) -> Result<&Schedule, EngineError> {
        self.registry
            .get_schedule(name)
            .filter(|s| s.tenant_id() == tenant)
            .ok_or(EngineError::NotFound)
    }

    /// `tenant`'s schedules, by name, each with its state and next tick.
    pub async fn schedules(&self, tenant: &TenantId) -> Result<Vec<ScheduleInfo>, EngineError> {
        let mut out = Vec::new();
        for schedule in self.registry.schedules() {
            if schedule.tenant_id() == tenant {
                out.push(self.schedule_info(schedule).await?);
            }
        }
        Ok(out)
    }

    /// `tenant`'s schedule `name`, with its state and next tick.
    pub async fn schedule(
        &self,
        tenant: &TenantId,
        name: &str,
    ) -> Result<ScheduleInfo, EngineError> {
        let schedule = self.tenant_schedule(tenant, name)?;
        self.schedule_info(schedule).await
    }

    async fn schedule_info(&self, schedule: &Schedule) -> Result<ScheduleInfo, EngineError> {
        let state = self
            .backend
            .schedules
            .get_schedule_state(schedule.tenant_id(), schedule.name())
            .await?
            .unwrap_or_default();
        let disabled = self.schedule_disabled(schedule.name());
        let paused = state.paused || disabled;
        let next = if paused {
            None
        } else {
            schedule.next_after(self.clock.now().max(state.through))
        };
        Ok(ScheduleInfo {
            name: schedule.name().to_owned(),
            workflow: schedule.workflow().to_owned(),
            cron: schedule.cron().to_owned(),
            timezone: schedule.zone().to_owned(),
            tenant: schedule.tenant_id().clone(),
            next,
            paused,
            disabled,
            last_fired: state.last_fired,
            last_run: state.last_fired.map(|t| tick_run_id(schedule.name(), t)),
            buffered: state.buffered,
            overlap: schedule.overlap_policy().as_str(),
            catch_up: schedule.catch_up_policy().as_str(),
        })
    }

    /// Pause `tenant`'s schedule `name`: it fires nothing until resumed (a run of it
    /// in flight goes on). Pausing a paused schedule changes nothing.
    pub async fn pause_schedule(
        &self,
        tenant: &TenantId,
        name: &str,
    ) -> Result<ScheduleInfo, EngineError> {
        let schedule = self.tenant_schedule(tenant, name)?;
        self.update_schedule_state(schedule, |state, _| state.paused = true)
            .await?;
        self.schedule_info(schedule).await
    }

    /// Resume `tenant`'s schedule `name`: it fires from its next tick on; the ticks
    /// that fell while it was paused are dropped, not caught up. Resuming a schedule
    /// that is not paused changes nothing.
    pub async fn resume_schedule(
        &self,
        tenant: &TenantId,
        name: &str,
    ) -> Result<ScheduleInfo, EngineError> {
        let schedule = self.tenant_schedule(tenant, name)?;
        self.update_schedule_state(schedule, |state, now| {
            if state.paused {
                state.paused = false;
                state.through = state.through.max(now);
            }
        })
        .await?;
        self.schedule_info(schedule).await
    }

    /// Read, change and write a schedule's state, again if a sweep wrote it between.
    async fn update_schedule_state(
        &self,
        schedule: &Schedule,
        change: impl Fn(&mut ScheduleState, Timestamp),
    ) -> Result<(), EngineError> {
        let store = &self.backend.schedules;
        let (tenant, name) = (schedule.tenant_id(), schedule.name());
        for _ in 0..STATE_WRITE_TRIES {
            let now = self.clock.now();
            let stored = store.get_schedule_state(tenant, name).await?;
            let mut state = stored.clone().unwrap_or(ScheduleState {
                through: now,
                ..ScheduleState::default()
            });
            change(&mut state, now);
            if stored.as_ref() == Some(&state) {
                return Ok(());
            }
            match store.put_schedule_state(tenant, name, &state).await {
                Ok(_) => return Ok(()),
                Err(StoreError::Conflict(_)) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(StoreError::Unavailable(format!(
            "schedule '{name}': its state kept changing under this write; try again"
        ))
        .into())
    }

    /// Start a run of `tenant`'s schedule `name` now, outside its ticks (paused or
    /// disabled, it may still be triggered; the overlap policy does not apply, and the
    /// run does not count as a tick's for it). With a `key`, the run's id is derived
    /// from it ([`trigger_run_id`]), so a retry with the same key answers the same run;
    /// without one, each call starts a run. Answers the run and whether this call
    /// started it.
    pub async fn trigger_schedule(
        &self,
        tenant: &TenantId,
        name: &str,
        key: Option<&str>,
    ) -> Result<(Run, bool), EngineError> {
        let schedule = self.tenant_schedule(tenant, name)?;
        if let Some(key) = key
            && !valid_schedule_name(key)
        {
            return Err(EngineError::InvalidInput(format!(
                "invalid trigger key '{key}': 1 to 64 ASCII letters, digits, '_', '-', '.'"
            )));
        }
        let run_id = trigger_run_id(name, key, self.clock.now());
        match self
            .start(
                tenant,
                schedule.workflow(),
                schedule.run_input().clone(),
                Some(run_id.clone()),
            )
            .await
        {
            Ok(run) => Ok((run, true)),
            Err(EngineError::AlreadyExists) => {
                Ok((self.ensure_started(tenant, &run_id).await?, false))
            }
            Err(e) => Err(e),
        }
    }
}

/// Schedule names as a deployment lists them (`a,b`): the set
/// [`EngineConfig::disabled_schedules`](super::EngineConfig::disabled_schedules) takes.
pub fn parse_schedule_names(list: &str) -> BTreeSet<String> {
    list.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}
