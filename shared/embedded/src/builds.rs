//! Which builds a tenant's runs started on, kept by the file itself.
//!
//! A run records the build it started on ([`siesta::Run::build_id`]) in its body; the
//! `build` column repeats it where SQL can see it, so that an operator's view of the
//! builds ([`siesta::ports::RunStore::builds`]) costs what the tenant's builds and
//! unfinished runs number, not what it has ever run:
//! - `tenant_builds`, one row per tenant and build with the creation times of its
//!   first and latest run, kept by triggers on `runs` (insert, and an upgrade that moves
//!   a run to another build), in the same transaction as the change;
//! - `runs_unfinished_by_build`, a partial index of the unfinished runs by tenant,
//!   build and status, which the count by status reads alone. It holds no column a
//!   checkpoint of a running run changes (the body, the due time), so only a status
//!   change or an upgrade writes to it.
//!
//! The column, the table, the index and the triggers are the file's schema version 1
//! (see `layout::MIGRATIONS`): a file made before them gets them, and its runs
//! counted, once, when it is opened.

use std::collections::BTreeMap;

use rusqlite::{Connection, params};
use siesta::ports::{BuildSummary, StoreError};
use siesta::{RunStatus, TenantId, Timestamp};

use crate::sql;

/// Schema version 1: the runs' build, the table of builds per tenant, the index of
/// unfinished runs by build, and the triggers that keep the table.
pub(crate) const SCHEMA: &str = "
ALTER TABLE runs ADD COLUMN build TEXT;
CREATE TABLE IF NOT EXISTS tenant_builds (
    tenant TEXT NOT NULL, build TEXT NOT NULL, first_seen INTEGER NOT NULL, last_seen INTEGER NOT NULL,
    PRIMARY KEY (tenant, build)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS runs_unfinished_by_build ON runs (tenant, build, status)
    WHERE build IS NOT NULL AND status NOT IN ('completed', 'failed', 'cancelled');
CREATE TRIGGER IF NOT EXISTS tenant_builds_insert AFTER INSERT ON runs
    WHEN new.build IS NOT NULL
    BEGIN
        INSERT INTO tenant_builds (tenant, build, first_seen, last_seen)
            VALUES (new.tenant, new.build, new.created_at, new.created_at)
            ON CONFLICT (tenant, build) DO UPDATE SET
                first_seen = min(first_seen, excluded.first_seen),
                last_seen = max(last_seen, excluded.last_seen);
    END;
CREATE TRIGGER IF NOT EXISTS tenant_builds_upgrade AFTER UPDATE OF build ON runs
    WHEN new.build IS NOT NULL
    BEGIN
        INSERT INTO tenant_builds (tenant, build, first_seen, last_seen)
            VALUES (new.tenant, new.build, new.created_at, new.created_at)
            ON CONFLICT (tenant, build) DO UPDATE SET
                first_seen = min(first_seen, excluded.first_seen),
                last_seen = max(last_seen, excluded.last_seen);
    END;
";

/// What [`SCHEMA`] needs of a file that already holds runs: their build read from
/// their body (the upgrade trigger fills the builds table as it goes). Once, when the
/// file gets version 1.
pub(crate) const BACKFILL: &str = "UPDATE runs SET build = json_extract(body, '$.build_id')";

/// The tenant's builds, by build id.
const BUILDS: &str =
    "SELECT build, first_seen, last_seen FROM tenant_builds WHERE tenant = ?1 ORDER BY build";

/// Schema version 9: [`SCHEMA`]'s partial index again, its condition written as three
/// `<>` instead of a `NOT IN` list, which SQLite evaluates by building a temporary table
/// on every insert and status change of a run (a third of a status update's
/// instructions); the query below names the same condition, so it still reads the index.
pub(crate) const INDEX_WITHOUT_NOT_IN: &str = "
DROP INDEX IF EXISTS runs_unfinished_by_build;
CREATE INDEX runs_unfinished_by_build ON runs (tenant, build, status)
    WHERE build IS NOT NULL AND status <> 'completed' AND status <> 'failed' AND status <> 'cancelled';
";

/// The tenant's unfinished runs by build and status, from the partial index alone.
const UNFINISHED_BY_BUILD: &str =
    "SELECT build, status, count(*) FROM runs INDEXED BY runs_unfinished_by_build
     WHERE tenant = ?1 AND build IS NOT NULL AND status <> 'completed' AND status <> 'failed' AND status <> 'cancelled'
     GROUP BY build, status";

/// Move a run to another build (an upgrade); the trigger notes the build for its
/// tenant.
pub(crate) const SET_BUILD: &str = "UPDATE runs SET build = ?3 WHERE tenant = ?1 AND run_id = ?2";

/// `tenant`'s builds, each with its unfinished runs by status.
pub(crate) fn of_tenant(
    conn: &Connection,
    tenant: &TenantId,
) -> Result<Vec<BuildSummary>, StoreError> {
    let mut builds: Vec<BuildSummary> = conn
        .prepare_cached(BUILDS)
        .map_err(sql)?
        .query_map(params![tenant.0], |r| {
            Ok(BuildSummary {
                build_id: r.get(0)?,
                first_seen: Timestamp(r.get(1)?),
                last_seen: Timestamp(r.get(2)?),
                unfinished: BTreeMap::new(),
            })
        })
        .map_err(sql)?
        .collect::<Result<_, _>>()
        .map_err(sql)?;
    let counts: Vec<(String, String, i64)> = conn
        .prepare_cached(UNFINISHED_BY_BUILD)
        .map_err(sql)?
        .query_map(params![tenant.0], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .map_err(sql)?
        .collect::<Result<_, _>>()
        .map_err(sql)?;
    for (build, status, n) in counts {
        let status = RunStatus::ALL
            .into_iter()
            .find(|s| s.as_str() == status)
            .ok_or_else(|| StoreError::Invalid(format!("corrupt record: run status {status:?}")))?;
        if let Ok(i) = builds.binary_search_by(|b| b.build_id.as_str().cmp(&build)) {
            builds[i].unfinished.insert(status, n.max(0) as u64);
        }
    }
    Ok(builds)
}
