//! The sweep function on the Lambda runtime, invoked on a schedule.

use lambda_runtime::{Error, LambdaEvent, service_fn};
use siesta::Engine;
use siesta_lambda::Settings;

/// Sweep with [`handle`](crate::handle) over `engine` at every scheduled event, at most
/// the settings' page of due runs each, then [`reap`](crate::reap) until the safety
/// margin before the deadline, until the Lambda runtime stops; an event of the drain
/// check's schedule makes [`check_builds`](crate::check_builds) instead.
pub async fn run(engine: Engine, settings: &Settings) -> Result<(), Error> {
    let page = settings.sweep_page;
    let sdk = siesta_aws::sdk_config_from_env().await;
    let registry =
        siesta_aws::builds::BuildRegistry::from_sdk(&sdk, settings.resources.table.clone());
    let serving = settings.build_id.clone();
    let reaper = settings
        .aws_backend(&sdk)
        .reaper(settings.retention_rules());
    let (reap_page, margin) = (settings.reap_page, settings.safety_margin);
    lambda_runtime::run(service_fn(move |event: LambdaEvent<serde_json::Value>| {
        let engine = engine.clone();
        let registry = registry.clone();
        let serving = serving.clone();
        let reaper = reaper.clone();
        async move {
            if crate::is_builds_check(&event.payload) {
                return Ok::<_, Error>(crate::check_builds(&registry, &serving).await?);
            }
            let report = crate::handle(&engine, &event.payload, page).await;
            // The reaper takes what time the sweep left; a failure is logged, and the
            // next minute's invocation goes on where this one stopped.
            let stop_at = siesta_lambda::stop_at(
                siesta_lambda::now_ms(),
                event.context.deadline as i64,
                margin,
            );
            let reaped = crate::reap(&reaper, reap_page, stop_at).await;
            if let Err(e) = &reaped {
                tracing::error!(error = %e, "reaping failed; the next sweep goes on");
            }
            let report = report.map(|mut counts| {
                counts["reaped"] =
                    reaped.unwrap_or_else(|e| serde_json::json!({"error": e.to_string()}));
                counts
            });
            // Before the invocation returns: a frozen container sends nothing.
            siesta_lambda::otel::flush().await;
            Ok::<_, Error>(report?)
        }
    }))
    .await
}
