//! `replay`: check, before a deploy, that the runs in flight replay on this binary's
//! code. Every run found is replayed from the top over its journal with no side
//! effect and no write (see `siesta::Engine::check_replay`): an operation the journal
//! does not hold ends that run's check. One line per run; a non-zero exit when any
//! diverges, naming the run, the position and both operation kinds.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use siesta::ports::{Backend, RunFilter};
use siesta::{
    Clock as _, Engine, EngineConfig, ReplayCheck, Run, RunExport, SystemClock, TenantId,
};

use crate::App;
use crate::command::{AwsArgs, BackendKind};

/// The options of `replay`.
#[derive(Debug, clap::Args)]
pub struct ReplayArgs {
    /// Where the dev server's data lives (the embedded backend).
    #[arg(long, default_value = ".siesta")]
    pub data_dir: PathBuf,
    /// Where runs live: `embedded` (the SQLite file in `--data-dir`) or `aws`
    /// (the DynamoDB table and S3 bucket `--table`/`--bucket` name).
    #[arg(long, env = "SIESTA_BACKEND", value_enum, default_value_t = BackendKind::Embedded)]
    pub backend: BackendKind,
    /// Check these exported runs (`GET /runs/{id}/export` saved to a file) instead of a
    /// backend: every one given is checked, whatever its build and status. `--history`
    /// is the flag's former name, still accepted.
    #[arg(long = "export", alias = "history", num_args = 1.., value_name = "FILE")]
    pub exports: Vec<PathBuf>,
    /// The tenants whose runs to check (comma-separated or repeated).
    #[arg(long = "tenant", value_delimiter = ',', default_value = "default")]
    pub tenants: Vec<String>,
    /// Check every run: this build's too, and finished ones (whose whole journal must
    /// replay).
    #[arg(long)]
    pub all: bool,
    /// Check only the runs of this build.
    #[arg(long, value_name = "ID")]
    pub build: Option<String>,
    /// Where the AWS backend's resources are.
    #[command(flatten)]
    pub aws: AwsArgs,
}

/// What `replay` found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplayReport {
    /// Runs checked.
    pub checked: usize,
    /// Runs whose journal does not replay (run id, divergence).
    pub diverged: Vec<(String, siesta::Divergence)>,
}

/// `replay` as the binary runs it: the report on stdout, an error (exit code 1) when
/// any run diverges.
pub(crate) async fn replay(app: App, args: ReplayArgs) -> anyhow::Result<()> {
    crate::command::init_dev_logging(None);
    let build = app.build_id.clone();
    let report = check(app, args, &mut std::io::stdout()).await?;
    if report.diverged.is_empty() {
        Ok(())
    } else {
        anyhow::bail!(
            "{} of {} runs do not replay on build {build}",
            report.diverged.len(),
            report.checked
        )
    }
}

/// Check the runs `args` pick against `app`'s code, writing one line per run to `out`.
pub async fn check(
    app: App,
    args: ReplayArgs,
    out: &mut impl Write,
) -> anyhow::Result<ReplayReport> {
    let build = app.build_id.clone();
    let mut report = ReplayReport::default();
    let ReplayArgs {
        data_dir,
        backend,
        exports,
        tenants,
        all,
        build: only,
        aws,
    } = args;
    if !exports.is_empty() {
        // An export holds its offloaded values inline, so the check reads nothing from
        // a backend; an engine needs one all the same: an empty one, in a scratch
        // directory.
        let scratch = std::env::temp_dir().join(format!(
            "siesta-replay-{}-{}",
            std::process::id(),
            SystemClock.now().0
        ));
        let result = async {
            let embedded =
                siesta_embedded::EmbeddedBackend::open(scratch.join("siesta.db"), clock())
                    .context("opening a scratch store for the check")?;
            let engine = engine(&app, embedded.backend());
            for path in &exports {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("reading {}", path.display()))?;
                let export: RunExport = serde_json::from_str(&text)
                    .with_context(|| format!("{} is not a run export", path.display()))?;
                if export.format != RunExport::FORMAT {
                    anyhow::bail!(
                        "{}: format {} (this binary reads {})",
                        path.display(),
                        export.format,
                        RunExport::FORMAT
                    );
                }
                let (run, input) = export.into_parts();
                let result = engine.check_replay_input(run.clone(), input).await;
                record(&mut report, out, &run, result)?;
            }
            Ok(())
        }
        .await;
        let _ = std::fs::remove_dir_all(&scratch);
        result?;
    } else {
        let backend = match backend {
            BackendKind::Embedded => {
                let path = data_dir.join("siesta.db");
                if !path.exists() {
                    anyhow::bail!("no data in {} (no {})", data_dir.display(), path.display());
                }
                siesta_embedded::EmbeddedBackend::open(&path, clock())
                    .with_context(|| format!("opening {}", path.display()))?
                    .backend()
            }
            BackendKind::Aws => {
                let names = aws.names()?;
                let sdk = siesta_aws::sdk_config_from_env().await;
                siesta_aws::AwsBackend::new(&sdk, names).backend()
            }
        };
        let engine = engine(&app, backend);
        for tenant in &tenants {
            let tenant = TenantId::from(tenant.as_str());
            for run in runs(&engine, &tenant, all, only.as_deref(), &build).await? {
                let result = engine.check_replay(&tenant, &run.id).await;
                record(&mut report, out, &run, result)?;
            }
        }
    }
    writeln!(
        out,
        "{} run(s) checked on build {build}: {} clean, {} diverged",
        report.checked,
        report.checked - report.diverged.len(),
        report.diverged.len()
    )?;
    Ok(report)
}

fn clock() -> Arc<dyn siesta::Clock> {
    Arc::new(SystemClock)
}

fn engine(app: &App, backend: Backend) -> Engine {
    let config = EngineConfig {
        build_id: app.build_id.clone(),
        owner: "replay-check".to_owned(),
        ..EngineConfig::default()
    };
    Engine::new(backend, clock(), app.registry.clone(), config)
}

/// The tenant's runs to check, oldest first: by default the unfinished runs of other
/// builds than this one; with `all` finished ones and this build's too; with `only`,
/// only that build's.
async fn runs(
    engine: &Engine,
    tenant: &TenantId,
    all: bool,
    only: Option<&str>,
    build: &str,
) -> anyhow::Result<Vec<Run>> {
    let mut picked = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let page = engine
            .backend()
            .store
            .list_runs(tenant, &RunFilter::default(), cursor.as_deref(), 500)
            .await
            .with_context(|| format!("listing the runs of tenant {tenant}"))?;
        picked.extend(page.runs.into_iter().filter(|run| {
            let run_build = run.build_id.as_deref().unwrap_or("");
            let build_ok = match only {
                Some(wanted) => run_build == wanted,
                None => all || run_build != build,
            };
            build_ok && (all || !run.status.is_finished())
        }));
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    picked.reverse();
    Ok(picked)
}

/// One line for `run`'s check.
fn record(
    report: &mut ReplayReport,
    out: &mut impl Write,
    run: &Run,
    result: Result<ReplayCheck, siesta::EngineError>,
) -> anyhow::Result<()> {
    report.checked += 1;
    let build = run.build_id.as_deref().unwrap_or("-");
    match result {
        Ok(ReplayCheck::Clean { replayed }) => writeln!(
            out,
            "clean     {} ({} on {build}, {} replayed)",
            run.id, run.workflow, replayed
        )?,
        Ok(ReplayCheck::Diverged(divergence)) => {
            let kind = |k: Option<siesta::OperationKind>| k.map_or("nothing", |k| k.as_str());
            writeln!(
                out,
                "DIVERGED  {} ({} on {build}) at {}: journal {} vs code {} — {}",
                run.id,
                run.workflow,
                divergence.position,
                kind(divergence.journal_kind),
                kind(divergence.code_kind),
                divergence.message
            )?;
            report.diverged.push((run.id.to_string(), divergence));
        }
        Err(e @ siesta::EngineError::UnknownWorkflow(_)) => {
            // A run whose workflow this binary no longer has would break on this build
            // as surely as a divergence: it counts as one.
            let divergence = siesta::Divergence {
                position: siesta::Position::from(""),
                journal_kind: None,
                code_kind: None,
                message: e.to_string(),
            };
            writeln!(
                out,
                "DIVERGED  {} ({} on {build}): {e}",
                run.id, run.workflow
            )?;
            report.diverged.push((run.id.to_string(), divergence));
        }
        Err(e) => return Err(anyhow::anyhow!(e).context(format!("checking run {}", run.id))),
    }
    Ok(())
}
