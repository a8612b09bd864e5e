//! The sweep function on the Lambda runtime, invoked on a schedule.

use lambda_runtime::{Error, LambdaEvent, service_fn};
use siesta::Engine;
use siesta_lambda::Settings;

/// Sweep with [`handle`](crate::handle) over `engine` at every scheduled event, at most
/// the settings' page of due runs each, until the Lambda runtime stops; an event of
/// the drain check's schedule makes [`check_builds`](crate::check_builds) instead.
pub async fn run(engine: Engine, settings: &Settings) -> Result<(), Error> {
    let page = settings.sweep_page;
    let sdk = siesta_aws::sdk_config_from_env().await;
    let registry =
        siesta_aws::builds::BuildRegistry::from_sdk(&sdk, settings.resources.table.clone());
    let serving = settings.build_id.clone();
    lambda_runtime::run(service_fn(move |event: LambdaEvent<serde_json::Value>| {
        let engine = engine.clone();
        let registry = registry.clone();
        let serving = serving.clone();
        async move {
            if crate::is_builds_check(&event.payload) {
                return Ok::<_, Error>(crate::check_builds(&registry, &serving).await?);
            }
            let report = crate::handle(&engine, &event.payload, page).await;
            // Before the invocation returns: a frozen container sends nothing.
            siesta_lambda::otel::flush().await;
            Ok::<_, Error>(report?)
        }
    }))
    .await
}
