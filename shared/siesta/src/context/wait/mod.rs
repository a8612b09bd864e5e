//! Waits: durable timers, callbacks completed from outside, named events, and durable
//! polling. Each records its deadline in the journal the first time it runs, so the
//! deadline does not move when the run replays, and suspends until a delivery or the
//! deadline wakes the run.

mod callback;
mod condition;
mod event;
mod timer;
mod wait_for_callback;

use crate::context::{Context, Delta, Op};
use crate::error::{Error, ErrorKind};
use crate::model::*;
use crate::timeline as tl;

pub use callback::{Callback, CallbackBuilder};
pub(crate) use callback::{expire_callbacks, held_callbacks_due};
pub use condition::{ConditionBuilder, ConditionCheck, WaitStrategy};
pub use event::EventBuilder;
pub use timer::WaitBuilder;
pub use wait_for_callback::WaitForCallbackBuilder;

/// The deliveries the operation consumed so far, and `id`.
fn consumed_with(ctx: &Context, op: &Op, id: &DeliveryId) -> Vec<DeliveryId> {
    let mut consumed = ctx
        .shared
        .state()
        .journal
        .get(&op.position)
        .map(|e| e.consumed.clone())
        .unwrap_or_default();
    consumed.push(id.clone());
    consumed
}

/// Set aside a delivery the wait cannot decode: journal it as consumed by the still
/// waiting operation (so it is never taken again), say so on the timeline, and write
/// `callbacks` (a callback reopened). The run is not failed by what a sender posted.
async fn set_aside(
    ctx: &Context,
    op: &Op,
    sub_type: SubType,
    delivery: &DeliveryId,
    why: &Error,
    callbacks: Vec<CallbackRecord>,
) {
    let Some(mut entry) = ctx.shared.state().journal.get(&op.position).cloned() else {
        return;
    };
    entry.consumed.push(delivery.clone());
    let event = ctx.event(
        EventType::DeliveryRejected,
        sub_type,
        op,
        tl::EventDetails::DeliveryRejected(tl::Delivered {
            event: None,
            delivery_id: delivery.0.clone(),
            reason: Some(why.to_string()),
        }),
    );
    ctx.commit_or_suspend(Delta {
        journal: vec![entry],
        timeline: vec![event],
        callbacks,
        ..Delta::default()
    })
    .await;
}

/// The error of a payload that did not decode as the wait's type (not a storage error
/// reading an offloaded one, which is retried like any other).
fn undecodable<T>(result: &Result<T, Error>) -> Option<&Error> {
    result
        .as_ref()
        .err()
        .filter(|e| e.kind() == ErrorKind::Serialization)
}
