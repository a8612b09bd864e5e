//! What the engine's tests share on top of the exported harness (`siesta-testing`).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]
#![allow(dead_code, unreachable_pub, missing_docs)]

pub mod lossy;

use std::sync::{Arc, Mutex};

use siesta::ports::{WakeReason, WakeUp};
use siesta::*;
use siesta_testing::TestEnv;
use tokio::sync::oneshot;

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

/// The wake-up a started run gets.
pub fn started(w: &TestEnv, id: &RunId) -> WakeUp {
    WakeUp {
        tenant: w.tenant().clone(),
        run_id: id.clone(),
        reason: WakeReason::Started,
        epoch_hint: 0,
        seq_hint: None,
    }
}

/// A point in a step where the first pass is held until the test lets it go; later
/// passes go straight through.
#[derive(Clone)]
pub struct Gate(Arc<Mutex<Option<FirstPass>>>);

/// What the first pass tells (it is held) and waits for (its release).
type FirstPass = (oneshot::Sender<()>, oneshot::Receiver<()>);

/// A gate, what hears its first pass is held, and what lets that pass go.
pub fn gate() -> (Gate, oneshot::Receiver<()>, oneshot::Sender<()>) {
    let (entered_tx, entered_rx) = oneshot::channel();
    let (release_tx, release_rx) = oneshot::channel();
    (
        Gate(Arc::new(Mutex::new(Some((entered_tx, release_rx))))),
        entered_rx,
        release_tx,
    )
}

impl Gate {
    /// Pass the gate: whether this was the first pass, held until let go.
    pub async fn pass(&self) -> bool {
        let first = self.0.lock().unwrap().take();
        match first {
            Some((entered, release)) => {
                let _ = entered.send(());
                let _ = release.await;
                true
            }
            None => false,
        }
    }
}
