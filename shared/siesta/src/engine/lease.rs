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

/// Renew the lease every third of its TTL until aborted; note a lost lease or a
/// cancellation request for the engine to act on.
pub(super) async fn renew_lease(
    store: Arc<dyn RunStore>,
    clock: Arc<dyn Clock>,
    tenant: TenantId,
    run_id: RunId,
    epoch: FencingEpoch,
    ttl: Duration,
    watch: Arc<LeaseWatch>,
) {
    loop {
        tokio::time::sleep(ttl / 3).await;
        match store
            .renew_lease(&tenant, &run_id, epoch, clock.now().plus(ttl))
            .await
        {
            Ok(run) => {
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
                tracing::warn!(run_id = %run_id, error = %e, "lease renewal failed; retrying")
            }
        }
    }
}
