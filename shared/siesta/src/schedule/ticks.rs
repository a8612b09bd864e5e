//! A schedule's ticks: the instants a cron pattern names on a time zone's wall clock.
//!
//! Pure: no clock, no I/O. The pattern is matched on the zone's **wall clock** (its
//! local date and time, `croner` over `chrono`'s naive date-times), and each matching
//! wall time is then placed on the time line by one rule:
//!
//! > **A tick fires at the first instant at which the zone's wall clock shows the
//! > tick's time or a later one.**
//!
//! Which gives, around daylight-saving changes:
//! - a wall time the clock shows once fires then;
//! - a wall time in a **gap** (the clock jumps forward: in Europe/Paris from 02:00 to
//!   03:00 on the last Sunday of March, so 02:30 is never shown) fires when the gap
//!   ends, at 03:00 new time. Several wall times of one gap fire once, together, at
//!   its end: one instant, one tick, one run (a gap-time tick that coincides with a
//!   tick at the gap's end, `0 2,3 * * *`, is the same tick);
//! - a wall time the clock shows **twice** (the clock goes back: 02:30 on the last
//!   Sunday of October in Paris, once in summer time and again an hour later in winter
//!   time) fires once, the first time. A schedule that fires within that hour
//!   (`*/15 * * * *`) fires in its first pass only, and pauses during the second.
//!
//! So a daily schedule fires exactly once each day, DST or not, and never twice in
//! an hour. Schedules meant to fire at a fixed rate through the change (every 15
//! minutes, on the minute) should use `UTC`.
//!
//! Ticks are whole seconds (patterns have minutes, five fields, no seconds field).

use std::str::FromStr as _;

use chrono::{LocalResult, NaiveDateTime, TimeDelta, TimeZone, Timelike as _};
use chrono_tz::Tz;
use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};

use super::ScheduleError;
use crate::time::Timestamp;

/// How many matching wall times one search looks at before it gives up; bounds the
/// search through a repeated hour (at most 60 per hour for a per-minute pattern) and
/// the day searched back by [`Ticks::latest_at_or_before`].
const MAX_CANDIDATES: usize = 10_000;

/// How far past the wall clock's reading [`Ticks::latest_at_or_before`] starts looking:
/// a wall time later than the clock reads may have been shown already when the clock
/// went back (every backward change in the zone database is shorter).
const LOOK_AHEAD_HOURS: i64 = 3;

/// How far either side of a gap's wall time its end is looked for (more than any
/// zone's offset change).
const GAP_SEARCH_HOURS: i64 = 26;

/// A cron pattern on a time zone's wall clock; see the module's rule for
/// daylight-saving gaps and repeats.
#[derive(Debug, Clone)]
pub struct Ticks {
    cron: Cron,
    zone: Tz,
}

impl Ticks {
    /// The ticks of `pattern` (five fields: minute, hour, day of month, month, day of
    /// week; or a nickname such as `@daily`) on the wall clock of the IANA zone `zone`
    /// (`UTC`, `Europe/Paris`).
    pub fn new(pattern: &str, zone: &str) -> Result<Ticks, ScheduleError> {
        let cron = CronParser::builder()
            .seconds(Seconds::Disallowed)
            .year(Year::Disallowed)
            .build()
            .parse(pattern)
            .map_err(|e| ScheduleError::InvalidCron {
                cron: pattern.to_owned(),
                reason: e.to_string(),
            })?;
        let zone =
            Tz::from_str(zone).map_err(|_| ScheduleError::UnknownTimezone(zone.to_owned()))?;
        Ok(Ticks { cron, zone })
    }

    /// The first tick strictly after `after`, if the pattern has one (a pattern may
    /// name no time that exists, `0 0 30 2 *`).
    pub fn next_after(&self, after: Timestamp) -> Option<Timestamp> {
        // A wall time at or before the clock's reading at `after` was shown by then,
        // so its tick is not after `after`: the search starts past that reading.
        let mut wall = self.wall(after)?;
        for _ in 0..MAX_CANDIDATES {
            wall = self.cron.find_next_occurrence(&wall, false).ok()?;
            let tick = self.first_shown(wall)?;
            // Only a wall time the clock showed before `after` (the first pass of a
            // repeated hour, seen from its second) is not after it.
            if tick > after {
                return Some(tick);
            }
        }
        None
    }

    /// The last tick at or before `at`, if there is one within the pattern's reach.
    pub fn latest_at_or_before(&self, at: Timestamp) -> Option<Timestamp> {
        let mut wall = self
            .wall(at)?
            .checked_add_signed(TimeDelta::hours(LOOK_AHEAD_HOURS))?;
        for _ in 0..MAX_CANDIDATES {
            wall = self.cron.find_previous_occurrence(&wall, false).ok()?;
            let tick = self.first_shown(wall)?;
            if tick <= at {
                return Some(tick);
            }
        }
        None
    }

    /// The ticks after `after` and at or before `until`, at most `max` of them, in
    /// order.
    pub fn between(&self, after: Timestamp, until: Timestamp, max: usize) -> Vec<Timestamp> {
        let mut ticks = Vec::new();
        let mut from = after;
        while ticks.len() < max {
            match self.next_after(from) {
                Some(t) if t <= until => {
                    ticks.push(t);
                    from = t;
                }
                _ => break,
            }
        }
        ticks
    }

    /// The zone's wall clock at `at`.
    fn wall(&self, at: Timestamp) -> Option<NaiveDateTime> {
        Some(
            self.zone
                .timestamp_millis_opt(at.millis())
                .single()?
                .naive_local(),
        )
    }

    /// The first instant at which the zone's wall clock shows `wall` or a later time:
    /// the module's rule.
    fn first_shown(&self, wall: NaiveDateTime) -> Option<Timestamp> {
        match self.zone.from_local_datetime(&wall) {
            LocalResult::Single(t) => Some(Timestamp(t.timestamp_millis())),
            LocalResult::Ambiguous(first, second) => Some(Timestamp(
                first.timestamp_millis().min(second.timestamp_millis()),
            )),
            LocalResult::None => self.gap_end(wall),
        }
    }

    /// The instant a gap that hides `wall` ends: the first instant whose wall clock
    /// reads `wall` or later, searched by halving within a day either side (in whole
    /// seconds: every change in the zone database falls on one).
    fn gap_end(&self, wall: NaiveDateTime) -> Option<Timestamp> {
        let as_utc = wall.and_utc().timestamp();
        let (mut lo, mut hi) = (
            as_utc - GAP_SEARCH_HOURS * 3600,
            as_utc + GAP_SEARCH_HOURS * 3600,
        );
        let shows_it = |secs: i64| -> Option<bool> {
            Some(self.zone.timestamp_opt(secs, 0).single()?.naive_local() >= wall)
        };
        if shows_it(lo)? || !shows_it(hi)? {
            return None;
        }
        // Invariant: the clock reads earlier than `wall` at `lo`, `wall` or later at `hi`.
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if shows_it(mid)? {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        Some(Timestamp(hi * 1000))
    }
}

/// `at` as `YYYYMMDDTHHMMSSZ` (ISO 8601's basic format, UTC, whole seconds): how a
/// tick is named in its run's id.
pub(crate) fn compact_utc(at: Timestamp) -> String {
    match chrono::DateTime::from_timestamp_millis(at.millis()) {
        Some(t) if t.nanosecond() == 0 => t.format("%Y%m%dT%H%M%SZ").to_string(),
        Some(t) => t.format("%Y%m%dT%H%M%S%.3fZ").to_string(),
        None => at.millis().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{DateTime, Utc};
    use proptest::prelude::*;

    fn at(rfc3339: &str) -> Timestamp {
        Timestamp(
            DateTime::parse_from_rfc3339(rfc3339)
                .unwrap()
                .timestamp_millis(),
        )
    }

    fn show(t: Timestamp) -> String {
        DateTime::<Utc>::from_timestamp_millis(t.millis())
            .unwrap()
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    }

    fn ticks(pattern: &str, zone: &str, after: &str, n: usize) -> Vec<String> {
        let t = Ticks::new(pattern, zone).unwrap();
        let mut from = at(after);
        let mut out = Vec::new();
        for _ in 0..n {
            from = t.next_after(from).unwrap();
            out.push(show(from));
        }
        out
    }

    #[test]
    fn a_daily_tick_in_utc_fires_at_its_time_each_day() {
        assert_eq!(
            ticks("0 2 * * *", "UTC", "2026-01-01T00:00:00Z", 3),
            [
                "2026-01-01T02:00:00Z",
                "2026-01-02T02:00:00Z",
                "2026-01-03T02:00:00Z"
            ]
        );
    }

    #[test]
    fn a_tick_in_the_spring_gap_fires_when_the_gap_ends() {
        // Paris, 2026-03-29: 02:00 CET becomes 03:00 CEST (01:00 UTC); 02:30 is never
        // shown, and fires at 03:00 CEST.
        assert_eq!(
            ticks("30 2 * * *", "Europe/Paris", "2026-03-28T00:00:00Z", 3),
            [
                "2026-03-28T01:30:00Z",
                "2026-03-29T01:00:00Z",
                "2026-03-30T00:30:00Z"
            ]
        );
    }

    #[test]
    fn several_ticks_of_one_gap_fire_once_at_its_end() {
        // 02:00, 02:15, 02:30, 02:45 and 03:00 are all 03:00 CEST that day: one tick.
        assert_eq!(
            ticks("*/15 2,3 * * *", "Europe/Paris", "2026-03-29T00:30:00Z", 4),
            [
                "2026-03-29T01:00:00Z",
                "2026-03-29T01:15:00Z",
                "2026-03-29T01:30:00Z",
                "2026-03-29T01:45:00Z"
            ]
        );
    }

    #[test]
    fn a_tick_in_the_autumn_repeat_fires_once_the_first_time() {
        // Paris, 2026-10-25: 03:00 CEST becomes 02:00 CET (01:00 UTC); 02:30 is shown
        // at 00:30 UTC and again at 01:30 UTC, and fires at 00:30 UTC only.
        assert_eq!(
            ticks("30 2 * * *", "Europe/Paris", "2026-10-24T00:00:00Z", 3),
            [
                "2026-10-24T00:30:00Z",
                "2026-10-25T00:30:00Z",
                "2026-10-26T01:30:00Z"
            ]
        );
    }

    #[test]
    fn an_hourly_schedule_skips_the_second_pass_of_the_repeated_hour() {
        assert_eq!(
            ticks("0 * * * *", "Europe/Paris", "2026-10-24T23:30:00Z", 4),
            [
                // 02:00 CEST, then 02:00 CET is not fired again, then 03:00 CET.
                "2026-10-25T00:00:00Z",
                "2026-10-25T02:00:00Z",
                "2026-10-25T03:00:00Z",
                "2026-10-25T04:00:00Z"
            ]
        );
    }

    #[test]
    fn from_inside_the_second_pass_the_next_tick_is_after_it() {
        // 01:40 UTC is 02:40 CET, the second pass: 02:45's first showing has passed.
        assert_eq!(
            ticks("45 2 * * *", "Europe/Paris", "2026-10-25T01:40:00Z", 1),
            ["2026-10-26T01:45:00Z"]
        );
    }

    #[test]
    fn the_latest_tick_is_found_back_across_a_gap_and_a_repeat() {
        let t = Ticks::new("30 2 * * *", "Europe/Paris").unwrap();
        assert_eq!(
            show(t.latest_at_or_before(at("2026-03-29T12:00:00Z")).unwrap()),
            "2026-03-29T01:00:00Z"
        );
        assert_eq!(
            show(t.latest_at_or_before(at("2026-10-25T01:45:00Z")).unwrap()),
            "2026-10-25T00:30:00Z"
        );
        assert_eq!(
            show(t.latest_at_or_before(at("2026-10-25T00:30:00Z")).unwrap()),
            "2026-10-25T00:30:00Z",
            "inclusive"
        );
    }

    #[test]
    fn bad_patterns_and_zones_are_refused_with_what_is_wrong() {
        assert!(matches!(
            Ticks::new("0 25 * * *", "UTC"),
            Err(ScheduleError::InvalidCron { .. })
        ));
        assert!(matches!(
            Ticks::new("0 0 2 * * *", "UTC"),
            Err(ScheduleError::InvalidCron { .. })
        ));
        assert!(matches!(
            Ticks::new("0 2 * * *", "Europe/Pariss"),
            Err(ScheduleError::UnknownTimezone(z)) if z == "Europe/Pariss"
        ));
    }

    #[test]
    fn a_pattern_that_names_no_existing_time_has_no_tick() {
        let t = Ticks::new("0 0 30 2 *", "UTC").unwrap();
        assert_eq!(t.next_after(at("2026-01-01T00:00:00Z")), None);
    }

    #[test]
    fn a_tick_is_named_in_iso_basic_utc() {
        assert_eq!(compact_utc(at("2026-03-29T01:00:00Z")), "20260329T010000Z");
    }

    /// The rule, by brute force: walk the time line minute by minute; the wall times
    /// the clock reaches for the first time at an instant (those after the highest it
    /// had shown before, up to what it shows now) fire at that instant.
    fn oracle(pattern: &str, zone: Tz, from: i64, minutes: i64) -> Vec<Timestamp> {
        let cron = CronParser::builder()
            .seconds(Seconds::Disallowed)
            .year(Year::Disallowed)
            .build()
            .parse(pattern)
            .unwrap();
        let wall = |secs: i64| zone.timestamp_opt(secs, 0).unwrap().naive_local();
        // What the clock had shown by `from`: in the second pass of a repeated hour,
        // more than it shows at `from`.
        let mut highest = (0..=180).map(|m| wall(from - m * 60)).max().unwrap();
        let mut out = Vec::new();
        for m in 1..=minutes {
            let secs = from + m * 60;
            let now = wall(secs);
            if now > highest {
                let mut w = highest;
                while let Ok(next) = cron.find_next_occurrence(&w, false) {
                    if next > now {
                        break;
                    }
                    if out.last() != Some(&Timestamp(secs * 1000)) {
                        out.push(Timestamp(secs * 1000));
                    }
                    w = next;
                }
                highest = now;
            }
        }
        out
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Around every change of 2026 in three zones (one of them, Lord Howe, moves by
        /// half an hour), the ticks are the rule's.
        #[test]
        fn ticks_follow_the_rule_around_daylight_saving_changes(
            zone in prop::sample::select(vec!["Europe/Paris", "America/New_York", "Australia/Lord_Howe", "UTC"]),
            pattern in prop::sample::select(vec!["*/15 * * * *", "30 2 * * *", "0 * * * *", "0,30 1-3 * * *", "45 1 * * 0", "5 2,3 * * *"]),
            // Minutes into 2026, in a few days around its changes.
            day in prop::sample::select(vec![0i64, 86, 87, 88, 95, 96, 276, 277, 297, 298, 305, 306]),
            minute in 0i64..(24 * 60),
        ) {
            let zone_tz = Tz::from_str(zone).unwrap();
            let from = 1_767_225_600 + day * 86_400 + minute * 60;
            let t = Ticks::new(pattern, zone).unwrap();
            let expected = oracle(pattern, zone_tz, from, 36 * 60);
            let got = t.between(Timestamp(from * 1000), Timestamp((from + 36 * 3600) * 1000), 10_000);
            prop_assert_eq!(got.iter().map(|t| show(*t)).collect::<Vec<_>>(), expected.iter().map(|t| show(*t)).collect::<Vec<_>>());
            // And the latest tick at or before any of them is itself.
            for tick in &got {
                prop_assert_eq!(t.latest_at_or_before(*tick), Some(*tick));
                prop_assert!(t.latest_at_or_before(Timestamp(tick.millis() - 1)).is_none_or(|p| p < *tick));
            }
        }
    }
}
