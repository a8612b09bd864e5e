//! Every run records the build of the code it started on.

use serde_json::json;
use siesta::*;
use siesta_testing::{TestEnv, default_engine_config};

#[tokio::test]
async fn a_run_and_its_child_record_the_build_they_started_on() {
    let mut registry = Registry::new();
    registry.register("parent", |ctx: Context, _: ()| async move {
        ctx.invoke::<u32, _>("child", "child", 1u32).await
    });
    registry.register("child", |_: Context, n: u32| async move { Ok(n + 1) });
    let config = EngineConfig {
        build_id: "shop@1.4.0+9f2c1e0".to_owned(),
        ..default_engine_config()
    };
    let env = TestEnv::builder(registry).engine_config(config).build();
    let run = env.execute("parent", ()).await;
    assert_eq!(run.status, RunStatus::Completed, "{:?}", run.error);
    assert_eq!(run.build_id.as_deref(), Some("shop@1.4.0+9f2c1e0"));
    let started = &env.timeline(&run.id).await[0];
    assert_eq!(started.event_type, EventType::ExecutionStarted);
    assert_eq!(started.details["BuildId"], json!("shop@1.4.0+9f2c1e0"));

    let child = context::child_run_id(&run, &Position::from("child#0"));
    assert_eq!(
        env.run(&child).await.build_id.as_deref(),
        Some("shop@1.4.0+9f2c1e0")
    );
}

#[test]
fn the_default_build_id_names_the_crate_and_its_version() {
    assert_eq!(
        EngineConfig::default().build_id,
        concat!("siesta@", env!("CARGO_PKG_VERSION"))
    );
    assert!(build_id!().starts_with(concat!("siesta@", env!("CARGO_PKG_VERSION"))));
}
