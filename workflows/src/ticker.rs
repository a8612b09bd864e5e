//! The `ticker` workflow: one step publishes `chunks` chunks on the run's stream
//! `ticks`, each stamped with when it was published — the shape of `siesta bench
//! --streams N`, which reads them over Server-Sent Events and measures how fast they
//! arrive and how late.
//!
//! Input: `{"chunks": N, "pad": B}` (`pad`: extra bytes of text per chunk, default 0).
//! Output: `{"published": N}`.

use siesta::prelude::*;

/// The stream the ticks go to.
pub const TICKS_STREAM: &str = "ticks";

/// What a `ticker` run publishes.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct TickerInput {
    /// How many chunks.
    pub chunks: u32,
    /// Extra bytes of text in each.
    #[serde(default)]
    pub pad: usize,
}

/// The `ticker` workflow.
pub async fn ticker(ctx: Context, input: TickerInput) -> Result<serde_json::Value, Error> {
    let published: u32 = ctx
        .step("tick", move |step| async move {
            let stream = step.stream(TICKS_STREAM);
            let pad = "x".repeat(input.pad);
            for i in 0..input.chunks {
                // Wall-clock microseconds: the reader on the same machine subtracts them
                // from its own clock to get the publish → read latency.
                let sent_us = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_micros() as u64)
                    .unwrap_or(0);
                stream
                    .publish(&serde_json::json!({"i": i, "sent_us": sent_us, "pad": pad}))
                    .await?;
            }
            Ok(input.chunks)
        })
        .await?;
    Ok(serde_json::json!({"published": published}))
}
