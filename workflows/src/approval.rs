//! The `approval` workflow: plan a change, wait up to three days for a person's
//! decision, then execute the plan one step at a time — or park the run on rejection.
//!
//! Input: `{"change": string}`. The decision is the event named
//! [`"approval"`](APPROVAL_EVENT), delivered through the API
//! (`Engine::deliver_event`), with a [`Decision`] as its value:
//! `{"approved": bool, "by": string, "comment"?: string}`. A decision delivered before
//! the run reaches its wait is kept and consumed when it gets there.
//!
//! - Before the wait, a step `notify_approvers` asks the approvers — behind
//!   `ctx.patched("notify-approvers")`, since it was added while runs were waiting
//!   (docs/deploys.md shows the change).
//! - **Approved**: each plan item runs as its own step `execute` (positions
//!   `execute#0`, `execute#1`, …) with up to three attempts and exponential backoff on a
//!   durable timer; the output lists what was executed.
//! - **Rejected**: the run is **parked** for an operator, with an error naming who
//!   rejected the change and why. The context has no public "park" operation, so the
//!   rejection is recorded as a step `rejected` that fails fatally, with no retries and
//!   [`park_on_exhaustion`](siesta::context::StepBuilder::park_on_exhaustion): the run
//!   is parked with kind `RetriesExhausted` and a message that carries the rejection.
//!   The journal records the rejection like any step outcome, so an operator who
//!   resumes the run sees it fail with that same error rather than execute the plan.
//! - **No decision within three days**: the wait fails with `EventTimedOut` and the run
//!   fails with it.

use siesta::prelude::*;

/// The name of the event that carries the decision.
pub const APPROVAL_EVENT: &str = "approval";

/// The patch that added the `notify_approvers` step before the wait: runs that were
/// already waiting when it was deployed go on without it.
pub const NOTIFY_APPROVERS_PATCH: &str = "notify-approvers";

/// How long the run waits for a decision.
pub const APPROVAL_TIMEOUT: Duration = Duration::from_secs(3 * 24 * 60 * 60);

/// The input of the `approval` workflow.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ApprovalInput {
    /// The change to approve, e.g. `rotate the database password`.
    pub change: String,
}

/// A person's decision on the change: the value of the `approval` event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Decision {
    /// Whether the change may go ahead.
    pub approved: bool,
    /// Who decided.
    pub by: String,
    /// Why, optionally.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
}

/// One executed plan item.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutedStep {
    /// Its place in the plan, from 1.
    pub step: u32,
    /// What was done.
    pub action: String,
    /// On which attempt it succeeded.
    pub attempt: u32,
}

/// The outcome of an approved and executed change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalOutcome {
    /// The change, as given in the input.
    pub change: String,
    /// Who approved it.
    pub approved_by: String,
    /// The approver's comment, if any.
    pub comment: Option<String>,
    /// The plan's items, in the order they ran.
    pub executed: Vec<ExecutedStep>,
}

/// Plan the change, wait up to three days for the `approval` event, then execute the
/// plan (approved), park the run (rejected), or fail (no decision in time).
pub async fn approval(ctx: Context, input: ApprovalInput) -> Result<ApprovalOutcome, Error> {
    let change = input.change.trim().to_owned();
    if change.is_empty() {
        return Err(Error::msg("an approval needs a change to approve"));
    }
    let subject = change.clone();
    let plan: Vec<String> = ctx
        .step("plan", move |_| async move { Ok(make_plan(&subject)) })
        .await?;
    ctx.log(format!(
        "change '{change}': a plan of {} steps awaits approval",
        plan.len()
    ));
    // Added after runs were already waiting for their approval: a run that journaled
    // its wait before this step existed replays without it (`patched` is false there),
    // every other run asks its approvers (see docs/deploys.md).
    if ctx.patched(NOTIFY_APPROVERS_PATCH) {
        let subject = change.clone();
        ctx.step("notify_approvers", move |call| async move {
            // A real app would post to a chat channel or send a mail here.
            call.log(format!("approval requested for '{subject}'"));
            Ok(format!("approvers asked about '{subject}'"))
        })
        .await?;
    }
    let decision: Decision = ctx
        .wait_for_event(APPROVAL_EVENT)
        .timeout(APPROVAL_TIMEOUT)
        .await?;
    if !decision.approved {
        let reason = rejection(&change, &decision);
        let why = reason.clone();
        // Parks the run: a fatal error, no retries, park on exhaustion.
        ctx.step("rejected", move |_| async move {
            Err::<(), _>(StepError::new("Rejected", why, false))
        })
        .retry(RetryStrategy::none())
        .park_on_exhaustion()
        .await?;
        // A parked step never returns Ok; this only satisfies the type.
        return Err(Error::msg(reason));
    }
    let mut executed = Vec::with_capacity(plan.len());
    for (i, action) in plan.into_iter().enumerate() {
        let n = i as u32 + 1;
        let done: ExecutedStep = ctx
            .step("execute", move |call| async move {
                // A real plan item would call the system being changed here; an error
                // classified retryable gets another attempt on a durable timer.
                Ok(ExecutedStep {
                    step: n,
                    action,
                    attempt: call.attempt(),
                })
            })
            .retry(RetryStrategy::exponential(3))
            .await?;
        ctx.log(format!("change '{change}': step {n} done"));
        executed.push(done);
    }
    Ok(ApprovalOutcome {
        change,
        approved_by: decision.by,
        comment: decision.comment,
        executed,
    })
}

/// The plan for `change`: the same change always gets the same plan. A rollback needs
/// no snapshot of its own.
fn make_plan(change: &str) -> Vec<String> {
    let lower = change.to_lowercase();
    let mut plan = Vec::with_capacity(3);
    if !(lower.contains("rollback") || lower.contains("revert")) {
        plan.push(format!("snapshot what '{change}' touches"));
    }
    plan.push(format!("apply '{change}'"));
    plan.push(format!("verify '{change}' and close the change"));
    plan
}

/// The message a rejection parks the run with.
fn rejection(change: &str, decision: &Decision) -> String {
    let by = if decision.by.trim().is_empty() {
        "someone unnamed"
    } else {
        decision.by.trim()
    };
    match decision.comment.as_deref().map(str::trim) {
        Some(comment) if !comment.is_empty() => {
            format!("change '{change}' was rejected by {by}: {comment}")
        }
        _ => format!("change '{change}' was rejected by {by} (no reason given)"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_have_two_or_three_steps() {
        assert_eq!(make_plan("rotate keys").len(), 3);
        assert_eq!(make_plan("Revert the deploy").len(), 2);
        assert_eq!(make_plan("rotate keys"), make_plan("rotate keys"));
    }

    #[test]
    fn a_rejection_names_who_and_why() {
        let d = Decision {
            approved: false,
            by: "bob".into(),
            comment: Some("too risky".into()),
        };
        assert_eq!(
            rejection("x", &d),
            "change 'x' was rejected by bob: too risky"
        );
    }
}
