//! The `limited` workflow: the shape of `scripts/crash-limits`. Its runs count against
//! the concurrency limit [`LIMITED_RUNS`] (at most 2 unfinished runs per `key`), and
//! each of its steps against the step limit [`LIMITED_STEPS`] (at most 3 attempts in
//! flight across the deployment). Every attempt tells a recorder outside the engine
//! when it enters and leaves, so the script measures the concurrency the limits let
//! through from the side effects themselves.
//!
//! Input: `{"key": "k3", "recorder": "http://127.0.0.1:PORT", "steps": 2, "step_ms":
//! 20}`; each step POSTs `{recorder}/enter` then `{recorder}/exit` with `{"run", "key",
//! "step", "attempt"}` around a pause of `step_ms`. Output: the number of steps.

use siesta::prelude::*;

/// The limit on `limited` runs: 2 unfinished per key.
pub const LIMITED_RUNS: &str = "limited-runs";
/// The step limit of `limited`'s steps: 3 attempts in flight.
pub const LIMITED_STEPS: &str = "limited-steps";

/// What a run of `limited` does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LimitedInput {
    /// The key its run counts under.
    pub key: String,
    /// Where its attempts report (`POST {recorder}/enter`, `/exit`).
    pub recorder: String,
    /// How many steps.
    #[serde(default = "one")]
    pub steps: u32,
    /// How long each attempt pauses between entering and leaving, in ms.
    #[serde(default)]
    pub step_ms: u64,
}

fn one() -> u32 {
    1
}

/// Run `steps` limited steps, each reporting its attempt to the recorder.
pub async fn limited(ctx: Context, input: LimitedInput) -> Result<u32, Error> {
    for i in 0..input.steps {
        let input = input.clone();
        let run = ctx.run_id().to_string();
        ctx.step("work", move |step| async move {
            let client = reqwest::Client::new();
            let body = serde_json::json!({
                "run": run,
                "key": input.key,
                "step": i,
                "attempt": step.attempt(),
            });
            let report = |what: &'static str| {
                let (client, body) = (client.clone(), body.clone());
                let url = format!("{}/{what}", input.recorder.trim_end_matches('/'));
                async move {
                    client
                        .post(url)
                        .json(&body)
                        .send()
                        .await
                        .and_then(reqwest::Response::error_for_status)
                        .map(drop)
                        .map_err(|e| StepError::retryable(format!("recorder: {e}")))
                }
            };
            report("enter").await?;
            tokio::time::sleep(std::time::Duration::from_millis(input.step_ms)).await;
            report("exit").await?;
            Ok(())
        })
        .limit(LIMITED_STEPS, 3)
        .await?;
    }
    Ok(input.steps)
}

/// The limit `limited` runs count against.
pub fn limited_runs() -> RunLimit {
    RunLimit::new(LIMITED_RUNS, 2)
        .key_from_input("/key")
        .workflow("limited")
}
