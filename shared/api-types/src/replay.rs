//! Runs across deploys: what `GET /runs/{id}/replay-check` answers. (An export and an
//! upgrade report are the core's own types, `siesta::RunExport` and
//! `siesta::UpgradeReport`, described in [`crate::schema`].)

use serde::{Deserialize, Serialize};
use siesta::Divergence;
use utoipa::ToSchema;

use crate::schema::DivergenceSchema;

/// Whether a run's journal replays on the build serving this API.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ReplayCheckView {
    /// The build the check ran on (the one serving this API).
    pub build_id: String,
    /// The build the run is on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_build_id: Option<String>,
    /// `clean` or `diverged`.
    pub result: String,
    /// With `clean`: the journal entries replayed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replayed: Option<usize>,
    /// With `diverged`: where the journal and the code part ways.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<DivergenceSchema>)]
    pub divergence: Option<Divergence>,
}
