//! The build registry on DynamoDB: one partition listed in one `Query`, which builds are
//! deployed, and removal only of the registration it names.

use siesta_aws::builds::BuildRegistry;

#[tokio::test]
async fn the_registry_lists_builds_says_which_are_deployed_and_removes_only_the_named_version() {
    let Some(env) = siesta_aws::testing::emulators().await else {
        return;
    };
    let env = env.with_own_table().await;
    let names = env.names(1).await;
    let registry = BuildRegistry::from_sdk(&env.sdk, names.table.clone());
    registry
        .register("shop@1.0.1+b", "shop-step:2", 2_000)
        .await
        .unwrap();
    registry
        .register("shop@1.0.0+a", "shop-step:1", 1_000)
        .await
        .unwrap();
    // A second cold start of the same build keeps its first sighting.
    registry
        .register("shop@1.0.0+a", "shop-step:1", 3_000)
        .await
        .unwrap();

    let all = registry.all().await.unwrap();
    let ids: Vec<&str> = all.iter().map(|b| b.build_id.as_str()).collect();
    assert_eq!(ids, ["shop@1.0.0+a", "shop@1.0.1+b"], "by build id");
    assert_eq!(all[0].step_version, "shop-step:1");
    assert_eq!((all[0].first_seen, all[0].last_seen), (1_000, 3_000));

    let deployed = registry
        .deployed(&["shop@1.0.0+a".into(), "shop@0.9.0+gone".into()])
        .await
        .unwrap();
    assert!(deployed["shop@1.0.0+a"]);
    assert!(!deployed["shop@0.9.0+gone"]);

    // The build re-registered on another version since: that registration stays.
    assert!(
        !registry
            .remove("shop@1.0.0+a", "shop-step:9")
            .await
            .unwrap()
    );
    assert_eq!(
        registry
            .step_version("shop@1.0.0+a")
            .await
            .unwrap()
            .as_deref(),
        Some("shop-step:1")
    );
    assert!(
        registry
            .remove("shop@1.0.0+a", "shop-step:1")
            .await
            .unwrap()
    );
    assert_eq!(registry.step_version("shop@1.0.0+a").await.unwrap(), None);
    let ids: Vec<String> = registry
        .all()
        .await
        .unwrap()
        .into_iter()
        .map(|b| b.build_id)
        .collect();
    assert_eq!(ids, ["shop@1.0.1+b"]);
}
