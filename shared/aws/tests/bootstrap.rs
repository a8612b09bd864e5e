//! `Plan::create` builds the declared resources, and running it again
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
    let plan = Plan::declared();
    let first = plan.create(&env.sdk, &names).await.expect("bootstrap");
    let second = plan
        .create(&env.sdk, &names)
        .await
        .expect("bootstrap again");
    assert_eq!(first, second, "the same resources, found again");

    // The table: keys, both indexes with their keys and projections, on demand, TTL,
    // deletion protection (the template's default).
    let dynamodb = aws_sdk_dynamodb::Client::new(&env.sdk);
    let table = dynamodb
        .describe_table()
        .table_name(&names.table)
        .send()
        .await
        .unwrap()
        .table
        .unwrap();
    let keys = |k: &[aws_sdk_dynamodb::types::KeySchemaElement]| -> Vec<String> {
        k.iter()
            .map(|k| format!("{} {}", k.attribute_name(), k.key_type().as_str()))
            .collect()
    };
    assert_eq!(keys(table.key_schema()), ["pk HASH", "sk RANGE"]);
    let mut indexes: Vec<(String, Vec<String>, String)> = table
        .global_secondary_indexes()
        .iter()
        .map(|i| {
            (
                i.index_name().unwrap_or_default().to_owned(),
                keys(i.key_schema()),
                i.projection()
                    .and_then(|p| p.projection_type())
                    .map(|p| p.as_str().to_owned())
                    .unwrap_or_default(),
            )
        })
        .collect();
    indexes.sort();
    assert_eq!(
        indexes,
        [
            (
                "by_build".to_owned(),
                vec!["build_key HASH".to_owned(), "created_key RANGE".to_owned()],
                "KEYS_ONLY".to_owned()
            ),
            (
                "by_tenant".to_owned(),
                vec!["tenant HASH".to_owned(), "created_key RANGE".to_owned()],
                "KEYS_ONLY".to_owned()
            ),
            (
                "due".to_owned(),
                vec!["due_shard HASH".to_owned(), "sweep_at RANGE".to_owned()],
                "INCLUDE".to_owned()
            ),
            (
                "reap".to_owned(),
                vec!["reap_shard HASH".to_owned(), "reap_at RANGE".to_owned()],
                "KEYS_ONLY".to_owned()
            ),
        ]
    );
    assert_eq!(
        table
            .billing_mode_summary()
            .and_then(|b| b.billing_mode())
            .map(|b| b.as_str()),
        Some("PAY_PER_REQUEST")
    );
    assert_eq!(table.deletion_protection_enabled(), Some(true));
    let ttl = dynamodb
        .describe_time_to_live()
        .table_name(&names.table)
        .send()
        .await
        .unwrap()
        .time_to_live_description
        .unwrap();
    assert_eq!(ttl.attribute_name(), Some("expires_at"));
    assert_eq!(
        ttl.time_to_live_status().map(|s| s.as_str()),
        Some("ENABLED")
    );

    // The queues: the redrive policy with the template's limit, its visibility timeout.
    let sqs = aws_sdk_sqs::Client::new(&env.sdk);
    let mut attributes = sqs
        .get_queue_attributes()
        .queue_url(&first.queue_url)
        .attribute_names(QueueAttributeName::All)
        .send()
        .await
        .unwrap()
        .attributes
        .unwrap();
    let redrive: serde_json::Value = serde_json::from_str(
        &attributes
            .remove(&QueueAttributeName::RedrivePolicy)
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        redrive["maxReceiveCount"].to_string().trim_matches('"'),
        "5"
    );
    assert!(
        redrive["deadLetterTargetArn"]
            .as_str()
            .unwrap()
            .ends_with(&names.dead_letter_queue)
    );
    assert_eq!(
        attributes
            .get(&QueueAttributeName::VisibilityTimeout)
            .map(String::as_str),
        Some("900")
    );
    let dlq_retention = sqs
        .get_queue_attributes()
        .queue_url(&first.dead_letter_queue_url)
        .attribute_names(QueueAttributeName::MessageRetentionPeriod)
        .send()
        .await
        .unwrap()
        .attributes
        .unwrap()
        .remove(&QueueAttributeName::MessageRetentionPeriod);
    assert_eq!(dlq_retention.as_deref(), Some("1209600"));

    // A queue that drifted from the template is brought back to it.
    sqs.set_queue_attributes()
        .queue_url(&first.queue_url)
        .attributes(QueueAttributeName::VisibilityTimeout, "30")
        .send()
        .await
        .unwrap();
    let again = plan
        .create(&env.sdk, &names)
        .await
        .expect("bootstrap a third time");
    assert_eq!(again, first);
    let visibility = sqs
        .get_queue_attributes()
        .queue_url(&first.queue_url)
        .attribute_names(QueueAttributeName::VisibilityTimeout)
        .send()
        .await
        .unwrap()
        .attributes
        .unwrap()
        .remove(&QueueAttributeName::VisibilityTimeout);
    assert_eq!(visibility.as_deref(), Some("900"));

    // The bucket: encryption, public access block, TLS-only policy on the bucket's ARN.
    let s3 = aws_sdk_s3::Client::from_conf(
        aws_sdk_s3::config::Builder::from(&env.sdk)
            .force_path_style(true)
            .build(),
    );
    let encryption = s3
        .get_bucket_encryption()
        .bucket(&names.bucket)
        .send()
        .await
        .unwrap();
    let algorithm = encryption
        .server_side_encryption_configuration()
        .and_then(|c| c.rules().first())
        .and_then(|r| r.apply_server_side_encryption_by_default())
        .map(|d| d.sse_algorithm().as_str().to_owned());
    assert_eq!(algorithm.as_deref(), Some("AES256"));
    let block = s3
        .get_public_access_block()
        .bucket(&names.bucket)
        .send()
        .await
        .unwrap()
        .public_access_block_configuration
        .unwrap();
    assert_eq!(block.block_public_acls(), Some(true));
    assert_eq!(block.restrict_public_buckets(), Some(true));
    let policy = s3
        .get_bucket_policy()
        .bucket(&names.bucket)
        .send()
        .await
        .unwrap()
        .policy
        .unwrap();
    let policy: serde_json::Value = serde_json::from_str(&policy).unwrap();
    assert_eq!(
        policy["Statement"][0]["Resource"][1],
        format!("arn:aws:s3:::{}/*", names.bucket)
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

    // Deletion protection holds; lifted, the table can be given back.
    let refused = dynamodb
        .delete_table()
        .table_name(&names.table)
        .send()
        .await;
    assert!(refused.is_err(), "deletion protection");
    dynamodb
        .update_table()
        .table_name(&names.table)
        .deletion_protection_enabled(false)
        .send()
        .await
        .unwrap();
    dynamodb
        .delete_table()
        .table_name(&names.table)
        .send()
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bootstrap_gives_a_table_made_by_an_earlier_release_the_indexes_it_lacks() {
    let Some(env) = emulators().await else {
        return;
    };
    let dynamodb = aws_sdk_dynamodb::Client::new(&env.sdk);
    let table = format!(
        "siesta-boot-{}-runs",
        &uuid::Uuid::new_v4().simple().to_string()[..10]
    );
    let plan = siesta_aws::testing::test_plan();
    // The table as a release before the reap index made it.
    let mut older = plan.clone();
    older.table.indexes.retain(|i| i.name != "reap");
    older
        .table
        .attributes
        .retain(|(a, _)| !a.starts_with("reap_"));
    older.create_table(&dynamodb, &table).await.expect("older");
    let names = |d: &aws_sdk_dynamodb::types::TableDescription| {
        let mut n: Vec<String> = d
            .global_secondary_indexes()
            .iter()
            .filter_map(|i| i.index_name().map(str::to_owned))
            .collect();
        n.sort();
        n
    };
    let describe = || async {
        dynamodb
            .describe_table()
            .table_name(&table)
            .send()
            .await
            .unwrap()
            .table
            .unwrap()
    };
    assert_eq!(names(&describe().await), ["by_build", "by_tenant", "due"]);

    plan.create_table(&dynamodb, &table).await.expect("upgrade");
    let upgraded = describe().await;
    assert_eq!(
        names(&upgraded),
        ["by_build", "by_tenant", "due", "reap"],
        "the reap index added"
    );
    assert!(
        upgraded
            .attribute_definitions()
            .iter()
            .any(|a| a.attribute_name() == "reap_at")
    );
    plan.create_table(&dynamodb, &table)
        .await
        .expect("idempotent");
    let _ = dynamodb.delete_table().table_name(&table).send().await;
}
