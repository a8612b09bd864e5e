//! The registry of workflows: name → async function. The dev server and the Lambda
//! functions share one.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;

use futures::future::BoxFuture;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::context::Context;
use crate::error::Error;
use crate::flow::RunLimit;
use crate::flow::held::{Debounce, StartRate};
use crate::schedule::{Schedule, ScheduleError};

type Run = dyn Fn(Context, serde_json::Value) -> BoxFuture<'static, Result<serde_json::Value, Error>>
    + Send
    + Sync;
type Validate = dyn Fn(&serde_json::Value) -> Result<(), String> + Send + Sync;

/// A registered workflow, its input and output erased to JSON.
#[derive(Clone)]
pub struct Workflow {
    run: Arc<Run>,
    validate: Arc<Validate>,
}

impl Workflow {
    /// Check that `input` deserializes into the workflow's input type.
    pub fn validate(&self, input: &serde_json::Value) -> Result<(), String> {
        (self.validate)(input)
    }

    pub(crate) fn start(
        &self,
        ctx: Context,
        input: serde_json::Value,
    ) -> BoxFuture<'static, Result<serde_json::Value, Error>> {
        (self.run)(ctx, input)
    }
}

/// What may happen to a run of a workflow when the build serving it is not the build
/// the run started on (a deploy, or an edit on the dev server).
///
/// Under either policy an engine never replays a run on another build's code by
/// itself: a wake-up that reaches it for such a run is left alone
/// ([`WakeOutcome::OtherBuild`](crate::WakeOutcome::OtherBuild)) and the run waits for
/// its build. The policy says whether the run may be moved to the serving build
/// (upgraded) once its journal is known to replay cleanly there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UpgradePolicy {
    /// A run finishes on the build it started on, and is only moved by an operator.
    /// The default, and what Lambda deploys use: every deploy's functions stay
    /// published, so the run's own code is always there to serve it.
    #[default]
    Pinned,
    /// A run moves to the serving build when its journal replays cleanly on it (the
    /// dev server's default: every edit is a new build, and most edits do not touch
    /// the operations of runs in flight). A run that does not replay cleanly still
    /// waits for its build.
    UpgradeWhenReplays,
}

impl UpgradePolicy {
    /// The policy's wire name: `pinned` or `upgrade_when_replays`.
    pub fn as_str(self) -> &'static str {
        match self {
            UpgradePolicy::Pinned => "pinned",
            UpgradePolicy::UpgradeWhenReplays => "upgrade_when_replays",
        }
    }
}

/// Workflows by name.
#[derive(Clone, Default)]
pub struct Registry {
    workflows: BTreeMap<String, Workflow>,
    /// Policies set per workflow; the others follow the engine's
    /// [`EngineConfig::upgrade_policy`](crate::EngineConfig::upgrade_policy).
    policies: BTreeMap<String, UpgradePolicy>,
    /// Concurrency limits, by name.
    limits: BTreeMap<String, RunLimit>,
    /// Schedules by name, checked at registration.
    schedules: BTreeMap<String, Schedule>,
    /// Debounces and batches, by name.
    debounces: BTreeMap<String, Debounce>,
    /// Start rates, by name.
    start_rates: BTreeMap<String, StartRate>,
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Registry::default()
    }

    /// Register `f` as the workflow `name`. Its input is deserialized from the run's JSON
    /// input, its output serialized into the run's output.
    pub fn register<I, O, F, Fut>(&mut self, name: &str, f: F) -> &mut Self
    where
        I: DeserializeOwned + Send + 'static,
        O: Serialize + Send + 'static,
        F: Fn(Context, I) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<O, Error>> + Send + 'static,
    {
        let f = Arc::new(f);
        let run: Arc<Run> = Arc::new(move |ctx, input| {
            let f = f.clone();
            Box::pin(async move {
                let input: I = serde_json::from_value(input)
                    .map_err(|e| Error::msg(format!("invalid input: {e}")))?;
                let output = f(ctx, input).await?;
                Ok(serde_json::to_value(output)?)
            })
        });
        let validate: Arc<Validate> =
            Arc::new(|input| I::deserialize(input).map(|_| ()).map_err(|e| e.to_string()));
        self.workflows
            .insert(name.to_owned(), Workflow { run, validate });
        self
    }

    /// Set the [`UpgradePolicy`] of the workflow `name`'s runs, over the engine's default
    /// ([`EngineConfig::upgrade_policy`](crate::EngineConfig::upgrade_policy)):
    /// `registry.register("refund", refund).upgrade_policy("refund", UpgradePolicy::Pinned)`.
    /// It may be set before or after the workflow is registered.
    pub fn upgrade_policy(&mut self, name: &str, policy: UpgradePolicy) -> &mut Self {
        self.policies.insert(name.to_owned(), policy);
        self
    }

    /// The [`UpgradePolicy`] set for the workflow `name`, if one was; see
    /// [`Engine::upgrade_policy`](crate::Engine::upgrade_policy) for the one that applies.
    pub fn policy(&self, name: &str) -> Option<UpgradePolicy> {
        self.policies.get(name).copied()
    }

    /// Declare a concurrency limit ([`RunLimit`]): at most its `max` unfinished runs
    /// of the workflows it names per key; a start over it is queued until a slot
    /// frees (docs/flow-control.md). A limit may name workflows registered before or
    /// after it, and a workflow may be under several limits.
    ///
    /// ```
    /// use siesta::prelude::*;
    /// # async fn per_customer(_: Context, _: serde_json::Value) -> Result<(), Error> { Ok(()) }
    /// let mut registry = Registry::new();
    /// registry
    ///     .register("per_customer", per_customer)
    ///     .limit(RunLimit::new("per-customer", 1).key_from_input("/customer").workflow("per_customer"));
    /// ```
    ///
    /// # Panics
    /// When a limit of the same name was declared already.
    pub fn limit(&mut self, limit: RunLimit) -> &mut Self {
        let name = limit.name().to_owned();
        assert!(
            !self.limits.contains_key(&name),
            "the concurrency limit {name} is declared twice"
        );
        for workflow in limit.workflows() {
            self.assert_not_held(workflow, &format!("the concurrency limit {name}"));
        }
        self.limits.insert(name, limit);
        self
    }

    /// Declare a debounce or a batch ([`Debounce`]): starts of the workflows it names
    /// that share its key collapse into one run (docs/flow-control.md).
    ///
    /// ```
    /// use siesta::prelude::*;
    /// use std::time::Duration;
    /// # async fn sync_order(_: Context, _: serde_json::Value) -> Result<(), Error> { Ok(()) }
    /// let mut registry = Registry::new();
    /// registry.register("sync_order", sync_order).debounce(
    ///     Debounce::new("order-updates", Duration::from_secs(10))
    ///         .key_from_input("/order")
    ///         .workflow("sync_order"),
    /// );
    /// ```
    ///
    /// # Panics
    /// When a debounce of the same name was declared already, or a workflow it names
    /// is under another debounce, a start rate or a concurrency limit: a start is held
    /// back by one thing at a time (docs/flow-control.md says what is not yet).
    pub fn debounce(&mut self, debounce: Debounce) -> &mut Self {
        let name = debounce.name().to_owned();
        assert!(
            !self.debounces.contains_key(&name),
            "the debounce {name} is declared twice"
        );
        for workflow in debounce.workflows() {
            self.assert_not_held(workflow, &format!("the debounce {name}"));
            if let Some(schedule) = self.schedules.values().find(|s| s.workflow() == workflow) {
                panic!(
                    "the workflow {workflow} is started by the schedule {}, whose ticks name their runs: the debounce {name} cannot gather its starts",
                    schedule.name()
                );
            }
            assert!(
                self.limit_of(workflow).is_none(),
                "the workflow {workflow} is under a concurrency limit and the debounce {name}: not yet supported together"
            );
        }
        self.debounces.insert(name, debounce);
        self
    }

    /// Declare a start rate ([`StartRate`]): at most its `max` runs of the workflows
    /// it names begin per period and key; a start over it is queued until its turn.
    ///
    /// # Panics
    /// As [`Registry::debounce`].
    pub fn start_rate(&mut self, rate: StartRate) -> &mut Self {
        let name = rate.name().to_owned();
        assert!(
            !self.start_rates.contains_key(&name),
            "the start rate {name} is declared twice"
        );
        for workflow in rate.workflows() {
            self.assert_not_held(workflow, &format!("the start rate {name}"));
            assert!(
                self.limit_of(workflow).is_none(),
                "the workflow {workflow} is under a concurrency limit and the start rate {name}: not yet supported together"
            );
        }
        self.start_rates.insert(name, rate);
        self
    }

    /// A workflow's starts are held back by one debounce or start rate at most, and
    /// one held back is under no concurrency limit.
    fn assert_not_held(&self, workflow: &str, by: &str) {
        if let Some(d) = self.debounce_for(workflow) {
            panic!(
                "the workflow {workflow} is under the debounce {} already: {by} cannot apply too",
                d.name()
            );
        }
        if let Some(r) = self.start_rate_for(workflow) {
            panic!(
                "the workflow {workflow} is under the start rate {} already: {by} cannot apply too",
                r.name()
            );
        }
    }

    /// What controls the starts of `workflow`, in words ("the concurrency limit
    /// per-customer", "the debounce order-updates", "the start rate model"), if
    /// anything does.
    pub fn flow_control_of(&self, workflow: &str) -> Option<String> {
        if let Some(limit) = self.limit_of(workflow) {
            return Some(format!("the concurrency limit {}", limit.name()));
        }
        if let Some(d) = self.debounce_for(workflow) {
            return Some(format!("the debounce {}", d.name()));
        }
        self.start_rate_for(workflow)
            .map(|r| format!("the start rate {}", r.name()))
    }

    /// A concurrency limit that applies to `workflow`, if any (the first by name).
    fn limit_of(&self, workflow: &str) -> Option<&RunLimit> {
        self.limits
            .values()
            .find(|l| l.workflows().any(|w| w == workflow))
    }

    /// The debounce the starts of `workflow` are gathered by, if any.
    pub fn debounce_for(&self, workflow: &str) -> Option<&Debounce> {
        self.debounces.values().find(|d| d.applies_to(workflow))
    }

    /// The start rate the starts of `workflow` count against, if any.
    pub fn start_rate_for(&self, workflow: &str) -> Option<&StartRate> {
        self.start_rates.values().find(|r| r.applies_to(workflow))
    }

    /// The debounces declared, by name.
    pub fn debounces(&self) -> impl Iterator<Item = &Debounce> {
        self.debounces.values()
    }

    /// The start rates declared, by name.
    pub fn start_rates(&self) -> impl Iterator<Item = &StartRate> {
        self.start_rates.values()
    }

    /// The concurrency limits declared, by name.
    pub fn limits(&self) -> impl Iterator<Item = &RunLimit> {
        self.limits.values()
    }

    /// The workflow registered as `name`.
    pub fn get(&self, name: &str) -> Option<&Workflow> {
        self.workflows.get(name)
    }

    /// Every registered name, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.workflows.keys().map(String::as_str)
    }

    /// Start a workflow on a cron schedule (see [`crate::schedule`]):
    /// `registry.schedule(Schedule::new("nightly-report", "report", "0 2 * * *"))?`.
    /// Checked now: its name, its workflow (registered before it), its input against
    /// the workflow's input type, its cron pattern and time zone; a second schedule of
    /// the same name is refused.
    pub fn schedule(&mut self, schedule: Schedule) -> Result<&mut Self, ScheduleError> {
        let schedule = schedule.checked()?;
        let name = schedule.name().to_owned();
        if self.schedules.contains_key(&name) {
            return Err(ScheduleError::Duplicate(name));
        }
        let workflow =
            self.get(schedule.workflow())
                .ok_or_else(|| ScheduleError::UnknownWorkflow {
                    schedule: name.clone(),
                    workflow: schedule.workflow().to_owned(),
                })?;
        if let Some(debounce) = self.debounce_for(schedule.workflow()) {
            return Err(ScheduleError::Debounced {
                schedule: name,
                workflow: schedule.workflow().to_owned(),
                debounce: debounce.name().to_owned(),
            });
        }
        workflow
            .validate(schedule.run_input())
            .map_err(|reason| ScheduleError::InvalidInput {
                schedule: name.clone(),
                reason,
            })?;
        self.schedules.insert(name, schedule);
        Ok(self)
    }

    /// Every schedule, by name.
    pub fn schedules(&self) -> impl Iterator<Item = &Schedule> {
        self.schedules.values()
    }

    /// The schedule `name`.
    pub fn get_schedule(&self, name: &str) -> Option<&Schedule> {
        self.schedules.get(name)
    }
}
