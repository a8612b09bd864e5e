//! What every handler shares: the engine, the webhook receiver, how callers are known,
//! the health check and the transport's limits, and the reads several routes make
//! (a run's view, a wait for a run to finish).

use std::sync::Arc;
use std::time::{Duration, Instant};

use siesta::*;

use crate::auth::Authenticate;
use crate::error::ApiError;
use crate::view::{run_answer, served_view};
use crate::{Deployments, HealthCheck, WebhookReceiver};
use axum::http::StatusCode;
use axum::response::Response;
use siesta_api_types::RunView;

/// What every handler shares.
#[derive(Clone)]
pub(crate) struct AppState {
    pub(crate) engine: Engine,
    pub(crate) hooks: WebhookReceiver,
    pub(crate) auth: Arc<dyn Authenticate>,
    pub(crate) health: Option<Arc<dyn HealthCheck>>,
    pub(crate) deployments: Option<Arc<dyn Deployments>>,
    pub(crate) max_body: usize,
    pub(crate) max_wait: Duration,
}

impl AppState {
    pub(crate) async fn view(&self, tenant: &TenantId, run: &Run) -> Result<RunView, ApiError> {
        let replay_input = self
            .engine
            .backend()
            .store
            .load_replay_input(tenant, &run.id)
            .await?;
        let mut view = served_view(run, Some(&replay_input), self.engine.config());
        self.place_in_line(run, &mut view).await;
        Ok(view)
    }

    /// A queued run's place in its line, on its view. A place that could not be read
    /// is left out rather than failing the read of the run.
    pub(crate) async fn place_in_line(&self, run: &Run, view: &mut RunView) {
        if let Some(queued) = view.queued.as_mut() {
            match self.engine.queue_position(run).await {
                Ok(position) => queued.position = position,
                Err(e) => {
                    tracing::warn!(run_id = %run.id, error = %e, "a queued run's place in line not read")
                }
            }
        }
    }

    /// The run's view as an answer with `status`, its `ETag` the run's version: what
    /// every route that answers with a run sends.
    pub(crate) async fn run_answer(
        &self,
        status: StatusCode,
        tenant: &TenantId,
        run: &Run,
    ) -> Result<Response, ApiError> {
        Ok(run_answer(status, &self.view(tenant, run).await?))
    }

    /// Hold until the run is finished or `wait` passes (capped by the router's and the
    /// request's [`crate::MaxWait`]). In a process that runs the workflows itself (the
    /// dev server) the engine says when an invocation ends; where another process runs
    /// them (Lambda), the run is re-read on a backoff from 10 ms to 1 s.
    pub(crate) async fn await_finish(
        &self,
        tenant: &TenantId,
        id: &RunId,
        wait: Duration,
        cap: Option<crate::MaxWait>,
    ) -> Result<Run, ApiError> {
        let cap = cap.map_or(self.max_wait, |c| c.0.min(self.max_wait));
        let deadline = Instant::now() + wait.min(cap);
        let watch = self.engine.watch_run(tenant, id);
        let mut backoff = Duration::from_millis(10);
        loop {
            // Registered before the read: an end in between is not missed.
            let changed = watch.changed();
            let run = self.engine.get_run(tenant, id).await?;
            let left = deadline.saturating_duration_since(Instant::now());
            if run.status.is_finished() || left.is_zero() {
                return Ok(run);
            }
            tokio::select! {
                _ = changed => {}
                _ = tokio::time::sleep(backoff.min(left)) => {
                    backoff = (backoff * 2).min(Duration::from_secs(1));
                }
            }
        }
    }
}
