//! Lambda entry point of the webhook function.

use lambda_http::Error;

#[tokio::main]
async fn main() -> Result<(), Error> {
    siesta_lambda::init_logging();
    let settings = siesta_lambda::Settings::from_env()?;
    let sdk = siesta_aws::sdk_config_from_env().await;
    let engine = settings.engine(&sdk).await;
    let webhook = siesta_webhook_fn::Webhook::new(engine, settings, sdk).await?;
    lambda_http::run(webhook.router()).await
}
