//! The backend conformance suite: every Siesta storage backend passes it unchanged.
//!
//! The engine relies on the contracts written on the [ports](siesta::ports): the
//! conditional writes of a [`RunStore`](siesta::ports::RunStore), the content
//! addressing of an [`ArtifactStore`](siesta::ports::ArtifactStore) and the
//! at-least-once, delayed delivery of a [`WakeQueue`](siesta::ports::WakeQueue). Each
//! function in [`cases`] checks one of them against a [`Harness`]: a backend, the clock
//! it reads, and a way to let time pass.
//!
//! A backend crate runs the whole suite with one macro call in an integration test; the
//! expression is evaluated once per case and must produce a `Future<Output = Harness>`:
//!
//! ```ignore
//! async fn harness() -> siesta_conformance::Harness {
//!     let dir = tempfile::tempdir().unwrap();
//!     let clock = std::sync::Arc::new(siesta::ManualClock::default());
//!     let backend = my_backend::open(dir.path(), clock.clone()).backend();
//!     siesta_conformance::Harness::manual(backend, clock, 3).hold(dir)
//! }
//!
//! siesta_conformance::conformance_suite!(harness());
//! ```
//!
//! The macro expands to one `#[tokio::test]` per case, named after it, so the crate that
//! calls it needs `tokio` (with `macros` and `rt-multi-thread`) among its
//! dev-dependencies.
//!
//! # Sharing real infrastructure
//! The cases are written so that a backend on real infrastructure (DynamoDB, S3 and SQS
//! on LocalStack) can run them concurrently against one table and one bucket: every
//! case uses fresh tenant and run ids, reads time only from [`Harness::clock`], lets
//! time pass only with [`Harness::advance`], and looks for its own items only. The
//! global due index is probed in a window far in the past that no other case writes to.
//! The queue cases acknowledge every message they receive and count receptions, so they
//! need the harness's queue (and its dead-letter queue) to themselves: a real backend
//! should create a fresh queue pair per harness. Real-time waits are at most 2 s each.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test tooling: a failed unwrap is a failed assertion"
)]

use std::any::Any;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use siesta::ports::Backend;
use siesta::{Clock, ManualClock, SystemClock, Timestamp};

pub mod cases;
mod support;

type Advance = dyn Fn(Duration) -> BoxFuture<'static, ()> + Send + Sync;

/// What a conformance case runs against: a backend, its clock, and a way to let time
/// pass.
#[derive(Clone)]
pub struct Harness {
    /// The backend under test.
    pub backend: Backend,
    /// The clock the backend reads; cases take every timestamp from it.
    pub clock: Arc<dyn Clock>,
    /// How many times the queue hands out a wake-up before it dead-letters it.
    pub max_receives: u32,
    advance: Arc<Advance>,
    guards: Vec<Arc<dyn Any + Send + Sync>>,
}

impl fmt::Debug for Harness {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Harness")
            .field("now", &self.clock.now())
            .field("max_receives", &self.max_receives)
            .finish_non_exhaustive()
    }
}

impl Harness {
    /// A harness over `backend`, which reads `clock`; `advance` lets `d` pass on that
    /// clock (and on the backend's), and `max_receives` is the queue's receive limit.
    pub fn new(
        backend: Backend,
        clock: Arc<dyn Clock>,
        advance: impl Fn(Duration) -> BoxFuture<'static, ()> + Send + Sync + 'static,
        max_receives: u32,
    ) -> Self {
        Harness {
            backend,
            clock,
            max_receives,
            advance: Arc::new(advance),
            guards: Vec::new(),
        }
    }

    /// A harness whose backend reads a [`ManualClock`]: passing time moves the clock.
    pub fn manual(backend: Backend, clock: Arc<ManualClock>, max_receives: u32) -> Self {
        let moved = clock.clone();
        Harness::new(
            backend,
            clock,
            move |d| {
                moved.advance(d);
                Box::pin(async {})
            },
            max_receives,
        )
    }

    /// A harness whose backend reads the system clock: passing time sleeps.
    pub fn system(backend: Backend, max_receives: u32) -> Self {
        Harness::new(
            backend,
            Arc::new(SystemClock),
            |d| Box::pin(tokio::time::sleep(d)),
            max_receives,
        )
    }

    /// Keep `guard` (a temporary directory, a container handle) alive as long as the
    /// harness or any clone of it.
    pub fn hold<T: Send + Sync + 'static>(mut self, guard: T) -> Self {
        self.guards.push(Arc::new(guard));
        self
    }

    /// Let `d` pass, as the backend sees time.
    pub async fn advance(&self, d: Duration) {
        (self.advance)(d).await
    }

    /// The current time on the harness's clock.
    pub fn now(&self) -> Timestamp {
        self.clock.now()
    }
}

/// Expands to one `#[tokio::test(flavor = "multi_thread", worker_threads = 2)]` per
/// case of the suite, each named after its case and running it on a fresh
/// `$make.await` (a [`Harness`]).
#[macro_export]
macro_rules! conformance_suite {
    (@expand (@names) $($case:ident)*) => {
        &[$(stringify!($case)),*]
    };
    (@expand (@optional $make:expr) $($case:ident)*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                if let Some(harness) = $make.await {
                    $crate::cases::$case(harness).await;
                }
            }
        )*
    };
    (@expand (@tests $make:expr) $($case:ident)*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                $crate::cases::$case($make.await).await;
            }
        )*
    };
    (@list $how:tt) => {
        $crate::conformance_suite! { @expand $how
            // runs
            create_and_get_run
            tenant_isolation
            a_run_keeps_its_trace_parent
            // leases
            claim_takes_the_lease
            claim_resumes_a_waiting_run
            claim_conflicts_while_the_lease_is_live
            claim_after_lease_expiry_takes_over
            concurrent_claims_exactly_one_wins
            claim_conflicts_on_finished_and_parked_runs
            claim_on_missing_run_is_not_found
            renew_lease_extends_without_a_version_bump
            renew_lease_with_a_stale_epoch_conflicts
            // checkpoints
            checkpoint_writes_everything_atomically
            checkpoint_with_a_stale_version_writes_nothing
            checkpoint_with_a_stale_epoch_writes_nothing
            checkpoint_after_a_delivery_conflicts_on_version_only
            checkpoint_without_epoch_is_guarded_by_version
            checkpoint_without_epoch_keeps_a_lease_renewed_since_its_read
            checkpoint_rolls_back_when_a_timeline_seq_exists
            checkpoint_rolls_back_when_a_child_run_exists
            journal_entry_upsert_replaces
            checkpoint_replaces_callback_and_tool_call_records
            checkpoint_closing_callbacks_refuse_later_outcomes
            checkpoint_over_the_transaction_item_limit_writes_nothing
            callback_and_tool_call_records_round_trip
            // deliveries
            deliver_appends_delivery_and_event
            deliver_to_a_leased_run_keeps_its_due_at
            deliver_duplicate_changes_nothing
            deliver_to_missing_or_finished_run
            concurrent_deliveries_get_gapless_seqs
            callback_delivery_needs_an_open_record
            callback_heartbeat_keeps_it_open_and_success_closes_it
            callback_failure_closes_it
            callback_delivery_after_its_deadline_is_gone
            callback_delivery_after_its_heartbeat_deadline_is_gone
            parent_delivery_is_applied_inside_the_checkpoint
            parent_delivery_is_skipped_when_duplicate_or_parent_gone
            load_replay_input_returns_journal_and_deliveries_in_order
            load_claimed_replay_input_is_the_replay_input_of_the_claimed_run
            // the engine on the backend
            a_wait_a_race_dropped_takes_no_delivery
            a_dropped_wait_takes_no_delivery_whatever_its_shape_and_whenever_it_arrives
            // quotas
            unfinished_runs_are_counted_and_released_once
            concurrent_creates_for_the_last_slot_exactly_one_wins
            // concurrency limits
            a_start_over_its_limit_is_queued_and_a_finish_hands_its_slot_on
            a_cancelled_queued_run_frees_what_it_held_and_leaves_its_line
            slots_follow_the_rule_over_a_long_history
            step_slots_hold_at_most_max_and_hand_over_in_line
            rate_turns_are_spaced_kept_and_used_once
            // pausing
            a_paused_run_is_not_due_not_claimed_and_keeps_its_deliveries
            // restarting from a step
            a_run_restarted_in_place_from_its_failed_step_does_not_repeat_the_steps_before
            a_run_restarted_as_new_forks_and_links_both_ways
            a_restart_is_refused_where_the_code_before_the_point_changed
            a_restart_before_a_succeeded_tool_call_does_not_repeat_it
            // debounces and held starts
            debounce_entry_round_trips_and_is_written_on_its_version
            concurrent_debounce_entry_writes_exactly_one_wins
            // bulk actions' jobs
            action_job_round_trips_and_is_written_on_its_version
            active_action_jobs_are_the_running_ones_and_jobs_list_newest_first
            concurrent_action_job_writes_exactly_one_wins
            a_bulk_cancel_on_the_backend_acts_on_each_matched_run_once
            a_held_run_is_due_at_its_release_and_released_on_its_version
            // reading
            timeline_pages_are_gapless
            timeline_pages_from_every_point_across_checkpoints_and_deliveries
            list_runs_newest_first_with_cursor_paging
            list_runs_filters_by_status_and_workflow
            due_runs_order_limit_and_bound
            due_index_is_sparse
            due_runs_leave_out_runs_whose_wake_up_is_on_its_way
            // builds
            builds_count_unfinished_runs_by_status_per_build
            // streams
            stream_appends_get_gapless_offsets_from_zero
            stream_reads_from_any_offset_with_a_limit
            concurrent_stream_appends_never_share_an_offset
            an_ended_stream_takes_no_more_chunks
            streams_are_per_tenant_run_and_name
            a_keyed_chunk_is_appended_once
            // schedules
            schedule_state_round_trips_and_is_written_on_its_version
            concurrent_schedule_state_writes_exactly_one_wins
            workflow_pause_round_trips_and_is_written_on_its_version
            // retention
            reaping_removes_a_finished_run_past_its_retention_and_nothing_else
            reaping_pages_oldest_first
            reaping_honours_the_tenants_retention_under_the_workflows
            reaping_applies_a_shortened_retention_once_rearmed
            // artifacts
            artifact_put_get_round_trip
            artifact_of_one_mebibyte_round_trips
            artifact_missing_is_not_found
            // queue
            queue_send_receive_ack
            queue_delayed_message_is_invisible_until_due
            queue_visibility_timeout_redelivers
            queue_extend_visibility_keeps_it_hidden
            queue_dead_letters_after_max_receives
            queue_dead_letters_page_through_every_one_once
            queue_ack_with_unknown_receipt_is_ok
        }
    };
    (@names) => {
        $crate::conformance_suite!(@list (@names))
    };
    (optional $make:expr) => {
        $crate::conformance_suite! { @list (@optional $make) }
    };
    ($make:expr) => {
        $crate::conformance_suite! { @list (@tests $make) }
    };
}

/// Every case of the suite, by name, in the order [`conformance_suite!`] runs them.
pub const CASES: &[&str] = conformance_suite!(@names);

#[cfg(test)]
mod tests {
    use super::CASES;

    /// Every `pub async fn` in `cases` is in the suite, exactly once.
    #[test]
    fn every_case_is_in_the_suite() {
        let sources = [
            include_str!("cases/runs.rs"),
            include_str!("cases/leases.rs"),
            include_str!("cases/checkpoints.rs"),
            include_str!("cases/deliveries.rs"),
            include_str!("cases/engine.rs"),
            include_str!("cases/dropped_waits.rs"),
            include_str!("cases/reading.rs"),
            include_str!("cases/artifacts.rs"),
            include_str!("cases/queue.rs"),
            include_str!("cases/quotas.rs"),
            include_str!("cases/builds.rs"),
            include_str!("cases/streams.rs"),
            include_str!("cases/retention.rs"),
            include_str!("cases/limits.rs"),
            include_str!("cases/schedules.rs"),
            include_str!("cases/debounces.rs"),
            include_str!("cases/restarts.rs"),
            include_str!("cases/action_jobs.rs"),
        ];
        let mut defined: Vec<&str> = sources
            .iter()
            .flat_map(|s| s.lines())
            .filter_map(|l| l.trim().strip_prefix("pub async fn "))
            .map(|l| l.split('(').next().unwrap_or_default())
            .collect();
        defined.sort_unstable();
        let mut listed: Vec<&str> = CASES.to_vec();
        listed.sort_unstable();
        assert_eq!(defined, listed);
    }
}
