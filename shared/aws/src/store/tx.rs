//! Sending what a plan ([`crate::layout`]) decided: its plain writes as `PutItem` and
//! `UpdateItem` requests, its transactional ones as one `TransactWriteItems` — retried
//! while only contention cancels it, each item's role kept so that a cancellation
//! reason can be traced to its cause — and each write noted in the cost breakdown as
//! the plan bills it. No layout is decided here.

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::operation::update_item::{UpdateItemError, UpdateItemOutput};
use aws_sdk_dynamodb::types::{
    ConditionCheck, Delete, Put, ReturnConsumedCapacity, ReturnValue,
    ReturnValuesOnConditionCheckFailure, TransactWriteItem, Update,
};
use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use siesta::ports::*;

use super::{DynamoStore, RACE_ATTEMPTS};
use crate::error::sdk;
use crate::item::*;
use crate::layout::{Action, Billed, Condition, PlannedWrite, Role, WritePlan};

/// One reason a transaction was cancelled, for the item at the same index.
#[derive(Debug)]
pub(super) struct Reason {
    pub(super) code: String,
    pub(super) item: Option<Item>,
}

impl Reason {
    fn condition_failed(&self) -> bool {
        self.code == "ConditionalCheckFailed"
    }
}

/// How a transaction ended. (An `Err` from [`DynamoStore::transact`] is an outcome
/// not known: the transaction may have committed.)
pub(super) enum TxOutcome {
    Committed,
    /// Cancelled: the reasons, one per item, with the roles of the items.
    Cancelled(Vec<(Role, Reason)>),
    /// Not written, for certain, and not for a condition: refused before it was sent,
    /// invalid, or cancelled for contention or throttling every time it was tried.
    NotWritten(StoreError),
}

pub(super) fn build<T, E: std::fmt::Display>(r: Result<T, E>) -> Result<T, StoreError> {
    r.map_err(|e| StoreError::Invalid(format!("building a DynamoDB request: {e}")))
}

/// The names and values of an update and its condition, together (one request holds
/// both), `None` when empty.
fn placeholders(
    names: &HashMap<String, String>,
    values: &Item,
    condition: Option<&Condition>,
) -> (Option<HashMap<String, String>>, Option<Item>) {
    let mut names = names.clone();
    let mut values = values.clone();
    if let Some(c) = condition {
        names.extend(c.names.clone());
        values.extend(c.values.clone());
    }
    (
        Some(names).filter(|n| !n.is_empty()),
        Some(values).filter(|v| !v.is_empty()),
    )
}

/// `write` as an item of a `TransactWriteItems` on `table`. A failed condition returns
/// the item as it was (but a check's, which has nothing to return).
fn transact_item(table: &str, write: &PlannedWrite) -> Result<TransactWriteItem, StoreError> {
    let condition = write.condition.as_ref();
    let expression = condition.map(|c| c.expression.clone());
    let old = condition.map(|_| ReturnValuesOnConditionCheckFailure::AllOld);
    let item = TransactWriteItem::builder();
    Ok(match &write.action {
        Action::Put(put) => {
            let (names, values) = placeholders(&HashMap::new(), &Item::new(), condition);
            let put = Put::builder()
                .table_name(table)
                .set_item(Some(put.clone()))
                .set_condition_expression(expression)
                .set_expression_attribute_names(names)
                .set_expression_attribute_values(values)
                .set_return_values_on_condition_check_failure(old);
            item.put(build(put.build())?).build()
        }
        Action::Update {
            key,
            expression: update,
            names,
            values,
        } => {
            let (names, values) = placeholders(names, values, condition);
            let update = Update::builder()
                .table_name(table)
                .set_key(Some(key.clone()))
                .update_expression(update)
                .set_condition_expression(expression)
                .set_expression_attribute_names(names)
                .set_expression_attribute_values(values)
                .set_return_values_on_condition_check_failure(old);
            item.update(build(update.build())?).build()
        }
        Action::Check { key } => {
            let (names, values) = placeholders(&HashMap::new(), &Item::new(), condition);
            let check = ConditionCheck::builder()
                .table_name(table)
                .set_key(Some(key.clone()))
                .set_condition_expression(expression)
                .set_expression_attribute_names(names)
                .set_expression_attribute_values(values);
            item.condition_check(build(check.build())?).build()
        }
        Action::Delete { key } => {
            let (names, values) = placeholders(&HashMap::new(), &Item::new(), condition);
            let delete = Delete::builder()
                .table_name(table)
                .set_key(Some(key.clone()))
                .set_condition_expression(expression)
                .set_expression_attribute_names(names)
                .set_expression_attribute_values(values)
                .set_return_values_on_condition_check_failure(old);
            item.delete(build(delete.build())?).build()
        }
    })
}

impl DynamoStore {
    /// Send `plan`'s transaction; contention-only cancellations are retried a few
    /// times.
    pub(super) async fn transact(
        &self,
        op: &str,
        plan: &WritePlan,
    ) -> Result<TxOutcome, StoreError> {
        let writes: Vec<&PlannedWrite> = plan.transaction().collect();
        if writes.len() > MAX_TRANSACTION_ITEMS {
            return Ok(TxOutcome::NotWritten(StoreError::Invalid(format!(
                "{op}: {} items exceed DynamoDB's {MAX_TRANSACTION_ITEMS} per transaction",
                writes.len()
            ))));
        }
        // A request the SDK cannot build is not written, for certain.
        let items = match writes
            .iter()
            .map(|w| transact_item(&self.table, w))
            .collect::<Result<Vec<_>, _>>()
        {
            Ok(items) => items,
            Err(e) => return Ok(TxOutcome::NotWritten(e)),
        };
        let mut backoff = Duration::from_millis(10);
        for attempt in 1..=RACE_ATTEMPTS {
            let result = self
                .client
                .transact_write_items()
                .set_transact_items(Some(items.clone()))
                // Idempotency window: an SDK retry of this very call after a timeout is
                // answered as the original, never applied twice.
                .client_request_token(uuid::Uuid::new_v4().to_string())
                .return_consumed_capacity(ReturnConsumedCapacity::Total)
                .send()
                .await;
            match result {
                Ok(out) => {
                    self.capacity.add(true, out.consumed_capacity());
                    for write in &writes {
                        self.capacity.note_planned(op, write, None);
                    }
                    return Ok(TxOutcome::Committed);
                }
                Err(e) => {
                    let cancelled = match e.as_service_error() {
                        Some(TransactWriteItemsError::TransactionCanceledException(c)) => c
                            .cancellation_reasons()
                            .iter()
                            .map(|r| Reason {
                                code: r.code().unwrap_or("None").to_owned(),
                                item: r.item().cloned(),
                            })
                            .collect::<Vec<_>>(),
                        _ => {
                            // Refused for what the request is, which every attempt
                            // of it would have drawn: it was not written. Any other
                            // error may follow an attempt that committed.
                            let refused = matches!(e, SdkError::ConstructionFailure(_))
                                || e.as_service_error().and_then(|s| s.meta().code())
                                    == Some("ValidationException");
                            let error = sdk(op, e);
                            return match refused {
                                true => Ok(TxOutcome::NotWritten(error)),
                                false => Err(error),
                            };
                        }
                    };
                    if cancelled.iter().any(Reason::condition_failed) {
                        return Ok(TxOutcome::Cancelled(
                            writes.iter().map(|w| w.role).zip(cancelled).collect(),
                        ));
                    }
                    if cancelled.iter().any(|r| {
                        r.code == "ValidationError" || r.code == "ItemCollectionSizeLimitExceeded"
                    }) {
                        return Ok(TxOutcome::NotWritten(StoreError::Invalid(format!(
                            "{op}: {cancelled:?}"
                        ))));
                    }
                    // Contention or throttling only: nothing was written; try again.
                    if attempt == RACE_ATTEMPTS {
                        return Ok(TxOutcome::NotWritten(StoreError::Unavailable(format!(
                            "{op}: transaction kept being cancelled: {cancelled:?}"
                        ))));
                    }
                    tokio::time::sleep(backoff).await;
                    backoff *= 2;
                }
            }
        }
        unreachable!("the loop returns on its last attempt")
    }
}

impl DynamoStore {
    /// Send `write`, a plain put, counting its capacity and noting it in the cost
    /// breakdown under `op`. `Ok(false)` when its condition (that its key is new) failed.
    pub(super) async fn put_plain(
        &self,
        op: &str,
        write: &PlannedWrite,
    ) -> Result<bool, StoreError> {
        let Action::Put(item) = &write.action else {
            return Err(StoreError::Invalid(format!(
                "{op}: a put planned as {:?}",
                write.action
            )));
        };
        let condition = write.condition.as_ref();
        let (names, values) = placeholders(&HashMap::new(), &Item::new(), condition);
        let result = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item.clone()))
            .set_condition_expression(condition.map(|c| c.expression.clone()))
            .set_expression_attribute_names(names)
            .set_expression_attribute_values(values)
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await;
        match result {
            Ok(out) => {
                self.capacity.add(true, out.consumed_capacity());
                self.capacity.note_planned(op, write, None);
                Ok(true)
            }
            Err(e)
                if condition.is_some()
                    && matches!(
                        e.as_service_error(),
                        Some(PutItemError::ConditionalCheckFailedException(_))
                    ) =>
            {
                Ok(false)
            }
            Err(e) => Err(sdk(&format!("{op}: put {}", write.role.label()), e)),
        }
    }

    /// Send `write`, a plain update (returning the item after it when the plan bills
    /// it by that, [`Billed::Returned`]; the item as it was when its condition fails).
    /// Its capacity is counted and its cost noted when it applies.
    pub(super) async fn update_plain(
        &self,
        op: &str,
        write: &PlannedWrite,
    ) -> Result<Result<UpdateItemOutput, SdkError<UpdateItemError, HttpResponse>>, StoreError> {
        let Action::Update {
            key,
            expression,
            names,
            values,
        } = &write.action
        else {
            return Err(StoreError::Invalid(format!(
                "{op}: an update planned as {:?}",
                write.action
            )));
        };
        let condition = write.condition.as_ref();
        let (names, values) = placeholders(names, values, condition);
        let returned = write.billed == Billed::Returned;
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(key.clone()))
            .update_expression(expression)
            .set_condition_expression(condition.map(|c| c.expression.clone()))
            .set_expression_attribute_names(names)
            .set_expression_attribute_values(values)
            .set_return_values(returned.then_some(ReturnValue::AllNew))
            .set_return_values_on_condition_check_failure(
                condition.map(|_| ReturnValuesOnConditionCheckFailure::AllOld),
            )
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await;
        if let Ok(out) = &result {
            self.capacity.add(true, out.consumed_capacity());
            self.capacity.note_planned(op, write, out.attributes());
        }
        Ok(result)
    }
}

pub(super) fn reason_of(reasons: &[(Role, Reason)], role: Role) -> Option<&Reason> {
    reasons
        .iter()
        .filter(|(r, _)| *r == role)
        .map(|(_, reason)| reason)
        .find(|r| r.condition_failed())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{Condition, unfinished_count};
    use siesta::TenantId;

    #[test]
    fn a_planned_write_is_sent_as_planned_its_conditions_placeholders_beside_the_updates() {
        // An insert: its condition alone, no placeholders, the item as it was on failure.
        let insert = PlannedWrite::insert(Role::DeliveryRecord, key("R#t#r".into(), "D#1"));
        let put = transact_item("runs", &insert).unwrap().put.unwrap();
        assert_eq!(
            put.condition_expression(),
            Some(Condition::new_item().expression.as_str())
        );
        assert!(put.expression_attribute_names().is_none());
        assert_eq!(
            put.return_values_on_condition_check_failure(),
            Some(&ReturnValuesOnConditionCheckFailure::AllOld)
        );
        // A counter under a limit: the update's name serves its condition's value too.
        let counted = unfinished_count(&TenantId("t".into()), 1, Some(5));
        let update = transact_item("runs", &counted).unwrap().update.unwrap();
        assert_eq!(update.update_expression(), "ADD #unfinished :delta");
        let values = update.expression_attribute_values().unwrap();
        assert_eq!(
            (values.get(":delta"), values.get(":max")),
            (Some(&n(1)), Some(&n(5)))
        );
        // Without a limit: no condition, nothing returned on failure.
        let unlimited = unfinished_count(&TenantId("t".into()), -1, None);
        let update = transact_item("runs", &unlimited).unwrap().update.unwrap();
        assert!(update.condition_expression().is_none());
        assert!(update.return_values_on_condition_check_failure().is_none());
    }
}
