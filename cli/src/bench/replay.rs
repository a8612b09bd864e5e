//! The step+sleep replay shape: one `chain` run of `N` cycles, each a step and then a
//! durable `sleep` of 1 ms, so every cycle suspends the run and the next wake-up replays
//! everything before it. The server's cost per cycle is flat when replay stays linear
//! over the run and grows with the cycle number when each wake-up replays from the top.
//!
//! The run's `version` counts its writes, a fixed number per cycle; sampling it shows
//! how far the run is. Reported per mark (1 000 and `N`): the time to reach it, the
//! mean time per cycle up to it, and the marginal time per cycle over the 10 % of
//! cycles before it — the figure that shows whether a cycle costs more late in a run.

use std::time::{Duration, Instant};

use anyhow::bail;
use siesta::RunStatus;

/// How often the run is looked at.
const SAMPLE_EVERY: Duration = Duration::from_millis(100);

/// Run the shape with `cycles` cycles against the server `client` talks to and print
/// its figures.
pub(crate) async fn run(client: &siesta_client::Client, cycles: u64) -> anyhow::Result<()> {
    let started = Instant::now();
    let run = client
        .start_run(
            "chain",
            &serde_json::json!({"steps": cycles, "sleep_ms": 1}),
            &siesta_client::StartOptions::default(),
        )
        .await?;
    let mut samples: Vec<(Duration, u64)> = vec![(Duration::ZERO, 0)];
    let finished = loop {
        tokio::time::sleep(SAMPLE_EVERY).await;
        let view = client.get_run(&run.id).await?;
        samples.push((started.elapsed(), view.version));
        match view.status {
            RunStatus::Completed => break view,
            RunStatus::Failed | RunStatus::Parked | RunStatus::Cancelled => {
                bail!("the run did not complete: {view:?}")
            }
            _ => {}
        }
    };
    let expected = cycles * cycles.saturating_sub(1) / 2;
    let output = finished.output.as_ref().and_then(serde_json::Value::as_u64);
    if output != Some(expected) {
        bail!(
            "the run completed with {:?} instead of {expected}",
            finished.output
        );
    }
    let total = started.elapsed();
    let last_version = samples.last().map_or(0, |s| s.1).max(1);
    let writes_per_cycle = last_version as f64 / cycles as f64;
    // When the run had got through `c` cycles: the first sample at or past it.
    let reached = |c: f64| -> Duration {
        let version = c * writes_per_cycle;
        samples
            .iter()
            .find(|(_, v)| *v as f64 >= version)
            .map_or(total, |(t, _)| *t)
    };
    println!(
        "step+sleep(1 ms) replay: {cycles} cycles in one run, {:.1} s, {writes_per_cycle:.2} writes per cycle",
        total.as_secs_f64()
    );
    let mut marks = vec![1_000u64.min(cycles), cycles];
    marks.dedup();
    for mark in marks {
        let at = reached(mark as f64);
        let before = reached(mark as f64 * 0.9);
        let marginal = at.saturating_sub(before).as_secs_f64() * 1000.0 / (mark as f64 * 0.1);
        println!(
            "  at cycle {mark:>6}: {:>8.1} s elapsed, mean {:>7.2} ms per cycle, marginal {:>7.2} ms per cycle (cycles {}..{mark})",
            at.as_secs_f64(),
            at.as_secs_f64() * 1000.0 / mark as f64,
            marginal,
            (mark as f64 * 0.9) as u64,
        );
    }
    Ok(())
}
