//! `siesta bench --streams N`: stream throughput and publish → reader latency on a dev
//! server in its own process (embedded backend), with the `ticker` example.
//!
//! One `ticker` run publishes `N` chunks from one step, each stamped with the wall
//! clock when it was published; this process follows the run's stream `ticks` over
//! Server-Sent Events (`GET /runs/{id}/streams/ticks`, `Accept: text/event-stream`)
//! from before the run starts to the stream's `end` event, and prints chunks per second
//! (first publish to last read) and the publish → read latency p50/p99/max of the chunks
//! published once the reader was connected. Rounds are
//! repeated; nothing is asserted.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, bail};
use futures::StreamExt;
use serde_json::{Value, json};
use siesta_client::{Client, StartOptions};

use super::Server;
use super::sleeping::load;

/// What to run.
#[derive(Debug, Clone)]
pub struct StreamsOptions {
    /// Chunks per run.
    pub chunks: u32,
    /// Rounds (one run each).
    pub rounds: usize,
    /// `siesta dev --durability`.
    pub durability: String,
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

struct Round {
    chunks_per_sec: f64,
    latencies_us: Vec<u64>,
}

async fn round(client: &Client, chunks: u32) -> anyhow::Result<Round> {
    let run = client
        .start_run(
            "ticker",
            &json!({"chunks": chunks}),
            &StartOptions::default(),
        )
        .await
        .context("starting the ticker run")?;
    // The stream is offset-addressed: read from 0, every chunk arrives however late the
    // reader connects. Latency counts only chunks published after it was connected.
    let response = client.stream_events(&run.id, "ticks", 0).await?;
    let connected = now_us();
    let mut events = eventsource_stream::EventStream::new(response.bytes_stream());
    let mut latencies = Vec::with_capacity(chunks as usize);
    let mut first_sent: Option<u64> = None;
    let mut read_chunks = 0u32;
    let mut last_read = 0u64;
    let deadline = Instant::now() + Duration::from_secs(300);
    while let Some(event) = tokio::time::timeout_at(deadline.into(), events.next())
        .await
        .context("the stream did not end in 300 s")?
    {
        let event = event?;
        if event.event == "end" {
            break;
        }
        let read = now_us();
        let Ok(chunk) = serde_json::from_str::<Value>(&event.data) else {
            continue;
        };
        // The data of a chunk, wherever the event carries it.
        let data = chunk.get("data").unwrap_or(&chunk);
        let Some(sent) = data["sent_us"].as_u64() else {
            continue;
        };
        first_sent = Some(first_sent.map_or(sent, |f| f.min(sent)));
        if sent >= connected {
            latencies.push(read.saturating_sub(sent));
        }
        read_chunks += 1;
        last_read = read;
    }
    if read_chunks != chunks {
        bail!("read {read_chunks} chunks of {chunks}");
    }
    if latencies.is_empty() {
        bail!("every chunk was published before the reader connected: use more chunks");
    }
    let span = last_read
        .saturating_sub(first_sent.unwrap_or(last_read))
        .max(1);
    Ok(Round {
        chunks_per_sec: chunks as f64 / (span as f64 / 1e6),
        latencies_us: latencies,
    })
}

fn pct(sorted: &[u64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)] as f64 / 1000.0
}

/// Run the bench.
pub async fn run(options: StreamsOptions) -> anyhow::Result<()> {
    let server = Server::start(&options.durability, &[]).await?;
    let client = Client::new(&server.base);
    println!(
        "siesta bench --streams {}: one `ticker` run per round publishes {} chunks from a step; \
         read over SSE; dev server pid {} (--durability {}), {} rounds, load {}",
        options.chunks,
        options.chunks,
        server.pid,
        options.durability,
        options.rounds,
        load()
    );
    round(&client, options.chunks.min(100)).await?; // warm-up
    let mut rates = Vec::new();
    let mut all = Vec::new();
    for n in 0..options.rounds.max(1) {
        let r = round(&client, options.chunks).await?;
        let mut sorted = r.latencies_us.clone();
        sorted.sort_unstable();
        println!(
            "  round {}: {:>8.0} chunks/s   publish → SSE read p50 {:>6.2} ms  p99 {:>6.2} ms  max {:>6.2} ms",
            n + 1,
            r.chunks_per_sec,
            pct(&sorted, 0.5),
            pct(&sorted, 0.99),
            pct(&sorted, 1.0)
        );
        rates.push(r.chunks_per_sec);
        all.extend(r.latencies_us);
    }
    rates.sort_by(|a, b| a.total_cmp(b));
    all.sort_unstable();
    println!(
        "streams: median {:.0} chunks/s (min {:.0}, max {:.0}); publish → SSE read over all rounds p50 {:.2} ms, p99 {:.2} ms",
        rates[rates.len() / 2],
        rates[0],
        rates[rates.len() - 1],
        pct(&all, 0.5),
        pct(&all, 0.99)
    );
    println!("server peak RSS: {} KB (VmHWM)", server.peak_rss_kb());
    Ok(())
}
