//! What the test delivers to a run: events, messages, callback outcomes and heartbeats,
//! cancel and resume; and the callbacks a run waits on.

use serde::Serialize;
use siesta::ports::DeliverOutcome;
use siesta::{CallbackId, CallbackRecord, EntryState, ErrorInfo, Run, RunId, Wait, WaitKind};

use crate::TestEnv;

impl TestEnv {
    /// Deliver the named event to the run, then work until idle.
    pub async fn deliver_event(
        &self,
        run_id: &RunId,
        name: &str,
        value: impl Serialize,
    ) -> DeliverOutcome {
        let value = to_json(value);
        let outcome = self
            .engine()
            .deliver_event(&self.tenant, run_id, name, value, None)
            .await
            .unwrap_or_else(|e| panic!("delivering event '{name}' to run {run_id}: {e}"));
        self.run_until_idle().await;
        outcome
    }

    /// Inject a message into the run (drained at its next step boundary), then work
    /// until idle.
    pub async fn inject_message(&self, run_id: &RunId, value: impl Serialize) -> DeliverOutcome {
        let value = to_json(value);
        let outcome = self
            .engine()
            .inject_message(&self.tenant, run_id, value, None)
            .await
            .unwrap_or_else(|e| panic!("injecting a message into run {run_id}: {e}"));
        self.run_until_idle().await;
        outcome
    }

    /// Complete a callback with success, as its webhook would, then work until idle.
    pub async fn complete_callback(
        &self,
        callback_id: &CallbackId,
        value: impl Serialize,
    ) -> DeliverOutcome {
        self.callback_outcome(callback_id, Ok(to_json(value))).await
    }

    /// Fail a callback with `error`, then work until idle.
    pub async fn fail_callback(
        &self,
        callback_id: &CallbackId,
        error: ErrorInfo,
    ) -> DeliverOutcome {
        self.callback_outcome(callback_id, Err(error)).await
    }

    async fn callback_outcome(
        &self,
        callback_id: &CallbackId,
        outcome: Result<serde_json::Value, ErrorInfo>,
    ) -> DeliverOutcome {
        let delivered = self
            .engine()
            .complete_callback(callback_id, Some(&self.tenant), outcome, None)
            .await
            .unwrap_or_else(|e| panic!("completing callback {callback_id}: {e}"));
        self.run_until_idle().await;
        delivered
    }

    /// Record a heartbeat for a callback, pushing back its heartbeat timeout.
    pub async fn heartbeat_callback(&self, callback_id: &CallbackId) -> DeliverOutcome {
        self.engine()
            .heartbeat_callback(callback_id, Some(&self.tenant))
            .await
            .unwrap_or_else(|e| panic!("heartbeat for callback {callback_id}: {e}"))
    }

    /// The callbacks the run waits on, in position order.
    pub async fn open_callbacks(&self, run_id: &RunId) -> Vec<CallbackId> {
        let mut open: Vec<(siesta::Position, CallbackId)> = self
            .journal(run_id)
            .await
            .into_iter()
            .filter_map(|e| match e.state {
                EntryState::Waiting(Wait {
                    kind: WaitKind::Callback { callback_id, .. },
                    ..
                }) => Some((e.position, callback_id)),
                _ => None,
            })
            .collect();
        open.sort();
        open.into_iter().map(|(_, id)| id).collect()
    }

    /// The stored record of callback `id`; panics if there is none.
    pub async fn callback_record(&self, id: &CallbackId) -> CallbackRecord {
        self.backend()
            .store
            .get_callback(id)
            .await
            .unwrap_or_else(|e| panic!("reading callback {id}: {e}"))
            .unwrap_or_else(|| panic!("no record of callback {id}"))
    }

    /// The open callback the workflow created under `name`; panics if there is none.
    pub async fn callback(&self, run_id: &RunId, name: &str) -> CallbackId {
        self.journal(run_id)
            .await
            .into_iter()
            .find_map(|e| match e.state {
                EntryState::Waiting(Wait {
                    kind: WaitKind::Callback { callback_id, .. },
                    ..
                }) if e.name == name => Some(callback_id),
                _ => None,
            })
            .unwrap_or_else(|| panic!("run {run_id} waits on no callback named '{name}'"))
    }

    /// Cancel the run (at once, or at its next boundary if it is being worked), then
    /// work until idle.
    pub async fn cancel(&self, run_id: &RunId) -> Run {
        let run = self
            .engine()
            .cancel(&self.tenant, run_id, None)
            .await
            .unwrap_or_else(|e| panic!("cancelling run {run_id}: {e}"));
        self.run_until_idle().await;
        run
    }

    /// Pause the run (at once, or at its next boundary if it is being worked) as the
    /// operator `test`, then work until idle.
    pub async fn pause(&self, run_id: &RunId) -> Run {
        let run = self
            .engine()
            .pause(&self.tenant, run_id, None, "test")
            .await
            .unwrap_or_else(|e| panic!("pausing run {run_id}: {e}"));
        self.run_until_idle().await;
        run
    }

    /// Resume a parked or paused run, then work until idle.
    pub async fn resume(&self, run_id: &RunId) -> Run {
        let run = self
            .engine()
            .resume(&self.tenant, run_id, None)
            .await
            .unwrap_or_else(|e| panic!("resuming run {run_id}: {e}"));
        self.run_until_idle().await;
        run
    }
}

fn to_json(value: impl Serialize) -> serde_json::Value {
    serde_json::to_value(value).unwrap_or_else(|e| panic!("the value is not JSON: {e}"))
}
