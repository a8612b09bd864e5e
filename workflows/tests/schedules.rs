//! The examples' schedule: `nightly-report` starts `report` at 02:00 UTC, one run a
//! night, in the `default` tenant.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

use siesta::schedule::tick_run_id;
use siesta::{TenantId, Timestamp};
use siesta_testing::TestEnv;

/// 2026-01-01T00:00:00Z.
const JAN_1: i64 = 1_767_225_600_000;
const HOUR: i64 = 3_600_000;

#[tokio::test]
async fn nightly_report_starts_report_at_two_utc_in_the_default_tenant() {
    let env = TestEnv::builder(siesta_workflows::registry())
        .tenant("default")
        .start_at(Timestamp(JAN_1))
        .build();
    env.run_until_idle().await;
    let listed = env
        .engine()
        .schedules(&TenantId::from("default"))
        .await
        .unwrap();
    let nightly = listed.iter().find(|s| s.name == "nightly-report").unwrap();
    assert_eq!(
        (
            nightly.workflow.as_str(),
            nightly.cron.as_str(),
            nightly.timezone.as_str()
        ),
        ("report", "0 2 * * *", "UTC")
    );
    assert_eq!(nightly.next, Some(Timestamp(JAN_1 + 2 * HOUR)));
    env.clock().set(Timestamp(JAN_1 + 2 * HOUR));
    env.run_until_idle().await;
    let run = env
        .run(&tick_run_id("nightly-report", Timestamp(JAN_1 + 2 * HOUR)))
        .await;
    assert_eq!(run.workflow, "report");
}
