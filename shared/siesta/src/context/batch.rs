//! Child contexts, `parallel` and `map`.
//!
//! Each branch runs in a child context under the batch's position, and its outcome is
//! journaled as a context entry of its own, so replay skips finished branches. The
//! batch's own entry records only which branches finished how and why the batch
//! completed; the values stay in the branch entries.

use crate::timeline as tl;
pub use crate::timeline::CompletionReason;
use std::future::{Future, IntoFuture};

use futures::future::BoxFuture;
use futures::stream::{FuturesUnordered, StreamExt};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::claim::Scoped;
use super::{BlockGuard, BranchGuard, Context, Delta, Op};
use crate::error::{Error, ErrorKind};
use crate::model::*;

impl Context {
    /// Run `f` in a child context: its operations are grouped under this one's
    /// position, and once it finishes, replay returns its result without entering it.
    pub async fn run_in_child_context<T, F, Fut>(&self, name: &str, f: F) -> Result<T, Error>
    where
        F: FnOnce(Context) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, Error>> + Send + 'static,
        T: Serialize + DeserializeOwned + Send + 'static,
    {
        let op = self.mint(name, OperationKind::Context);
        run_context(self, &op, SubType::RunInChildContext, false, f).await
    }
}

/// Run one context (a child context, a batch branch, a `wait_for_callback`) and
/// journal its outcome.
pub(super) async fn run_context<T, F, Fut>(
    parent: &Context,
    op: &Op,
    sub: SubType,
    own_replay_flag: bool,
    f: F,
) -> Result<T, Error>
where
    F: FnOnce(Context) -> Fut + Send + 'static,
    Fut: Future<Output = Result<T, Error>> + Send + 'static,
    T: Serialize + DeserializeOwned + Send + 'static,
{
    let fresh = match parent.lookup(op).await.map(|e| e.state) {
        Some(EntryState::Succeeded { value, .. }) => return parent.decode(&value).await,
        Some(EntryState::Failed { error, .. }) => return Err(Error::from_info(&error)),
        found => found.is_none(),
    };
    let child = parent.child_started(op, sub, own_replay_flag, fresh, tl::EventDetails::None);
    let result = match f(child.clone()).await {
        // A child context's failure surfaces as its own error carrying the cause (AWS:
        // `ChildContextError`); a batch branch's error is reported as it is, per branch.
        Err(e) if sub == SubType::RunInChildContext => Err(Error::new(
            ErrorKind::ChildFailed,
            format!("child context '{}' failed: {e}", op.name),
            Some(e.to_info()),
        )),
        other => other,
    };
    child.go_live();
    let (state, event, result) = match result {
        Ok(value) => {
            // The workflow sees the value as replay will: decoded from its journal form.
            let (payload, decoded) = parent.encode_decoded(&value).await?;
            (
                EntryState::Succeeded {
                    value: payload,
                    attempt: 0,
                },
                EventType::ContextSucceeded,
                decoded,
            )
        }
        Err(e) => (
            EntryState::Failed {
                error: e.to_info(),
                attempt: 0,
            },
            EventType::ContextFailed,
            Err(e),
        ),
    };
    let details = match &state {
        EntryState::Failed { error, .. } => tl::EventDetails::ContextFailed(tl::ContextDetails {
            error: Some(error.clone()),
            ..Default::default()
        }),
        _ => tl::EventDetails::None,
    };
    let ev = parent.event(event, sub, op, details);
    // Through the child, so a start not yet recorded goes with the end.
    child
        .commit_or_suspend(Delta {
            journal: vec![op.entry(state)],
            timeline: vec![ev],
            ..Delta::default()
        })
        .await;
    result
}

/// One branch of a `parallel`.
pub type Branch<T> = Box<dyn FnOnce(Context) -> BoxFuture<'static, Result<T, Error>> + Send>;

/// Box a closure as a [`Branch`] of a `parallel`.
pub fn branch<T, F, Fut>(f: F) -> Branch<T>
where
    F: FnOnce(Context) -> Fut + Send + 'static,
    Fut: Future<Output = Result<T, Error>> + Send + 'static,
{
    Box::new(move |ctx| Box::pin(f(ctx)))
}

/// When a `parallel` or `map` is complete.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CompletionConfig {
    /// Complete as soon as this many branches succeeded.
    pub min_successful: Option<usize>,
    /// Complete (as failed) once more than this many branches failed.
    pub tolerated_failure_count: Option<usize>,
    /// Complete (as failed) once more than this share of all branches failed (0–100).
    pub tolerated_failure_percentage: Option<f64>,
}

impl CompletionConfig {
    /// Every branch must finish; failures are collected, not fatal (the default).
    pub fn all_completed() -> Self {
        CompletionConfig::default()
    }

    /// Complete with the first success; fail once every branch failed.
    pub fn first_successful() -> Self {
        CompletionConfig {
            min_successful: Some(1),
            ..CompletionConfig::default()
        }
    }

    /// Every branch must succeed: the first failure completes the batch as failed.
    pub fn all_successful() -> Self {
        CompletionConfig {
            tolerated_failure_count: Some(0),
            ..CompletionConfig::default()
        }
    }

    /// Whether the rule can hold for a batch of `total` branches: at most `total`
    /// required successes, a tolerated percentage within 0–100. The error says what
    /// is wrong, for [`ErrorKind::InvalidConfig`].
    pub fn validate(&self, total: usize) -> Result<(), String> {
        if let Some(n) = self.min_successful.filter(|n| *n > total) {
            return Err(format!(
                "min_successful is {n} but the batch has only {total} item(s)"
            ));
        }
        if let Some(p) = self
            .tolerated_failure_percentage
            .filter(|p| !(0.0..=100.0).contains(p))
        {
            return Err(format!(
                "tolerated_failure_percentage is {p}; it must be between 0 and 100"
            ));
        }
        Ok(())
    }

    /// The reason the batch is complete after `succeeded` successes and `failed`
    /// failures out of `total`, if it is.
    pub fn evaluate(
        &self,
        succeeded: usize,
        failed: usize,
        total: usize,
    ) -> Option<CompletionReason> {
        if self.tolerated_failure_count.is_some_and(|n| failed > n)
            || self
                .tolerated_failure_percentage
                .is_some_and(|p| total > 0 && (failed as f64) * 100.0 / (total as f64) > p)
        {
            return Some(CompletionReason::FailureToleranceExceeded);
        }
        if self.min_successful.is_some_and(|n| succeeded >= n) {
            return Some(CompletionReason::MinSuccessfulReached);
        }
        if succeeded + failed >= total {
            return Some(CompletionReason::AllCompleted);
        }
        None
    }
}

/// One branch's outcome.
#[derive(Debug, Clone, PartialEq)]
pub enum BatchOutcome<T> {
    /// It returned a value.
    Succeeded(T),
    /// It returned an error.
    Failed(Error),
    /// The batch completed before it finished (or started).
    NotCompleted,
}

/// One branch's outcome with its index.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchItem<T> {
    /// The branch's index (the item's index for `map`).
    pub index: usize,
    /// What it did.
    pub outcome: BatchOutcome<T>,
}

/// The outcome of a `parallel` or `map`, in index order.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchResult<T> {
    /// Every branch, in index order.
    pub items: Vec<BatchItem<T>>,
    /// Why it completed.
    pub completion_reason: CompletionReason,
}

impl<T> BatchResult<T> {
    /// How many branches succeeded.
    pub fn success_count(&self) -> usize {
        self.items
            .iter()
            .filter(|i| matches!(i.outcome, BatchOutcome::Succeeded(_)))
            .count()
    }

    /// How many branches failed.
    pub fn failure_count(&self) -> usize {
        self.items
            .iter()
            .filter(|i| matches!(i.outcome, BatchOutcome::Failed(_)))
            .count()
    }

    /// The successful values with their indexes, in index order.
    pub fn successes(&self) -> Vec<(usize, &T)> {
        self.items
            .iter()
            .filter_map(|i| match &i.outcome {
                BatchOutcome::Succeeded(v) => Some((i.index, v)),
                _ => None,
            })
            .collect()
    }

    /// Every value in index order, or the first failure as [`ErrorKind::BatchFailed`]
    /// (also when some branch did not complete).
    pub fn values(self) -> Result<Vec<T>, Error> {
        let mut out = Vec::with_capacity(self.items.len());
        for item in self.items {
            match item.outcome {
                BatchOutcome::Succeeded(v) => out.push(v),
                BatchOutcome::Failed(e) => {
                    return Err(Error::new(
                        ErrorKind::BatchFailed,
                        format!("branch {} failed: {e}", item.index),
                        Some(e.to_info()),
                    ));
                }
                BatchOutcome::NotCompleted => {
                    return Err(Error::new(
                        ErrorKind::BatchFailed,
                        format!("branch {} did not complete", item.index),
                        None,
                    ));
                }
            }
        }
        Ok(out)
    }
}

/// The journaled summary of a batch: how each branch ended, and why the batch did.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct BatchSummary {
    statuses: Vec<BranchStatus>,
    reason: CompletionReason,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum BranchStatus {
    Succeeded,
    Failed,
    NotCompleted,
}

/// A `parallel` or `map` being configured; `.await` it at once.
#[must_use = "a batch does nothing until awaited"]
pub struct BatchBuilder<T> {
    ctx: Context,
    op: Op,
    branches: Vec<Branch<T>>,
    max_concurrency: Option<usize>,
    completion: CompletionConfig,
    names: Option<Vec<String>>,
}

impl Context {
    /// Run `branches` concurrently, each in its own child context, and return their
    /// outcomes in index order once the completion rule is met.
    pub fn parallel<T>(&self, name: &str, branches: Vec<Branch<T>>) -> BatchBuilder<T> {
        BatchBuilder {
            ctx: self.clone(),
            op: self.mint(name, OperationKind::Parallel),
            branches,
            max_concurrency: None,
            completion: CompletionConfig::default(),
            names: None,
        }
    }

    /// Run `f` for each item concurrently, each in its own child context, and return the
    /// outcomes in index order once the completion rule is met.
    pub fn map<I, T, F, Fut>(&self, name: &str, items: Vec<I>, f: F) -> BatchBuilder<T>
    where
        I: Send + 'static,
        F: Fn(Context, I, usize) -> Fut + Send + Sync + Clone + 'static,
        Fut: Future<Output = Result<T, Error>> + Send + 'static,
    {
        let branches = items
            .into_iter()
            .enumerate()
            .map(|(i, item)| {
                let f = f.clone();
                let b: Branch<T> = Box::new(move |ctx| Box::pin(f(ctx, item, i)));
                b
            })
            .collect();
        BatchBuilder {
            ctx: self.clone(),
            op: self.mint(name, OperationKind::Map),
            branches,
            max_concurrency: None,
            completion: CompletionConfig::default(),
            names: None,
        }
    }
}

impl<T> BatchBuilder<T> {
    /// Run at most `n` branches at once (branches start in index order). Zero is
    /// refused with [`ErrorKind::InvalidConfig`] when the batch is awaited.
    pub fn max_concurrency(mut self, n: usize) -> Self {
        self.max_concurrency = Some(n);
        self
    }

    /// Name the branches (or the map's items), in index order: each branch's context
    /// is then `name#occurrence` under the batch instead of `branch#i` /
    /// `iteration#i`, and its timeline events carry the name (AWS: branch names, the
    /// map's item namer). One name per branch, or the batch fails with
    /// [`ErrorKind::InvalidConfig`] when awaited. Changing names changes positions, so
    /// it is a change of code for runs in flight.
    pub fn names<I, S>(mut self, names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.names = Some(names.into_iter().map(Into::into).collect());
        self
    }

    /// Use this completion rule (default: all complete, failures collected).
    pub fn completion(mut self, config: CompletionConfig) -> Self {
        self.completion = config;
        self
    }
}

impl<T: Serialize + DeserializeOwned + Send + 'static> IntoFuture for BatchBuilder<T> {
    type Output = Result<BatchResult<T>, Error>;
    type IntoFuture = BoxFuture<'static, Result<BatchResult<T>, Error>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(run_batch(self))
    }
}

async fn run_batch<T: Serialize + DeserializeOwned + Send + 'static>(
    b: BatchBuilder<T>,
) -> Result<BatchResult<T>, Error> {
    let BatchBuilder {
        ctx,
        op,
        branches,
        max_concurrency,
        completion,
        names,
    } = b;
    let invalid = if max_concurrency == Some(0) {
        Some("max_concurrency must be at least 1".to_owned())
    } else if let Some(n) = names.as_ref().filter(|n| n.len() != branches.len()) {
        Some(format!(
            "{} name(s) for {} branch(es)",
            n.len(),
            branches.len()
        ))
    } else {
        completion.validate(branches.len()).err()
    };
    if let Some(why) = invalid {
        return Err(Error::new(
            ErrorKind::InvalidConfig,
            format!("{} '{}': {why}", op.kind, op.name),
            None,
        ));
    }
    let is_map = op.kind == OperationKind::Map;
    let (sub, branch_sub, branch_name) = if is_map {
        (SubType::Map, SubType::MapIteration, "iteration")
    } else {
        (SubType::Parallel, SubType::ParallelBranch, "branch")
    };
    let total = branches.len();
    let entry = ctx.lookup(&op).await;
    let scope = ctx.child_started(
        &op,
        sub,
        false,
        entry.is_none(),
        tl::EventDetails::ContextStarted(tl::ContextDetails {
            total: Some(total as u64),
            max_concurrency: Some(max_concurrency.map(|m| m as u64)),
            ..Default::default()
        }),
    );
    // Mint every branch's position up front, in index order, so they are stable.
    let branch_ops: Vec<Op> = (0..total)
        .map(|i| {
            let name = names.as_ref().map_or(branch_name, |n| n[i].as_str());
            scope.mint(name, OperationKind::Context)
        })
        .collect();

    if let Some(entry) = entry {
        match entry.state {
            EntryState::Succeeded { value, .. } => {
                let summary: BatchSummary = ctx.decode(&value).await?;
                let mut items = Vec::with_capacity(total);
                for (index, (status, bop)) in summary.statuses.iter().zip(&branch_ops).enumerate() {
                    let recorded = ctx
                        .shared
                        .state()
                        .journal
                        .get(&bop.position)
                        .map(|e| e.state.clone());
                    let outcome = match (status, recorded) {
                        (BranchStatus::Succeeded, Some(EntryState::Succeeded { value, .. })) => {
                            BatchOutcome::Succeeded(ctx.decode(&value).await?)
                        }
                        (BranchStatus::Failed, Some(EntryState::Failed { error, .. })) => {
                            BatchOutcome::Failed(Error::from_info(&error))
                        }
                        _ => BatchOutcome::NotCompleted,
                    };
                    items.push(BatchItem { index, outcome });
                }
                return Ok(BatchResult {
                    items,
                    completion_reason: summary.reason,
                });
            }
            EntryState::Failed { error, .. } => return Err(Error::from_info(&error)),
            _ => {}
        }
    }

    let limit = max_concurrency.unwrap_or(total).max(1);
    let mut outcomes: Vec<Option<Result<T, Error>>> = (0..total).map(|_| None).collect();
    let mut pending = branches.into_iter().zip(branch_ops).enumerate();
    let mut running = FuturesUnordered::new();
    let (mut succeeded, mut failed) = (0usize, 0usize);
    let mut reason = completion.evaluate(0, 0, total);
    // While branches run, this branch (the batch's caller) is blocked on them.
    let blocked = BlockGuard::new(&ctx.shared);
    while reason.is_none() {
        while running.len() < limit {
            let Some((index, (f, bop))) = pending.next() else {
                break;
            };
            let guard = BranchGuard::new(&ctx.shared);
            let scope = scope.clone();
            // In a scope of its own: a branch still running when the batch completes
            // is dropped and gives back the deliveries it took (see `claim`).
            let shared = scope.shared.clone();
            running.push(Scoped::new(
                &shared,
                Box::pin(async move {
                    let _guard = guard;
                    (index, run_context(&scope, &bop, branch_sub, true, f).await)
                }),
            ));
        }
        let Some(((index, result), took)) = running.next().await else {
            break;
        };
        // Every finished branch's outcome is reported.
        took.keep();
        match &result {
            Ok(_) => succeeded += 1,
            Err(_) => failed += 1,
        }
        outcomes[index] = Some(result);
        reason = completion.evaluate(succeeded, failed, total);
    }
    drop(running);
    drop(blocked);
    let reason = reason.unwrap_or(CompletionReason::AllCompleted);
    let statuses: Vec<BranchStatus> = outcomes
        .iter()
        .map(|o| match o {
            Some(Ok(_)) => BranchStatus::Succeeded,
            Some(Err(_)) => BranchStatus::Failed,
            None => BranchStatus::NotCompleted,
        })
        .collect();
    let summary = BatchSummary { statuses, reason };
    ctx.go_live();
    let ev = ctx.event(
        EventType::ContextSucceeded,
        sub,
        &op,
        tl::EventDetails::ContextSucceeded(tl::ContextDetails {
            completion_reason: Some(reason),
            succeeded: Some(succeeded as u64),
            failed: Some(failed as u64),
            total: Some(total as u64),
            ..Default::default()
        }),
    );
    let value = ctx.encode(&summary).await?;
    // Through the batch's scope, so a start not yet recorded goes with the end.
    scope
        .commit_or_suspend(Delta {
            journal: vec![op.entry(EntryState::Succeeded { value, attempt: 0 })],
            timeline: vec![ev],
            ..Delta::default()
        })
        .await;
    let items = outcomes
        .into_iter()
        .enumerate()
        .map(|(index, o)| BatchItem {
            index,
            outcome: match o {
                Some(Ok(v)) => BatchOutcome::Succeeded(v),
                Some(Err(e)) => BatchOutcome::Failed(e),
                None => BatchOutcome::NotCompleted,
            },
        })
        .collect();
    Ok(BatchResult {
        items,
        completion_reason: reason,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_completes_when_all_finished_whatever_failed() {
        let c = CompletionConfig::all_completed();
        assert_eq!(c.evaluate(2, 1, 4), None);
        assert_eq!(c.evaluate(2, 2, 4), Some(CompletionReason::AllCompleted));
        assert_eq!(c.evaluate(0, 4, 4), Some(CompletionReason::AllCompleted));
    }

    #[test]
    fn min_successful_completes_early() {
        let c = CompletionConfig {
            min_successful: Some(2),
            ..Default::default()
        };
        assert_eq!(c.evaluate(1, 0, 5), None);
        assert_eq!(
            c.evaluate(2, 3, 5),
            Some(CompletionReason::MinSuccessfulReached)
        );
    }

    #[test]
    fn tolerated_failures_by_count_and_percentage() {
        let c = CompletionConfig {
            tolerated_failure_count: Some(1),
            ..Default::default()
        };
        assert_eq!(c.evaluate(0, 1, 5), None);
        assert_eq!(
            c.evaluate(0, 2, 5),
            Some(CompletionReason::FailureToleranceExceeded)
        );
        let p = CompletionConfig {
            tolerated_failure_percentage: Some(25.0),
            ..Default::default()
        };
        assert_eq!(p.evaluate(0, 1, 4), None);
        assert_eq!(
            p.evaluate(0, 2, 4),
            Some(CompletionReason::FailureToleranceExceeded)
        );
    }

    #[test]
    fn empty_batch_is_complete_at_once() {
        assert_eq!(
            CompletionConfig::default().evaluate(0, 0, 0),
            Some(CompletionReason::AllCompleted)
        );
    }
}
