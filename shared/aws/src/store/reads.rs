//! The store's reads: strongly consistent gets (one item, or a batch of keys) and paged
//! queries, their read units counted. The reaper reads through the same two functions.

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::operation::query::builders::QueryFluentBuilder;
use aws_sdk_dynamodb::types::{KeysAndAttributes, ReturnConsumedCapacity};
use siesta::ports::*;

use super::tx::build;
use super::{CapacityMeter, DynamoStore};
use crate::error::{corrupt, sdk};
use crate::item::*;
use crate::keys::*;

/// A strongly consistent read of one item, its read units counted in `capacity`: the
/// store's and the reaper's reads of a run item.
pub(crate) async fn consistent_get(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    capacity: &CapacityMeter,
    op: &str,
    key: Item,
) -> Result<Option<Item>, StoreError> {
    let out = client
        .get_item()
        .table_name(table)
        .set_key(Some(key))
        .consistent_read(true)
        .return_consumed_capacity(ReturnConsumedCapacity::Total)
        .send()
        .await
        .map_err(|e| sdk(op, e))?;
    capacity.add(false, out.consumed_capacity());
    Ok(out.item)
}

/// One page of a `Query` (its table and key condition already set) from `start`, its
/// read units counted in `capacity`: the items, and where the next page starts (`None`
/// after the last). Every paged query of the store and of the reaper goes through it.
pub(crate) async fn query_page(
    query: QueryFluentBuilder,
    capacity: &CapacityMeter,
    op: &str,
    start: Option<Item>,
) -> Result<(Vec<Item>, Option<Item>), StoreError> {
    let out = query
        .set_exclusive_start_key(start)
        .return_consumed_capacity(ReturnConsumedCapacity::Total)
        .send()
        .await
        .map_err(|e| sdk(op, e))?;
    capacity.add(false, out.consumed_capacity());
    let next = out.last_evaluated_key.filter(|k| !k.is_empty());
    Ok((out.items.unwrap_or_default(), next))
}

impl DynamoStore {
    pub(super) async fn get_item(&self, op: &str, key: Item) -> Result<Option<Item>, StoreError> {
        consistent_get(&self.client, &self.table, &self.capacity, op, key).await
    }

    /// Strongly consistent reads of up to 100 keys in one request (plus retries of
    /// unprocessed keys), returned by key.
    pub(super) async fn batch_get(
        &self,
        op: &str,
        keys: Vec<Item>,
    ) -> Result<HashMap<(String, String), Item>, StoreError> {
        let mut found = HashMap::new();
        let mut pending = Some(build(
            KeysAndAttributes::builder()
                .set_keys(Some(keys))
                .consistent_read(true)
                .build(),
        )?);
        let mut backoff = Duration::from_millis(10);
        while let Some(request) = pending.take() {
            let out = self
                .client
                .batch_get_item()
                .request_items(&self.table, request)
                .return_consumed_capacity(ReturnConsumedCapacity::Total)
                .send()
                .await
                .map_err(|e| sdk(op, e))?;
            self.capacity.add(false, out.consumed_capacity());
            for item in out
                .responses
                .unwrap_or_default()
                .remove(&self.table)
                .unwrap_or_default()
            {
                let key = item_key(&item)?;
                found.insert(key, item);
            }
            pending = out
                .unprocessed_keys
                .and_then(|mut u| u.remove(&self.table))
                .filter(|k| !k.keys().is_empty());
            if pending.is_some() {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
            }
        }
        Ok(found)
    }

    pub(super) async fn query_pages(
        &self,
        op: &str,
        build_query: impl Fn(QueryFluentBuilder) -> QueryFluentBuilder,
        limit: Option<usize>,
    ) -> Result<Vec<Item>, StoreError> {
        let mut items = Vec::new();
        let mut start = None;
        loop {
            let mut q = build_query(self.client.query().table_name(&self.table));
            if let Some(limit) = limit {
                q = q.limit((limit - items.len()).min(1000) as i32);
            }
            let (page, next) = query_page(q, &self.capacity, op, start).await?;
            items.extend(page);
            start = next;
            if start.is_none() || limit.is_some_and(|l| items.len() >= l) {
                return Ok(items);
            }
        }
    }
}

pub(super) fn item_key(item: &Item) -> Result<(String, String), StoreError> {
    match (item.get(PK), item.get(SK)) {
        (
            Some(aws_sdk_dynamodb::types::AttributeValue::S(pk)),
            Some(aws_sdk_dynamodb::types::AttributeValue::S(sk)),
        ) => Ok((pk.clone(), sk.clone())),
        _ => Err(corrupt("table", "an item without pk/sk")),
    }
}
