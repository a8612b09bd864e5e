//! What a storage backend can report, and whether it may be retried.

use super::*;

/// What a storage backend can report.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A condition failed (stale version, lost lease, closed callback...). Carries the
    /// run as it is now, when there is one.
    #[error("conflict: the run changed under this writer")]
    Conflict(Option<Box<Run>>),
    /// The thing addressed does not exist (for this tenant).
    #[error("not found")]
    NotFound,
    /// An item with this key already exists.
    #[error("already exists")]
    AlreadyExists,
    /// The callback or run no longer accepts this (closed, timed out, finished).
    #[error("gone: {0}")]
    Gone(String),
    /// Throttled, unavailable or timed out; trying again may work, and a write may or
    /// may not have been applied.
    #[error("storage unavailable: {0}")]
    Unavailable(String),
    /// The request itself is wrong (too large, malformed); retrying will not help.
    #[error("invalid request: {0}")]
    Invalid(String),
    /// The backend does not offer this operation (yet); retrying will not help.
    #[error("not supported by this backend: {0}")]
    Unsupported(String),
    /// [`RunStore::create_run_within`]: the tenant has as many unfinished runs as it may
    /// (the message says how many); nothing was written.
    #[error("over quota: {0}")]
    OverQuota(String),
}

impl StoreError {
    /// Whether a retry of the same call might succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(self, StoreError::Unavailable(_))
    }
}
