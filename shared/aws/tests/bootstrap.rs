//! `Plan::create` builds the resources the template declares, and running it again
//! changes nothing.

use aws_sdk_sqs::types::QueueAttributeName;
use siesta_aws::bootstrap::{NewResources, Plan};
use siesta_aws::testing::emulators;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bootstrap_creates_the_template_resources_and_is_idempotent() {
    let Some(env) = emulators().await else {
        return;
    };
    let names = NewResources::with_prefix(&format!(
        "siesta-boot-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..10]
    ));
    let plan = Plan::from_embedded_template().unwrap();
    let first = plan.create(&env.sdk, &names).await.expect("bootstrap");
    let second = plan
        .create(&env.sdk, &names)
        .await
        .expect("bootstrap again");
    assert_eq!(first, second, "the same resources, found again");

    let table = aws_sdk_dynamodb::Client::new(&env.sdk)
        .describe_table()
        .table_name(&names.table)
        .send()
        .await
        .unwrap()
        .table
        .unwrap();
    let mut indexes: Vec<String> = table
        .global_secondary_indexes()
        .iter()
        .filter_map(|i| i.index_name().map(str::to_owned))
        .collect();
    indexes.sort();
    assert_eq!(indexes, ["by_tenant", "due"]);

    let redrive = aws_sdk_sqs::Client::new(&env.sdk)
        .get_queue_attributes()
        .queue_url(&first.queue_url)
        .attribute_names(QueueAttributeName::RedrivePolicy)
        .send()
        .await
        .unwrap()
        .attributes
        .unwrap()
        .remove(&QueueAttributeName::RedrivePolicy)
        .unwrap();
    let redrive: serde_json::Value = serde_json::from_str(&redrive).unwrap();
    assert_eq!(
        redrive["maxReceiveCount"].to_string().trim_matches('"'),
        "5"
    );

    // The backend works on what was created.
    let backend = siesta_aws::AwsBackend::new(&env.sdk, first).backend();
    let artifact = backend
        .artifacts
        .put(
            &siesta::TenantId::from("t"),
            &siesta::RunId::from("r"),
            "text/plain",
            bytes::Bytes::from_static(b"hello"),
        )
        .await
        .unwrap();
    assert_eq!(
        &backend.artifacts.get(&artifact).await.unwrap()[..],
        b"hello"
    );
}
