//! The registry of workflows: name → async function. The dev server and the Lambda
//! functions share one.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;

use futures::future::BoxFuture;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::context::Context;
use crate::error::Error;

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

/// Workflows by name.
#[derive(Clone, Default)]
pub struct Registry {
    workflows: BTreeMap<String, Workflow>,
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

    /// The workflow registered as `name`.
    pub fn get(&self, name: &str) -> Option<&Workflow> {
        self.workflows.get(name)
    }

    /// Every registered name, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.workflows.keys().map(String::as_str)
    }
}
