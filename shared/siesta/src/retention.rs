//! Retention: how long a finished run is kept, and when a finished run is removed.
//!
//! A run is kept while it is not finished, however old (a run waiting for a webhook a
//! year from now is never removed). Once it is finished (completed, failed,
//! cancelled; a parked run is not finished — it waits for an operator) it is kept for
//! its retention, then removed with everything that is its own. After that, a start
//! with the same `Idempotency-Key` is a new start: the key named the run, and the run
//! is gone.
//!
//! The decision is made here, once, for every backend: [`RetentionRules::of`] gives a
//! run its retention (its workflow's own, else its tenant's `retention_days`, else the
//! deployment's), and [`RetentionRules::verdict`] says what is due for a finished run
//! at a given time. Each backend finds its finished runs by an index of when to look
//! at them next ([`crate::ports::RunStore::reap_due`] on the embedded backend, the
//! `reap` index on DynamoDB), so a run kept longer than others is not read again until
//! its own end.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::model::TenantId;
use crate::ports::ReapedRun;
use crate::quota::Quotas;
use crate::time::Timestamp;

/// How long a finished run is kept by default: 30 days.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(30 * 24 * 60 * 60);

/// When a finished child run whose parent still exists is looked at again (the
/// parent may still read the child's outcome and the values it offloaded).
pub const PARENT_RECHECK: Duration = Duration::from_secs(24 * 60 * 60);

/// When a finished child run found at `now` with its parent still there is looked at
/// again (ms): [`PARENT_RECHECK`] on, or when the parent is due to be looked at itself
/// (`parent_due`, when it has a time) if that is later — a parent kept a year leaves
/// its child alone that year, rather than costing a look a day.
pub fn parent_recheck_at(now: Timestamp, parent_due: Option<i64>) -> i64 {
    let recheck = now.0.saturating_add(millis(PARENT_RECHECK));
    parent_due.map_or(recheck, |due| recheck.max(due))
}

/// How long finished runs are kept: a default, and workflows that differ from it.
/// `None` keeps finished runs for ever.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetentionPolicy {
    /// The retention of every workflow not named in `workflows`.
    pub default: Option<Duration>,
    /// Workflows kept longer or shorter than the default, by name.
    pub workflows: BTreeMap<String, Option<Duration>>,
}

impl Default for RetentionPolicy {
    /// [`DEFAULT_RETENTION`] for every workflow.
    fn default() -> Self {
        RetentionPolicy::keep_for(Some(DEFAULT_RETENTION))
    }
}

impl RetentionPolicy {
    /// Keep every finished run for `retention` (`None`: for ever).
    pub fn keep_for(retention: Option<Duration>) -> Self {
        RetentionPolicy {
            default: retention,
            workflows: BTreeMap::new(),
        }
    }

    /// This policy, with `workflow`'s finished runs kept for `retention` instead
    /// (`None`: for ever).
    pub fn with_workflow(
        mut self,
        workflow: impl Into<String>,
        retention: Option<Duration>,
    ) -> Self {
        self.workflows.insert(workflow.into(), retention);
        self
    }

    /// How long `workflow`'s finished runs are kept by this policy alone, whatever
    /// their tenant (`None`: for ever).
    pub fn of(&self, workflow: &str) -> Option<Duration> {
        self.workflows
            .get(workflow)
            .copied()
            .unwrap_or(self.default)
    }
}

/// How long finished runs are kept: the deployment's [`RetentionPolicy`] (a default and
/// workflows of their own) and the tenants' `retention_days` in the [`Quotas`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RetentionRules {
    /// The deployment's retention and the workflows that differ from it.
    pub policy: RetentionPolicy,
    /// The tenants' quotas: `retention_days` replaces the deployment's retention for a
    /// tenant (`0`: for ever).
    pub quotas: Quotas,
}

/// What is due for a finished run at a given time ([`RetentionRules::verdict`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Its retention has passed: remove it (unless a parent still needs it).
    Remove,
    /// Its retention ends at this time: look at it again then.
    LookAgainAt(Timestamp),
    /// It is kept for ever: never look at it again.
    KeepForEver,
}

fn days(d: u64) -> Option<Duration> {
    (d > 0).then(|| Duration::from_secs(d.saturating_mul(86_400)))
}

impl RetentionRules {
    /// Rules with `policy` and no tenant of its own.
    pub fn new(policy: RetentionPolicy) -> Self {
        RetentionRules {
            policy,
            quotas: Quotas::default(),
        }
    }

    /// How long `tenant`'s finished runs of `workflow` are kept (`None`: for ever): the
    /// workflow's own retention if the policy names it, else the tenant's
    /// `retention_days`, else the policy's default.
    pub fn of(&self, tenant: &TenantId, workflow: &str) -> Option<Duration> {
        if let Some(own) = self.policy.workflows.get(workflow) {
            return *own;
        }
        match self.quotas.for_tenant(tenant).retention_days {
            Some(d) => days(d),
            None => self.policy.default,
        }
    }

    /// What is due at `now` for `tenant`'s run of `workflow` that finished at
    /// `finished_at`.
    pub fn verdict(
        &self,
        tenant: &TenantId,
        workflow: &str,
        finished_at: Timestamp,
        now: Timestamp,
    ) -> Verdict {
        match self.of(tenant, workflow) {
            None => Verdict::KeepForEver,
            Some(retention) => {
                let end = Timestamp(finished_at.0.saturating_add(millis(retention)));
                if end > now {
                    Verdict::LookAgainAt(end)
                } else {
                    Verdict::Remove
                }
            }
        }
    }

    /// The shortest retention any finished run can have: how long after a run finished
    /// the reaper first looks at it. Rules that keep everything for ever give
    /// [`Duration::MAX`].
    pub fn shortest(&self) -> Duration {
        let tenants = std::iter::once(&self.quotas.default)
            .chain(self.quotas.tenants.values())
            .filter_map(|q| q.retention_days.map(days));
        std::iter::once(self.policy.default)
            .chain(self.policy.workflows.values().copied())
            .chain(tenants)
            .flatten()
            .min()
            .unwrap_or(Duration::MAX)
    }
}

/// What one [`crate::Engine::reap`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReapReport {
    /// The runs removed.
    pub removed: Vec<ReapedRun>,
    /// Finished runs looked at and not removed: their retention has not passed (looked
    /// at again when it does), they are kept for ever, or their parent still exists.
    pub put_back: usize,
    /// Whether the page was full: more runs may be due, call again.
    pub more: bool,
}

/// Milliseconds of `d`, saturating.
pub fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Parse a retention as `siesta dev --retention` takes it: a number and a unit —
/// `30d`, `12h`, `15m`, `3s` — or `0`, which keeps finished runs for ever (`None`), as
/// does a zero of any unit (`0d`).
pub fn parse_retention(text: &str) -> Result<Option<Duration>, String> {
    let text = text.trim();
    let bad = || {
        format!(
            "'{text}' is not a retention: a number and a unit (30d, 12h, 15m, 3s), or 0 to keep everything"
        )
    };
    if text.chars().all(|c| c.is_ascii_digit()) && !text.is_empty() {
        return match text.parse::<u64>() {
            Ok(0) => Ok(None),
            _ => Err(bad()),
        };
    }
    let split = text.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
    let (number, unit) = text.split_at(split);
    let number: u64 = number.parse().map_err(|_| bad())?;
    let seconds = match unit {
        "d" => 24 * 60 * 60,
        "h" => 60 * 60,
        "m" => 60,
        "s" => 1,
        _ => return Err(bad()),
    };
    match number.checked_mul(seconds) {
        Some(0) => Ok(None),
        Some(secs) => Ok(Some(Duration::from_secs(secs))),
        None => Err(bad()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quota::Quota;

    const DAY: Duration = Duration::from_secs(86_400);

    #[test]
    fn retentions_parse_in_days_hours_minutes_and_seconds_and_zero_keeps_everything() {
        assert_eq!(parse_retention("30d"), Ok(Some(30 * DAY)));
        assert_eq!(
            parse_retention("12h"),
            Ok(Some(Duration::from_secs(12 * 3600)))
        );
        assert_eq!(parse_retention("15m"), Ok(Some(Duration::from_secs(900))));
        assert_eq!(parse_retention("3s"), Ok(Some(Duration::from_secs(3))));
        assert_eq!(parse_retention("0"), Ok(None));
        assert_eq!(parse_retention("0d"), Ok(None));
        for bad in ["", "d", "3", "3w", "-1d", "1.5h", "h3"] {
            assert!(parse_retention(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_child_is_looked_at_again_a_day_on_or_when_its_parent_is_due_if_later() {
        let now = Timestamp(1_000);
        let day = millis(PARENT_RECHECK);
        assert_eq!(parent_recheck_at(now, None), 1_000 + day);
        assert_eq!(
            parent_recheck_at(now, Some(0)),
            1_000 + day,
            "an unfinished parent"
        );
        assert_eq!(
            parent_recheck_at(now, Some(1_000 + 365 * day)),
            1_000 + 365 * day
        );
        assert_eq!(
            parent_recheck_at(now, Some(i64::MAX)),
            i64::MAX,
            "a parent kept for ever"
        );
    }

    fn rules() -> RetentionRules {
        RetentionRules {
            policy: RetentionPolicy::keep_for(Some(30 * DAY))
                .with_workflow("audit", None)
                .with_workflow("ping", Some(Duration::from_secs(3600))),
            quotas: Quotas {
                default: Quota::default(),
                tenants: BTreeMap::from([
                    (
                        "acme".to_owned(),
                        Quota {
                            retention_days: Some(7),
                            ..Quota::default()
                        },
                    ),
                    (
                        "bank".to_owned(),
                        Quota {
                            retention_days: Some(0),
                            ..Quota::default()
                        },
                    ),
                ]),
            },
        }
    }

    #[test]
    fn a_workflow_of_its_own_beats_the_tenant_which_beats_the_deployment() {
        let rules = rules();
        let t = |name: &str| TenantId(name.into());
        assert_eq!(rules.of(&t("other"), "order"), Some(30 * DAY));
        assert_eq!(rules.of(&t("acme"), "order"), Some(7 * DAY));
        assert_eq!(rules.of(&t("bank"), "order"), None, "0 days: for ever");
        assert_eq!(rules.of(&t("acme"), "audit"), None);
        assert_eq!(
            rules.of(&t("bank"), "ping"),
            Some(Duration::from_secs(3600))
        );
        assert_eq!(rules.shortest(), Duration::from_secs(3600));
    }

    #[test]
    fn the_verdict_removes_at_the_end_of_the_runs_own_retention_and_not_before() {
        let rules = rules();
        let t = |name: &str| TenantId(name.into());
        let finished = Timestamp(1_000);
        let end = |d: Duration| Timestamp(finished.0 + millis(d));
        assert_eq!(
            rules.verdict(&t("acme"), "order", finished, Timestamp(2_000)),
            Verdict::LookAgainAt(end(7 * DAY))
        );
        assert_eq!(
            rules.verdict(&t("acme"), "order", finished, end(7 * DAY)),
            Verdict::Remove
        );
        assert_eq!(
            rules.verdict(&t("other"), "order", finished, end(7 * DAY)),
            Verdict::LookAgainAt(end(30 * DAY))
        );
        assert_eq!(
            rules.verdict(&t("bank"), "order", finished, end(3650 * DAY)),
            Verdict::KeepForEver
        );
    }

    #[test]
    fn rules_that_keep_everything_for_ever_look_at_nothing() {
        let rules = RetentionRules::new(RetentionPolicy::keep_for(None));
        assert_eq!(rules.shortest(), Duration::MAX);
        assert_eq!(rules.of(&TenantId("t".into()), "w"), None);
    }
}
