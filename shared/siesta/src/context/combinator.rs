//! Combinators over durable futures: `join_all`, `try_join_all`, `select_ok` and `race`
//! (the AWS Rust SDK's names and semantics).
//!
//! The futures are operations the workflow created before (`ctx.step(..).into_future()`,
//! a wait, a callback...), so their positions are minted where they were created and
//! their events are the combinator's siblings, not its children. The combinator is a
//! context operation of its own (AWS: type `Context`, sub-type `RunInChildContext`):
//! what it decided — the collected outcomes, the winner — is journaled before the
//! workflow sees it, and replay returns that record without polling the futures again,
//! so a race is never decided twice.
//!
//! The futures are polled in their order, and of those found finished in one round the
//! first in order counts first, so a decision depends only on what the journal holds.
//! When a combinator settles early (the first success, the first settled, the first
//! failure of `try_join_all`) the other futures are dropped: they are never polled
//! again, what they journaled stays, and what they left open (a callback, a timer)
//! stays open until its own deadline or the run's end. What they took from the inbox
//! (an event, a callback outcome, messages) they give back, as do the finished futures
//! whose outcome the combinator discards: replay never polls them, so the workflow must
//! not have lost those deliveries to them (see `claim`).
//!
//! A future built lazily (`Box::pin(async move { ctx.wait_for_event(..).await })`) takes
//! its position when first polled, so replay, which does not poll a decided
//! combinator's futures, would not mint those positions, and the next operations would
//! take them: the next round's wait would be handed the position, and so the journal
//! entry and the deliveries, of a wait an earlier round dropped (vercel/workflow#4264).
//! The combinator therefore journals with its outcome the positions its futures minted
//! while it decided ([`JournalEntry::minted`]) — in the invocation that decides, and,
//! found in the journal by [`JournalEntry::within`], in the earlier ones (a future
//! after the one that decides is not polled again before the decision) — and replay
//! takes them as minting them would: whatever a future's shape, what comes after the
//! combinator has the position it had, and a dropped wait is never polled again.

use crate::timeline as tl;
use std::future::IntoFuture;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;

use futures::future::BoxFuture;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::claim::{Kept, Scoped};
use super::state::Minting;
use super::{BlockGuard, BranchGuard, Context, Delta, Op, Shared};
use crate::error::{Error, ErrorKind};
use crate::model::*;

/// A durable operation's future, boxed so that futures of different operations (a
/// step, a wait, a callback) can be combined: `ctx.step(..).into_future()`, or
/// `Box::pin(async move { .. })` around one.
pub type DurableFuture<T> = BoxFuture<'static, Result<T, Error>>;

/// Which combinator, and so when it settles and what it returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rule {
    /// Every future's outcome, in order; never settles early.
    JoinAll,
    /// Every value, in order; settles at the first failure.
    TryJoinAll,
    /// The first success; fails once every future failed.
    SelectOk,
    /// The first outcome, success or failure.
    Race,
}

impl Rule {
    fn as_str(self) -> &'static str {
        match self {
            Rule::JoinAll => "join_all",
            Rule::TryJoinAll => "try_join_all",
            Rule::SelectOk => "select_ok",
            Rule::Race => "race",
        }
    }
}

/// One future's outcome as `join_all` journals it: its value, or its error whole (kind,
/// message and cause), so replay hands back the same error.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "lowercase")]
enum Settled<T> {
    /// It succeeded with `value`.
    Fulfilled {
        /// Its value.
        value: T,
    },
    /// It failed with `error`.
    Rejected {
        /// Its error.
        error: ErrorInfo,
    },
}

/// A combinator being configured; `.await` it.
#[must_use = "a combinator does nothing until awaited"]
pub struct Combinator<T, O> {
    ctx: Context,
    op: Op,
    rule: Rule,
    futures: Vec<DurableFuture<T>>,
    /// The workflow's value from the journal form (on first execution too, so it sees
    /// what replay will hand it).
    from_journal: fn(serde_json::Value) -> Result<O, Error>,
}

impl Context {
    /// Await every future and collect each outcome, in order; never settles early (AWS
    /// `join_all`, whose `Settled` is a `Result` here). The outcomes are journaled, so
    /// replay returns them without polling the futures again.
    ///
    /// ```no_run
    /// # async fn demo(ctx: siesta::Context) -> Result<(), siesta::Error> {
    /// use std::future::IntoFuture;
    /// let a = ctx.step("a", |_| async { Ok(1) }).into_future();
    /// let b = ctx.step("b", |_| async { Ok(2) }).into_future();
    /// let outcomes: Vec<Result<i32, siesta::Error>> = ctx.join_all("both", [a, b]).await?;
    /// # Ok(()) }
    /// ```
    pub fn join_all<T, I>(
        &self,
        name: &str,
        futures: impl IntoIterator<Item = I>,
    ) -> Combinator<T, Vec<Result<T, Error>>>
    where
        I: IntoFuture<Output = Result<T, Error>>,
        I::IntoFuture: Send + 'static,
        T: Serialize + DeserializeOwned + Send + 'static,
    {
        self.combinator(name, Rule::JoinAll, futures, |json| {
            let settled: Vec<Settled<T>> = serde_json::from_value(json)?;
            Ok(settled
                .into_iter()
                .map(|s| match s {
                    Settled::Fulfilled { value } => Ok(value),
                    Settled::Rejected { error } => Err(Error::from_info(&error)),
                })
                .collect())
        })
    }

    /// Await every future and return their values in order, or fail at the first failure
    /// (its error is the cause of a [`ErrorKind::CombinatorFailed`]); the futures not
    /// finished by then are dropped. With no futures: an empty `Vec`.
    pub fn try_join_all<T, I>(
        &self,
        name: &str,
        futures: impl IntoIterator<Item = I>,
    ) -> Combinator<T, Vec<T>>
    where
        I: IntoFuture<Output = Result<T, Error>>,
        I::IntoFuture: Send + 'static,
        T: Serialize + DeserializeOwned + Send + 'static,
    {
        self.combinator(name, Rule::TryJoinAll, futures, |json| {
            Ok(serde_json::from_value(json)?)
        })
    }

    /// The first future to succeed; the others are dropped. Fails
    /// ([`ErrorKind::CombinatorFailed`], every error in its message, the last as its
    /// cause) once every future failed, and at once with no futures. The winner is
    /// journaled: replay returns it, whatever has finished since.
    pub fn select_ok<T, I>(
        &self,
        name: &str,
        futures: impl IntoIterator<Item = I>,
    ) -> Combinator<T, T>
    where
        I: IntoFuture<Output = Result<T, Error>>,
        I::IntoFuture: Send + 'static,
        T: Serialize + DeserializeOwned + Send + 'static,
    {
        self.combinator(name, Rule::SelectOk, futures, |json| {
            Ok(serde_json::from_value(json)?)
        })
    }

    /// The first future to finish, whether it succeeded or failed (a failure is the
    /// cause of a [`ErrorKind::CombinatorFailed`]); the others are dropped. Fails at once
    /// with no futures. The winner is journaled: replay returns it, whatever has
    /// finished since.
    ///
    /// ```no_run
    /// # async fn demo(ctx: siesta::Context) -> Result<(), siesta::Error> {
    /// use std::future::IntoFuture;
    /// let approved = ctx.wait_for_event::<bool>("approval").into_future();
    /// let deadline = ctx.step("default", |_| async { Ok(false) }).into_future();
    /// let answer = ctx.race("approval or default", [approved, deadline]).await?;
    /// # Ok(()) }
    /// ```
    pub fn race<T, I>(&self, name: &str, futures: impl IntoIterator<Item = I>) -> Combinator<T, T>
    where
        I: IntoFuture<Output = Result<T, Error>>,
        I::IntoFuture: Send + 'static,
        T: Serialize + DeserializeOwned + Send + 'static,
    {
        self.combinator(name, Rule::Race, futures, |json| {
            Ok(serde_json::from_value(json)?)
        })
    }

    fn combinator<T, O, I>(
        &self,
        name: &str,
        rule: Rule,
        futures: impl IntoIterator<Item = I>,
        from_journal: fn(serde_json::Value) -> Result<O, Error>,
    ) -> Combinator<T, O>
    where
        I: IntoFuture<Output = Result<T, Error>>,
        I::IntoFuture: Send + 'static,
    {
        // The futures were created (their positions minted) before this call; the
        // combinator's own position comes after theirs, as in AWS.
        let futures = futures
            .into_iter()
            .map(|f| Box::pin(f.into_future()) as DurableFuture<T>)
            .collect();
        Combinator {
            op: self.mint(name, OperationKind::Context),
            ctx: self.clone(),
            rule,
            futures,
            from_journal,
        }
    }
}

/// What the futures came to, by the combinator's rule.
enum Decision<T> {
    /// Every outcome, in order (`join_all`).
    All(Vec<Result<T, Error>>),
    /// Every value, in order (`try_join_all`).
    Values(Vec<T>),
    /// The winner's index and value (`select_ok`, `race`).
    Winner(usize, T),
    /// The combinator failed: the index of the future that decided it (if one did) and
    /// the error.
    Failed(Option<usize>, Error),
}

/// Poll every unfinished future in order until `rule` is decided. Of the futures found
/// finished in one round, the first in order counts first. Each future runs in a scope
/// of its own ([`Scoped`]): the deliveries of the futures whose outcome the decision
/// passes on are kept, those of the others (dropped unfinished, or finished and
/// discarded) are given back for the waits live after it. Every position the futures
/// mint while they are polled is added to `minted`.
async fn decide<T>(
    shared: &Arc<Shared>,
    rule: Rule,
    op: &Op,
    futures: Vec<DurableFuture<T>>,
    minted: &mut Vec<MintedPosition>,
) -> Decision<T> {
    let name = op.name.as_str();
    let total = futures.len();
    if total == 0 {
        return match rule {
            Rule::JoinAll => Decision::All(Vec::new()),
            Rule::TryJoinAll => Decision::Values(Vec::new()),
            Rule::SelectOk | Rule::Race => Decision::Failed(
                None,
                Error::new(
                    ErrorKind::CombinatorFailed,
                    format!("{} '{name}' was given no futures", rule.as_str()),
                    None,
                ),
            ),
        };
    }
    let mut slots: Vec<Option<Scoped<DurableFuture<T>>>> = futures
        .into_iter()
        .map(|f| Some(Scoped::new(shared, f)))
        .collect();
    let mut outcomes: Vec<Option<Result<T, Error>>> = (0..total).map(|_| None).collect();
    // What the finished futures took, until the decision says whose outcome counts.
    let mut kept: Vec<Option<Kept>> = (0..total).map(|_| None).collect();
    std::future::poll_fn(move |cx| {
        for index in 0..total {
            let Some(future) = slots[index].as_mut() else {
                continue;
            };
            let polled = {
                let _recording = MintRecorder::enter(shared, &op.position, minted);
                Pin::new(future).poll(cx)
            };
            let Poll::Ready((outcome, took)) = polled else {
                continue;
            };
            slots[index] = None;
            match (rule, outcome) {
                (Rule::Race, Ok(value)) | (Rule::SelectOk, Ok(value)) => {
                    took.keep();
                    return Poll::Ready(Decision::Winner(index, value));
                }
                (Rule::Race, Err(e)) => {
                    took.keep();
                    return Poll::Ready(Decision::Failed(
                        Some(index),
                        Error::new(
                            ErrorKind::CombinatorFailed,
                            format!("race '{name}': future #{index} finished first, failed: {e}"),
                            Some(e.to_info()),
                        ),
                    ));
                }
                (Rule::TryJoinAll, Err(e)) => {
                    took.keep();
                    return Poll::Ready(Decision::Failed(
                        Some(index),
                        Error::new(
                            ErrorKind::CombinatorFailed,
                            format!("try_join_all '{name}': future #{index} failed: {e}"),
                            Some(e.to_info()),
                        ),
                    ));
                }
                (_, outcome) => {
                    outcomes[index] = Some(outcome);
                    kept[index] = Some(took);
                }
            }
        }
        if slots.iter().any(Option::is_some) {
            return Poll::Pending;
        }
        // Every future finished and every outcome is passed on.
        for took in kept.iter_mut().filter_map(Option::take) {
            took.keep();
        }
        #[allow(
            clippy::expect_used,
            reason = "no slot is pending: every outcome is in"
        )]
        let all: Vec<Result<T, Error>> = outcomes
            .iter_mut()
            .map(|o| o.take().expect("every future finished"))
            .collect();
        Poll::Ready(match rule {
            Rule::JoinAll => Decision::All(all),
            Rule::TryJoinAll => Decision::Values(all.into_iter().filter_map(Result::ok).collect()),
            // Every future failed (a success returned above).
            Rule::SelectOk | Rule::Race => {
                let errors: Vec<String> = all
                    .iter()
                    .enumerate()
                    .filter_map(|(i, o)| o.as_ref().err().map(|e| format!("#{i}: {e}")))
                    .collect();
                let last = all
                    .last()
                    .and_then(|o| o.as_ref().err())
                    .map(Error::to_info);
                Decision::Failed(
                    None,
                    Error::new(
                        ErrorKind::CombinatorFailed,
                        format!(
                            "select_ok '{name}': all {total} futures failed ({})",
                            errors.join("; ")
                        ),
                        last,
                    ),
                )
            }
        })
    })
    .await
}

/// The positions minted during one poll of a combinator's future: pushed on entry,
/// popped on exit into the combinator's record and the record of the combinator
/// around it, if any (a future of this one may hold a combinator of its own) — also
/// when the poll unwinds.
struct MintRecorder<'a> {
    shared: &'a Shared,
    into: &'a mut Vec<MintedPosition>,
}

impl<'a> MintRecorder<'a> {
    fn enter(
        shared: &'a Shared,
        combinator: &Position,
        into: &'a mut Vec<MintedPosition>,
    ) -> MintRecorder<'a> {
        shared.state().minting.push(Minting {
            combinator: combinator.clone(),
            minted: Vec::new(),
        });
        MintRecorder { shared, into }
    }
}

impl Drop for MintRecorder<'_> {
    fn drop(&mut self) {
        let mut st = self.shared.state();
        let minted = st.minting.pop().map(|m| m.minted).unwrap_or_default();
        if let Some(outer) = st.minting.last_mut() {
            outer.minted.extend(minted.iter().cloned());
        }
        self.into.extend(minted);
    }
}

impl<T, O> IntoFuture for Combinator<T, O>
where
    T: Serialize + DeserializeOwned + Send + 'static,
    O: Send + 'static,
{
    type Output = Result<O, Error>;
    type IntoFuture = BoxFuture<'static, Result<O, Error>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(run_combinator(self))
    }
}

async fn run_combinator<T, O>(c: Combinator<T, O>) -> Result<O, Error>
where
    T: Serialize + DeserializeOwned + Send + 'static,
{
    let Combinator {
        ctx,
        op,
        rule,
        futures,
        from_journal,
    } = c;
    let fresh = match ctx.lookup(&op).await.map(|e| (e.state, e.minted)) {
        // Decided before: the record, not a second decision; the futures are not polled,
        // so the positions they minted are taken from the record.
        Some((EntryState::Succeeded { value, .. }, minted)) => {
            ctx.reached_before(&op);
            ctx.take_minted(&minted);
            return from_journal(ctx.decode(&value).await?);
        }
        Some((EntryState::Failed { error, .. }, minted)) => {
            ctx.reached_before(&op);
            ctx.take_minted(&minted);
            return Err(Error::from_info(&error));
        }
        found => found.is_none(),
    };
    let total = futures.len();
    let combinator = rule.as_str();
    if fresh {
        ctx.start_detached(
            &op,
            SubType::RunInChildContext,
            tl::EventDetails::ContextStarted(tl::ContextDetails {
                combinator: Some(combinator.to_owned()),
                futures: Some(total as u64),
                ..Default::default()
            }),
        );
    }
    let mut minted = Vec::new();
    let decision = {
        // While the futures run, this branch (the combinator's caller) waits on them,
        // and each future counts as a branch of its own until it finishes or is dropped.
        let _blocked = BlockGuard::new(&ctx.shared);
        let futures = futures
            .into_iter()
            .map(|f| {
                let guard = BranchGuard::new(&ctx.shared);
                Box::pin(async move {
                    let _guard = guard;
                    f.await
                }) as DurableFuture<T>
            })
            .collect();
        decide(&ctx.shared, rule, &op, futures, &mut minted).await
    };
    // The futures' operations minted in earlier invocations count too: a future after
    // the one that decided was not polled again in this one. Only a combinator started
    // in an earlier invocation can have them: its start is journaled with the first
    // checkpoint made after it, before any of its futures' entries, so a fresh one
    // (the common case) skips the look through the journal.
    if !fresh {
        minted.extend(ctx.minted_within(&op.position));
    }
    // Only positions where the code after the combinator mints again matter: under the
    // combinator's own parent or one of its ancestors. Those under an operation of the
    // futures (a child context's, a nested combinator's) are that operation's alone.
    minted.retain(|m| match (m.position.parent(), op.parent.as_ref()) {
        (None, _) => true,
        (Some(parent), Some(own)) => own == &parent || own.ancestors().any(|a| a == parent),
        (Some(_), None) => false,
    });
    minted.sort_by(|a, b| (a.index, &a.position.0).cmp(&(b.index, &b.position.0)));
    minted.dedup_by(|a, b| a.position == b.position);
    // What comes after the combinator, in this invocation as on replay, takes none of
    // those positions.
    ctx.take_minted(&minted);
    // A loser polled in an earlier invocation may not have been polled in this one.
    ctx.reached_before(&op);
    ctx.go_live();
    let decided = match decision {
        Decision::Failed(index, e) => Err((index, e)),
        Decision::All(outcomes) => {
            let failed = outcomes.iter().filter(|o| o.is_err()).count();
            let settled: Vec<Settled<T>> = outcomes
                .into_iter()
                .map(|o| match o {
                    Ok(value) => Settled::Fulfilled { value },
                    Err(e) => Settled::Rejected { error: e.to_info() },
                })
                .collect();
            Ok((
                serde_json::to_value(&settled)?,
                tl::ContextDetails {
                    combinator: Some(combinator.to_owned()),
                    succeeded: Some((total - failed) as u64),
                    failed: Some(failed as u64),
                    ..Default::default()
                },
            ))
        }
        Decision::Values(values) => Ok((
            serde_json::to_value(&values)?,
            tl::ContextDetails {
                combinator: Some(combinator.to_owned()),
                succeeded: Some(total as u64),
                failed: Some(0),
                ..Default::default()
            },
        )),
        Decision::Winner(index, value) => Ok((
            serde_json::to_value(&value)?,
            tl::ContextDetails {
                combinator: Some(combinator.to_owned()),
                winner: Some(index as u64),
                ..Default::default()
            },
        )),
    };
    let (state, event_type, details, result) = match decided {
        Ok((json, details)) => (
            EntryState::Succeeded {
                value: ctx.encode(&json).await?,
                attempt: 0,
            },
            EventType::ContextSucceeded,
            tl::EventDetails::ContextSucceeded(details),
            from_journal(json),
        ),
        Err((index, e)) => (
            EntryState::Failed {
                error: e.to_info(),
                attempt: 0,
            },
            EventType::ContextFailed,
            tl::EventDetails::ContextFailed(tl::ContextDetails {
                combinator: Some(combinator.to_owned()),
                decided_by: Some(index.map(|i| i as u64)),
                error: Some(e.to_info()),
                ..Default::default()
            }),
            Err(e),
        ),
    };
    let event = ctx.event(event_type, SubType::RunInChildContext, &op, details);
    let mut entry = op.entry(state);
    entry.minted = minted;
    ctx.commit_or_suspend(Delta {
        journal: vec![entry],
        timeline: vec![event],
        ..Delta::default()
    })
    .await;
    result
}
