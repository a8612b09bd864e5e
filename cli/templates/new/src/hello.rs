//! The `hello` workflow: `{"name": "Ada"}` → `"Hello, Ada!"`.

use siesta::prelude::*;

/// The input of `hello`.
#[derive(Debug, Deserialize)]
pub struct HelloInput {
    /// Who to greet.
    pub name: String,
}

/// Greet `input.name`. The greeting is made in a step: its result is journaled, so
/// after a crash or on a later wake-up it is replayed, not made again.
pub async fn hello(ctx: Context, input: HelloInput) -> Result<String, Error> {
    let name = input.name;
    let greeting: String = ctx
        .step("greet", move |_| async move { Ok(format!("Hello, {name}!")) })
        .await?;
    Ok(greeting)
}
