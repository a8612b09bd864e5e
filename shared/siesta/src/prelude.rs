//! What a workflow author needs, in one import:
//!
//! ```
//! use siesta::prelude::*;
//!
//! #[derive(Deserialize)]
//! struct Order { item: String }
//!
//! async fn order(ctx: Context, input: Order) -> Result<String, Error> {
//!     let id: String = ctx.step("create_order", |_| async move { Ok(format!("ord-{}", input.item)) }).await?;
//!     ctx.sleep(Duration::from_secs(60)).await?;
//!     Ok(id)
//! }
//!
//! let mut registry = Registry::new();
//! registry.register("order", order);
//! ```
//!
//! The [`Context`] and the types its operations take and return (their builders, the
//! step's [`StepContext`], the streams a run publishes to ([`Stream`], [`StepStream`]), callbacks, condition checks, batches and combinators), the
//! errors of workflows and steps with [`StepResultExt`]'s `.fatal()`, the [`Registry`] and its [`RunLimit`]s, [`Debounce`]s and [`StartRate`]s,
//! the [`RetryStrategy`], [`Duration`] (every timer and timeout takes one) and the
//! derives a payload type needs: serde's `Serialize`/`Deserialize` (the crate depends on
//! `serde` with its `derive` feature, as the derives name it) and [`JsonSchema`] for
//! callback and event payloads checked on arrival (likewise `schemars`). The engine, the
//! ports and the stored records stay under their own paths; every name here is also
//! where it was (`siesta::Context`, `siesta::context::StepContext`, …).

pub use std::time::Duration;

pub use schemars::JsonSchema;
pub use serde::{Deserialize, Serialize};

pub use crate::context::{
    BatchBuilder, BatchItem, BatchOutcome, BatchResult, Branch, Callback, CallbackBuilder,
    Combinator, CompletionConfig, CompletionReason, ConditionBuilder, ConditionCheck, Context,
    DurableFuture, EventBuilder, InvokeBuilder, StepBuilder, StepContext, StepSemantics,
    StepStream, Stream, ToolCallBuilder, WaitBuilder, WaitForCallbackBuilder, WaitStrategy, branch,
};
pub use crate::error::{Error, ErrorKind, StepError, StepResultExt};
pub use crate::flow::RunLimit;
pub use crate::flow::held::{Debounce, StartRate};
pub use crate::model::{ArtifactRef, CallbackId, RunId, TenantId};
pub use crate::registry::Registry;
pub use crate::retry::{Backoff, Jitter, RetryOn, RetryStrategy};
pub use crate::schedule::{CatchUp, Overlap, Schedule};
pub use crate::time::Timestamp;
