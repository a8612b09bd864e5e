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
/// failed for a reason other than the lease being lost): half a TTL after a renewal —
/// on DynamoDB each is a write of the run item and two of its `due` index entry, so a
/// step shorter than that renews none — and a tenth after a failure, so that a passing
/// error is tried again several times before the lease would run out.
fn next_renewal(ttl: Duration, succeeded: bool) -> Duration {
    match succeeded {
        true => ttl / 2,
        false => ttl / 10,
    }
}

/// Renew the lease every half of its TTL until aborted (sooner again after a failed
/// attempt, [`next_renewal`]); note a lost lease or a cancellation request for the
/// engine to act on.
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
        match store
            .renew_lease(&tenant, &run_id, epoch, clock.now().plus(ttl))
            .await
        {
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
    fn a_lease_is_renewed_at_half_its_ttl_and_a_failed_renewal_tried_again_well_before_it_ends() {
        let ttl = Duration::from_secs(60);
        assert_eq!(next_renewal(ttl, true), Duration::from_secs(30));
        // After a failure at half the TTL, four more attempts before it runs out.
        let retry = next_renewal(ttl, false);
        let attempts_left = (ttl / 2).as_millis() / retry.as_millis();
        assert!(attempts_left >= 4, "{retry:?}");
    }
}
