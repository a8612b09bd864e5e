//! The sweep function on the Lambda runtime, invoked on a schedule.

use lambda_runtime::{Error, LambdaEvent, service_fn};
use siesta::Engine;
use siesta_lambda::Settings;

/// Sweep with [`handle`](crate::handle) over `engine` at every scheduled event, at most
/// the settings' page of due runs each, until the Lambda runtime stops.
pub async fn run(engine: Engine, settings: &Settings) -> Result<(), Error> {
    let page = settings.sweep_page;
    lambda_runtime::run(service_fn(move |event: LambdaEvent<serde_json::Value>| {
        let engine = engine.clone();
        async move { Ok::<_, Error>(crate::handle(&engine, &event.payload, page).await?) }
    }))
    .await
}
