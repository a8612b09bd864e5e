//! Starting a run, and reading one.

use crate::time::Timestamp;
use crate::timeline as tl;
use std::time::Duration;

use super::{Engine, EngineError};
use crate::model::*;
use crate::ports::*;
use crate::quota::{self, QuotaExceeded, QuotaLimit, json_size};

/// What a start did ([`Engine::start_or_join`]).
#[derive(Debug, Clone)]
pub struct Started {
    /// The run it created, or the one it joined.
    pub run: Run,
    /// A debounce gathered it into a run that was queued already.
    pub joined: bool,
}

/// How to start a run ([`Engine::start_with`]); every field may be left out.
#[derive(Debug, Clone, Default)]
pub struct StartOptions {
    /// The run's id (an idempotent start); default a fresh time-ordered one.
    pub run_id: Option<RunId>,
    /// The W3C trace context the run joins; see [`Engine::start_in_trace`].
    pub trace_parent: Option<crate::telemetry::TraceParent>,
    /// The key the run counts under for limits whose key is given at start
    /// ([`RunLimit::key_given_at_start`](crate::RunLimit::key_given_at_start)).
    pub concurrency_key: Option<String>,
}

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
        self.start_in_trace(tenant, workflow, input, run_id, None)
            .await
    }

    /// [`Engine::start`], the run joining the caller's trace: every wake-up's span is
    /// parented on `trace_parent`, which is stored with the run. With `None` the run
    /// has its own trace, derived from its id, and the current span is linked to it
    /// (see [`crate::telemetry`]).
    pub async fn start_in_trace(
        &self,
        tenant: &TenantId,
        workflow: &str,
        input: serde_json::Value,
        run_id: Option<RunId>,
        trace_parent: Option<crate::telemetry::TraceParent>,
    ) -> Result<Run, EngineError> {
        let options = StartOptions {
            run_id,
            trace_parent,
            concurrency_key: None,
        };
        self.start_with(tenant, workflow, input, options).await
    }

    /// [`Engine::start`] with every option. A run under concurrency limits
    /// ([`Registry::limit`](crate::Registry::limit)) that finds one of them full is
    /// created [`RunStatus::Queued`] and sent no wake-up: the write that frees its
    /// slot admits it (docs/flow-control.md). A start a debounce gathers into a run
    /// already queued answers that run ([`Engine::start_or_join`] says which).
    pub async fn start_with(
        &self,
        tenant: &TenantId,
        workflow: &str,
        input: serde_json::Value,
        options: StartOptions,
    ) -> Result<Run, EngineError> {
        Ok(self
            .start_or_join(tenant, workflow, input, options)
            .await?
            .run)
    }

    /// [`Engine::start_with`], saying whether the start created its run or joined one
    /// a debounce gathers ([`crate::Debounce`]). A start over a start rate
    /// ([`crate::StartRate`]) is created queued until its turn.
    pub async fn start_or_join(
        &self,
        tenant: &TenantId,
        workflow: &str,
        input: serde_json::Value,
        options: StartOptions,
    ) -> Result<Started, EngineError> {
        let wf = self
            .registry
            .get(workflow)
            .ok_or_else(|| EngineError::UnknownWorkflow(workflow.to_owned()))?;
        let debounce = self.registry.debounce_for(workflow);
        // A batch's run takes the list of its starts' inputs: each start gives one.
        let batched = debounce.is_some_and(|d| d.batch_size().is_some());
        if batched {
            wf.validate(&serde_json::Value::Array(vec![input.clone()]))
        } else {
            wf.validate(&input)
        }
        .map_err(EngineError::InvalidInput)?;
        let limits = crate::flow::slots_for(
            self.registry.limits(),
            &self.config.limits,
            workflow,
            &input,
            options.concurrency_key.as_deref(),
        )
        .map_err(EngineError::InvalidInput)?;
        // A paused workflow's start is held or refused — but a retried start of a run
        // that exists (its `Idempotency-Key`, a schedule's tick) is answered that run,
        // as it would be unpaused: the create below finds it.
        let held_by = match self.paused_starts(tenant, workflow).await {
            Some(held) if !self.exists(tenant, options.run_id.as_ref()).await? => {
                match held.starts {
                    PausedStarts::Refuse => {
                        return Err(EngineError::WorkflowPaused(workflow.to_owned()));
                    }
                    // A start created paused would hold no slot and be in no line: a
                    // flow-controlled workflow's paused starts are refused instead.
                    PausedStarts::Queue if self.flow_controlled.contains_key(workflow) => {
                        return Err(EngineError::WorkflowPaused(format!(
                            "{workflow} (under {}, so its starts are refused, not queued)",
                            self.flow_controlled[workflow]
                        )));
                    }
                    PausedStarts::Queue => Some(held.by),
                }
            }
            _ => None,
        };
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
        if let Some(debounce) = debounce {
            return self
                .start_debounced(tenant, workflow, debounce, input, options, now)
                .await;
        }
        let id = options.run_id.clone().unwrap_or_else(RunId::generate);
        let payload = self.encode(tenant, &id, &input).await?;
        let (mut run, started) = self.new_run(tenant, id, workflow, payload, &options, now);
        run.limits = limits;
        if let Some(by) = held_by {
            // Created paused: it begins with the workflow's resume.
            run.status = RunStatus::Paused;
            run.due_at = None;
            run.resend_after = None;
            let run = self.create(run, &started, now).await?;
            self.note_held_by_workflow_pause(&run, &by).await;
            return Ok(Started { run, joined: false });
        }
        if let Some(rate) = self.registry.start_rate_for(workflow) {
            self.hold_for_turn(&mut run, rate, &input, &options, now)
                .await?;
        }
        self.create(run, &started, now)
            .await
            .map(|run| Started { run, joined: false })
    }

    /// Whether the run `id` (when one is named) exists already.
    async fn exists(&self, tenant: &TenantId, id: Option<&RunId>) -> Result<bool, EngineError> {
        match id {
            Some(id) => Ok(self.backend.store.get_run(tenant, id).await?.is_some()),
            None => Ok(false),
        }
    }

    /// A new pending run of `workflow` with `payload` as its input, as a start makes it
    /// at `now`, and its `ExecutionStarted` event.
    pub(super) fn new_run(
        &self,
        tenant: &TenantId,
        id: RunId,
        workflow: &str,
        payload: Payload,
        options: &StartOptions,
        now: Timestamp,
    ) -> (Run, TimelineEvent) {
        let mut run = Run::new(tenant.clone(), id, workflow, payload, now);
        run.timeline_seq = 1;
        run.build_id = Some(self.config.build_id.clone());
        run.trace_parent = options.trace_parent;
        // A start's wake-up is handled within seconds but for a backlog: past the short
        // margin the sweep sends another, so a start cut off before its send is not
        // left for the general margin (see `EngineConfig::start_resend_margin`).
        run.resend_after = Some(now.plus(self.start_margin()));
        let started = TimelineEvent::execution_started(
            now,
            workflow,
            tl::EventDetails::ExecutionStarted(tl::ExecutionStarted {
                workflow: Some(workflow.to_owned()),
                build_id: Some(self.config.build_id.clone()),
                ..Default::default()
            })
            .to_value(),
        );
        (run, started)
    }

    /// How long a start's wake-up is given before the sweep sends another.
    pub(super) fn start_margin(&self) -> Duration {
        self.config
            .start_resend_margin
            .min(self.config.resend_margin)
    }

    /// Create `run` (under its concurrency limits and the tenant's quota) and send its
    /// wake-up: at once when it may begin, at its release when a debounce or a start
    /// rate holds it, none when it waits in a limit's line.
    pub(super) async fn create(
        &self,
        mut run: Run,
        started: &TimelineEvent,
        now: Timestamp,
    ) -> Result<Run, EngineError> {
        let quota = self.config.quotas.for_tenant(&run.tenant);
        let created = if run.limits.is_empty() {
            match quota.max_unfinished_runs {
                Some(max) => {
                    self.backend
                        .store
                        .create_run_within(&run, started, max)
                        .await
                }
                None => self.backend.store.create_run(&run, started).await,
            }
        } else {
            self.backend
                .store
                .admit_run(&run, started, quota.max_unfinished_runs)
                .await
                .map(|stored| run = stored)
        };
        match created {
            Ok(()) => {}
            Err(StoreError::AlreadyExists) => return Err(EngineError::AlreadyExists),
            Err(StoreError::OverQuota(m)) => {
                return Err(QuotaExceeded::new(QuotaLimit::UnfinishedRuns, m).into());
            }
            Err(e) => return Err(e.into()),
        }
        if run.trace_parent.is_none() {
            crate::telemetry::link_to_run(&tracing::Span::current(), &run);
        }
        match (&run.held, run.status) {
            (Some(held), RunStatus::Queued) => {
                tracing::info!(tenant = %run.tenant, run_id = %run.id, held_by = held.reason.kind(), until_ms = held.until.0, "run queued until its start is released");
                self.send_release(&run, now).await;
            }
            (None, RunStatus::Queued) => {
                tracing::info!(tenant = %run.tenant, run_id = %run.id, queued = ?run.queued, "run queued behind a concurrency limit");
            }
            (_, RunStatus::Paused) => {
                tracing::info!(tenant = %run.tenant, run_id = %run.id, "run created paused: its workflow is paused");
            }
            _ => self.send_start(&run).await,
        }
        Ok(run)
    }

    /// The run `run_id` of `tenant`, as an idempotent retry of its start finds it; a run
    /// that has not begun (pending, never claimed) has its start's wake-up sent again.
    ///
    /// A start answered with [`EngineError::AlreadyExists`] may be the retry of one whose
    /// process died between its write and its send: its run would wait for the sweep
    /// ([`EngineConfig::start_resend_margin`](super::EngineConfig::start_resend_margin)) though the retry was answered. Sending
    /// again costs one wake-up (`SendMessage`) per retry of a start that has not begun,
    /// nothing for one that has; a duplicate is harmless (the claim's lease and the run's
    /// version make it a no-op). A failed send is left to the sweep, as a start's is.
    pub async fn ensure_started(
        &self,
        tenant: &TenantId,
        run_id: &RunId,
    ) -> Result<Run, EngineError> {
        let run = self.get_run(tenant, run_id).await?;
        if run.status == RunStatus::Pending && run.epoch == FencingEpoch(0) {
            self.send_start(&run).await;
        }
        Ok(run)
    }

    /// Send the wake-ups that begin the runs a write admitted from their lines
    /// ([`RunStore::checkpoint_admitting`]). A failed send is left to the sweep: an
    /// admitted run is due.
    pub(crate) async fn wake_admitted(&self, admitted: &[Run]) {
        for run in admitted {
            self.send_start(run).await;
        }
    }

    /// Send the wake-up that begins `run` (a start's, or its retry's). A failed send is
    /// left to the sweep.
    pub(super) async fn send_start(&self, run: &Run) {
        self.send_start_after(run, Duration::ZERO).await;
    }

    /// Send the wake-up that begins `run`, visible after `delay` (a held start's, at its
    /// release). A failed send is left to the sweep.
    pub(super) async fn send_start_after(&self, run: &Run, delay: Duration) {
        self.send_wake(
            WakeUp {
                tenant: run.tenant.clone(),
                run_id: run.id.clone(),
                reason: WakeReason::Started,
                epoch_hint: 0,
                seq_hint: Some(run.timeline_seq),
            },
            delay,
            run.due_at,
        )
        .await;
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
