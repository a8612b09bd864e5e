//! Typed tools a model may call: each call a journaled `tool_call` with an idempotency
//! key from its meaning (the run, its position, its arguments), optionally behind a
//! person's approval.

use std::future::Future;
use std::sync::Arc;

use futures::future::BoxFuture;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use siesta::context::StepContext;
use siesta::{Context, Error, JsonSchema, RetryStrategy, StepError};

use crate::message::ToolSpec;

type Handler = Arc<
    dyn Fn(Context, String, Value) -> BoxFuture<'static, Result<Value, ToolFailure>> + Send + Sync,
>;

/// Why a tool gave no result: told to the model, which may try something else.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ToolFailure {
    /// The arguments do not fit the tool's type.
    InvalidArguments(String),
    /// The tool ran and failed for good (its retries spent, or a fatal error).
    Failed(Error),
}

/// A tool: its name, description and argument schema for the model, and the code that
/// runs it.
#[derive(Clone)]
pub struct Tool {
    spec: ToolSpec,
    needs_approval: bool,
    handler: Handler,
}

impl std::fmt::Debug for Tool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tool")
            .field("name", &self.spec.name)
            .field("needs_approval", &self.needs_approval)
            .finish()
    }
}

impl Tool {
    /// A tool named `name` whose arguments are an `A` (its JSON Schema derived from
    /// the type and shown to the model) and whose result `O` goes back to the model as
    /// JSON. `f` runs inside a `tool_call`: recorded `running` before, its outcome
    /// after, retried by `retry` (default: the step default), never run twice for one
    /// call once it succeeded.
    pub fn new<A, O, F, Fut>(name: &str, description: &str, f: F) -> Self
    where
        A: DeserializeOwned + Serialize + JsonSchema + Send + 'static,
        O: Serialize + DeserializeOwned + Send + 'static,
        F: Fn(A, StepContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<O, StepError>> + Send + 'static,
    {
        Self::with_retry(name, description, RetryStrategy::default(), f)
    }

    /// [`Tool::new`] with the retry strategy of its calls.
    pub fn with_retry<A, O, F, Fut>(
        name: &str,
        description: &str,
        retry: RetryStrategy,
        f: F,
    ) -> Self
    where
        A: DeserializeOwned + Serialize + JsonSchema + Send + 'static,
        O: Serialize + DeserializeOwned + Send + 'static,
        F: Fn(A, StepContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<O, StepError>> + Send + 'static,
    {
        let f = Arc::new(f);
        let handler: Handler = Arc::new(move |ctx: Context, name: String, arguments: Value| {
            let f = Arc::clone(&f);
            let retry = retry.clone();
            Box::pin(async move {
                let args: A = serde_json::from_value(arguments)
                    .map_err(|e| ToolFailure::InvalidArguments(e.to_string()))?;
                // The arguments as the type reads them are the call's meaning: the
                // idempotency key hashes them.
                let payload = serde_json::to_value(&args).unwrap_or(Value::Null);
                let out: O = ctx
                    .tool_call(&name, &payload, move |call| f(args, call))
                    .retry(retry)
                    .await
                    .map_err(ToolFailure::Failed)?;
                Ok(serde_json::to_value(out).unwrap_or(Value::Null))
            })
        });
        Tool {
            spec: ToolSpec {
                name: name.to_owned(),
                description: description.to_owned(),
                parameters: siesta::accepts::schema_of::<A>(),
            },
            needs_approval: false,
            handler,
        }
    }

    /// A person must approve each call before it runs (see
    /// [`Agent::approvals`](crate::Agent::approvals)); a refusal or no answer in time
    /// goes back to the model as the tool's result.
    pub fn needs_approval(mut self) -> Self {
        self.needs_approval = true;
        self
    }

    /// What the model is told about it.
    pub fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    /// Whether each call waits for a person's approval.
    pub fn requires_approval(&self) -> bool {
        self.needs_approval
    }

    pub(crate) async fn call(&self, ctx: &Context, arguments: Value) -> Result<Value, ToolFailure> {
        (self.handler)(ctx.clone(), self.spec.name.clone(), arguments).await
    }
}
