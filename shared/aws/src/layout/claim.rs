//! A run's claim by a worker and the renewal of its lease: each one conditional
//! `UpdateItem` of the run item that moves the lease and the run's place in the `due`
//! index (its sweep time is the lease's expiry, so a worker that dies is swept), without
//! reading the item first — billed by the item it returns.

use std::collections::HashMap;

use siesta::ports::Claim;
use siesta::{FencingEpoch, RunId, RunStatus, TenantId, Timestamp};

use super::{Action, Billed, Condition, PlannedWrite, Role, names};
use crate::item::*;
use crate::keys::*;

/// The claim of run `run_id` by `claim.owner`: a new version and fencing epoch, the
/// lease, the run running and due when the lease runs out; on the condition that the run
/// exists, is not finished or parked, and holds no lease still running at `claim.now`.
pub(crate) fn claim(tenant: &TenantId, run_id: &RunId, claim: &Claim) -> PlannedWrite {
    let names = names(&[
        ("#status", STATUS),
        ("#version", VERSION),
        ("#epoch", EPOCH),
        ("#lease_epoch", LEASE_EPOCH),
        ("#lease_owner", LEASE_OWNER),
        ("#lease_expires", LEASE_EXPIRES),
        ("#due_at", DUE_AT),
        ("#sweep_at", SWEEP_AT),
        ("#resend_after", RESEND_AFTER),
        ("#due_shard", DUE_SHARD),
        ("#updated_at", UPDATED_AT),
    ]);
    let values = HashMap::from([
        (":running".to_owned(), s(RunStatus::Running.as_str())),
        (":one".to_owned(), n(1)),
        (":owner".to_owned(), s(&claim.owner)),
        (":expires".to_owned(), n(claim.expires_at.0)),
        (":shard".to_owned(), s(due_shard(tenant, run_id))),
        (":now".to_owned(), n(claim.now.0)),
    ]);
    let condition = Condition {
        expression: "attribute_exists(pk) AND #status IN (:pending, :running, :waiting) \
                     AND (attribute_not_exists(#lease_expires) OR #lease_expires <= :now)"
            .into(),
        names: HashMap::new(),
        values: HashMap::from([
            (":pending".to_owned(), s(RunStatus::Pending.as_str())),
            (":waiting".to_owned(), s(RunStatus::Waiting.as_str())),
        ]),
    };
    update_of_run(
        tenant,
        run_id,
        "SET #status = :running, #version = #version + :one, #epoch = #epoch + :one, \
         #lease_epoch = #epoch + :one, #lease_owner = :owner, #lease_expires = :expires, \
         #due_at = :expires, #sweep_at = :expires, #due_shard = :shard, \
         #updated_at = :now REMOVE #resend_after",
        names,
        values,
        condition,
    )
}

/// The renewal of the lease of epoch `epoch` until `expires_at`: the lease and the run's
/// sweep time move, nothing else (no new version: a delivery that read the run before
/// is told by the lease expiry it writes back, see [`super::Expected`]).
pub(crate) fn renewal(
    tenant: &TenantId,
    run_id: &RunId,
    epoch: FencingEpoch,
    expires_at: Timestamp,
) -> PlannedWrite {
    let names = names(&[
        ("#lease_epoch", LEASE_EPOCH),
        ("#lease_expires", LEASE_EXPIRES),
        ("#due_at", DUE_AT),
        ("#sweep_at", SWEEP_AT),
        ("#resend_after", RESEND_AFTER),
        ("#due_shard", DUE_SHARD),
    ]);
    let values = HashMap::from([
        (":expires".to_owned(), n(expires_at.0)),
        (":shard".to_owned(), s(due_shard(tenant, run_id))),
    ]);
    let condition = Condition {
        expression: "#lease_epoch = :epoch".into(),
        names: HashMap::new(),
        values: HashMap::from([(":epoch".to_owned(), n(epoch.0))]),
    };
    update_of_run(
        tenant,
        run_id,
        "SET #lease_expires = :expires, #due_at = :expires, #sweep_at = :expires, \
         #due_shard = :shard REMOVE #resend_after",
        names,
        values,
        condition,
    )
}

/// A plain update of the run item, returning the item after it (by which it is billed).
fn update_of_run(
    tenant: &TenantId,
    run_id: &RunId,
    expression: &str,
    names: HashMap<String, String>,
    values: Item,
    condition: Condition,
) -> PlannedWrite {
    PlannedWrite {
        role: Role::Run,
        action: Action::Update {
            key: key(run_pk(tenant, run_id), RUN_SK),
            expression: expression.to_owned(),
            names,
            values,
        },
        condition: Some(condition),
        transactional: false,
        billed: Billed::Returned,
        run_after: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::fixtures::*;

    fn ids() -> (TenantId, RunId) {
        (TenantId("t".into()), RunId("r".into()))
    }

    #[test]
    fn a_claim_takes_a_run_not_finished_whose_lease_ran_out_and_makes_it_due_when_its_own_does() {
        let (tenant, run_id) = ids();
        let write = claim(
            &tenant,
            &run_id,
            &Claim {
                owner: "w1".into(),
                now: Timestamp(10_000),
                expires_at: Timestamp(40_000),
            },
        );
        assert_eq!(
            condition(&write).expression,
            "attribute_exists(pk) AND #status IN (:pending, :running, :waiting) \
             AND (attribute_not_exists(#lease_expires) OR #lease_expires <= :now)"
        );
        let values = values(&write);
        assert_eq!(values.get(":now"), Some(&n(10_000)));
        assert_eq!(values.get(":expires"), Some(&n(40_000)));
        assert!(update_expression(&write).contains("#sweep_at = :expires"));
        // One plain request, billed by the item it returns (it reads none before).
        assert!(!write.transactional);
        assert_eq!(write.billed, Billed::Returned);
    }

    #[test]
    fn a_renewal_moves_the_lease_only_under_its_epoch() {
        let (tenant, run_id) = ids();
        let write = renewal(&tenant, &run_id, FencingEpoch(7), Timestamp(70_000));
        assert_eq!(condition(&write).expression, "#lease_epoch = :epoch");
        assert_eq!(values(&write).get(":epoch"), Some(&n(7)));
        let update = update_expression(&write);
        assert!(update.contains("#lease_expires = :expires"));
        assert!(!update.contains("#version"), "no new version: {update}");
        assert_eq!(write.billed, Billed::Returned);
    }
}
