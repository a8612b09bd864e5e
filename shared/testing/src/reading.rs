//! Reading runs back: the run as stored, its status, output or error, payloads, journal,
//! streams and timeline.

use serde::de::DeserializeOwned;
use siesta::ports::ReplayInput;
use siesta::{ErrorInfo, JournalEntry, Payload, Run, RunId, RunStatus, TimelineEvent};

use crate::TestEnv;

impl TestEnv {
    /// The run as stored (read past the crash probe); panics if there is no such run.
    pub async fn run(&self, run_id: &RunId) -> Run {
        self.backend()
            .store
            .get_run(&self.tenant, run_id)
            .await
            .expect("the in-memory store failed")
            .unwrap_or_else(|| panic!("no run {run_id}"))
    }

    /// The run's status.
    pub async fn status(&self, run_id: &RunId) -> RunStatus {
        self.run(run_id).await.status
    }

    /// The output of a completed run, as `T`; panics with the run's status and error if
    /// it did not complete.
    pub async fn output<T: DeserializeOwned>(&self, run_id: &RunId) -> T {
        let run = self.run(run_id).await;
        let Some(payload) = run
            .output
            .as_ref()
            .filter(|_| run.status == RunStatus::Completed)
        else {
            panic!(
                "run {run_id} has no output: it is {}{}",
                run.status,
                run.error.map(|e| format!(" ({e})")).unwrap_or_default()
            )
        };
        let value = self.payload(payload).await;
        serde_json::from_value(value.clone())
            .unwrap_or_else(|e| panic!("run {run_id}'s output {value} does not fit: {e}"))
    }

    /// The error of a failed, parked or cancelled run; panics if it has none.
    pub async fn error(&self, run_id: &RunId) -> ErrorInfo {
        let run = self.run(run_id).await;
        run.error
            .unwrap_or_else(|| panic!("run {run_id} has no error: it is {}", run.status))
    }

    /// A payload's JSON, fetched from the artifact store when it was offloaded.
    pub async fn payload(&self, payload: &Payload) -> serde_json::Value {
        match payload {
            Payload::Inline(v) => v.clone(),
            Payload::Artifact(a) => {
                let bytes = self
                    .backend()
                    .artifacts
                    .get(a)
                    .await
                    .unwrap_or_else(|e| panic!("reading artifact {}: {e}", a.location));
                serde_json::from_slice(&bytes)
                    .unwrap_or_else(|e| panic!("artifact {} is not JSON: {e}", a.location))
            }
        }
    }

    /// The run's journal and deliveries.
    pub async fn replay_input(&self, run_id: &RunId) -> ReplayInput {
        self.backend()
            .store
            .load_replay_input(&self.tenant, run_id)
            .await
            .expect("the in-memory store failed")
    }

    /// The run's journal entries.
    pub async fn journal(&self, run_id: &RunId) -> Vec<JournalEntry> {
        self.replay_input(run_id).await.journal
    }

    /// The journal entry at `position` (`name#occurrence`, e.g. `charge#0`).
    pub async fn entry(&self, run_id: &RunId, position: &str) -> Option<JournalEntry> {
        self.journal(run_id)
            .await
            .into_iter()
            .find(|e| e.position.as_str() == position)
    }

    /// Every chunk of the run's stream `name`, in offset order (read from the store,
    /// not through the probe). [`siesta::visible`] gives what a reader shows of them.
    pub async fn stream(&self, run_id: &RunId, name: &str) -> Vec<siesta::ports::StreamChunk> {
        self.embedded
            .backend()
            .streams
            .read(&self.tenant, run_id, name, 0, usize::MAX)
            .await
            .expect("reading a stream")
    }

    /// The data of the chunks a reader shows of the run's stream `name`
    /// ([`siesta::visible`]: a failed attempt's chunks dropped).
    pub async fn stream_data(&self, run_id: &RunId, name: &str) -> Vec<serde_json::Value> {
        siesta::visible(&self.stream(run_id, name).await)
            .into_iter()
            .map(|c| c.chunk.data)
            .collect()
    }

    /// The run's whole timeline, in order.
    pub async fn timeline(&self, run_id: &RunId) -> Vec<TimelineEvent> {
        self.backend()
            .store
            .timeline(&self.tenant, run_id, 0, usize::MAX >> 1)
            .await
            .expect("the in-memory store failed")
    }
}
