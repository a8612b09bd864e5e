//! What the engine's tests share on top of the exported harness (`siesta-testing`).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]
#![allow(dead_code, unreachable_pub, missing_docs)]

use siesta::*;
use siesta_testing::TestEnv;

/// The harness over `registry`, runs owned by the tenant `acme`.
pub fn world(registry: Registry) -> TestEnv {
    TestEnv::builder(registry).tenant("acme").build()
}

/// Create a run without working the queue.
pub async fn create(w: &TestEnv, workflow: &str, input: serde_json::Value) -> RunId {
    w.create(workflow, input, None).await.unwrap()
}

/// The inline output of a run.
pub fn output(run: &Run) -> serde_json::Value {
    match &run.output {
        Some(Payload::Inline(v)) => v.clone(),
        other => panic!(
            "no inline output: {other:?} (status {}, error {:?})",
            run.status, run.error
        ),
    }
}
