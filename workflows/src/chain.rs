//! The `chain` workflow: the shape benchmarks use — `N` sequential steps, nothing else.
//!
//! Input: a number `N` as JSON (e.g. `10`). Step `i` (position `step#i`) returns `i`; the
//! output is their sum, `0 + 1 + … + (N−1)`. Every step is one journal write, so a run
//! costs exactly `N` checkpoints plus its start and finish: throughput and latency per
//! step read straight off it.

use siesta::{Context, Error};

/// The most steps one run may take; a larger `N` fails the run at once (a typo should
/// not start a run that checkpoints for hours).
pub const MAX_STEPS: u64 = 100_000;

/// Run `n` sequential steps, step `i` returning `i`; the sum of what they returned.
pub async fn chain(ctx: Context, n: u64) -> Result<u64, Error> {
    if n > MAX_STEPS {
        return Err(Error::msg(format!(
            "chain takes at most {MAX_STEPS} steps, not {n}"
        )));
    }
    let mut sum = 0u64;
    for i in 0..n {
        let value: u64 = ctx.step("step", move |_| async move { Ok(i) }).await?;
        sum += value;
    }
    Ok(sum)
}
