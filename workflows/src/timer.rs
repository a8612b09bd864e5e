//! The `timer` workflow: one durable timer, then done — the shape of `siesta bench
//! --timers N`, where `N` runs sleep until one common instant and fire together.
//!
//! Input: `{"until": "2026-11-24T09:00:00Z"}` (RFC 3339: sleep until that instant) or
//! `{"sleep_ms": S}` (sleep `S` ms). The deadline is journaled the first time the run
//! reaches its timer, so a replay keeps it. Output: how late the timer fired, in ms
//! (`{"late_ms": n}`, from the engine's clock when the run finished).

use siesta::prelude::*;

/// What a run of `timer` sleeps for.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum TimerInput {
    /// `{"until": RFC 3339}`: until that instant (at once if it has passed).
    Until {
        /// The instant, RFC 3339.
        until: String,
    },
    /// `{"sleep_ms": S}`: for `S` ms.
    For {
        /// How long, in ms.
        sleep_ms: u64,
    },
}

/// What a finished `timer` run reports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimerOutcome {
    /// How long after its instant the timer fired, in ms.
    pub late_ms: u64,
}

/// The instant an RFC 3339 string names.
fn parse_instant(text: &str) -> Result<Timestamp, Error> {
    chrono::DateTime::parse_from_rfc3339(text)
        .map(|t| Timestamp(t.timestamp_millis()))
        .map_err(|e| Error::msg(format!("until: '{text}' is not an RFC 3339 instant: {e}")))
}

/// Sleep on one durable timer as `input` says; how late it fired.
pub async fn timer(ctx: Context, input: TimerInput) -> Result<TimerOutcome, Error> {
    let now = ctx.now();
    let at = match &input {
        TimerInput::Until { until } => parse_instant(until)?,
        TimerInput::For { sleep_ms } => now.plus(Duration::from_millis(*sleep_ms)),
    };
    // Only the first execution's duration counts: the timer's deadline is journaled
    // then, and a replay reads it back.
    ctx.sleep(now.until(at)).await?;
    let late = match input {
        TimerInput::Until { .. } => at.until(ctx.now()),
        // The start is not journaled; the replay's `now` is not the first one.
        TimerInput::For { .. } => Duration::ZERO,
    };
    Ok(TimerOutcome {
        late_ms: late.as_millis() as u64,
    })
}
