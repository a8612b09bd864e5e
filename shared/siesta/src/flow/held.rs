//! Starts held back until an instant (docs/flow-control.md):
//!
//! - a [`Debounce`] gathers the starts of its workflows that share a key into one run,
//!   released a period after the last of them (at most a maximum delay after the
//!   first), with the latest input — or, as a batch, with all of them in order;
//! - a [`StartRate`] lets at most `max` runs per period begin per key: a start over
//!   the rate is accepted and waits for its turn.
//!
//! Either way the run is created [`RunStatus::Queued`] with
//! a [`HeldStart`] saying what holds it and until when; its wake-up
//! is sent for that instant, and the wake-up that finds it due releases it. The rules
//! here are plain functions of the declaration, the run as read and the clock.

use std::collections::BTreeSet;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::KeySource;
use crate::model::{HeldStart, HoldReason, Run, RunStatus};
use crate::time::Timestamp;

/// Starts of the workflows it names that share a key within `period` of each other
/// collapse into one run: it begins `period` after the last of them, and at most
/// `max_delay` after the first, with the latest start's input; or, declared as a
/// [`Debounce::batch`], with every start's input in an array, in the order they came,
/// as soon as it holds `size` of them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Debounce {
    name: String,
    period: Duration,
    max_delay: Duration,
    key: KeySource,
    workflows: BTreeSet<String>,
    batch: Option<u32>,
}

/// How much later than its period a debounce releases its run at the latest, unless
/// it says otherwise ([`Debounce::max_delay`]): a steady stream of starts still begins
/// a run every ten periods.
pub const DEFAULT_MAX_DELAY_PERIODS: u32 = 10;

impl Debounce {
    /// Collapse starts that come within `period` of each other, under one key until
    /// [`Debounce::key_from_input`] or [`Debounce::key_given_at_start`] says otherwise.
    ///
    /// # Panics
    /// When `name` is empty or `period` is zero: a mistake in the code that declares
    /// it, found when the registry is built.
    pub fn new(name: impl Into<String>, period: Duration) -> Self {
        let name = name.into();
        assert!(!name.is_empty(), "a debounce needs a name");
        assert!(!period.is_zero(), "the debounce {name} needs a period");
        Debounce {
            name,
            period,
            max_delay: period.saturating_mul(DEFAULT_MAX_DELAY_PERIODS),
            key: KeySource::None,
            workflows: BTreeSet::new(),
            batch: None,
        }
    }

    /// Begin the run at most `max_delay` after its first start, however many follow.
    ///
    /// # Panics
    /// When `max_delay` is zero.
    pub fn max_delay(mut self, max_delay: Duration) -> Self {
        assert!(
            !max_delay.is_zero(),
            "the debounce {} needs a maximum delay",
            self.name
        );
        self.max_delay = max_delay;
        self
    }

    /// Gather every start's input, not only the latest: the run's input is the array
    /// of them, in the order they came, and it begins as soon as it holds `size` (the
    /// next start begins another). The workflow's input type is then a list of what
    /// each start gives.
    ///
    /// # Panics
    /// When `size` is 0.
    pub fn batch(mut self, size: u32) -> Self {
        assert!(
            size > 0,
            "the batch {} must hold at least one start",
            self.name
        );
        self.batch = Some(size);
        self
    }

    /// Gather starts by the value at `pointer` (a JSON pointer, e.g. `/order`) in
    /// their input.
    pub fn key_from_input(mut self, pointer: impl Into<String>) -> Self {
        self.key = KeySource::Input(pointer.into());
        self
    }

    /// Gather starts by the key each start gives (`concurrency_key`).
    pub fn key_given_at_start(mut self) -> Self {
        self.key = KeySource::Given;
        self
    }

    /// Apply it to starts of `workflow` (call once per workflow).
    pub fn workflow(mut self, workflow: impl Into<String>) -> Self {
        self.workflows.insert(workflow.into());
        self
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How long after a start the run waits for another.
    pub fn period(&self) -> Duration {
        self.period
    }

    /// How long after its first start the run begins at the latest.
    pub fn max_delay_after_first(&self) -> Duration {
        self.max_delay
    }

    /// The most starts a batch gathers; `None` for a debounce that keeps the latest.
    pub fn batch_size(&self) -> Option<u32> {
        self.batch
    }

    /// Where the key comes from.
    pub fn key(&self) -> &KeySource {
        &self.key
    }

    /// The workflows it applies to.
    pub fn workflows(&self) -> impl Iterator<Item = &str> {
        self.workflows.iter().map(String::as_str)
    }

    /// Whether it applies to `workflow`.
    pub fn applies_to(&self, workflow: &str) -> bool {
        self.workflows.contains(workflow)
    }

    /// The key a start of `input`, given `given`, is gathered under.
    pub fn key_of(&self, input: &serde_json::Value, given: Option<&str>) -> Result<String, String> {
        self.key
            .read(&format!("the debounce {}", self.name), input, given)
    }

    /// The hold of a run its first start creates at `now`, under `key`.
    pub fn first_hold(&self, key: &str, now: Timestamp) -> HeldStart {
        HeldStart {
            reason: HoldReason::Debounce {
                name: self.name.clone(),
                key: key.to_owned(),
                first_at: now,
                starts: 1,
            },
            until: self.release_at(now, now, 1),
        }
    }

    /// The hold `run` has once a start at `now` under `key` joins it, or `None` when
    /// the start cannot join it and begins a run of its own: the run is not queued by
    /// this debounce for this key (it began, was cancelled, or is another's), its
    /// maximum delay has passed, or its batch is full.
    pub fn join(&self, run: &Run, key: &str, now: Timestamp) -> Option<HeldStart> {
        if run.status != RunStatus::Queued {
            return None;
        }
        let HeldStart {
            reason:
                HoldReason::Debounce {
                    name,
                    key: held_key,
                    first_at,
                    starts,
                },
            ..
        } = run.held.as_ref()?
        else {
            return None;
        };
        if name != &self.name || held_key != key || now >= first_at.plus(self.max_delay) {
            return None;
        }
        if self.batch.is_some_and(|size| *starts >= size) {
            return None;
        }
        let starts = starts.saturating_add(1);
        Some(HeldStart {
            reason: HoldReason::Debounce {
                name: name.clone(),
                key: key.to_owned(),
                first_at: *first_at,
                starts,
            },
            until: self.release_at(*first_at, now, starts),
        })
    }

    /// When a run first started at `first_at`, last at `last_at`, holding `starts`,
    /// is released: a period after the last start, at most the maximum delay after the
    /// first, at once when a batch is full.
    pub fn release_at(&self, first_at: Timestamp, last_at: Timestamp, starts: u32) -> Timestamp {
        if self.batch.is_some_and(|size| starts >= size) {
            return last_at;
        }
        last_at
            .plus(self.period)
            .min(first_at.plus(self.max_delay))
            .max(last_at)
    }
}

/// At most `max` runs of the workflows it names begin per `per`, per key: a start over
/// the rate is accepted, queued, and begins at its turn. Turns are spaced evenly
/// (`per / max` apart), so no window of `per` holds more than `max` of them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StartRate {
    name: String,
    max: u32,
    per: Duration,
    key: KeySource,
    workflows: BTreeSet<String>,
}

impl StartRate {
    /// At most `max` starts per `per`, under one key until
    /// [`StartRate::key_from_input`] or [`StartRate::key_given_at_start`] says
    /// otherwise.
    ///
    /// # Panics
    /// When `name` is empty, `max` is 0 or `per` is zero.
    pub fn new(name: impl Into<String>, max: u32, per: Duration) -> Self {
        let name = name.into();
        assert!(!name.is_empty(), "a start rate needs a name");
        assert!(
            max > 0 && !per.is_zero(),
            "the start rate {name} must let at least one run begin per period"
        );
        StartRate {
            name,
            max,
            per,
            key: KeySource::None,
            workflows: BTreeSet::new(),
        }
    }

    /// Count starts by the value at `pointer` in their input.
    pub fn key_from_input(mut self, pointer: impl Into<String>) -> Self {
        self.key = KeySource::Input(pointer.into());
        self
    }

    /// Count starts by the key each start gives (`concurrency_key`).
    pub fn key_given_at_start(mut self) -> Self {
        self.key = KeySource::Given;
        self
    }

    /// Apply it to starts of `workflow` (call once per workflow sharing it).
    pub fn workflow(mut self, workflow: impl Into<String>) -> Self {
        self.workflows.insert(workflow.into());
        self
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The most starts per period.
    pub fn max(&self) -> u32 {
        self.max
    }

    /// The period.
    pub fn per(&self) -> Duration {
        self.per
    }

    /// The time between two turns of a key.
    pub fn interval(&self) -> Duration {
        self.per / self.max
    }

    /// The workflows it applies to.
    pub fn workflows(&self) -> impl Iterator<Item = &str> {
        self.workflows.iter().map(String::as_str)
    }

    /// Whether it applies to `workflow`.
    pub fn applies_to(&self, workflow: &str) -> bool {
        self.workflows.contains(workflow)
    }

    /// The key a start of `input`, given `given`, counts under.
    pub fn key_of(&self, input: &serde_json::Value, given: Option<&str>) -> Result<String, String> {
        self.key
            .read(&format!("the start rate {}", self.name), input, given)
    }

    /// The key of the store's turns for `tenant`'s starts under `key`: apart from any
    /// step rate's (whose keys are the author's own words).
    pub fn turns_key(&self, tenant: &crate::TenantId, key: &str) -> String {
        format!("start-rate/{tenant}/{}/{key}", self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Payload, RunId, TenantId};
    use proptest::prelude::*;
    use serde_json::json;

    const S: Duration = Duration::from_secs(1);

    fn held_run(hold: HeldStart) -> Run {
        let mut run = Run::new(
            TenantId("t".into()),
            RunId("r".into()),
            "sync",
            Payload::Inline(json!({})),
            Timestamp(0),
        );
        run.status = RunStatus::Queued;
        run.held = Some(hold);
        run
    }

    #[test]
    fn a_start_within_the_period_joins_and_moves_the_release_a_period_after_it() {
        let debounce = Debounce::new("orders", 10 * S);
        let first = debounce.first_hold("o-1", Timestamp(0));
        assert_eq!(first.until, Timestamp(10_000));
        let joined = debounce
            .join(&held_run(first), "o-1", Timestamp(4_000))
            .expect("joins");
        assert_eq!(joined.until, Timestamp(14_000));
        let HoldReason::Debounce { starts, .. } = joined.reason else {
            panic!("a debounce")
        };
        assert_eq!(starts, 2);
    }

    #[test]
    fn the_release_is_never_later_than_the_maximum_delay_after_the_first_start() {
        let debounce = Debounce::new("orders", 10 * S).max_delay(15 * S);
        let mut hold = debounce.first_hold("o-1", Timestamp(0));
        for at in [4_000, 8_000, 12_000] {
            hold = debounce
                .join(&held_run(hold), "o-1", Timestamp(at))
                .unwrap();
        }
        assert_eq!(hold.until, Timestamp(15_000));
        assert_eq!(
            debounce.join(&held_run(hold), "o-1", Timestamp(15_000)),
            None,
            "past its maximum delay a run takes no more starts"
        );
    }

    #[test]
    fn a_start_of_another_key_or_to_a_run_that_began_does_not_join() {
        let debounce = Debounce::new("orders", 10 * S);
        let hold = debounce.first_hold("o-1", Timestamp(0));
        assert_eq!(
            debounce.join(&held_run(hold.clone()), "o-2", Timestamp(1)),
            None
        );
        let mut began = held_run(hold.clone());
        began.status = RunStatus::Pending;
        assert_eq!(debounce.join(&began, "o-1", Timestamp(1)), None);
        let other = Debounce::new("other", 10 * S);
        assert_eq!(other.join(&held_run(hold), "o-1", Timestamp(1)), None);
    }

    #[test]
    fn a_full_batch_is_released_at_once_and_takes_no_more() {
        let batch = Debounce::new("emails", 10 * S).batch(3);
        let mut hold = batch.first_hold("", Timestamp(0));
        hold = batch.join(&held_run(hold), "", Timestamp(1_000)).unwrap();
        assert_eq!(hold.until, Timestamp(11_000));
        hold = batch.join(&held_run(hold), "", Timestamp(2_000)).unwrap();
        assert_eq!(hold.until, Timestamp(2_000), "the third start fills it");
        assert_eq!(batch.join(&held_run(hold), "", Timestamp(2_001)), None);
        assert_eq!(
            Debounce::new("one", S)
                .batch(1)
                .first_hold("", Timestamp(5))
                .until,
            Timestamp(5)
        );
    }

    #[test]
    fn a_start_rate_spaces_its_turns_evenly() {
        let rate = StartRate::new("provider", 100, 60 * S);
        assert_eq!(rate.interval(), Duration::from_millis(600));
        assert_eq!(
            rate.turns_key(&TenantId("acme".into()), "k"),
            "start-rate/acme/provider/k"
        );
    }

    proptest! {
        /// Whatever the starts' times, each run is released a period after its last
        /// start or its maximum delay after its first, whichever is sooner, never
        /// before its last start, and every start lands in exactly one run.
        #[test]
        fn every_start_lands_in_one_run_released_by_the_rule(
            gaps in proptest::collection::vec(0i64..30_000, 1..40),
            period_s in 1u32..20,
            extra_s in 0u32..40,
            batch in proptest::option::of(1u32..6),
        ) {
            let mut debounce = Debounce::new("d", period_s * S).max_delay((period_s + extra_s) * S);
            if let Some(size) = batch {
                debounce = debounce.batch(size);
            }
            let made = gaps.len();
            let mut now = Timestamp(0);
            let mut open: Option<(HeldStart, Vec<Timestamp>)> = None;
            let mut runs: Vec<(HeldStart, Vec<Timestamp>)> = Vec::new();
            for gap in gaps {
                now = now.plus(Duration::from_millis(gap as u64));
                // A run due by now has been released: it takes no more starts.
                if let Some((hold, starts)) = open.take() {
                    if hold.until <= now {
                        runs.push((hold, starts));
                    } else {
                        open = Some((hold, starts));
                    }
                }
                open = match open.take() {
                    Some((hold, mut starts)) => match debounce.join(&held_run(hold.clone()), "", now) {
                        Some(joined) => {
                            starts.push(now);
                            Some((joined, starts))
                        }
                        None => {
                            runs.push((hold, starts));
                            Some((debounce.first_hold("", now), vec![now]))
                        }
                    },
                    None => Some((debounce.first_hold("", now), vec![now])),
                };
            }
            runs.extend(open);
            let mut total = 0;
            for (hold, starts) in &runs {
                let (first, last) = (starts[0], *starts.last().unwrap());
                let HoldReason::Debounce { starts: counted, first_at, .. } = &hold.reason else {
                    panic!("a debounce");
                };
                prop_assert_eq!(*counted as usize, starts.len());
                prop_assert_eq!(*first_at, first);
                prop_assert!(hold.until >= last);
                prop_assert!(hold.until <= first.plus(debounce.max_delay_after_first()));
                if let Some(size) = batch {
                    prop_assert!(starts.len() <= size as usize);
                }
                if batch.is_none_or(|size| (starts.len() as u32) < size) {
                    prop_assert_eq!(
                        hold.until,
                        last.plus(debounce.period()).min(first.plus(debounce.max_delay_after_first()))
                    );
                }
                total += starts.len();
            }
            prop_assert_eq!(total, made, "no start lost, none counted twice");
        }
    }
}
