//! Renewing an invocation's lease while it runs.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::context::LeaseWatch;
use crate::model::*;
use crate::ports::*;
use crate::time::Clock;

/// Aborts a spawned task when dropped.
pub(super) struct AbortOnDrop(pub(super) tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// When the next renewal of a lease of `ttl` is due, after one that `succeeded` (or
/// failed for a reason other than the lease being lost): two fifths of a TTL after a
/// renewal — on DynamoDB each is a write of the run item and two of its `due` index
/// entry, so a turn shorter than that renews none — and a tenth after a failure, so
/// that a passing error is tried again five times before the lease would run out.
///
/// Not as late as half a TTL: a checkpoint whose write lands just after a renewal's
/// may carry the expiry before it (read from the watch before the renewal began), and
/// the next renewal must come while that one has not yet run out — here with a fifth
/// of a TTL to spare.
fn next_renewal(ttl: Duration, succeeded: bool) -> Duration {
    match succeeded {
        true => ttl * 2 / 5,
        false => ttl / 10,
    }
}

/// Renew the lease every two fifths of its TTL until aborted (sooner again after a
/// failed attempt, [`next_renewal`]); note a lost lease or a cancellation request for
/// the engine to act on.
pub(super) async fn renew_lease(
    store: Arc<dyn RunStore>,
    clock: Arc<dyn Clock>,
    tenant: TenantId,
    run_id: RunId,
    epoch: FencingEpoch,
    ttl: Duration,
    watch: Arc<LeaseWatch>,
) {
    let mut pause = next_renewal(ttl, true);
    loop {
        tokio::time::sleep(pause).await;
        let until = clock.now().plus(ttl);
        // Told to the holder's checkpoints before it is written: one that read the
        // watch before this renewal's answer and landed after its write would put the
        // previous expiry back, half a TTL old and nearly run out, for another worker to
        // claim. A checkpoint is conditioned on the holder's epoch, so it can extend
        // only a lease the holder still has.
        watch.expires_at.fetch_max(until.millis(), Ordering::SeqCst);
        match store.renew_lease(&tenant, &run_id, epoch, until).await {
            Ok(run) => {
                pause = next_renewal(ttl, true);
                if let Some(lease) = &run.lease {
                    watch
                        .expires_at
                        .fetch_max(lease.expires_at.millis(), Ordering::SeqCst);
                }
                if run.cancel_requested {
                    watch.cancel.store(true, Ordering::SeqCst);
                }
                if let Some(by) = &run.pause_requested
                    && let Ok(mut pause) = watch.pause.lock()
                {
                    *pause = Some(by.clone());
                }
            }
            Err(StoreError::Conflict(_)) | Err(StoreError::NotFound) => {
                watch.lost.store(true, Ordering::SeqCst);
                return;
            }
            Err(e) => {
                tracing::warn!(run_id = %run_id, error = %e, "lease renewal failed; retrying");
                pause = next_renewal(ttl, false);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_is_renewed_with_room_for_a_stale_expiry_and_a_failed_renewal_tried_again_in_time() {
        let ttl = Duration::from_secs(60);
        let every = next_renewal(ttl, true);
        assert_eq!(every, Duration::from_secs(24));
        // A checkpoint may put back the expiry a renewal replaced (made one interval
        // earlier): the next renewal comes before it runs out.
        assert!(every * 2 < ttl, "{every:?}");
        // A renewal that failed is tried again, five times, before the lease it was
        // to extend runs out.
        let retry = next_renewal(ttl, false);
        let retries = (1..).take_while(|k| every + retry * *k < ttl).count();
        assert_eq!(retries, 5, "{retry:?}");
    }
}
