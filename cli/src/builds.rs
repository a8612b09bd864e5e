//! `siesta builds prune`: delete the Lambda versions of an app's functions that no
//! unfinished run needs, and say what was deleted and what was kept, and why
//! ([`siesta_aws::prune`] decides). `siesta builds` itself lists the builds as `runs
//! builds` does.

use serde_json::{Value, json};
use siesta_aws::prune::{AppFunctions, Decision, Done, Pruner, plan};

/// Where the app is on AWS and what the prune may do.
#[derive(Debug, Clone)]
pub struct PruneOptions {
    /// The stack: its functions are `<stack>-step`, `-start`, `-webhook`, `-sweep`.
    pub stack: String,
    /// The runs table (default `<stack>-runs`, as the template names it).
    pub table: Option<String>,
    /// The alias every event source invokes.
    pub alias: String,
    /// Say what would be deleted, delete nothing.
    pub dry_run: bool,
    /// Print JSON.
    pub json: bool,
}

/// Prune with the AWS configuration of the environment; the report on stdout. Fails
/// when what the prune decides from cannot be read (then nothing is deleted) or when a
/// delete failed.
pub async fn prune(options: PruneOptions, sdk: &aws_config::SdkConfig) -> anyhow::Result<()> {
    let table = options
        .table
        .clone()
        .unwrap_or_else(|| format!("{}-runs", options.stack));
    let mut functions = AppFunctions::of_stack(&options.stack);
    functions.alias = options.alias.clone();
    let pruner = Pruner::new(sdk, table);
    let inventory = pruner.inventory(&functions).await?;
    let plan = plan(&inventory);
    let (done, stale) = pruner.apply(&plan, &inventory, options.dry_run).await;
    let failed = done
        .iter()
        .filter(|(_, d)| matches!(d, Done::Failed(_)))
        .count()
        + stale
            .iter()
            .filter(|(_, d)| matches!(d, Done::Failed(_)))
            .count();
    if options.json {
        let report = json!({
            "dry_run": options.dry_run,
            "versions": done.iter().map(|(d, done)| json!({
                "function": d.function,
                "version": d.version,
                "build": d.build,
                "done": done_word(done),
                "reason": d.reason,
                "error": match done { Done::Failed(e) => Value::from(e.as_str()), _ => Value::Null },
            })).collect::<Vec<_>>(),
            "stale_registrations": stale.iter().map(|(b, done)| json!({
                "build": b.build_id,
                "step_version": b.step_version,
                "done": done_word(done),
            })).collect::<Vec<_>>(),
        });
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report_lines(&done, &stale, &plan.stale));
    }
    if failed > 0 {
        anyhow::bail!("{failed} delete(s) failed (kept; see above)");
    }
    Ok(())
}

fn done_word(done: &Done) -> &'static str {
    match done {
        Done::Deleted => "deleted",
        Done::WouldDelete => "would delete",
        Done::Kept => "kept",
        Done::Failed(_) => "failed",
    }
}

/// The report: one line per version (`deleted`, `would delete`, `kept`, `FAILED`), its
/// build when known and why; then the registry items removed because their version is
/// gone; then a summary.
pub fn report_lines(
    done: &[(Decision, Done)],
    stale: &[(siesta_aws::builds::RegisteredBuild, Done)],
    reasons: &[(siesta_aws::builds::RegisteredBuild, String)],
) -> String {
    let mut out = String::new();
    for (d, outcome) in done {
        let version = format!("{}:{}", d.function, d.version);
        let build = d
            .build
            .as_deref()
            .map_or_else(String::new, |b| format!(" [{b}]"));
        let word = match outcome {
            Done::Failed(_) => "FAILED",
            other => done_word(other),
        };
        out.push_str(&format!("{word:<13} {version:<28}{build} {}\n", d.reason));
        if let Done::Failed(e) = outcome {
            out.push_str(&format!("              {e}\n"));
        }
    }
    for ((b, outcome), (_, why)) in stale.iter().zip(reasons) {
        let word = match outcome {
            Done::Deleted => "unregistered",
            Done::WouldDelete => "would unregister",
            Done::Kept => "kept",
            Done::Failed(_) => "FAILED",
        };
        out.push_str(&format!("{word:<13} build {}: {why}\n", b.build_id));
    }
    let count = |f: fn(&Done) -> bool| done.iter().filter(|(_, d)| f(d)).count();
    out.push_str(&format!(
        "{} deleted, {} would be deleted, {} kept, {} failed\n",
        count(|d| matches!(d, Done::Deleted)),
        count(|d| matches!(d, Done::WouldDelete)),
        count(|d| matches!(d, Done::Kept)),
        count(|d| matches!(d, Done::Failed(_))),
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use siesta_aws::builds::RegisteredBuild;

    fn decision(version: u64, delete: bool, build: Option<&str>, reason: &str) -> Decision {
        Decision {
            function: "shop-step".into(),
            version,
            delete,
            build: build.map(str::to_owned),
            reason: reason.into(),
        }
    }

    #[test]
    fn the_report_says_what_was_deleted_and_kept_and_why() {
        let done = [
            (
                decision(
                    1,
                    true,
                    Some("shop@1+a"),
                    "build shop@1+a has no unfinished run",
                ),
                Done::Deleted,
            ),
            (
                decision(
                    2,
                    false,
                    Some("shop@2+b"),
                    "build shop@2+b has 3 unfinished run(s)",
                ),
                Done::Kept,
            ),
            (
                decision(3, true, None, "no build registered it"),
                Done::Failed("DeleteFunction shop-step:3: throttled".into()),
            ),
        ];
        let gone = RegisteredBuild {
            build_id: "shop@0+gone".into(),
            step_version: "shop-step:0".into(),
            first_seen: 0,
            last_seen: 0,
        };
        let report = report_lines(
            &done,
            &[(gone.clone(), Done::Deleted)],
            &[(gone, "its version shop-step:0 no longer exists".into())],
        );
        let lines: Vec<&str> = report.lines().collect();
        assert!(lines[0].starts_with("deleted"), "{report}");
        assert!(lines[0].contains("shop-step:1") && lines[0].contains("[shop@1+a]"));
        assert!(lines[1].starts_with("kept") && lines[1].contains("3 unfinished"));
        assert!(lines[2].starts_with("FAILED") && lines[3].contains("throttled"));
        assert!(lines[4].starts_with("unregistered") && lines[4].contains("shop@0+gone"));
        assert_eq!(lines[5], "1 deleted, 0 would be deleted, 1 kept, 1 failed");
    }
}
