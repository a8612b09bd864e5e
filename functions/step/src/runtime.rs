//! The step function on the Lambda runtime.

use aws_lambda_events::event::sqs::SqsEvent;
use lambda_runtime::{Error, LambdaEvent, service_fn};
use siesta::Engine;
use siesta_lambda::Settings;

/// Handle SQS batches of wake-ups with [`handle`](crate::handle) over `engine` until the
/// Lambda runtime stops, each invocation working until its deadline less the settings'
/// safety margin.
///
/// At the cold start this version registers itself as the one serving the settings'
/// build ([`Forwarder::register`](crate::Forwarder::register)), and wake-ups for runs of
/// other builds are forwarded to their builds' versions.
pub async fn run(engine: Engine, settings: &Settings) -> Result<(), Error> {
    let margin = settings.safety_margin;
    let sdk = siesta_aws::sdk_config_from_env().await;
    let builds =
        siesta_aws::builds::BuildRegistry::from_sdk(&sdk, settings.resources.table.clone());
    let forwarder = crate::Forwarder::new(&sdk, builds);
    forwarder.register(&settings.build_id).await;
    lambda_runtime::run(service_fn(move |event: LambdaEvent<SqsEvent>| {
        let engine = engine.clone();
        let forwarder = forwarder.clone();
        async move {
            let deadline = event.context.deadline;
            let response = crate::handle_forwarding(
                &engine,
                Some(&forwarder),
                event.payload,
                deadline,
                margin,
            )
            .await;
            Ok::<_, Error>(response)
        }
    }))
    .await
}
