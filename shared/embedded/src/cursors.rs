//! Cursors of the run list: where a page ended, as the caller is handed it.

use siesta::ports::StoreError;

/// Where a page of a list ends: the last run listed, which the next page starts after.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ListPosition {
    /// Its creation time and run key: `created_at.key` (what cursors hold).
    Keyed { created_at: i64, key: i64 },
    /// Its creation time and run id: `created_at:run_id`, what a cursor handed out
    /// before run keys held; still accepted, so a client paging across the upgrade
    /// goes on where it was.
    ByRunId { created_at: i64, run_id: String },
}

impl ListPosition {
    /// The cursor of a page that ends at the run created at `created_at` with key `key`
    /// (cursors are handed out [`ListPosition::Keyed`] only).
    pub(crate) fn cursor(created_at: i64, key: i64) -> String {
        siesta::cursor::encode(&format!("{created_at}.{key}"))
    }

    pub(crate) fn decode(cursor: &str) -> Result<Self, StoreError> {
        let malformed = || StoreError::Invalid("malformed cursor".into());
        let position = siesta::cursor::decode(cursor)?;
        if let Some((created_at, run_id)) = position.split_once(':') {
            return Ok(ListPosition::ByRunId {
                created_at: created_at.parse().map_err(|_| malformed())?,
                run_id: run_id.to_owned(),
            });
        }
        let (created_at, key) = position.split_once('.').ok_or_else(malformed)?;
        Ok(ListPosition::Keyed {
            created_at: created_at.parse().map_err(|_| malformed())?,
            key: key.parse().map_err(|_| malformed())?,
        })
    }
}
