//! The index writes the cost breakdown counts (`siesta_aws::index_writes`) are the ones
//! DynamoDB reports for plain writes, on the table `siesta bootstrap` declares: a run
//! item created, its `due` entry moved, a projected attribute changed, an attribute no
//! index holds changed, and the item deleted.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

mod support;

use std::collections::HashMap;

use aws_sdk_dynamodb::types::{AttributeValue, ConsumedCapacity, ReturnConsumedCapacity};
use siesta_aws::index_writes::index_writes;
use siesta_aws::keys::*;

type Item = HashMap<String, AttributeValue>;

fn s(v: &str) -> AttributeValue {
    AttributeValue::S(v.to_owned())
}

fn n(v: i64) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

/// The index units DynamoDB reported, by index.
fn reported(consumed: Option<&ConsumedCapacity>) -> HashMap<String, u32> {
    consumed
        .and_then(|c| c.global_secondary_indexes())
        .map(|indexes| {
            indexes
                .iter()
                .filter_map(|(name, c)| Some((name.clone(), c.capacity_units()? as u32)))
                .filter(|(_, units)| *units > 0)
                .collect()
        })
        .unwrap_or_default()
}

/// What `siesta_aws::index_writes` counts, by index.
fn counted(before: Option<&Item>, after: Option<&Item>) -> HashMap<String, u32> {
    index_writes(before, after)
        .into_iter()
        .map(|w| (w.index.to_owned(), w.writes))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_index_writes_counted_are_the_ones_dynamodb_reports_for_plain_writes() {
    let Some(env) = support::emulators().await else {
        return;
    };
    let client = aws_sdk_dynamodb::Client::new(&env.sdk);
    let run_pk = format!("R#t-{}#r", uuid::Uuid::new_v4().simple());
    let key: Item = [(PK.to_owned(), s(&run_pk)), (SK.to_owned(), s("RUN"))].into();
    let mut item = key.clone();
    for (name, value) in [
        (TENANT, s("t")),
        (CREATED_KEY, s("00000001#r")),
        (BUILD_KEY, s("B#t#v1")),
        (DUE_SHARD, s("3")),
        (SWEEP_AT, n(1_000)),
        (DUE_AT, n(1_000)),
        ("status", s("pending")),
        ("body", s("{}")),
    ] {
        item.insert(name.to_owned(), value);
    }

    let put = client
        .put_item()
        .table_name(&env.table)
        .set_item(Some(item.clone()))
        .return_consumed_capacity(ReturnConsumedCapacity::Indexes)
        .send()
        .await
        .unwrap();
    let created = counted(None, Some(&item));
    assert_eq!(created.len(), 3, "due, by_tenant, by_build: {created:?}");
    assert_eq!(reported(put.consumed_capacity()), created);

    // Each change as an UpdateItem, compared with what the model counts for it.
    let changes: [(&str, &str, AttributeValue); 3] = [
        ("the due entry's sort key moves", SWEEP_AT, n(2_000)),
        ("a projected attribute changes", "status", s("running")),
        (
            "an attribute no index holds changes",
            "body",
            s("{\"a\":1}"),
        ),
    ];
    for (what, name, value) in changes {
        let before = item.clone();
        item.insert(name.to_owned(), value.clone());
        let update = client
            .update_item()
            .table_name(&env.table)
            .set_key(Some(key.clone()))
            .update_expression("SET #a = :v")
            .expression_attribute_names("#a", name)
            .expression_attribute_values(":v", value)
            .return_consumed_capacity(ReturnConsumedCapacity::Indexes)
            .send()
            .await
            .unwrap();
        assert_eq!(
            reported(update.consumed_capacity()),
            counted(Some(&before), Some(&item)),
            "{what}"
        );
    }
    assert_eq!(
        counted(None, Some(&item)).get(DUE_INDEX),
        Some(&1),
        "the model saw the due entry"
    );

    let deleted = client
        .delete_item()
        .table_name(&env.table)
        .set_key(Some(key))
        .return_consumed_capacity(ReturnConsumedCapacity::Indexes)
        .send()
        .await
        .unwrap();
    assert_eq!(
        reported(deleted.consumed_capacity()),
        counted(Some(&item), None)
    );
}
