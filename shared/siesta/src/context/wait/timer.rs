//! The durable timer (`sleep`, AWS's `wait`): its fire time is journaled the first time
//! it runs, so it does not move when the run replays.

use crate::timeline as tl;
use std::future::IntoFuture;
use std::time::Duration;

use futures::future::BoxFuture;

use crate::context::{Context, Delta, Op};
use crate::error::Error;
use crate::model::*;

/// A durable timer being configured; `.await` it at once.
#[must_use = "a wait does nothing until awaited"]
pub struct WaitBuilder {
    ctx: Context,
    op: Op,
    duration: Duration,
}

impl Context {
    /// Sleep for `duration` on a durable timer: the run suspends, costs nothing while it
    /// sleeps, and wakes when the timer fires. Named `sleep`; see [`Context::wait`].
    pub fn sleep(&self, duration: Duration) -> WaitBuilder {
        self.wait("sleep", duration)
    }

    /// A named durable timer (AWS durable functions' `wait`).
    pub fn wait(&self, name: &str, duration: Duration) -> WaitBuilder {
        WaitBuilder {
            ctx: self.clone(),
            op: self.mint(name, OperationKind::Wait),
            duration,
        }
    }
}

impl IntoFuture for WaitBuilder {
    type Output = Result<(), Error>;
    type IntoFuture = BoxFuture<'static, Result<(), Error>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move {
            let WaitBuilder { ctx, op, duration } = self;
            // Each turn re-evaluates the timer against the journal: after a re-arm (a
            // continuation), exactly as a replay from the top would.
            loop {
                let now = ctx.shared.now();
                let fire_at = match ctx.lookup(&op).await.map(|e| e.state) {
                    Some(EntryState::Succeeded { .. }) => return Ok(()),
                    Some(EntryState::Waiting(Wait {
                        deadline: Some(at), ..
                    })) => at,
                    Some(EntryState::Failed { error, .. }) => return Err(Error::from_info(&error)),
                    _ => {
                        ctx.go_live();
                        ctx.boundary().await;
                        let fire_at = now.plus(duration);
                        let wait = Wait {
                            kind: WaitKind::Timer,
                            deadline: Some(fire_at),
                            started_at: now,
                        };
                        let event = ctx.event(
                            EventType::WaitStarted,
                            SubType::Wait,
                            &op,
                            tl::EventDetails::WaitStarted(tl::WaitStarted {
                                scheduled_end_timestamp: Some(fire_at),
                                ..Default::default()
                            }),
                        );
                        let opening = Delta {
                            journal: vec![op.entry(EntryState::Waiting(wait))],
                            timeline: vec![event],
                            ..Delta::default()
                        };
                        if now < fire_at {
                            // The branch holds next: the opening goes with the next
                            // checkpoint (the suspension's), not in one of its own.
                            ctx.hold_opening(opening).await;
                        } else {
                            ctx.commit_or_suspend(opening).await;
                        }
                        fire_at
                    }
                };
                if now < fire_at {
                    ctx.hold(Some(fire_at)).await;
                    continue;
                }
                let event = ctx.event(
                    EventType::WaitSucceeded,
                    SubType::Wait,
                    &op,
                    tl::EventDetails::None,
                );
                // The time has passed for a replay too: held for the next checkpoint
                // rather than written on its own.
                ctx.hold_ending(Delta {
                    journal: vec![op.entry(EntryState::Succeeded {
                        value: Payload::Inline(serde_json::Value::Null),
                        attempt: 0,
                    })],
                    timeline: vec![event],
                    ..Delta::default()
                })
                .await;
                return Ok(());
            }
        })
    }
}
