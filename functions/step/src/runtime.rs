//! The step function on the Lambda runtime.

use aws_lambda_events::event::sqs::SqsEvent;
use lambda_runtime::{Error, LambdaEvent, service_fn};
use siesta::Engine;
use siesta_lambda::Settings;

/// Handle SQS batches of wake-ups with [`handle`](crate::handle) over `engine` until the
/// Lambda runtime stops, each invocation working until its deadline less the settings'
/// safety margin.
pub async fn run(engine: Engine, settings: &Settings) -> Result<(), Error> {
    let margin = settings.safety_margin;
    lambda_runtime::run(service_fn(move |event: LambdaEvent<SqsEvent>| {
        let engine = engine.clone();
        async move {
            let deadline = event.context.deadline;
            Ok::<_, Error>(crate::handle(&engine, event.payload, deadline, margin).await)
        }
    }))
    .await
}
