//! What every route may answer: the error body; and `/healthz`'s answer.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// The body of every error answer.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[schema(as = Error)]
pub struct ErrorBody {
    /// The error.
    pub error: ErrorDetail,
}

/// What went wrong.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ErrorDetail {
    /// Stable machine-readable code (`bad_request`, `not_found`, `version_mismatch`...).
    pub code: String,
    /// What happened, for a person.
    pub message: String,
    /// With `diverged`: where the run's journal and this build's code part ways.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<crate::schema::DivergenceSchema>)]
    pub divergence: Option<siesta::Divergence>,
}

/// The answer of `/healthz`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Health {
    /// `ok`.
    pub status: String,
}
