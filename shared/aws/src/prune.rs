//! `builds prune`: delete the Lambda versions of an app's functions that no run needs.
//!
//! Each deploy publishes a version of each of the four functions (`AutoPublishAlias`),
//! and SAM keeps the old ones, so that a run finishes on the build it started on: a
//! wake-up for a run of an older build is forwarded to that build's **step** version,
//! found in the build registry ([`crate::builds`]). What the prune keeps, and why:
//!
//! - the version the alias points at, and any newer one (a deploy in progress
//!   publishes before it moves the alias);
//! - a step version registered for a build that has an unfinished run, in any tenant —
//!   never deleted, whatever else holds;
//! - a step version no build registered (it never started cold, or its item was
//!   removed), while some build with unfinished runs has no registered version: it may
//!   be theirs.
//!
//! Everything else older than the alias goes: step versions of builds with no
//! unfinished run (with their registry item, removed only if it still names that
//! version), unregistered step versions when every build with unfinished runs has its
//! own, and the other functions' old versions, which nothing invokes (they run no
//! workflow code, and only the alias is routed to). A registry item whose version no
//! longer exists (deleted by hand) is removed too, so `GET /builds` stops calling its
//! build deployed. Unfinished runs are counted from the sparse `by_build` index
//! ([`BuildRegistry::unfinished_runs_by_build`]): a read proportional to the unfinished
//! runs, not to the table.
//!
//! [`plan`] decides from an [`Inventory`] with no I/O; [`Pruner`] reads the inventory
//! and carries the plan out.

use std::collections::{BTreeMap, BTreeSet};

use siesta::ports::StoreError;

use crate::builds::{BuildRegistry, RegisteredBuild};

/// The functions of an app, as the template names them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppFunctions {
    /// The step function (whose versions serve runs and register their build).
    pub step: String,
    /// The others (start, webhook, sweep): they run no workflow code.
    pub others: Vec<String>,
    /// The alias every event source invokes.
    pub alias: String,
}

impl AppFunctions {
    /// The functions of the stack `stack` as `infra/template.yaml` (and the template
    /// `siesta new` writes) names them: `<stack>-step`, `-start`, `-webhook`,
    /// `-sweep`, alias `live`.
    pub fn of_stack(stack: &str) -> Self {
        AppFunctions {
            step: format!("{stack}-step"),
            others: ["start", "webhook", "sweep"]
                .iter()
                .map(|f| format!("{stack}-{f}"))
                .collect(),
            alias: "live".into(),
        }
    }
}

/// One function's published versions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FunctionVersions {
    /// The function's name.
    pub function: String,
    /// Whether it is the step function.
    pub step: bool,
    /// The version the alias points at; `None` when the function has no such alias.
    pub alias_version: Option<u64>,
    /// Its published versions (`$LATEST` is not one).
    pub versions: Vec<u64>,
}

/// What the prune decides from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inventory {
    /// The alias's name (`live`).
    pub alias: String,
    /// Each function's versions.
    pub functions: Vec<FunctionVersions>,
    /// The build registry.
    pub registry: Vec<RegisteredBuild>,
    /// Unfinished runs by build, every tenant.
    pub unfinished: BTreeMap<String, u64>,
}

/// What becomes of one version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// The function.
    pub function: String,
    /// The version.
    pub version: u64,
    /// Whether it is deleted.
    pub delete: bool,
    /// The build it serves, when the registry says.
    pub build: Option<String>,
    /// Why, in a few words.
    pub reason: String,
}

/// What the prune will do.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Plan {
    /// One decision per published version, by function then version.
    pub decisions: Vec<Decision>,
    /// Registry items whose version no longer exists: removed, with why.
    pub stale: Vec<(RegisteredBuild, String)>,
}

/// `NAME:VERSION` or `arn:…:function:NAME:VERSION` → (NAME, VERSION).
fn parse_qualified(arn: &str) -> Option<(&str, u64)> {
    let (name, version) = arn.rsplit_once(':')?;
    let version = version.parse().ok()?;
    let name = match name.rsplit_once(":function:") {
        Some((_, name)) => name,
        None => name,
    };
    Some((name, version))
}

/// Decide, for every published version of `inventory`'s functions, whether it goes.
pub fn plan(inventory: &Inventory) -> Plan {
    let alias = &inventory.alias;
    let unfinished = |build: &str| inventory.unfinished.get(build).copied().unwrap_or(0);
    let registered: BTreeSet<&str> = inventory
        .registry
        .iter()
        .map(|b| b.build_id.as_str())
        .collect();
    // Builds with unfinished runs that no version registered: an unregistered version
    // may be theirs.
    let unserved: Vec<&str> = inventory
        .unfinished
        .iter()
        .filter(|(b, n)| **n > 0 && !registered.contains(b.as_str()))
        .map(|(b, _)| b.as_str())
        .collect();
    let mut out = Plan::default();
    for f in &inventory.functions {
        let mut versions = f.versions.clone();
        versions.sort_unstable();
        for &version in &versions {
            let builds: Vec<&RegisteredBuild> = if f.step {
                inventory
                    .registry
                    .iter()
                    .filter(|b| {
                        parse_qualified(&b.step_version) == Some((f.function.as_str(), version))
                    })
                    .collect()
            } else {
                Vec::new()
            };
            let build = builds.first().map(|b| b.build_id.clone());
            let keep = |reason: String| Decision {
                function: f.function.clone(),
                version,
                delete: false,
                build: build.clone(),
                reason,
            };
            let delete = |reason: String| Decision {
                function: f.function.clone(),
                version,
                delete: true,
                build: build.clone(),
                reason,
            };
            let decision = match f.alias_version {
                None => keep(format!(
                    "the function has no alias {alias}: which version serves is unknown"
                )),
                Some(a) if version == a => keep(format!("the alias {alias} points at it")),
                Some(a) if version > a => keep(format!(
                    "newer than the version {alias} points at ({a}): a deploy in progress"
                )),
                Some(_) if !f.step => delete(format!(
                    "older than {alias}, which alone invokes this function (it runs no workflow code)"
                )),
                Some(_) => match builds
                    .iter()
                    .map(|b| (b.build_id.as_str(), unfinished(&b.build_id)))
                    .find(|(_, n)| *n > 0)
                {
                    Some((b, n)) => keep(format!("build {b} has {n} unfinished run(s)")),
                    None if !builds.is_empty() => delete(format!(
                        "build {} has no unfinished run",
                        builds
                            .iter()
                            .map(|b| b.build_id.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    )),
                    None if !unserved.is_empty() => keep(format!(
                        "no build registered it, and build(s) {} with unfinished runs have no registered version: it may be theirs",
                        unserved.join(", ")
                    )),
                    None => delete(
                        "no build registered it, and every build with unfinished runs has a registered version"
                            .into(),
                    ),
                },
            };
            out.decisions.push(decision);
        }
    }
    // Registry items naming a step version that is not published (any more).
    for b in &inventory.registry {
        let Some((name, version)) = parse_qualified(&b.step_version) else {
            continue;
        };
        let listed = inventory
            .functions
            .iter()
            .find(|f| f.step && f.function == name);
        if let Some(f) = listed
            && !f.versions.contains(&version)
        {
            out.stale.push((
                b.clone(),
                format!("its version {name}:{version} no longer exists"),
            ));
        }
    }
    out
}

/// What was done with one decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Done {
    /// Deleted (and, for a step version, its registry item removed if it still named it).
    Deleted,
    /// Would be deleted (`--dry-run`).
    WouldDelete,
    /// Kept.
    Kept,
    /// The delete failed: kept.
    Failed(String),
}

/// Why a prune could not read what it decides from.
#[derive(Debug, thiserror::Error)]
pub enum PruneError {
    /// Lambda refused or failed a request.
    #[error("lambda: {0}")]
    Lambda(String),
    /// The runs table could not be read.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Reads an app's versions, the registry and the unfinished runs, and deletes what
/// [`plan`] says.
#[derive(Clone)]
pub struct Pruner {
    lambda: aws_sdk_lambda::Client,
    registry: BuildRegistry,
}

impl Pruner {
    /// A pruner of the app whose runs table is `table`, with clients configured from
    /// `sdk` (`AWS_ENDPOINT_URL_LAMBDA` honoured).
    pub fn new(sdk: &aws_config::SdkConfig, table: String) -> Self {
        Self::from_parts(sdk, BuildRegistry::from_sdk(sdk, table))
    }

    /// A pruner reaching Lambda as `lambda` configures, over `registry`'s table.
    pub fn from_parts(lambda: &aws_config::SdkConfig, registry: BuildRegistry) -> Self {
        Pruner {
            lambda: aws_sdk_lambda::Client::new(lambda),
            registry,
        }
    }

    /// What [`plan`] decides from: each function's versions and alias, the registry,
    /// and the unfinished runs by build.
    pub async fn inventory(&self, functions: &AppFunctions) -> Result<Inventory, PruneError> {
        let mut listed = Vec::new();
        let names = std::iter::once((&functions.step, true))
            .chain(functions.others.iter().map(|f| (f, false)));
        for (function, step) in names {
            listed.push(FunctionVersions {
                function: function.clone(),
                step,
                alias_version: self.alias_version(function, &functions.alias).await?,
                versions: self.versions(function).await?,
            });
        }
        Ok(Inventory {
            alias: functions.alias.clone(),
            functions: listed,
            registry: self.registry.all().await?,
            unfinished: self.registry.unfinished_runs_by_build().await?,
        })
    }

    async fn alias_version(&self, function: &str, alias: &str) -> Result<Option<u64>, PruneError> {
        match self
            .lambda
            .get_alias()
            .function_name(function)
            .name(alias)
            .send()
            .await
        {
            Ok(out) => Ok(out.function_version().and_then(|v| v.parse().ok())),
            Err(e)
                if e.as_service_error()
                    .is_some_and(|e| e.is_resource_not_found_exception()) =>
            {
                Ok(None)
            }
            Err(e) => Err(PruneError::Lambda(format!(
                "GetAlias {function}:{alias}: {}",
                aws_sdk_lambda::error::DisplayErrorContext(e)
            ))),
        }
    }

    async fn versions(&self, function: &str) -> Result<Vec<u64>, PruneError> {
        let mut versions = Vec::new();
        let mut marker = None;
        loop {
            let out = self
                .lambda
                .list_versions_by_function()
                .function_name(function)
                .set_marker(marker)
                .send()
                .await
                .map_err(|e| {
                    PruneError::Lambda(format!(
                        "ListVersionsByFunction {function}: {}",
                        aws_sdk_lambda::error::DisplayErrorContext(e)
                    ))
                })?;
            // `$LATEST` is listed too; it is no published version.
            versions.extend(
                out.versions()
                    .iter()
                    .filter_map(|v| v.version()?.parse::<u64>().ok()),
            );
            match out.next_marker {
                Some(m) if !m.is_empty() => marker = Some(m),
                _ => return Ok(versions),
            }
        }
    }

    /// Carry `plan` out (or, with `dry_run`, say what it would do): each version to
    /// delete is deleted, then its build's registry item removed if it still names it;
    /// stale registry items are removed. One outcome per decision, in order, and the
    /// stale items with whether each was removed.
    pub async fn apply(
        &self,
        plan: &Plan,
        inventory: &Inventory,
        dry_run: bool,
    ) -> (Vec<(Decision, Done)>, Vec<(RegisteredBuild, Done)>) {
        let mut done = Vec::with_capacity(plan.decisions.len());
        for d in &plan.decisions {
            let outcome = if !d.delete {
                Done::Kept
            } else if dry_run {
                Done::WouldDelete
            } else {
                match self.delete(d, inventory).await {
                    Ok(()) => Done::Deleted,
                    Err(e) => Done::Failed(e),
                }
            };
            done.push((d.clone(), outcome));
        }
        let mut stale = Vec::with_capacity(plan.stale.len());
        for (b, _) in &plan.stale {
            let outcome = if dry_run {
                Done::WouldDelete
            } else {
                match self.registry.remove(&b.build_id, &b.step_version).await {
                    Ok(true) => Done::Deleted,
                    Ok(false) => Done::Kept,
                    Err(e) => Done::Failed(e.to_string()),
                }
            };
            stale.push((b.clone(), outcome));
        }
        (done, stale)
    }

    async fn delete(&self, d: &Decision, inventory: &Inventory) -> Result<(), String> {
        self.lambda
            .delete_function()
            .function_name(&d.function)
            .qualifier(d.version.to_string())
            .send()
            .await
            .map_err(|e| {
                format!(
                    "DeleteFunction {}:{}: {}",
                    d.function,
                    d.version,
                    aws_sdk_lambda::error::DisplayErrorContext(e)
                )
            })?;
        // The version first, then its item: a prune that stops in between leaves an
        // item naming no version, which the next prune removes as stale.
        for b in inventory
            .registry
            .iter()
            .filter(|b| parse_qualified(&b.step_version) == Some((d.function.as_str(), d.version)))
        {
            self.registry
                .remove(&b.build_id, &b.step_version)
                .await
                .map_err(|e| format!("removing build {}'s registry item: {e}", b.build_id))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn registered(build: &str, version: &str) -> RegisteredBuild {
        RegisteredBuild {
            build_id: build.into(),
            step_version: version.into(),
            first_seen: 0,
            last_seen: 0,
        }
    }

    fn inventory(unfinished: &[(&str, u64)]) -> Inventory {
        Inventory {
            alias: "live".into(),
            functions: vec![
                FunctionVersions {
                    function: "shop-step".into(),
                    step: true,
                    alias_version: Some(4),
                    versions: vec![1, 2, 3, 4, 5],
                },
                FunctionVersions {
                    function: "shop-start".into(),
                    step: false,
                    alias_version: Some(4),
                    versions: vec![1, 2, 3, 4],
                },
            ],
            registry: vec![
                registered(
                    "shop@1+a",
                    "arn:aws:lambda:eu-west-1:1:function:shop-step:1",
                ),
                registered("shop@2+b", "shop-step:2"),
                registered("shop@4+d", "shop-step:4"),
                registered("shop@0+gone", "shop-step:0"),
            ],
            unfinished: unfinished.iter().map(|(b, n)| ((*b).into(), *n)).collect(),
        }
    }

    fn verdicts(plan: &Plan) -> Vec<(String, bool)> {
        plan.decisions
            .iter()
            .map(|d| (format!("{}:{}", d.function, d.version), d.delete))
            .collect()
    }

    #[test]
    fn a_version_whose_build_has_unfinished_runs_is_kept_and_so_are_the_alias_and_newer() {
        let plan = plan(&inventory(&[("shop@1+a", 2), ("shop@4+d", 7)]));
        let v = verdicts(&plan);
        let of = |name: &str| v.iter().find(|(n, _)| n == name).unwrap().1;
        assert!(!of("shop-step:1"), "build a has unfinished runs");
        assert!(of("shop-step:2"), "build b has none");
        assert!(
            of("shop-step:3"),
            "unregistered, and every busy build has its version"
        );
        assert!(!of("shop-step:4"), "the alias");
        assert!(!of("shop-step:5"), "a deploy in progress");
        assert!(
            of("shop-start:1") && of("shop-start:3"),
            "only the alias invokes start"
        );
        assert!(!of("shop-start:4"));
        let kept = &plan.decisions[0];
        assert_eq!(kept.build.as_deref(), Some("shop@1+a"));
        assert_eq!(kept.reason, "build shop@1+a has 2 unfinished run(s)");
        assert_eq!(plan.stale.len(), 1, "shop-step:0 is not published");
        assert_eq!(plan.stale[0].0.build_id, "shop@0+gone");
    }

    #[test]
    fn an_unregistered_version_is_kept_while_a_build_with_unfinished_runs_has_no_version() {
        let plan = plan(&inventory(&[("shop@3+c", 1)]));
        let step3 = plan
            .decisions
            .iter()
            .find(|d| d.function == "shop-step" && d.version == 3)
            .unwrap();
        assert!(!step3.delete);
        assert!(step3.reason.contains("shop@3+c"), "{}", step3.reason);
    }

    #[test]
    fn nothing_is_deleted_from_a_function_without_the_alias() {
        let mut inv = inventory(&[]);
        inv.functions[0].alias_version = None;
        let plan = plan(&inv);
        assert!(
            plan.decisions
                .iter()
                .filter(|d| d.function == "shop-step")
                .all(|d| !d.delete)
        );
    }
}
