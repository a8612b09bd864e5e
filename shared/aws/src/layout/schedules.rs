//! A schedule's state: one item per tenant and schedule (partition
//! [`schedules_pk`], sort key the schedule's name), its body the state's JSON and its
//! version beside it, written whole by one plain `PutItem` conditioned on the version
//! read (on no item for a state not stored yet). The sweep reads it each time it looks
//! at the schedule (one strongly consistent `GetItem`) and writes it only when a tick
//! was dealt with, a pause or a resume.

use siesta::TenantId;
use siesta::ports::{ScheduleState, StoreError};

use super::{Condition, PlannedWrite, Role, names};
use crate::item::*;
use crate::keys::*;

/// The key of `tenant`'s schedule `name`'s state.
pub(crate) fn schedule_key(tenant: &TenantId, name: &str) -> Item {
    key(schedules_pk(tenant), name)
}

/// The write of `state` as `tenant`'s schedule `name`'s, on the stored one being at
/// `state.version` (0: none stored); the item written is at the next version.
pub(crate) fn schedule_state_write(
    tenant: &TenantId,
    name: &str,
    state: &ScheduleState,
) -> Result<PlannedWrite, StoreError> {
    let mut item = schedule_key(tenant, name);
    item.insert(VERSION.to_owned(), n(state.version + 1));
    item.insert(BODY.to_owned(), s(to_json(state)?));
    let condition = if state.version == 0 {
        Condition::new_item()
    } else {
        Condition {
            expression: "#version = :version".into(),
            names: names(&[("#version", VERSION)]),
            values: Item::from([(":version".to_owned(), n(state.version))]),
        }
    };
    Ok(PlannedWrite::put(
        Role::Schedule,
        item,
        Some(condition),
        false,
    ))
}

/// The state a schedule's item holds, with its version.
pub(crate) fn schedule_state_of(item: &Item) -> Result<ScheduleState, StoreError> {
    let mut state: ScheduleState = from_json(item, "schedule")?;
    state.version = get_n(item, VERSION, "schedule")?;
    Ok(state)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{Action, write_units};
    use siesta::Timestamp;

    fn state(version: u64) -> ScheduleState {
        ScheduleState {
            paused: false,
            through: Timestamp(1_767_225_600_000),
            last_fired: Some(Timestamp(1_767_232_800_000)),
            buffered: None,
            version,
        }
    }

    #[test]
    fn a_first_state_is_put_on_no_item_and_a_later_one_on_the_version_read() {
        let tenant = TenantId::from("acme");
        let first = schedule_state_write(&tenant, "nightly-report", &state(0)).unwrap();
        assert_eq!(
            first.condition.as_ref().unwrap().expression,
            "attribute_not_exists(pk)"
        );
        let later = schedule_state_write(&tenant, "nightly-report", &state(4)).unwrap();
        let condition = later.condition.as_ref().unwrap();
        assert_eq!(condition.expression, "#version = :version");
        assert_eq!(condition.values[":version"], n(4));
        let Action::Put(item) = &later.action else {
            panic!("a put")
        };
        assert_eq!(item[VERSION], n(5));
        assert_eq!(item[PK], s("SCH#acme"));
        assert_eq!(item[SK], s("nightly-report"));
        assert!(!later.transactional);
    }

    #[test]
    fn a_state_reads_back_as_written_at_the_next_version_in_one_write_unit() {
        let write = schedule_state_write(&TenantId::from("acme"), "s", &state(2)).unwrap();
        let Action::Put(item) = &write.action else {
            panic!("a put")
        };
        assert_eq!(schedule_state_of(item).unwrap(), state(3));
        assert_eq!(write_units(item_size(item), false), 1.0);
    }
}
