//! Lambda entry point of the start function.

use lambda_http::{Error, service_fn};

#[tokio::main]
async fn main() -> Result<(), Error> {
    siesta_lambda::init_logging();
    let settings = siesta_lambda::Settings::from_env()?;
    let sdk = siesta_aws::sdk_config_from_env().await;
    let start = siesta_start::Start::new(settings.engine(&sdk).await, &settings.tenant_claim);
    lambda_http::run(service_fn(move |req| {
        let start = start.clone();
        async move { Ok::<_, std::convert::Infallible>(start.handle(req).await) }
    }))
    .await
}
