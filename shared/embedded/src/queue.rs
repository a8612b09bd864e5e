//! The wake-up queue ([`WakeQueue`]): two lanes, one wake-up per tenant in turn,
//! visibility timeouts, receive counts and the dead-letter queue.

use std::time::Duration;

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, params};
use siesta::ports::*;
use siesta::*;

use crate::{EmbeddedBackend, from_json, sql, to_json};

/// The queue's lanes: wake-ups caused by the outside world (a delivery, a timer, a
/// child's result, the sweep) are taken before the engine's own (starts,
/// continuations), so an event for a run that has waited for days does not queue
/// behind a burst of starts.
fn lane(reason: WakeReason) -> i64 {
    match reason {
        WakeReason::Delivery | WakeReason::Timer | WakeReason::Child | WakeReason::Sweep => 0,
        // A bulk action's slices yield to live traffic too.
        WakeReason::Started | WakeReason::Continue | WakeReason::Action => 1,
    }
}

/// The lanes, in the order they are served.
const LANES: [i64; 2] = [0, 1];

/// How much later than a run's `due_at` its wake-up may become visible and still be
/// the one for that due time (the sender computed the delay a moment before sending).
const HOLD_SLACK: Duration = Duration::from_secs(1);

/// The tenant after `after` with a wake-up in `lane`, in tenant order (one index seek).
fn next_tenant(tx: &Connection, lane: i64, after: &str) -> Result<Option<String>, StoreError> {
    tx.prepare_cached(
        "SELECT tenant FROM wake_queue WHERE lane = ?1 AND tenant > ?2 ORDER BY tenant LIMIT 1",
    )
    .map_err(sql)?
    .query_row(params![lane, after], |r| r.get(0))
    .optional()
    .map_err(sql)
}

/// The tenant's oldest visible wake-up in `lane` (one index seek).
fn oldest_visible(
    tx: &Connection,
    lane: i64,
    tenant: &str,
    now: Timestamp,
) -> Result<Option<(i64, String, u32)>, StoreError> {
    tx.prepare_cached(
        "SELECT id, body, receive_count FROM wake_queue
          WHERE lane = ?1 AND tenant = ?2 AND visible_at <= ?3 ORDER BY visible_at, id LIMIT 1",
    )
    .map_err(sql)?
    .query_row(params![lane, tenant, now.0], |r| {
        Ok((r.get(0)?, r.get(1)?, r.get(2)?))
    })
    .optional()
    .map_err(sql)
}

/// Take up to `max` visible wake-ups: the outside-world lane first, and within a lane
/// one wake-up per tenant in turn (round robin, resumed where the last receive
/// stopped), so that one tenant's backlog never stands between another tenant and
/// the queue. A wake-up received `max_receives` times already goes to the dead-letter
/// queue instead.
fn receive_fair(
    tx: &Connection,
    now: Timestamp,
    max: usize,
    visibility: Duration,
    max_receives: u32,
) -> Result<Vec<ReceivedWakeUp>, StoreError> {
    let mut out = Vec::new();
    for lane in LANES {
        let mut turn: String = tx
            .prepare_cached("SELECT tenant FROM queue_turns WHERE lane = ?1")
            .map_err(sql)?
            .query_row(params![lane], |r| r.get(0))
            .optional()
            .map_err(sql)?
            .unwrap_or_default();
        // The first tenant of a round in which nobody had anything visible.
        let mut idle_since: Option<String> = None;
        while out.len() < max {
            let tenant = match next_tenant(tx, lane, &turn)? {
                Some(t) => t,
                None => match next_tenant(tx, lane, "")? {
                    Some(t) => t,
                    None => break,
                },
            };
            if idle_since.as_ref() == Some(&tenant) {
                break;
            }
            match oldest_visible(tx, lane, &tenant, now)? {
                None => {
                    idle_since.get_or_insert_with(|| tenant.clone());
                }
                Some((id, body, count)) => {
                    idle_since = None;
                    if count >= max_receives {
                        tx.execute(
                            "INSERT INTO dead_letter_queue (body, moved_at, visible_at) VALUES (?1, ?2, ?2)",
                            params![body, now.0],
                        )
                        .map_err(sql)?;
                        tx.execute("DELETE FROM wake_queue WHERE id = ?1", params![id])
                            .map_err(sql)?;
                    } else {
                        let receipt = format!("{id}:{}", uuid::Uuid::new_v4());
                        tx.prepare_cached(
                            "UPDATE wake_queue SET receipt = ?1, receive_count = receive_count + 1, visible_at = ?2 WHERE id = ?3",
                        )
                        .map_err(sql)?
                        .execute(params![receipt, now.plus(visibility).0, id])
                        .map_err(sql)?;
                        out.push(ReceivedWakeUp {
                            wake: from_json(&body)?,
                            receipt,
                            receive_count: count + 1,
                        });
                    }
                }
            }
            turn = tenant;
        }
        tx.prepare_cached("INSERT OR REPLACE INTO queue_turns (lane, tenant) VALUES (?1, ?2)")
            .map_err(sql)?
            .execute(params![lane, turn])
            .map_err(sql)?;
    }
    Ok(out)
}

#[async_trait]
impl WakeQueue for EmbeddedBackend {
    async fn send(&self, wake: &WakeUp, delay: Duration) -> Result<(), StoreError> {
        let body = to_json(wake)?;
        let (tenant, run_id, lane) = (
            wake.tenant.0.clone(),
            wake.run_id.0.clone(),
            lane(wake.reason),
        );
        let delay = delay.min(MAX_QUEUE_DELAY);
        self.tx_unsynced_of(tenant.clone(), move |tx, now| {
            tx.prepare_cached(
                "INSERT INTO wake_queue (tenant, run_id, lane, body, visible_at) VALUES (?1, ?2, ?3, ?4, ?5)",
            )
            .map_err(sql)?
            .execute(params![tenant, run_id, lane, body, now.plus(delay).0])
            .map_err(sql)?;
            Ok(())
        })
        .await
    }

    async fn receive(
        &self,
        max: usize,
        visibility: Duration,
    ) -> Result<Vec<ReceivedWakeUp>, StoreError> {
        if max == 0 {
            return Ok(Vec::new());
        }
        let max_receives = self.inner.max_receives;
        self.tx_unsynced(move |tx, now| receive_fair(tx, now, max, visibility, max_receives))
            .await
    }

    async fn ack(&self, receipt: &str) -> Result<(), StoreError> {
        let receipt = receipt.to_owned();
        self.tx_unsynced(move |tx, _| {
            tx.prepare_cached("DELETE FROM wake_queue WHERE receipt = ?1")
                .map_err(sql)?
                .execute(params![receipt])
                .map_err(sql)?;
            Ok(())
        })
        .await
    }

    async fn extend_visibility(
        &self,
        receipt: &str,
        visibility: Duration,
    ) -> Result<(), StoreError> {
        let receipt = receipt.to_owned();
        self.tx_unsynced(move |tx, now| {
            tx.prepare_cached("UPDATE wake_queue SET visible_at = ?1 WHERE receipt = ?2")
                .map_err(sql)?
                .execute(params![now.plus(visibility).0, receipt])
                .map_err(sql)?;
            Ok(())
        })
        .await
    }

    async fn dead_letters(
        &self,
        max: usize,
        visibility: Duration,
    ) -> Result<Vec<DeadLetter>, StoreError> {
        let max = max.min(10);
        self.tx(move |tx, now| {
            let page: Vec<(i64, String)> = {
                let mut stmt = tx
                    .prepare_cached(
                        "SELECT id, body FROM dead_letter_queue WHERE visible_at <= ?1 ORDER BY visible_at, id LIMIT ?2",
                    )
                    .map_err(sql)?;
                let rows = stmt
                    .query_map(params![now.0, max as i64], |r| Ok((r.get(0)?, r.get(1)?)))
                    .map_err(sql)?;
                rows.collect::<Result<_, _>>().map_err(sql)?
            };
            let mut out = Vec::with_capacity(page.len());
            for (id, body) in page {
                let receipt = format!("{id}:{}", uuid::Uuid::new_v4());
                tx.prepare_cached(
                    "UPDATE dead_letter_queue SET receipt = ?1, visible_at = ?2 WHERE id = ?3",
                )
                .map_err(sql)?
                .execute(params![receipt, now.plus(visibility).0, id])
                .map_err(sql)?;
                match from_json(&body) {
                    Ok(wake) => out.push(DeadLetter { wake, receipt }),
                    // Nothing can act on it; dropping it beats handing it out forever.
                    Err(_) => {
                        tx.execute("DELETE FROM dead_letter_queue WHERE id = ?1", params![id])
                            .map_err(sql)?;
                    }
                }
            }
            Ok(out)
        })
        .await
    }

    async fn delete_dead_letter(&self, receipt: &str) -> Result<(), StoreError> {
        let receipt = receipt.to_owned();
        self.tx(move |tx, _| {
            tx.prepare_cached("DELETE FROM dead_letter_queue WHERE receipt = ?1")
                .map_err(sql)?
                .execute(params![receipt])
                .map_err(sql)?;
            Ok(())
        })
        .await
    }

    async fn holds(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
        due_at: Timestamp,
    ) -> Result<Option<bool>, StoreError> {
        let (tenant, run_id) = (tenant.0.clone(), run_id.0.clone());
        // A read: the sweep asks this for a page of runs at a time, and the writer is
        // for writes.
        self.read(move |tx| {
            tx.prepare_cached(
                "SELECT EXISTS (SELECT 1 FROM wake_queue WHERE tenant = ?1 AND run_id = ?2
                                  AND (receipt IS NOT NULL OR visible_at <= ?3))",
            )
            .map_err(sql)?
            .query_row(params![tenant, run_id, due_at.plus(HOLD_SLACK).0], |r| {
                r.get::<_, bool>(0)
            })
            .map(Some)
            .map_err(sql)
        })
        .await
    }
}

/// The wake-up queue at an instant: what waits to be received, what a worker holds,
/// what is delayed, and since when the oldest receivable one could have been received.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueDepth {
    /// Receivable now and not yet received (or back after a visibility timeout).
    pub visible: u64,
    /// Received by a worker and hidden until its visibility timeout.
    pub in_flight: u64,
    /// Sent with a delay that has not passed (a retry's backoff, a later timer).
    pub delayed: u64,
    /// When the oldest receivable wake-up became receivable: `now` minus it is the lag
    /// of the queue.
    pub oldest_visible_at: Option<Timestamp>,
}

impl EmbeddedBackend {
    /// The wake-up queue's depth at `now` (for a metrics scrape), the dead-letter queue
    /// not counted. One read transaction; per lane and tenant with queued wake-ups, one
    /// statement that counts ranges of the queue's fair index (never a scan of the
    /// table), so a scrape costs what is queued, nothing more.
    pub async fn queue_depth(&self, now: Timestamp) -> Result<QueueDepth, StoreError> {
        self.read(move |conn| {
            let mut depth = QueueDepth::default();
            let mut oldest: Option<i64> = None;
            for lane in LANES {
                let mut after = String::new();
                while let Some(tenant) = next_tenant(conn, lane, &after)? {
                    let (visible, in_flight, delayed, first): (i64, i64, i64, Option<i64>) = conn
                        .prepare_cached(
                            "SELECT
                               (SELECT count(*) FROM wake_queue WHERE lane = ?1 AND tenant = ?2 AND visible_at <= ?3),
                               (SELECT count(*) FROM wake_queue WHERE lane = ?1 AND tenant = ?2 AND visible_at > ?3 AND receipt IS NOT NULL),
                               (SELECT count(*) FROM wake_queue WHERE lane = ?1 AND tenant = ?2 AND visible_at > ?3 AND receipt IS NULL),
                               (SELECT min(visible_at) FROM wake_queue WHERE lane = ?1 AND tenant = ?2 AND visible_at <= ?3)",
                        )
                        .map_err(sql)?
                        .query_row(params![lane, tenant, now.0], |r| {
                            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
                        })
                        .map_err(sql)?;
                    depth.visible += visible.max(0) as u64;
                    depth.in_flight += in_flight.max(0) as u64;
                    depth.delayed += delayed.max(0) as u64;
                    oldest = match (oldest, first) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    };
                    after = tenant;
                }
            }
            depth.oldest_visible_at = oldest.map(Timestamp);
            Ok(depth)
        })
        .await
    }
}
