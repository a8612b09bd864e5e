//! The four Lambda roles, served from one binary: which one a function runs is its
//! configuration (`SIESTA_ROLE`, or `lambda ROLE`), so one build artifact serves all four.

use siesta::Registry;
use siesta_lambda::Settings;

/// One of Siesta's four Lambda functions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Role {
    /// The control API behind API Gateway (HTTP API, JWT authorizer).
    Start,
    /// Wake-ups from SQS: each run advanced as far as it can go.
    Step,
    /// Webhooks (`/hooks/{token}`, `/hooks/sources/{source}`), signature-checked.
    Webhook,
    /// The scheduled sweep: timers, deadlines, expired leases, lost wake-ups.
    Sweep,
}

/// Serve `role` on the Lambda runtime until it stops, over the AWS backend the
/// environment names ([`Settings::from_env`]) and `registry`'s workflows; the engine and
/// its clients are built once, before the first event.
pub(crate) async fn serve(
    role: Role,
    registry: Registry,
    build_id: &str,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let mut settings = Settings::from_env()?;
    settings.build_id = build_id.to_owned();
    let sdk = siesta_aws::sdk_config_from_env().await;
    settings.load_quotas(&sdk).await?;
    let engine = settings.engine(&sdk, registry).await;
    match role {
        Role::Start => siesta_start::run(engine, &settings).await,
        Role::Step => siesta_step::run(engine, &settings).await,
        Role::Webhook => siesta_webhook_fn::run(engine, settings, sdk).await,
        Role::Sweep => siesta_sweep::run(engine, &settings).await,
    }
}
