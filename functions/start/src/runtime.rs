//! The start function on the Lambda runtime.

use lambda_http::Error;
use siesta::Engine;
use siesta_lambda::Settings;

/// Serve API Gateway requests with the control API's router over `engine` until the
/// Lambda runtime stops. The engine is built once per container, by the caller. `GET
/// /builds` reads which builds are deployed from the build registry on the runs table.
pub async fn run(engine: Engine, settings: &Settings) -> Result<(), Error> {
    let sdk = siesta_aws::sdk_config_from_env().await;
    let registry =
        siesta_aws::builds::BuildRegistry::from_sdk(&sdk, settings.resources.table.clone());
    let start = crate::Start::with_deployments(
        engine,
        &settings.tenant_claim,
        siesta_lambda::http::RegistryDeployments(registry),
    );
    // The router sends the spans before each invocation returns.
    lambda_http::run(start.router()).await
}
