//! Starting a run, and reading one.

use std::time::Duration;

use super::{Engine, EngineError};
use crate::model::*;
use crate::ports::*;
use crate::quota::{self, QuotaExceeded, QuotaLimit, json_size};

impl Engine {
    /// Start a run of `workflow` with `input`. The run is created pending and a wake-up
    /// is sent; `run_id` picks the id (default: a fresh time-ordered one).
    pub async fn start(
        &self,
        tenant: &TenantId,
        workflow: &str,
        input: serde_json::Value,
        run_id: Option<RunId>,
    ) -> Result<Run, EngineError> {
        let wf = self
            .registry
            .get(workflow)
            .ok_or_else(|| EngineError::UnknownWorkflow(workflow.to_owned()))?;
        wf.validate(&input).map_err(EngineError::InvalidInput)?;
        let now = self.clock.now();
        let quota = self.config.quotas.for_tenant(tenant);
        quota::check_size(
            QuotaLimit::InputBytes,
            "the input",
            json_size(&input),
            quota.max_input_bytes,
        )?;
        if let Some(per_minute) = quota.starts_per_minute {
            self.start_rate
                .take(tenant, per_minute, now)
                .map_err(|retry_after| QuotaExceeded {
                    limit: QuotaLimit::StartRate,
                    message: format!("tenant {tenant} may start {per_minute} runs a minute"),
                    retry_after,
                })?;
        }
        let id = run_id.unwrap_or_else(RunId::generate);
        let payload = self.encode(tenant, &id, &input).await?;
        let mut run = Run::new(tenant.clone(), id, workflow, payload, now);
        run.timeline_seq = 1;
        run.build_id = Some(self.config.build_id.clone());
        run.resend_after = self.resend_after(now);
        let started = TimelineEvent::execution_started(
            now,
            workflow,
            serde_json::json!({"Workflow": workflow, "BuildId": self.config.build_id}),
        );
        let created = match quota.max_unfinished_runs {
            Some(max) => {
                self.backend
                    .store
                    .create_run_within(&run, &started, max)
                    .await
            }
            None => self.backend.store.create_run(&run, &started).await,
        };
        match created {
            Ok(()) => {}
            Err(StoreError::AlreadyExists) => return Err(EngineError::AlreadyExists),
            Err(StoreError::OverQuota(m)) => {
                return Err(QuotaExceeded::new(QuotaLimit::UnfinishedRuns, m).into());
            }
            Err(e) => return Err(e.into()),
        }
        self.send_wake(
            WakeUp {
                tenant: tenant.clone(),
                run_id: run.id.clone(),
                reason: WakeReason::Started,
                epoch_hint: 0,
                seq_hint: Some(run.timeline_seq),
            },
            Duration::ZERO,
            run.due_at,
        )
        .await;
        Ok(run)
    }

    /// The run, if this tenant has it.
    pub async fn get_run(&self, tenant: &TenantId, run_id: &RunId) -> Result<Run, EngineError> {
        self.backend
            .store
            .get_run(tenant, run_id)
            .await?
            .ok_or(EngineError::NotFound)
    }
}
