//! Lambda entry point of the sweep function, invoked on a schedule.

use lambda_runtime::{Error, LambdaEvent, service_fn};

#[tokio::main]
async fn main() -> Result<(), Error> {
    siesta_lambda::init_logging();
    let settings = siesta_lambda::Settings::from_env()?;
    let sdk = siesta_aws::sdk_config_from_env().await;
    let engine = settings.engine(&sdk).await;
    let page = settings.sweep_page;
    lambda_runtime::run(service_fn(move |event: LambdaEvent<serde_json::Value>| {
        let engine = engine.clone();
        async move { Ok::<_, Error>(siesta_sweep::handle(&engine, &event.payload, page).await?) }
    }))
    .await
}
