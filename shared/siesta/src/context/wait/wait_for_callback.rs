//! `wait_for_callback`: a context operation that creates a callback, hands it to a
//! submitter step, and waits for the outcome.

use std::future::{Future, IntoFuture};
use std::marker::PhantomData;
use std::time::Duration;

use futures::future::BoxFuture;
use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::accepts::schema_of;
use crate::context::{Context, Op, StepContext};
use crate::error::{Error, StepError};
use crate::model::*;
use crate::retry::RetryStrategy;

/// `wait_for_callback` being configured; `.await` it at once.
#[must_use = "a callback does nothing until awaited"]
pub struct WaitForCallbackBuilder<T, F> {
    ctx: Context,
    op: Op,
    timeout: Option<Duration>,
    heartbeat_timeout: Option<Duration>,
    retry: RetryStrategy,
    accepts: Option<serde_json::Value>,
    submitter: F,
    _t: PhantomData<fn() -> T>,
}

impl Context {
    /// Create a callback, hand its id and URL to a third party in `submitter` (a step),
    /// and wait for the outcome. Like AWS's `waitForCallback`, it is a context operation
    /// of its own (`SubType` `WaitForCallback`) with the callback (under the same name)
    /// and the submitter step (`submit`) nested under it.
    /// The payload is checked on arrival as with [`Context::create_callback`].
    pub fn wait_for_callback<T, F, Fut>(
        &self,
        name: &str,
        submitter: F,
    ) -> WaitForCallbackBuilder<T, F>
    where
        T: JsonSchema,
        F: FnOnce(CallbackId, String, StepContext) -> Fut + Send + 'static,
        Fut: Future<Output = Result<(), StepError>> + Send + 'static,
    {
        self.wait_for_callback_builder(name, submitter, Some(schema_of::<T>()))
    }

    /// [`Context::wait_for_callback`] for a `T` without a JSON Schema (see
    /// [`Context::create_callback_unchecked`]).
    pub fn wait_for_callback_unchecked<T, F, Fut>(
        &self,
        name: &str,
        submitter: F,
    ) -> WaitForCallbackBuilder<T, F>
    where
        F: FnOnce(CallbackId, String, StepContext) -> Fut + Send + 'static,
        Fut: Future<Output = Result<(), StepError>> + Send + 'static,
    {
        self.wait_for_callback_builder(name, submitter, None)
    }

    fn wait_for_callback_builder<T, F>(
        &self,
        name: &str,
        submitter: F,
        accepts: Option<serde_json::Value>,
    ) -> WaitForCallbackBuilder<T, F> {
        WaitForCallbackBuilder {
            ctx: self.clone(),
            op: self.mint(name, OperationKind::Context),
            timeout: None,
            heartbeat_timeout: None,
            retry: RetryStrategy::default(),
            accepts,
            submitter,
            _t: PhantomData,
        }
    }
}

impl<T, F> WaitForCallbackBuilder<T, F> {
    /// Fail with [`ErrorKind::CallbackTimedOut`](crate::error::ErrorKind::CallbackTimedOut)
    /// if no outcome arrives within `d`.
    pub fn timeout(mut self, d: Duration) -> Self {
        self.timeout = Some(d);
        self
    }

    /// Fail if no heartbeat arrives for `d`.
    pub fn heartbeat_timeout(mut self, d: Duration) -> Self {
        self.heartbeat_timeout = Some(d);
        self
    }

    /// Retry the submitter with this strategy (default: a step's default); once it
    /// gives up, the operation fails with
    /// [`ErrorKind::StepFailed`](crate::error::ErrorKind::StepFailed) and the callback is
    /// never awaited.
    pub fn submitter_retry(mut self, retry: RetryStrategy) -> Self {
        self.retry = retry;
        self
    }
}

impl<T, F, Fut> IntoFuture for WaitForCallbackBuilder<T, F>
where
    T: Serialize + DeserializeOwned + Send + 'static,
    F: FnOnce(CallbackId, String, StepContext) -> Fut + Send + 'static,
    Fut: Future<Output = Result<(), StepError>> + Send + 'static,
{
    type Output = Result<T, Error>;
    type IntoFuture = BoxFuture<'static, Result<T, Error>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move {
            let WaitForCallbackBuilder {
                ctx,
                op,
                timeout,
                heartbeat_timeout,
                retry,
                accepts,
                submitter,
                ..
            } = self;
            let name = op.name.clone();
            crate::context::batch::run_context(
                &ctx,
                &op,
                SubType::WaitForCallback,
                false,
                move |scope| async move {
                    let mut callback = scope.callback_builder::<T>(&name, accepts);
                    callback.timeout = timeout;
                    callback.heartbeat_timeout = heartbeat_timeout;
                    let callback = callback.await?;
                    let (id, url) = (callback.id().clone(), callback.url());
                    scope
                        .step("submit", move |s| submitter(id, url, s))
                        .retry(retry)
                        .await?;
                    callback.wait().await
                },
            )
            .await
        })
    }
}
