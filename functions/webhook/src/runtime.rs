//! The webhook function on the Lambda runtime.

use lambda_http::Error;
use siesta::Engine;
use siesta_lambda::Settings;

/// Serve webhooks with [`Webhook`](crate::Webhook)'s router over `engine` until the
/// Lambda runtime stops; the webhook sources are read now (from SSM when the settings
/// name a parameter) and refreshed as [`Webhook`](crate::Webhook) says.
pub async fn run(
    engine: Engine,
    settings: Settings,
    sdk: aws_config::SdkConfig,
) -> Result<(), Error> {
    // The router sends the spans before each invocation returns.
    let webhook = crate::Webhook::new(engine, settings, sdk).await?;
    lambda_http::run(webhook.router()).await
}
