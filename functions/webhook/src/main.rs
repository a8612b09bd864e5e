//! Lambda entry point of the webhook function.

use lambda_http::{Error, service_fn};

#[tokio::main]
async fn main() -> Result<(), Error> {
    siesta_lambda::init_logging();
    let settings = siesta_lambda::Settings::from_env()?;
    let sdk = siesta_aws::sdk_config_from_env().await;
    let engine = settings.engine(&sdk).await;
    let webhook = siesta_webhook_fn::Webhook::new(engine, settings, sdk).await?;
    lambda_http::run(service_fn(move |req| {
        let webhook = webhook.clone();
        async move { Ok::<_, std::convert::Infallible>(webhook.handle(req).await) }
    }))
    .await
}
