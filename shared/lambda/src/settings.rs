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
    /// (`SIESTA_RETENTION`, default `30d`; `0` keeps them for ever), and the workflows
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
    /// This deployment's maxima of concurrency limits (`SIESTA_LIMITS`).
    pub limits: siesta::LimitOverrides,
    /// Schedules this deployment does not fire (`SIESTA_SCHEDULES_DISABLED`).
    pub disabled_schedules: std::collections::BTreeSet<String>,
    /// Per-tenant quotas (`SIESTA_QUOTAS`, JSON, see docs/quotas.md; replaced by the
    /// parameter's by [`Settings::load_quotas`]).
    pub quotas: siesta::Quotas,
    /// An SSM parameter holding the quotas instead (`SIESTA_QUOTAS_PARAMETER`).
    pub quotas_parameter: Option<String>,
}

/// Where the AWS backend's resources are: the same flags and variables for the Lambda
/// functions, `dev --backend aws` and `replay --backend aws`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct AwsArgs {
    /// The DynamoDB table of runs.
    #[arg(long, env = "SIESTA_TABLE")]
    pub table: Option<String>,
    /// The S3 bucket of artifacts.
    #[arg(long, env = "SIESTA_BUCKET")]
    pub bucket: Option<String>,
    /// The SQS queue of wake-ups (its URL).
    #[arg(long, env = "SIESTA_QUEUE_URL")]
    pub queue_url: Option<String>,
    /// Its dead-letter queue (its URL).
    #[arg(long, env = "SIESTA_DLQ_URL")]
    pub dlq_url: Option<String>,
}

impl AwsArgs {
    /// The resource names, or an error naming the flag and the variable that is missing.
    pub fn names(self) -> Result<ResourceNames, SetupError> {
        let need = |v: Option<String>, flag: &str, var: &str| {
            blank_is_none(v).ok_or_else(|| {
                SetupError::Config(format!(
                    "the AWS backend needs {flag} (or {var}); `siesta bootstrap` creates the resources and prints them"
                ))
            })
        };
        Ok(ResourceNames {
            table: need(self.table, "--table", "SIESTA_TABLE")?,
            bucket: need(self.bucket, "--bucket", "SIESTA_BUCKET")?,
            queue_url: need(self.queue_url, "--queue-url", "SIESTA_QUEUE_URL")?,
            dead_letter_queue_url: need(self.dlq_url, "--dlq-url", "SIESTA_DLQ_URL")?,
        })
    }
}

/// The settings the dev server and the Lambda functions share, read once, by clap, under
/// one name each: a flag for `siesta dev` and the same variable for both.
#[derive(Debug, Clone, clap::Args)]
pub struct SharedArgs {
    /// Lease length in milliseconds: how soon a run held by a crashed process is
    /// taken over.
    #[arg(long, env = "SIESTA_LEASE_TTL_MS", default_value_t = 60_000)]
    pub lease_ttl_ms: u64,
    /// Webhook sources as a JSON array (see the README).
    #[arg(long, env = "SIESTA_WEBHOOK_SOURCES", default_value = "")]
    pub webhook_sources: String,
    /// How long finished runs (completed, failed, cancelled) are kept before they
    /// and everything they own are removed: `30d` (default), `12h`, `15m`, `3s`;
    /// `0` (or `0d`, any unit) keeps them for ever, but for workflows and tenants given
    /// a retention of their own. Runs not finished — waiting, parked — are never removed.
    #[arg(long, env = "SIESTA_RETENTION", default_value = "30d")]
    pub retention: String,
    /// Workflows kept longer or shorter than `--retention`, as `workflow=retention,…`
    /// (`audit=0,ping=12h`); a workflow named here keeps its retention in every tenant,
    /// before a tenant's (`--quotas`) and `--retention`.
    #[arg(long, env = "SIESTA_RETENTION_WORKFLOWS", default_value = "")]
    pub retention_workflows: String,
    /// This deployment's maximum for concurrency limits declared in code, as JSON by
    /// limit name (`{"per-customer": 2}`; docs/flow-control.md); the others keep the
    /// maximum their code declares.
    #[arg(long, env = "SIESTA_LIMITS", default_value = "")]
    pub limits: String,
    /// Schedules declared in code that this deployment does not fire, by name
    /// (`nightly-report,digest`; docs/flow-control.md): listed as paused, still
    /// triggered by hand.
    #[arg(long, env = "SIESTA_SCHEDULES_DISABLED", default_value = "")]
    pub schedules_disabled: String,
}

impl SharedArgs {
    /// How long a lease lasts (at least 100 ms).
    pub fn lease_ttl(&self) -> Duration {
        Duration::from_millis(self.lease_ttl_ms.max(100))
    }

    /// The retention policy `--retention` and `--retention-workflows` name.
    pub fn retention_policy(&self) -> Result<RetentionPolicy, SetupError> {
        retention_policy(&self.retention, &self.retention_workflows)
    }

    /// The schedules `--schedules-disabled` names.
    pub fn disabled_schedules(&self) -> std::collections::BTreeSet<String> {
        siesta::parse_schedule_names(&self.schedules_disabled)
    }

    /// The limits' maxima `--limits` sets (none when it is empty).
    pub fn limit_overrides(&self) -> Result<siesta::LimitOverrides, SetupError> {
        if self.limits.trim().is_empty() {
            return Ok(siesta::LimitOverrides::default());
        }
        siesta::LimitOverrides::parse(&self.limits)
            .map_err(|e| SetupError::Config(format!("SIESTA_LIMITS (--limits): {e}")))
    }
}

/// What only the Lambda functions read, beside [`SharedArgs`] and [`AwsArgs`]: parsed from
/// the environment alone (a function gets no arguments).
#[derive(Debug, clap::Parser)]
#[command(no_binary_name = true)]
struct LambdaEnv {
    #[command(flatten)]
    resources: AwsArgs,
    #[command(flatten)]
    shared: SharedArgs,
    #[arg(long, env = "SIESTA_TENANT_CLAIM", default_value = "tenant")]
    tenant_claim: String,
    #[arg(
        long,
        env = "SIESTA_CALLBACK_BASE_URL",
        default_value = "http://127.0.0.1:8080"
    )]
    callback_base_url: String,
    #[arg(long, env = "SIESTA_SAFETY_MARGIN_MS", default_value_t = 10_000)]
    safety_margin_ms: u64,
    /// The older name of the default retention, in days, which functions deployed from
    /// an older template still set: used when `SIESTA_RETENTION` is not.
    #[arg(long, env = "SIESTA_RETENTION_DAYS")]
    retention_days: Option<u64>,
    #[arg(long, env = "SIESTA_REAP_PAGE", default_value_t = 100)]
    reap_page: usize,
    #[arg(long, env = "SIESTA_SWEEP_PAGE", default_value_t = 500)]
    sweep_page: usize,
    #[arg(long, env = "SIESTA_WEBHOOK_SOURCES_PARAMETER")]
    webhook_sources_parameter: Option<String>,
    #[arg(long, env = "SIESTA_QUOTAS", default_value = "")]
    quotas: String,
    #[arg(long, env = "SIESTA_QUOTAS_PARAMETER")]
    quotas_parameter: Option<String>,
}

/// A parse error of [`LambdaEnv`] named by the variable that was set, not the flag
/// clap reports (a function has no flags).
fn env_error(error: clap::Error) -> SetupError {
    use clap::CommandFactory as _;
    use clap::error::{ContextKind, ContextValue};
    let context = |kind| match error.get(kind) {
        Some(ContextValue::String(s)) => s.clone(),
        _ => String::new(),
    };
    let flag = context(ContextKind::InvalidArg);
    let variable = LambdaEnv::command().get_arguments().find_map(|arg| {
        let long = format!("--{}", arg.get_long()?);
        let named = flag == long || flag.starts_with(&format!("{long} "));
        named.then(|| arg.get_env().map(|v| v.to_string_lossy().into_owned()))?
    });
    match variable {
        Some(variable) => SetupError::Config(format!(
            "{variable}={:?}: {}",
            context(ContextKind::InvalidValue),
            error.kind()
        )),
        None => SetupError::Config(error.render().to_string().trim().to_owned()),
    }
}

/// `None` for a value that is missing or blank (a template may set a variable to "").
fn blank_is_none(value: Option<String>) -> Option<String> {
    value.filter(|v| !v.trim().is_empty())
}

impl Settings {
    /// Read the settings from the environment.
    pub fn from_env() -> Result<Settings, SetupError> {
        Settings::parse_from(std::iter::empty::<String>())
    }

    /// The settings of `args` (flags named as [`LambdaEnv`]'s) and the environment.
    fn parse_from(
        args: impl IntoIterator<Item = impl Into<std::ffi::OsString> + Clone>,
    ) -> Result<Settings, SetupError> {
        use clap::{CommandFactory as _, FromArgMatches as _};
        let matches = LambdaEnv::command()
            .try_get_matches_from(args)
            .map_err(env_error)?;
        let mut env = LambdaEnv::from_arg_matches(&matches).map_err(env_error)?;
        let retention_defaulted =
            matches.value_source("retention") == Some(clap::parser::ValueSource::DefaultValue);
        if retention_defaulted && let Some(days) = env.retention_days {
            env.shared.retention = format!("{days}d");
        }
        Ok(Settings {
            resources: env.resources.names()?,
            tenant_claim: env.tenant_claim,
            callback_base_url: env.callback_base_url,
            lease_ttl: env.shared.lease_ttl(),
            safety_margin: Duration::from_millis(env.safety_margin_ms),
            retention: env.shared.retention_policy()?,
            limits: env.shared.limit_overrides()?,
            disabled_schedules: env.shared.disabled_schedules(),
            reap_page: env.reap_page,
            sweep_page: env.sweep_page,
            webhook_sources: env.shared.webhook_sources,
            webhook_sources_parameter: blank_is_none(env.webhook_sources_parameter),
            build_id: EngineConfig::default().build_id,
            quotas: siesta::Quotas::parse(&env.quotas)
                .map_err(|e| SetupError::Config(format!("SIESTA_QUOTAS: {e}")))?,
            quotas_parameter: blank_is_none(env.quotas_parameter),
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
            limits: self.limits.clone(),
            disabled_schedules: self.disabled_schedules.clone(),
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

/// The retention policy of `SIESTA_RETENTION` (`30d`, `12h`; `0`: for ever) and
/// `SIESTA_RETENTION_WORKFLOWS` (`workflow=retention,…`).
fn retention_policy(default: &str, workflows: &str) -> Result<RetentionPolicy, SetupError> {
    let default = siesta::parse_retention(default)
        .map_err(|e| SetupError::Config(format!("SIESTA_RETENTION (--retention): {e}")))?;
    let mut policy = RetentionPolicy::keep_for(default);
    for pair in workflows
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
    {
        let bad = |why: &str| {
            SetupError::Config(format!(
                "SIESTA_RETENTION_WORKFLOWS (--retention-workflows): '{pair}' {why}"
            ))
        };
        let (workflow, retention) = pair
            .split_once('=')
            .ok_or_else(|| bad("is not workflow=retention"))?;
        let workflow = workflow.trim();
        if workflow.is_empty() {
            return Err(bad("names no workflow"));
        }
        if policy.workflows.contains_key(workflow) {
            return Err(bad("names a workflow given a retention already"));
        }
        let retention = siesta::parse_retention(retention).map_err(|e| {
            SetupError::Config(format!(
                "SIESTA_RETENTION_WORKFLOWS (--retention-workflows): {e}"
            ))
        })?;
        policy = policy.with_workflow(workflow, retention);
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
        let policy = retention_policy("30d", "audit=0, ping=12h").unwrap();
        assert_eq!(policy.of("order"), Some(Duration::from_secs(30 * 86_400)));
        assert_eq!(policy.of("audit"), None);
        assert_eq!(policy.of("ping"), Some(Duration::from_secs(12 * 3600)));
        assert_eq!(retention_policy("0", "").unwrap().of("order"), None);
        assert!(retention_policy("30d", "ping").is_err());
        assert!(retention_policy("30d", "ping=soon").is_err());
        assert!(retention_policy("30d", "=3d").is_err(), "no workflow");
        assert!(
            retention_policy("30d", "ping=1h,ping=2h").is_err(),
            "a workflow given two retentions"
        );
    }

    const RESOURCES: [&str; 8] = [
        "--table",
        "runs",
        "--bucket",
        "artifacts",
        "--queue-url",
        "http://queue",
        "--dlq-url",
        "http://dlq",
    ];

    fn with_resources(extra: &[&str]) -> Vec<String> {
        RESOURCES
            .iter()
            .chain(extra)
            .map(|s| s.to_string())
            .collect()
    }

    #[test]
    fn unset_settings_take_the_defaults_the_dev_server_has() {
        let settings = Settings::parse_from(with_resources(&[])).unwrap();
        assert_eq!(settings.resources.table, "runs");
        assert_eq!(settings.resources.dead_letter_queue_url, "http://dlq");
        assert_eq!(settings.lease_ttl, Duration::from_secs(60));
        assert_eq!(settings.safety_margin, Duration::from_secs(10));
        assert_eq!(
            settings.retention.of("order"),
            Some(Duration::from_secs(30 * 86_400))
        );
        assert_eq!((settings.reap_page, settings.sweep_page), (100, 500));
        assert_eq!(settings.tenant_claim, "tenant");
        assert!(settings.webhook_sources_parameter.is_none());
    }

    #[test]
    fn a_missing_resource_is_named_by_its_variable() {
        let err = Settings::parse_from(["--table", "runs"]).unwrap_err();
        assert!(err.to_string().contains("SIESTA_BUCKET"), "{err}");
    }

    #[test]
    fn a_malformed_value_is_named_by_its_variable_not_a_flag() {
        let err = Settings::parse_from(with_resources(&["--lease-ttl-ms", "soon"])).unwrap_err();
        let message = err.to_string();
        assert!(
            message.contains("SIESTA_LEASE_TTL_MS=\"soon\""),
            "{message}"
        );
        let err = Settings::parse_from(with_resources(&["--retention", "soon"])).unwrap_err();
        assert!(err.to_string().contains("SIESTA_RETENTION"), "{err}");
    }

    #[test]
    fn the_older_retention_days_variable_counts_only_when_retention_is_unset() {
        let older = Settings::parse_from(with_resources(&["--retention-days", "7"])).unwrap();
        assert_eq!(
            older.retention.of("order"),
            Some(Duration::from_secs(7 * 86_400))
        );
        let both = Settings::parse_from(with_resources(&[
            "--retention-days",
            "7",
            "--retention",
            "12h",
        ]))
        .unwrap();
        assert_eq!(
            both.retention.of("order"),
            Some(Duration::from_secs(12 * 3600))
        );
    }

    #[test]
    fn blank_parameter_names_count_as_unset() {
        let settings = Settings::parse_from(with_resources(&[
            "--quotas-parameter",
            " ",
            "--webhook-sources-parameter",
            "",
        ]))
        .unwrap();
        assert!(settings.quotas_parameter.is_none());
        assert!(settings.webhook_sources_parameter.is_none());
    }
}
