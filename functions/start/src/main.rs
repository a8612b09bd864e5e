//! Lambda entry point of the start function.

use lambda_http::Error;

#[tokio::main]
async fn main() -> Result<(), Error> {
    siesta_lambda::init_logging();
    let settings = siesta_lambda::Settings::from_env()?;
    let sdk = siesta_aws::sdk_config_from_env().await;
    let start = siesta_start::Start::new(settings.engine(&sdk).await, &settings.tenant_claim);
    lambda_http::run(start.router()).await
}
