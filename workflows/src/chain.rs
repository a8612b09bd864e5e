//! The `chain` workflow: the shape benchmarks use — `N` sequential steps, nothing else.
//!
//! Input: a number `N` as JSON (e.g. `10`), or `{"steps": N, "sleep_ms": S}` to sleep
//! `S` ms on a durable timer after each step (the step+sleep replay shape: every sleep
//! suspends the run, and the next wake-up replays it). Step `i` (position `step#i`)
//! returns `i`; the output is their sum, `0 + 1 + … + (N−1)`. Every step is one journal
//! write, so a run without sleeps costs exactly `N` checkpoints plus its start and
//! finish: throughput and latency per step read straight off it.

use siesta::prelude::*;

/// The most steps one run may take; a larger `N` fails the run at once (a typo should
/// not start a run that checkpoints for hours).
pub const MAX_STEPS: u64 = 100_000;

/// What a run of `chain` is asked to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum ChainInput {
    /// `N`: that many steps, back to back.
    Steps(u64),
    /// `{"steps": N, "sleep_ms": S}`: `N` steps, each followed by a durable sleep of `S`
    /// ms when `S` is given.
    Shape {
        /// How many steps.
        steps: u64,
        /// The sleep after each step, in ms.
        #[serde(default)]
        sleep_ms: Option<u64>,
    },
}

/// Run `n` sequential steps, step `i` returning `i` (each followed by a sleep when the
/// input asks for one); the sum of what they returned.
pub async fn chain(ctx: Context, input: ChainInput) -> Result<u64, Error> {
    let (n, sleep) = match input {
        ChainInput::Steps(n) => (n, None),
        ChainInput::Shape { steps, sleep_ms } => (steps, sleep_ms.map(Duration::from_millis)),
    };
    if n > MAX_STEPS {
        return Err(Error::msg(format!(
            "chain takes at most {MAX_STEPS} steps, not {n}"
        )));
    }
    let mut sum = 0u64;
    for i in 0..n {
        let value: u64 = ctx.step("step", move |_| async move { Ok(i) }).await?;
        sum += value;
        if let Some(sleep) = sleep {
            ctx.sleep(sleep).await?;
        }
    }
    Ok(sum)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_number_and_the_object_both_name_a_shape() {
        let number: ChainInput = serde_json::from_value(serde_json::json!(10)).unwrap();
        assert_eq!(number, ChainInput::Steps(10));
        let object: ChainInput =
            serde_json::from_value(serde_json::json!({"steps": 3, "sleep_ms": 1})).unwrap();
        assert_eq!(
            object,
            ChainInput::Shape {
                steps: 3,
                sleep_ms: Some(1)
            }
        );
        assert!(serde_json::from_value::<ChainInput>(serde_json::json!("ten")).is_err());
    }
}
