//! Lambda entry point of the step function.

use aws_lambda_events::event::sqs::SqsEvent;
use lambda_runtime::{Error, LambdaEvent, service_fn};

#[tokio::main]
async fn main() -> Result<(), Error> {
    siesta_lambda::init_logging();
    let settings = siesta_lambda::Settings::from_env()?;
    let sdk = siesta_aws::sdk_config_from_env().await;
    let engine = settings.engine(&sdk).await;
    let margin = settings.safety_margin;
    lambda_runtime::run(service_fn(move |event: LambdaEvent<SqsEvent>| {
        let engine = engine.clone();
        async move {
            let deadline = event.context.deadline;
            Ok::<_, Error>(siesta_step::handle(&engine, event.payload, deadline, margin).await)
        }
    }))
    .await
}
