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
    let webhook = crate::Webhook::new(engine, settings, sdk).await?;
    // Spans are sent before each invocation returns: a frozen container sends nothing.
    let router = webhook.router().layer(axum::middleware::map_response(
        siesta_lambda::otel::flush_after,
    ));
    lambda_http::run(router).await
}
