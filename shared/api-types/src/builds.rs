//! `GET /builds`: the builds the caller's runs started on, each with its unfinished runs
//! by status, so an operator can see a deploy drain (`docs/deploys.md`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use siesta::RunStatus;
use utoipa::ToSchema;

use crate::time::Rfc3339;

/// A build of the app, as the caller's runs know it.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct BuildView {
    /// The build id (`myapp@0.1.0+5f3a9c0e1b2d4a67`).
    pub build_id: String,
    /// Whether it is the build serving this API. A run of another build that is not
    /// finished waits for its build (its view says `awaiting_build`).
    pub serving: bool,
    /// Whether it is still deployed: the serving build is; on the dev server no other
    /// build is (it serves only its own); on Lambda, a build whose step function
    /// version is still in the build registry (`builds prune` removes it with the
    /// versions). `null` where that cannot be known (the registry could not be read).
    /// An unfinished run of a build that is not deployed waits until its build is
    /// deployed again or the run is upgraded.
    pub deployed: Option<bool>,
    /// Its unfinished runs by status (`{"waiting": 3, "parked": 1}`); empty when all
    /// of them finished.
    #[schema(value_type = BTreeMap<String, u64>)]
    pub unfinished: BTreeMap<RunStatus, u64>,
    /// When its first run was created; `null` for the serving build before it ran any.
    pub first_seen: Option<Rfc3339>,
    /// When its latest run was created; `null` as for `first_seen`.
    pub last_seen: Option<Rfc3339>,
}

/// The caller's builds.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct BuildList {
    /// The build serving this API.
    pub serving: String,
    /// Every build that started a run of the caller, and the serving one: the serving
    /// build first, then the others by their latest run, newest first.
    pub builds: Vec<BuildView>,
}
