//! Configuration from the environment, and the engine built from it.

use std::time::Duration;

use siesta::{Engine, EngineConfig, Registry, SystemClock};
use siesta_api::WebhookSource;
use siesta_aws::{AwsBackend, AwsOptions, ResourceNames};

/// Why a function cannot start.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// A variable is missing or malformed.
    #[error("configuration: {0}")]
    Config(String),
    /// The webhook sources or the quotas could not be read from SSM Parameter Store.
    #[error("reading SSM parameter {parameter}: {message}")]
    Ssm {
        /// The parameter's name.
        parameter: String,
        /// What went wrong.
        message: String,
    },
}

/// Everything a function reads from its environment.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The table, bucket and queues (`SIESTA_TABLE`, `SIESTA_BUCKET`, `SIESTA_QUEUE_URL`,
    /// `SIESTA_DLQ_URL`).
    pub resources: ResourceNames,
    /// The JWT claim that names the tenant (`SIESTA_TENANT_CLAIM`, default `tenant`).
    pub tenant_claim: String,
    /// The public base URL callback URLs are built on (`SIESTA_CALLBACK_BASE_URL`).
    pub callback_base_url: String,
    /// How long a lease lasts (`SIESTA_LEASE_TTL_MS`, default 60 000).
    pub lease_ttl: Duration,
    /// Time kept back before the invocation's deadline to checkpoint and hand over
    /// (`SIESTA_SAFETY_MARGIN_MS`, default 10 000).
    pub safety_margin: Duration,
    /// How long finished runs and closed callbacks are kept (`SIESTA_RETENTION_DAYS`,
    /// default 30).
    pub retention: Duration,
    /// Due runs one sweep invocation wakes at most (`SIESTA_SWEEP_PAGE`, default 500).
    pub sweep_page: usize,
    /// Webhook sources as JSON (`SIESTA_WEBHOOK_SOURCES`).
    pub webhook_sources: String,
    /// An SSM parameter (SecureString) holding the webhook sources instead
    /// (`SIESTA_WEBHOOK_SOURCES_PARAMETER`).
    pub webhook_sources_parameter: Option<String>,
    /// The build id every run started here records (the app sets it; default: the
    /// engine's, Siesta's own version).
    pub build_id: String,
    /// Per-tenant quotas (`SIESTA_QUOTAS`, JSON, see docs/quotas.md; replaced by the
    /// parameter's by [`Settings::load_quotas`]).
    pub quotas: siesta::Quotas,
    /// An SSM parameter holding the quotas instead (`SIESTA_QUOTAS_PARAMETER`).
    pub quotas_parameter: Option<String>,
}

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

fn number<T: std::str::FromStr>(name: &str, default: T) -> Result<T, SetupError> {
    match var(name) {
        None => Ok(default),
        Some(v) => v
            .trim()
            .parse()
            .map_err(|_| SetupError::Config(format!("{name}={v} is not a number"))),
    }
}

impl Settings {
    /// Read the settings from the environment.
    pub fn from_env() -> Result<Settings, SetupError> {
        Ok(Settings {
            resources: ResourceNames::from_env().map_err(|e| SetupError::Config(e.to_string()))?,
            tenant_claim: var("SIESTA_TENANT_CLAIM").unwrap_or_else(|| "tenant".into()),
            callback_base_url: var("SIESTA_CALLBACK_BASE_URL")
                .unwrap_or_else(|| "http://127.0.0.1:8080".into()),
            lease_ttl: Duration::from_millis(number("SIESTA_LEASE_TTL_MS", 60_000)?),
            safety_margin: Duration::from_millis(number("SIESTA_SAFETY_MARGIN_MS", 10_000)?),
            retention: Duration::from_secs(86_400 * number("SIESTA_RETENTION_DAYS", 30u64)?),
            sweep_page: number("SIESTA_SWEEP_PAGE", 500)?,
            webhook_sources: var("SIESTA_WEBHOOK_SOURCES").unwrap_or_default(),
            webhook_sources_parameter: var("SIESTA_WEBHOOK_SOURCES_PARAMETER"),
            build_id: EngineConfig::default().build_id,
            quotas: siesta::Quotas::parse(&var("SIESTA_QUOTAS").unwrap_or_default())
                .map_err(|e| SetupError::Config(format!("SIESTA_QUOTAS: {e}")))?,
            quotas_parameter: var("SIESTA_QUOTAS_PARAMETER"),
        })
    }

    /// Read the quotas from the SSM parameter, when one is named, into
    /// [`Settings::quotas`] (call it before [`Settings::engine`]).
    pub async fn load_quotas(&mut self, sdk: &aws_config::SdkConfig) -> Result<(), SetupError> {
        if let Some(name) = &self.quotas_parameter {
            let json = parameter(sdk, name).await?;
            self.quotas = siesta::Quotas::parse(&json)
                .map_err(|e| SetupError::Config(format!("SSM parameter {name}: {e}")))?;
        }
        Ok(())
    }

    /// The engine over the AWS backend, running `registry`'s workflows. Build it once per
    /// container, outside the handler: the SDK clients keep their connections.
    pub async fn engine(&self, sdk: &aws_config::SdkConfig, registry: Registry) -> Engine {
        let options = AwsOptions {
            retention: self.retention,
            ..AwsOptions::default()
        };
        let backend = AwsBackend::with_options(sdk, self.resources.clone(), options).backend();
        let config = EngineConfig {
            lease_ttl: self.lease_ttl,
            callback_base_url: self.callback_base_url.clone(),
            build_id: self.build_id.clone(),
            quotas: self.quotas.clone(),
            ..EngineConfig::default()
        };
        Engine::new(backend, std::sync::Arc::new(SystemClock), registry, config)
    }

    /// The webhook sources: from the SSM parameter when one is named (a SecureString,
    /// decrypted), otherwise from `SIESTA_WEBHOOK_SOURCES`.
    pub async fn webhook_sources(
        &self,
        sdk: &aws_config::SdkConfig,
    ) -> Result<Vec<WebhookSource>, SetupError> {
        let json = match &self.webhook_sources_parameter {
            None => self.webhook_sources.clone(),
            Some(name) => parameter(sdk, name).await?,
        };
        WebhookSource::parse_all(&json).map_err(SetupError::Config)
    }
}

/// The value of the SSM parameter `name` (a SecureString is decrypted).
async fn parameter(sdk: &aws_config::SdkConfig, name: &str) -> Result<String, SetupError> {
    Ok(aws_sdk_ssm::Client::new(sdk)
        .get_parameter()
        .name(name)
        .with_decryption(true)
        .send()
        .await
        .map_err(|e| SetupError::Ssm {
            parameter: name.to_owned(),
            message: aws_sdk_ssm::error::DisplayErrorContext(e).to_string(),
        })?
        .parameter
        .and_then(|p| p.value)
        .unwrap_or_default())
}
