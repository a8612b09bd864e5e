//! `invoke`: start another workflow as a child run and await its result.
//!
//! The child is created in the same checkpoint that journals the invoke, with an id
//! derived from the parent's id, its creation time and the invoke's position (so replay
//! never creates a second one, and a new run under a reused id never names the first
//! one's children). Its input, when large, is stored under the child's own id: it is
//! the child's, removed with the child and not with the parent, which may go first.
//! When the child finishes, its final checkpoint delivers its outcome to the parent in
//! the same transaction, which wakes the parent.

use crate::timeline as tl;
use std::future::IntoFuture;
use std::marker::PhantomData;

use futures::future::BoxFuture;
use serde::Serialize;
use serde::de::DeserializeOwned;
use sha2::{Digest, Sha256};

use super::{Context, Delta, Op};
use crate::error::{Error, ErrorKind};
use crate::model::*;

/// An `invoke` being configured; `.await` it at once.
#[must_use = "an invoke does nothing until awaited"]
pub struct InvokeBuilder<O, I> {
    ctx: Context,
    op: Op,
    workflow: String,
    input: I,
    _o: PhantomData<fn() -> O>,
}

impl Context {
    /// Start `workflow` with `input` as a child run of this one, and wait for its output.
    /// A failed child is [`ErrorKind::InvokeFailed`].
    pub fn invoke<O, I>(&self, name: &str, workflow: &str, input: I) -> InvokeBuilder<O, I>
    where
        I: Serialize + Send + 'static,
        O: DeserializeOwned + Send + 'static,
    {
        InvokeBuilder {
            ctx: self.clone(),
            op: self.mint(name, OperationKind::Invoke),
            workflow: workflow.to_owned(),
            input,
            _o: PhantomData,
        }
    }
}

/// The id of the child run started by `invoke` at `position` of `parent`: the parent's
/// id and a hash of its creation time and the position. The creation time tells apart
/// two runs under one id — an `Idempotency-Key` replayed after the first run was
/// removed starts a new run under the same id, whose children must not be the first
/// one's (which may remain: unfinished, or kept longer).
pub fn child_run_id(parent: &Run, position: &Position) -> RunId {
    let mut hash = Sha256::new();
    hash.update(parent.created_at.0.to_be_bytes());
    hash.update(position.as_str().as_bytes());
    RunId(format!(
        "{}.{}",
        parent.id,
        &hex::encode(hash.finalize())[..16]
    ))
}

impl<O, I> IntoFuture for InvokeBuilder<O, I>
where
    I: Serialize + Send + 'static,
    O: DeserializeOwned + Send + 'static,
{
    type Output = Result<O, Error>;
    type IntoFuture = BoxFuture<'static, Result<O, Error>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move {
            let InvokeBuilder {
                ctx,
                op,
                workflow,
                input,
                ..
            } = self;
            let entry = ctx.lookup(&op).await;
            // A child already started keeps the id its entry records: one started by an
            // older build was named by the position alone.
            // A child a restart set aside is taken over, not started again (`carried`).
            let carried = match &entry {
                None => ctx.carried_child(&op),
                Some(_) => None,
            };
            let child_id = match entry.as_ref().and_then(|e| e.handle.clone()) {
                Some(recorded) => RunId(recorded),
                None => carried.clone().unwrap_or_else(|| {
                    let default = child_run_id(&ctx.shared.state().run, &op.position);
                    ctx.restarted_child_id(&op, default)
                }),
            };
            match entry.map(|e| e.state) {
                Some(EntryState::Succeeded { value, .. }) => return ctx.decode(&value).await,
                Some(EntryState::Failed { error, .. }) => return Err(Error::from_info(&error)),
                Some(_) => {}
                None if carried.is_some() => {
                    ctx.go_live();
                    ctx.boundary().await;
                    let mut entry = op.entry(EntryState::Waiting(Wait {
                        kind: WaitKind::Child {
                            run_id: child_id.clone(),
                        },
                        deadline: None,
                        started_at: ctx.shared.now(),
                    }));
                    entry.handle = Some(child_id.0.clone());
                    ctx.commit_or_suspend(Delta {
                        journal: vec![entry],
                        ..Delta::default()
                    })
                    .await;
                }
                None => {
                    // Not yet: a child run would not count against its limit, debounce
                    // or start rate — refused, rather than let through unseen.
                    if let Some(by) = ctx.shared.config.flow_controlled.get(&workflow) {
                        return Err(Error::new(
                            ErrorKind::InvalidConfig,
                            format!(
                                "invoke '{}': {workflow} is under {by}, which does not count child runs yet; start it with POST /runs instead",
                                op.name
                            ),
                            None,
                        ));
                    }
                    ctx.go_live();
                    ctx.boundary().await;
                    let now = ctx.shared.now();
                    // Under the child's id: the parent may be removed before the child.
                    let input = ctx.encode_under(&child_id, &input).await?;
                    let mut child = Run::new(
                        ctx.shared.tenant.clone(),
                        child_id.clone(),
                        workflow.clone(),
                        input,
                        now,
                    );
                    child.build_id = Some(ctx.shared.config.build_id.clone());
                    // The child's wake-ups join this run's trace, under this invoke.
                    child.trace_parent = Some(crate::telemetry::child_trace_parent(
                        &ctx.shared.state().run,
                        &child_id,
                    ));
                    child.parent = Some(ParentLink {
                        run_id: ctx.shared.run_id.clone(),
                        position: op.position.clone(),
                        created_at: Some(ctx.shared.state().run.created_at),
                    });
                    let started = TimelineEvent::execution_started(
                        now,
                        &workflow,
                        tl::EventDetails::ExecutionStarted(tl::ExecutionStarted {
                            workflow: None,
                            parent_run_id: Some(ctx.shared.run_id.0.clone()),
                            parent_operation_id: Some(op.position.0.clone()),
                            build_id: Some(ctx.shared.config.build_id.clone()),
                        })
                        .to_value(),
                    );
                    child.timeline_seq = 1;
                    let wait = Wait {
                        kind: WaitKind::Child {
                            run_id: child_id.clone(),
                        },
                        deadline: None,
                        started_at: now,
                    };
                    let mut entry = op.entry(EntryState::Waiting(wait));
                    entry.handle = Some(child_id.0.clone());
                    let ev = ctx.event(
                        EventType::ChainedInvokeStarted,
                        SubType::ChainedInvoke,
                        &op,
                        tl::EventDetails::ChainedInvokeStarted(tl::ChainedInvoke {
                            workflow: workflow.to_string(),
                            child_run_id: child_id.0.clone(),
                            status: None,
                        }),
                    );
                    ctx.commit_or_suspend(Delta {
                        journal: vec![entry],
                        timeline: vec![ev],
                        child_runs: vec![(child, started)],
                        ..Delta::default()
                    })
                    .await;
                }
            }
            let before = ctx
                .shared
                .state()
                .journal
                .get(&op.position)
                .map(|e| e.state.clone());
            // Claimed until the result is handed back: dropped before (a combinator's
            // loser), the invoke gives it back (see `claim`).
            // This child's outcome only: a child of an earlier run under this run's id
            // (an `Idempotency-Key` replayed after it was removed) may finish too, and
            // its outcome comes to this id at the same position.
            let ours = child_finished_id(&child_id);
            let finished = ctx.take_delivery(&op, before, |d| {
                d.id == ours
                    && matches!(&d.body, DeliveryBody::ChildFinished { position, .. } if *position == op.position)
            });
            let Some((delivery, claim)) = finished else {
                return ctx.suspend(None).await;
            };
            ctx.go_live();
            let DeliveryBody::ChildFinished { outcome, .. } = delivery.body else {
                unreachable!("only child results are taken")
            };
            let (state, result) = match outcome {
                Ok(value) => {
                    let result = ctx.decode::<O>(&value).await;
                    (EntryState::Succeeded { value, attempt: 0 }, result)
                }
                Err(error) => {
                    let err = Error::new(
                        ErrorKind::InvokeFailed,
                        format!("child run {child_id} ({workflow}) failed: {error}"),
                        Some(error),
                    );
                    (
                        EntryState::Failed {
                            error: err.to_info(),
                            attempt: 0,
                        },
                        Err(err),
                    )
                }
            };
            let mut entry = op.entry(state);
            entry.consumed = vec![delivery.id];
            entry.handle = Some(child_id.0.clone());
            ctx.commit_or_suspend(Delta {
                journal: vec![entry],
                ..Delta::default()
            })
            .await;
            claim.keep();
            result
        })
    }
}
