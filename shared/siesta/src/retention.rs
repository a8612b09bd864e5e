//! Retention: how long a finished run is kept, and which runs are due for removal.
//!
//! A run is kept while it is not finished, however old (a run waiting for a webhook a
//! year from now is never removed). Once it is finished (completed, failed,
//! cancelled; a parked run is not finished — it waits for an operator) it is kept for
//! the retention of its workflow, then removed with everything that is its own
//! ([`RunStore::reap_finished`]). After that, a start with the same
//! `Idempotency-Key` is a new start: the key named the run, and the run is gone.
//!
//! The decision is made here, once, for every backend: a [`RetentionPolicy`] gives
//! each workflow its retention, [`RetentionPolicy::passes`] turns it into the store
//! calls that remove what is due at a given time, and [`reap`] makes them, a bounded
//! page each.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::ports::{ReapedRun, RunStore, StoreError};
use crate::time::Timestamp;

/// How long a finished run is kept by default: 30 days.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(30 * 24 * 60 * 60);

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

/// One store call of a removal: finished runs of `workflow` (any, when `None`) that
/// finished at or before `finished_before`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReapPass {
    /// The workflow whose runs it removes; `None`: any workflow's.
    pub workflow: Option<String>,
    /// The runs that finished at or before this are due.
    pub finished_before: Timestamp,
}

/// What one [`reap`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReapReport {
    /// The runs removed.
    pub removed: Vec<ReapedRun>,
    /// Whether a pass filled its page: more runs may be due, call again.
    pub more: bool,
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

    /// How long `workflow`'s finished runs are kept (`None`: for ever).
    pub fn of(&self, workflow: &str) -> Option<Duration> {
        self.workflows
            .get(workflow)
            .copied()
            .unwrap_or(self.default)
    }

    /// The passes that remove what is due at `now`, for the `registered` workflows:
    /// one per workflow with a retention of its own or the default, then one over
    /// every workflow at the longest retention of all, which removes the runs of
    /// workflows no longer registered (kept that long, since no pass knows their own)
    /// — left out when any workflow is kept for ever.
    pub fn passes<'a>(
        &self,
        registered: impl IntoIterator<Item = &'a str>,
        now: Timestamp,
    ) -> Vec<ReapPass> {
        let cutoff = |d: Duration| Timestamp(now.0.saturating_sub(millis(d)));
        let mut names: Vec<&str> = registered.into_iter().collect();
        names.extend(self.workflows.keys().map(String::as_str));
        names.sort_unstable();
        names.dedup();
        let mut passes: Vec<ReapPass> = names
            .iter()
            .filter_map(|name| {
                self.of(name).map(|d| ReapPass {
                    workflow: Some((*name).to_owned()),
                    finished_before: cutoff(d),
                })
            })
            .collect();
        let mut longest = self.default;
        for retention in self.workflows.values() {
            longest = match (longest, retention) {
                (Some(a), Some(b)) => Some(a.max(*b)),
                _ => None,
            };
        }
        if let Some(longest) = longest {
            passes.push(ReapPass {
                workflow: None,
                finished_before: cutoff(longest),
            });
        }
        passes
    }
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Make `passes` on `store`, one page of at most `limit` runs each.
pub async fn reap(
    store: &dyn RunStore,
    passes: &[ReapPass],
    limit: usize,
) -> Result<ReapReport, StoreError> {
    let limit = limit.max(1);
    let mut report = ReapReport::default();
    for pass in passes {
        let removed = store
            .reap_finished(pass.workflow.as_deref(), pass.finished_before, limit)
            .await?;
        report.more |= removed.len() >= limit;
        report.removed.extend(removed);
    }
    Ok(report)
}

/// Parse a retention as `siesta dev --retention` takes it: a number and a unit —
/// `30d`, `12h`, `15m`, `3s` — or `0`, which keeps finished runs for ever (`None`).
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
    fn each_workflow_is_reaped_at_its_own_retention_and_the_rest_at_the_longest() {
        let now = Timestamp(100 * 86_400_000);
        let policy = RetentionPolicy::keep_for(Some(30 * DAY))
            .with_workflow("audit", Some(90 * DAY))
            .with_workflow("ping", Some(DAY));
        let passes = policy.passes(["approval", "ping"], now);
        let at = |days: i64| Timestamp(now.0 - days * 86_400_000);
        assert_eq!(
            passes,
            vec![
                ReapPass {
                    workflow: Some("approval".into()),
                    finished_before: at(30)
                },
                ReapPass {
                    workflow: Some("audit".into()),
                    finished_before: at(90)
                },
                ReapPass {
                    workflow: Some("ping".into()),
                    finished_before: at(1)
                },
                ReapPass {
                    workflow: None,
                    finished_before: at(90)
                },
            ]
        );
    }

    #[test]
    fn a_workflow_kept_for_ever_is_never_reaped_nor_is_any_unregistered_one() {
        let policy = RetentionPolicy::default().with_workflow("ledger", None);
        let passes = policy.passes(["ledger", "approval"], Timestamp(0));
        assert_eq!(passes.len(), 1);
        assert_eq!(passes[0].workflow.as_deref(), Some("approval"));
        assert!(
            RetentionPolicy::keep_for(None)
                .passes(["a"], Timestamp(0))
                .is_empty()
        );
    }
}
