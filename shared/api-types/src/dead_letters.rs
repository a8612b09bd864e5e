//! Runs that dead letters parked, for operators: what `GET /dead-letters` answers and
//! what `POST /dead-letters/redrive` did. A *dead letter* is a queue message
//! (`siesta::ports::DeadLetter`): a wake-up that kept failing; the run it woke is
//! parked, and these views show that run. To *redrive* is the operator's action of
//! resuming the runs dead letters parked.

use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::time::Rfc3339;

/// A run parked because a wake-up of its own was dead-lettered; its run id is what
/// `POST /dead-letters/{id}/redrive` takes.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct DeadLetteredRunView {
    /// The run the dead letter parked.
    pub run_id: String,
    /// The run's workflow.
    pub workflow: String,
    /// Why it was parked.
    pub reason: String,
    /// When it was parked: the run's last change, which is its parking unless a
    /// delivery arrived since.
    pub parked_at: Rfc3339,
    /// The run's version (its `ETag`): pass it as `If-Match` to redrive exactly this.
    pub version: u64,
}

/// A page of runs parked because a wake-up of their own was dead-lettered.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct DeadLetteredRunPage {
    /// The runs, newest first.
    pub dead_letters: Vec<DeadLetteredRunView>,
    /// Pass as `cursor` for the next page; `null` on the last page. A page may hold
    /// fewer than `limit` and still have a next one (runs parked for other reasons are
    /// skipped).
    pub next_cursor: Option<String>,
}

/// What `POST /dead-letters/redrive` did.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Redriven {
    /// How many runs were resumed.
    pub redriven: usize,
    /// Their ids.
    pub run_ids: Vec<String>,
}

/// Paging of `GET /dead-letters`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct DeadLetteredRunQuery {
    /// Where the previous page ended (its `next_cursor`).
    pub cursor: Option<String>,
    /// Dead letters per page, 1 to 200 (default 50).
    #[param(minimum = 1, maximum = 200)]
    pub limit: Option<u32>,
}
