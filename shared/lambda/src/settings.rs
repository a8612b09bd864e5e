//! Configuration from the environment, and the engine built from it.

use std::time::Duration;

use siesta::{Engine, EngineConfig, Registry, RetentionPolicy, SystemClock};
use siesta_api::WebhookSource;
use siesta_aws::retention::RetentionRules;
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
    /// How long finished runs are kept, counted from when they finished
    /// (`SIESTA_RETENTION_DAYS`, default 30; `0` keeps them for ever), and the workflows
    /// kept longer or shorter (`SIESTA_RETENTION_WORKFLOWS`: `audit=0,ping=12h`, each a
    /// retention as `siesta dev --retention` takes it). A tenant's `retention_days` in
    /// the quotas replaces the default for that tenant ([`Settings::retention_rules`]).
    pub retention: RetentionPolicy,
    /// Finished runs one page of the sweep's reaper looks at (`SIESTA_REAP_PAGE`,
    /// default 100); it takes pages while the invocation has time.
    pub reap_page: usize,
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
            retention: retention_policy(
                number("SIESTA_RETENTION_DAYS", 30u64)?,
                &var("SIESTA_RETENTION_WORKFLOWS").unwrap_or_default(),
            )?,
            reap_page: number("SIESTA_REAP_PAGE", 100)?,
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
        let backend = self.aws_backend(sdk).backend();
        let config = EngineConfig {
            lease_ttl: self.lease_ttl,
            callback_base_url: self.callback_base_url.clone(),
            build_id: self.build_id.clone(),
            quotas: self.quotas.clone(),
            ..EngineConfig::default()
        };
        Engine::new(backend, std::sync::Arc::new(SystemClock), registry, config)
    }

    /// How long each finished run is kept: the retention policy and the tenants'
    /// `retention_days` of the quotas (load them first, [`Settings::load_quotas`]).
    pub fn retention_rules(&self) -> RetentionRules {
        RetentionRules {
            policy: self.retention.clone(),
            quotas: self.quotas.clone(),
        }
    }

    /// The AWS backend over the settings' resources. Finished runs enter the reap
    /// index at the shortest retention of [`Settings::retention_rules`].
    pub fn aws_backend(&self, sdk: &aws_config::SdkConfig) -> AwsBackend {
        let options = AwsOptions {
            retention: self.retention_rules().shortest(),
            ..AwsOptions::default()
        };
        AwsBackend::with_options(sdk, self.resources.clone(), options)
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

/// The retention policy of `SIESTA_RETENTION_DAYS` (`days`, `0`: for ever) and
/// `SIESTA_RETENTION_WORKFLOWS` (`workflow=retention,…`).
fn retention_policy(days: u64, workflows: &str) -> Result<RetentionPolicy, SetupError> {
    let default = (days > 0).then(|| Duration::from_secs(days.saturating_mul(86_400)));
    let mut policy = RetentionPolicy::keep_for(default);
    for pair in workflows
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
    {
        let (workflow, retention) = pair.split_once('=').ok_or_else(|| {
            SetupError::Config(format!(
                "SIESTA_RETENTION_WORKFLOWS: '{pair}' is not workflow=retention"
            ))
        })?;
        let retention = siesta::parse_retention(retention)
            .map_err(|e| SetupError::Config(format!("SIESTA_RETENTION_WORKFLOWS: {e}")))?;
        policy = policy.with_workflow(workflow.trim(), retention);
    }
    Ok(policy)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retention_days_and_workflows_make_the_policy_and_zero_keeps_for_ever() {
        let policy = retention_policy(30, "audit=0, ping=12h").unwrap();
        assert_eq!(policy.of("order"), Some(Duration::from_secs(30 * 86_400)));
        assert_eq!(policy.of("audit"), None);
        assert_eq!(policy.of("ping"), Some(Duration::from_secs(12 * 3600)));
        assert_eq!(retention_policy(0, "").unwrap().of("order"), None);
        assert!(retention_policy(30, "ping").is_err());
        assert!(retention_policy(30, "ping=soon").is_err());
    }
}
