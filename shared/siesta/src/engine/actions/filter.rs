//! A job's filter read against runs: the part the store lists by, and the rest checked
//! on each run listed.

use crate::dead_letters::is_dead_lettered;
use crate::model::*;
use crate::ports::RunFilter;
use crate::time::Timestamp;

/// The part of `filter` the store lists by ([`crate::ports::RunStore::list_runs`]): the
/// workflow, and the status — the one asked, or the one the other fields imply
/// (failed for a failure time, parked for dead-lettered runs).
pub(super) fn store_filter(filter: &ActionFilter) -> RunFilter {
    let implied = if filter.failed_after.is_some() || filter.failed_before.is_some() {
        Some(RunStatus::Failed)
    } else if filter.dead_lettered {
        Some(RunStatus::Parked)
    } else {
        None
    };
    RunFilter {
        status: filter.status.or(implied),
        workflow: filter.workflow.clone(),
    }
}

/// Whether `run` matches every field of `filter`.
pub(super) fn matches(filter: &ActionFilter, run: &Run) -> bool {
    let within = |t: Timestamp, after: Option<Timestamp>, before: Option<Timestamp>| {
        after.is_none_or(|a| t >= a) && before.is_none_or(|b| t < b)
    };
    let listed = store_filter(filter);
    listed.status.is_none_or(|s| run.status == s)
        && listed.workflow.as_ref().is_none_or(|w| run.workflow == *w)
        && filter
            .build
            .as_ref()
            .is_none_or(|b| run.build_id.as_ref() == Some(b))
        && within(run.created_at, filter.created_after, filter.created_before)
        && within(run.updated_at, filter.failed_after, filter.failed_before)
        && filter
            .error_kind
            .as_ref()
            .is_none_or(|k| run.error.as_ref().is_some_and(|e| e.kind == *k))
        && (!filter.dead_lettered || is_dead_lettered(run))
}

/// Whether `run`, and so every run listed after it (listings are newest first), was
/// created before `filter`'s `created_after`: nothing further can match.
pub(super) fn is_past_the_end(filter: &ActionFilter, run: &Run) -> bool {
    filter.created_after.is_some_and(|a| run.created_at < a)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(status: RunStatus, created: i64, updated: i64) -> Run {
        let mut run = Run::new(
            TenantId::from("acme"),
            RunId::from("r-1"),
            "order",
            Payload::Inline(serde_json::Value::Null),
            Timestamp(created),
        );
        run.status = status;
        run.updated_at = Timestamp(updated);
        run
    }

    #[test]
    fn a_failure_time_lists_failed_runs_and_dead_lettered_lists_parked_ones() {
        let failed = ActionFilter {
            failed_after: Some(Timestamp(10)),
            ..ActionFilter::default()
        };
        assert_eq!(store_filter(&failed).status, Some(RunStatus::Failed));
        let dead = ActionFilter {
            dead_lettered: true,
            workflow: Some("order".into()),
            ..ActionFilter::default()
        };
        let listed = store_filter(&dead);
        assert_eq!(listed.status, Some(RunStatus::Parked));
        assert_eq!(listed.workflow.as_deref(), Some("order"));
    }

    #[test]
    fn every_field_given_must_match() {
        let filter = ActionFilter {
            created_after: Some(Timestamp(100)),
            created_before: Some(Timestamp(200)),
            failed_before: Some(Timestamp(300)),
            error_kind: Some("Boom".into()),
            ..ActionFilter::default()
        };
        let mut r = run(RunStatus::Failed, 150, 250);
        assert!(!matches(&filter, &r), "no error");
        r.error = Some(ErrorInfo::new("Boom", "it broke", false));
        assert!(matches(&filter, &r));
        assert!(!matches(&filter, &run(RunStatus::Completed, 150, 250)));
        let mut late = r.clone();
        late.updated_at = Timestamp(300);
        assert!(!matches(&filter, &late), "failed_before is exclusive");
        let mut early = r.clone();
        early.created_at = Timestamp(99);
        assert!(!matches(&filter, &early));
        assert!(is_past_the_end(&filter, &early));
        assert!(!is_past_the_end(&filter, &r));
    }

    #[test]
    fn a_build_filter_matches_runs_that_record_that_build_only() {
        let filter = ActionFilter {
            build: Some("app@1".into()),
            ..ActionFilter::default()
        };
        let mut r = run(RunStatus::Waiting, 1, 1);
        assert!(!matches(&filter, &r), "a run that records no build");
        r.build_id = Some("app@1".into());
        assert!(matches(&filter, &r));
        r.build_id = Some("app@2".into());
        assert!(!matches(&filter, &r));
    }
}
