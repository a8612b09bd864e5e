//! A workflow's pause: one item per tenant and workflow (partition
//! [`workflow_pauses_pk`], sort key the workflow's name), its body the pause's JSON and
//! its version beside it, written whole by one plain `PutItem` conditioned on the
//! version read, like a schedule's state. A start of a workflow reads it (one
//! `GetItem`), at most once a second per process and workflow (the engine keeps what it
//! read that long).

use siesta::TenantId;
use siesta::ports::{StoreError, WorkflowPause};

use super::{Condition, PlannedWrite, Role, names};
use crate::item::*;
use crate::keys::*;

/// The key of `tenant`'s workflow `workflow`'s pause.
pub(crate) fn workflow_pause_key(tenant: &TenantId, workflow: &str) -> Item {
    key(workflow_pauses_pk(tenant), workflow)
}

/// The write of `pause` as `tenant`'s workflow `workflow`'s, on the stored one being at
/// `pause.version` (0: none stored); the item written is at the next version.
pub(crate) fn workflow_pause_write(
    tenant: &TenantId,
    workflow: &str,
    pause: &WorkflowPause,
) -> Result<PlannedWrite, StoreError> {
    let mut item = workflow_pause_key(tenant, workflow);
    item.insert(VERSION.to_owned(), n(pause.version + 1));
    item.insert(BODY.to_owned(), s(to_json(pause)?));
    let condition = if pause.version == 0 {
        Condition::new_item()
    } else {
        Condition {
            expression: "#version = :version".into(),
            names: names(&[("#version", VERSION)]),
            values: Item::from([(":version".to_owned(), n(pause.version))]),
        }
    };
    Ok(PlannedWrite::put(
        Role::WorkflowPause,
        item,
        Some(condition),
        false,
    ))
}

/// The pause a workflow's item holds, with its version.
pub(crate) fn workflow_pause_of(item: &Item) -> Result<WorkflowPause, StoreError> {
    let mut pause: WorkflowPause = from_json(item, "workflow pause")?;
    pause.version = get_n(item, VERSION, "workflow pause")?;
    Ok(pause)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::Action;
    use siesta::Timestamp;
    use siesta::ports::PausedStarts;

    fn pause(version: u64) -> WorkflowPause {
        WorkflowPause {
            paused: true,
            starts: PausedStarts::Refuse,
            by: "ops".into(),
            at: Timestamp(5),
            version,
        }
    }

    #[test]
    fn a_pause_is_put_on_no_item_first_then_on_the_version_read_and_reads_back() {
        let tenant = TenantId::from("acme");
        let first = workflow_pause_write(&tenant, "report", &pause(0)).unwrap();
        assert_eq!(
            first.condition.as_ref().unwrap().expression,
            "attribute_not_exists(pk)"
        );
        let later = workflow_pause_write(&tenant, "report", &pause(2)).unwrap();
        assert_eq!(later.condition.as_ref().unwrap().values[":version"], n(2));
        let Action::Put(item) = &later.action else {
            panic!("a put")
        };
        assert_eq!(item[PK], s("WFP#acme"));
        assert_eq!(item[SK], s("report"));
        assert_eq!(workflow_pause_of(item).unwrap(), pause(3));
    }
}
