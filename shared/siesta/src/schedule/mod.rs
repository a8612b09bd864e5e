//! Schedules: a workflow started on a cron pattern in a time zone, declared in code on
//! the [`Registry`](crate::Registry).
//!
//! ```
//! # use siesta::prelude::*;
//! # use siesta::schedule::{Schedule, Overlap, CatchUp};
//! # async fn report(_: Context, _: serde_json::Value) -> Result<(), Error> { Ok(()) }
//! let mut registry = Registry::new();
//! registry.register("report", report);
//! registry
//!     .schedule(
//!         Schedule::new("nightly-report", "report", "0 2 * * *")
//!             .timezone("Europe/Paris")
//!             .input(serde_json::json!({"period": "day"}))
//!             .overlap(Overlap::Skip)
//!             .catch_up(CatchUp::Latest),
//!     )
//!     .expect("a valid schedule");
//! ```
//!
//! What holds, and why:
//! - **One run per tick.** A tick's run has an id derived from the schedule and the
//!   tick ([`tick_run_id`]: `schedule-nightly-report-20260102T010000Z`), so two sweeps
//!   that fire the same tick — concurrently, or again after a crash between the start
//!   and the schedule's state being written — start one run: the second start finds
//!   the id taken.
//! - **Ticks on the wall clock.** Which instants a pattern names, and the rule for
//!   daylight-saving gaps and repeats, are [`Ticks`]' (a tick fires at the first instant
//!   the zone's clock shows its time or a later one: a gap's ticks at its end, a
//!   repeated time once, the first time).
//! - **On time, or missed.** The sweep fires a tick once it is due. A tick it finds at
//!   most [`Schedule::grace`] late is on time and fires; an older one was *missed*
//!   (nothing was serving, or the schedule was disabled on the deployment), and the
//!   [`CatchUp`] policy says which missed ticks still fire.
//! - **Overlap.** A tick that falls while the run of the schedule's previous fired
//!   tick is unfinished is handled by the [`Overlap`] policy. Runs started by hand
//!   ([`Engine::trigger_schedule`](crate::Engine::trigger_schedule)) are not ticks and
//!   do not count.
//! - **Paused.** A paused schedule fires nothing; its ticks that fall while it is
//!   paused are dropped, not caught up when it resumes (a pause is an operator's
//!   "not now"). Disabling a schedule on a deployment
//!   ([`EngineConfig::disabled_schedules`](crate::EngineConfig::disabled_schedules))
//!   is "nothing serving it": enabled again, its missed ticks follow [`CatchUp`].
//! - **A tenant.** A schedule's runs belong to [`Schedule::tenant`], by default
//!   [`DEFAULT_TENANT`] (`default`, the tenant of the dev server without API keys);
//!   the API lists and acts on a schedule for its own tenant only.
//! - **A new schedule starts now.** The first sweep to see a schedule records it with
//!   no tick fired: ticks before it are not missed, they predate it.

use std::time::Duration;

use crate::model::{RunId, TenantId};
use crate::time::Timestamp;

mod ticks;

pub use ticks::Ticks;

/// The tenant a schedule's runs belong to when it names none: `default`, the dev
/// server's tenant when it has no API keys.
pub const DEFAULT_TENANT: &str = "default";

/// The longest a schedule's name may be; see [`valid_schedule_name`].
pub const MAX_SCHEDULE_NAME: usize = 64;

/// How late a tick may fire and still be on time, unless the schedule says
/// ([`Schedule::grace`]): five sweep periods of the dev server's default, and five of a
/// deployment's sweep function (every minute).
pub const DEFAULT_GRACE: Duration = Duration::from_secs(5 * 60);

/// The most ticks one sweep fires of one schedule; the next sweep goes on.
pub const MAX_TICKS_PER_SWEEP: usize = 100;

/// Whether `name` may name a schedule: 1 to [`MAX_SCHEDULE_NAME`] ASCII letters,
/// digits, `_`, `-` and `.`, so it is one URL path segment and part of a run id as it
/// is.
pub fn valid_schedule_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_SCHEDULE_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// What a tick does when the run of the schedule's previous fired tick is unfinished.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Overlap {
    /// The tick is dropped (the default): at most one of the schedule's runs at a time.
    #[default]
    Skip,
    /// The tick starts its run anyway: runs of the schedule may overlap.
    Allow,
    /// The tick waits, and its run starts at the first sweep after the previous run
    /// finished; one tick waits at most, and later ones are dropped while it does.
    BufferOne,
}

impl Overlap {
    /// The policy's wire name: `skip`, `allow` or `buffer_one`.
    pub fn as_str(self) -> &'static str {
        match self {
            Overlap::Skip => "skip",
            Overlap::Allow => "allow",
            Overlap::BufferOne => "buffer_one",
        }
    }
}

/// Which missed ticks (more than [`Schedule::grace`] late when a sweep finds them: the
/// server was down, the schedule disabled) still fire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CatchUp {
    /// None: only ticks on time fire.
    Skip,
    /// The latest missed tick fires, unless a tick on time follows it (the default):
    /// a nightly report missed while the server was down runs once when it is back.
    #[default]
    Latest,
    /// The latest `max` missed ticks fire, oldest first, each as its own run (and
    /// each subject to [`Overlap`]: under [`Overlap::Skip`] the first one's run, still
    /// unfinished, makes the others skip).
    All {
        /// The most missed ticks that fire.
        max: u32,
    },
}

impl CatchUp {
    /// The policy's wire name: `skip`, `latest` or `all`.
    pub fn as_str(self) -> &'static str {
        match self {
            CatchUp::Skip => "skip",
            CatchUp::Latest => "latest",
            CatchUp::All { .. } => "all",
        }
    }
}

/// Why a schedule was refused at registration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    /// The name is empty, too long or has characters a run id or a URL path segment
    /// cannot carry as they are.
    #[error(
        "invalid schedule name '{0}': 1 to {MAX_SCHEDULE_NAME} ASCII letters, digits, '_', '-', '.'"
    )]
    InvalidName(String),
    /// Another schedule has this name.
    #[error("a schedule named '{0}' is registered already")]
    Duplicate(String),
    /// No workflow of this name is registered (register it before its schedule).
    #[error("schedule '{schedule}': no workflow '{workflow}' is registered (register it first)")]
    UnknownWorkflow {
        /// The schedule.
        schedule: String,
        /// The workflow it names.
        workflow: String,
    },
    /// The cron pattern does not parse.
    #[error("invalid cron pattern '{cron}': {reason}")]
    InvalidCron {
        /// The pattern.
        cron: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The pattern names no time that exists (`0 0 30 2 *`).
    #[error("cron pattern '{0}' never fires")]
    NeverFires(String),
    /// Not a zone of the IANA database.
    #[error("unknown time zone '{0}' (an IANA name such as 'UTC' or 'Europe/Paris')")]
    UnknownTimezone(String),
    /// The workflow's starts are gathered by a debounce, which names its runs: a
    /// tick's run id could not be the tick's.
    #[error(
        "schedule '{schedule}': the workflow '{workflow}' is under the debounce '{debounce}', which names its runs; a tick names its own"
    )]
    Debounced {
        /// The schedule.
        schedule: String,
        /// Its workflow.
        workflow: String,
        /// The debounce.
        debounce: String,
    },
    /// The input does not fit the workflow's input type.
    #[error("schedule '{schedule}': invalid input for its workflow: {reason}")]
    InvalidInput {
        /// The schedule.
        schedule: String,
        /// What the workflow's input type said.
        reason: String,
    },
}

/// A workflow started on a cron pattern in a time zone; see the [module](self).
#[derive(Debug, Clone)]
pub struct Schedule {
    name: String,
    workflow: String,
    cron: String,
    timezone: String,
    input: serde_json::Value,
    overlap: Overlap,
    catch_up: CatchUp,
    grace: Duration,
    tenant: TenantId,
    ticks: Option<Ticks>,
}

impl Schedule {
    /// The schedule `name`, starting `workflow` on the cron pattern `cron` (five fields:
    /// minute, hour, day of month, month, day of week), in `UTC` with a `null` input,
    /// [`Overlap::Skip`] and [`CatchUp::Latest`], until told otherwise.
    pub fn new(name: &str, workflow: &str, cron: &str) -> Self {
        Schedule {
            name: name.to_owned(),
            workflow: workflow.to_owned(),
            cron: cron.to_owned(),
            timezone: "UTC".to_owned(),
            input: serde_json::Value::Null,
            overlap: Overlap::default(),
            catch_up: CatchUp::default(),
            grace: DEFAULT_GRACE,
            tenant: TenantId::from(DEFAULT_TENANT),
            ticks: None,
        }
    }

    /// The IANA time zone whose wall clock the pattern is read on (`Europe/Paris`).
    pub fn timezone(mut self, zone: &str) -> Self {
        zone.clone_into(&mut self.timezone);
        self.ticks = None;
        self
    }

    /// The input every run of the schedule gets.
    pub fn input(mut self, input: serde_json::Value) -> Self {
        self.input = input;
        self
    }

    /// What a tick does while the previous tick's run is unfinished.
    pub fn overlap(mut self, overlap: Overlap) -> Self {
        self.overlap = overlap;
        self
    }

    /// Which missed ticks still fire.
    pub fn catch_up(mut self, catch_up: CatchUp) -> Self {
        self.catch_up = catch_up;
        self
    }

    /// How late a tick may fire and still be on time (default [`DEFAULT_GRACE`]);
    /// later, it was missed.
    pub fn grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// The tenant its runs belong to (default [`DEFAULT_TENANT`]).
    pub fn tenant(mut self, tenant: impl Into<TenantId>) -> Self {
        self.tenant = tenant.into();
        self
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The workflow it starts.
    pub fn workflow(&self) -> &str {
        &self.workflow
    }

    /// Its cron pattern, as given.
    pub fn cron(&self) -> &str {
        &self.cron
    }

    /// Its time zone's IANA name.
    pub fn zone(&self) -> &str {
        &self.timezone
    }

    /// The input of its runs.
    pub fn run_input(&self) -> &serde_json::Value {
        &self.input
    }

    /// Its overlap policy.
    pub fn overlap_policy(&self) -> Overlap {
        self.overlap
    }

    /// Its catch-up policy.
    pub fn catch_up_policy(&self) -> CatchUp {
        self.catch_up
    }

    /// How late a tick may fire and still be on time.
    pub fn grace_period(&self) -> Duration {
        self.grace
    }

    /// The tenant its runs belong to.
    pub fn tenant_id(&self) -> &TenantId {
        &self.tenant
    }

    /// Its ticks (the pattern on the zone's wall clock), checked: what registration
    /// does, besides the name, the workflow and the input.
    pub fn ticks(&self) -> Result<Ticks, ScheduleError> {
        if let Some(t) = &self.ticks {
            return Ok(t.clone());
        }
        let ticks = Ticks::new(&self.cron, &self.timezone)?;
        // 2000-01-01: any pattern that names a time that exists has one within 28
        // years (the calendar's cycle of weekdays and leap years).
        if ticks.next_after(Timestamp(946_684_800_000)).is_none() {
            return Err(ScheduleError::NeverFires(self.cron.clone()));
        }
        Ok(ticks)
    }

    /// The schedule with its ticks checked and kept, as the registry holds it.
    pub(crate) fn checked(mut self) -> Result<Self, ScheduleError> {
        if !valid_schedule_name(&self.name) {
            return Err(ScheduleError::InvalidName(self.name));
        }
        self.ticks = Some(self.ticks()?);
        Ok(self)
    }

    /// The first tick strictly after `after`.
    pub fn next_after(&self, after: Timestamp) -> Option<Timestamp> {
        self.ticks().ok()?.next_after(after)
    }

    /// The ticks a sweep at `now` fires, in order, given that every tick at or before
    /// `through` was dealt with: those on time (after `through`, at most
    /// [`Schedule::grace`] before `now`), and before them the missed ones
    /// [`CatchUp`] keeps. At most [`MAX_TICKS_PER_SWEEP`]; with them, what `through`
    /// becomes (`now`, or the last tick returned when more were due).
    pub fn due_ticks(&self, through: Timestamp, now: Timestamp) -> (Vec<Timestamp>, Timestamp) {
        let Ok(ticks) = self.ticks() else {
            return (Vec::new(), now.max(through));
        };
        if now <= through {
            return (Vec::new(), through);
        }
        let late = Timestamp(now.millis().saturating_sub(self.grace.as_millis() as i64));
        let on_time_from = through.max(late);
        let on_time = ticks.between(on_time_from, now, MAX_TICKS_PER_SWEEP + 1);
        let mut missed = match self.catch_up {
            CatchUp::Skip => Vec::new(),
            CatchUp::Latest if !on_time.is_empty() => Vec::new(),
            CatchUp::Latest => ticks
                .latest_at_or_before(late)
                .filter(|t| *t > through)
                .into_iter()
                .collect(),
            CatchUp::All { max } => {
                let mut back = Vec::new();
                let mut at = late;
                while back.len() < (max as usize).min(MAX_TICKS_PER_SWEEP) {
                    match ticks.latest_at_or_before(at) {
                        Some(t) if t > through => {
                            back.push(t);
                            at = Timestamp(t.millis() - 1);
                        }
                        _ => break,
                    }
                }
                back.reverse();
                back
            }
        };
        missed.extend(on_time);
        if missed.len() > MAX_TICKS_PER_SWEEP {
            missed.truncate(MAX_TICKS_PER_SWEEP);
            let last = missed[MAX_TICKS_PER_SWEEP - 1];
            return (missed, last);
        }
        (missed, now)
    }
}

/// The id of the run a schedule's tick starts: `schedule-{name}-{tick}`, the tick in
/// UTC as `YYYYMMDDTHHMMSSZ`. The same schedule and tick give the same id, so that a
/// tick fired twice starts one run.
pub fn tick_run_id(schedule: &str, tick: Timestamp) -> RunId {
    RunId(format!("schedule-{schedule}-{}", ticks::compact_utc(tick)))
}

/// The id of a run started by hand ([`Engine::trigger_schedule`](crate::Engine::trigger_schedule)):
/// `schedule-{name}-trigger-{key}`, with the caller's key (a retry with the same key
/// finds the same run) or, without one, the instant of the request.
pub fn trigger_run_id(schedule: &str, key: Option<&str>, now: Timestamp) -> RunId {
    match key {
        Some(key) => RunId(format!("schedule-{schedule}-trigger-{key}")),
        None => RunId(format!(
            "schedule-{schedule}-trigger-{}",
            ticks::compact_utc(now)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: i64 = 3_600_000;
    /// 2026-01-01T00:00:00Z.
    const JAN_1: i64 = 1_767_225_600_000;

    fn hourly(catch_up: CatchUp) -> Schedule {
        Schedule::new("h", "w", "0 * * * *").catch_up(catch_up)
    }

    fn hours(ts: &[Timestamp]) -> Vec<i64> {
        ts.iter().map(|t| (t.millis() - JAN_1) / HOUR).collect()
    }

    #[test]
    fn a_tick_within_grace_is_on_time_and_fires_under_every_policy() {
        for policy in [CatchUp::Skip, CatchUp::Latest, CatchUp::All { max: 5 }] {
            let (due, through) = hourly(policy).due_ticks(
                Timestamp(JAN_1 + 30 * 60_000),
                Timestamp(JAN_1 + HOUR + 60_000),
            );
            assert_eq!(hours(&due), [1], "{policy:?}");
            assert_eq!(through, Timestamp(JAN_1 + HOUR + 60_000));
        }
    }

    #[test]
    fn missed_ticks_follow_the_catch_up_policy() {
        // Down from 00:30 to 04:30: ticks at 1, 2, 3 and 4 o'clock are all missed.
        let (through, now) = (
            Timestamp(JAN_1 + 30 * 60_000),
            Timestamp(JAN_1 + 4 * HOUR + 30 * 60_000),
        );
        assert_eq!(
            hours(&hourly(CatchUp::Skip).due_ticks(through, now).0),
            Vec::<i64>::new()
        );
        assert_eq!(
            hours(&hourly(CatchUp::Latest).due_ticks(through, now).0),
            [4]
        );
        assert_eq!(
            hours(&hourly(CatchUp::All { max: 3 }).due_ticks(through, now).0),
            [2, 3, 4]
        );
        assert_eq!(
            hours(&hourly(CatchUp::All { max: 10 }).due_ticks(through, now).0),
            [1, 2, 3, 4]
        );
    }

    #[test]
    fn under_latest_a_tick_on_time_supersedes_the_missed_ones() {
        let (due, _) = hourly(CatchUp::Latest).due_ticks(
            Timestamp(JAN_1 + 30 * 60_000),
            Timestamp(JAN_1 + 4 * HOUR + 60_000),
        );
        assert_eq!(hours(&due), [4]);
        let (due, _) = hourly(CatchUp::All { max: 10 }).due_ticks(
            Timestamp(JAN_1 + 30 * 60_000),
            Timestamp(JAN_1 + 4 * HOUR + 60_000),
        );
        assert_eq!(hours(&due), [1, 2, 3, 4]);
    }

    #[test]
    fn a_sweep_fires_at_most_its_bound_and_the_next_goes_on() {
        let s = Schedule::new("m", "w", "* * * * *").grace(Duration::from_secs(86_400));
        let (due, through) = s.due_ticks(Timestamp(JAN_1), Timestamp(JAN_1 + 10 * HOUR));
        assert_eq!(due.len(), MAX_TICKS_PER_SWEEP);
        assert_eq!(through, *due.last().unwrap());
        let (next, _) = s.due_ticks(through, Timestamp(JAN_1 + 10 * HOUR));
        assert_eq!(next[0].millis(), through.millis() + 60_000);
    }

    #[test]
    fn registration_checks_refuse_bad_names_patterns_and_zones() {
        assert_eq!(
            Schedule::new("a b", "w", "* * * * *")
                .checked()
                .unwrap_err(),
            ScheduleError::InvalidName("a b".into())
        );
        assert!(matches!(
            Schedule::new("a", "w", "0 0 30 2 *").checked().unwrap_err(),
            ScheduleError::NeverFires(_)
        ));
        assert!(matches!(
            Schedule::new("a", "w", "nope").checked().unwrap_err(),
            ScheduleError::InvalidCron { .. }
        ));
        assert!(matches!(
            Schedule::new("a", "w", "* * * * *")
                .timezone("Mars/Olympus")
                .checked()
                .unwrap_err(),
            ScheduleError::UnknownTimezone(_)
        ));
    }

    #[test]
    fn tick_and_trigger_run_ids_are_derived_from_the_schedule() {
        assert_eq!(
            tick_run_id("nightly-report", Timestamp(JAN_1 + 2 * HOUR)).as_str(),
            "schedule-nightly-report-20260101T020000Z"
        );
        assert_eq!(
            trigger_run_id("nightly-report", Some("abc"), Timestamp(JAN_1)).as_str(),
            "schedule-nightly-report-trigger-abc"
        );
        assert_eq!(
            trigger_run_id("nightly-report", None, Timestamp(JAN_1 + 5)).as_str(),
            "schedule-nightly-report-trigger-20260101T000000.005Z"
        );
    }
}
