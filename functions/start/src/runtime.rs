//! The start function on the Lambda runtime.

use lambda_http::Error;
use siesta::Engine;
use siesta_lambda::Settings;

/// Serve API Gateway requests with the control API's router over `engine` until the
/// Lambda runtime stops. The engine is built once per container, by the caller.
pub async fn run(engine: Engine, settings: &Settings) -> Result<(), Error> {
    let start = crate::Start::new(engine, &settings.tenant_claim);
    lambda_http::run(start.router()).await
}
