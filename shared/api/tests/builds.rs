//! A run of another build shows the build it waits for; `GET /builds` counts each
//! build's unfinished runs by status.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

use http::StatusCode;
use serde_json::{Value, json};
use siesta::{Context, EngineConfig, OtherBuilds, Registry, RunStatus};
use siesta_api::{ApiKeys, ControlApi};
use siesta_testing::{TestEnv, default_engine_config};
use tower::ServiceExt;

fn registry() -> Registry {
    let mut registry = Registry::new();
    registry.register("approval", |ctx: Context, _: Value| async move {
        let ok: bool = ctx.wait_for_event("approval").await?;
        Ok(ok)
    });
    registry
}

fn config(build_id: &str) -> EngineConfig {
    EngineConfig {
        build_id: build_id.to_owned(),
        sweep_other_builds: OtherBuilds::Leave,
        ..default_engine_config()
    }
}

async fn get(api: &ControlApi, path: &str) -> (StatusCode, Value) {
    let req = http::Request::get(path)
        .header("authorization", "Bearer k")
        .body(axum::body::Body::empty())
        .unwrap();
    let response = api.clone().router().oneshot(req).await.unwrap();
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    (status, serde_json::from_slice(&bytes).unwrap())
}

#[tokio::test]
async fn a_run_of_another_build_awaits_it_and_get_builds_counts_it() {
    let env = TestEnv::builder(Registry::new()).tenant("acme").build();
    let (old, _) = env.engine_with(registry(), config("shop@1.0.0+old"));
    let (new, _) = env.engine_with(registry(), config("shop@1.1.0+new"));
    let waiting = old
        .start(env.tenant(), "approval", json!(null), None)
        .await
        .unwrap();
    old.run_until_idle(10).await.unwrap();
    let done = old
        .start(env.tenant(), "approval", json!(null), None)
        .await
        .unwrap();
    old.run_until_idle(10).await.unwrap();
    old.deliver_event(env.tenant(), &done.id, "approval", json!(true), None)
        .await
        .unwrap();
    old.run_until_idle(10).await.unwrap();
    assert_eq!(env.status(&done.id).await, RunStatus::Completed);

    let keys = ApiKeys::new(std::collections::HashMap::from([(
        "k".to_owned(),
        env.tenant().clone(),
    )]));
    let api = ControlApi::new(new).authenticate(keys);
    let (status, view) = get(&api, &format!("/runs/{}", waiting.id)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(view["status"], "waiting");
    assert_eq!(view["awaiting_build"], "shop@1.0.0+old");
    let (_, finished) = get(&api, &format!("/runs/{}", done.id)).await;
    assert!(
        finished.get("awaiting_build").is_none(),
        "a finished run waits for nothing: {finished}"
    );
    let (_, page) = get(&api, "/runs").await;
    let listed = page["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == json!(waiting.id.to_string()))
        .unwrap();
    assert_eq!(listed["awaiting_build"], "shop@1.0.0+old");

    let (status, builds) = get(&api, "/builds").await;
    assert_eq!(status, StatusCode::OK, "{builds}");
    assert_eq!(builds["serving"], "shop@1.1.0+new");
    let list = builds["builds"].as_array().unwrap();
    assert_eq!(list.len(), 2, "{builds}");
    assert_eq!(list[0]["build_id"], "shop@1.1.0+new");
    assert_eq!(list[0]["serving"], true);
    assert_eq!(list[0]["deployed"], true);
    assert_eq!(list[0]["unfinished"], json!({}));
    assert_eq!(list[0]["first_seen"], Value::Null);
    assert_eq!(list[1]["build_id"], "shop@1.0.0+old");
    assert_eq!(list[1]["serving"], false);
    assert_eq!(
        list[1]["deployed"], false,
        "without a deployments port (dev) only the serving build is deployed"
    );
    assert_eq!(list[1]["unfinished"], json!({"waiting": 1}));
    assert!(
        list[1]["first_seen"].as_str().unwrap().ends_with('Z'),
        "RFC 3339: {builds}"
    );
}

/// A deployments port that knows one build and fails when told to.
struct Registered {
    builds: Vec<&'static str>,
    fail: bool,
}

#[async_trait::async_trait]
impl siesta_api::Deployments for Registered {
    async fn deployed(
        &self,
        builds: &[String],
    ) -> Result<std::collections::HashMap<String, bool>, String> {
        if self.fail {
            return Err("the registry is unavailable".into());
        }
        Ok(builds
            .iter()
            .map(|b| (b.clone(), self.builds.contains(&b.as_str())))
            .collect())
    }
}

#[tokio::test]
async fn get_builds_says_which_builds_the_deployments_port_knows_and_null_when_it_fails() {
    let env = TestEnv::builder(Registry::new()).tenant("acme").build();
    let (old, _) = env.engine_with(registry(), config("shop@1.0.0+old"));
    let (gone, _) = env.engine_with(registry(), config("shop@0.9.0+gone"));
    let (new, _) = env.engine_with(registry(), config("shop@1.1.0+new"));
    for engine in [&old, &gone] {
        engine
            .start(env.tenant(), "approval", json!(null), None)
            .await
            .unwrap();
        engine.run_until_idle(10).await.unwrap();
    }
    let keys = ApiKeys::new(std::collections::HashMap::from([(
        "k".to_owned(),
        env.tenant().clone(),
    )]));
    let deployed_of = |body: &Value, build: &str| {
        body["builds"]
            .as_array()
            .unwrap()
            .iter()
            .find(|b| b["build_id"] == build)
            .unwrap_or_else(|| panic!("{build} in {body}"))["deployed"]
            .clone()
    };

    let api = ControlApi::new(new.clone())
        .authenticate(keys.clone())
        .deployments(Registered {
            builds: vec!["shop@1.0.0+old"],
            fail: false,
        });
    let (status, body) = get(&api, "/builds").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(deployed_of(&body, "shop@1.1.0+new"), true, "serving");
    assert_eq!(deployed_of(&body, "shop@1.0.0+old"), true, "registered");
    assert_eq!(
        deployed_of(&body, "shop@0.9.0+gone"),
        false,
        "not registered"
    );

    let api = ControlApi::new(new)
        .authenticate(keys)
        .deployments(Registered {
            builds: vec![],
            fail: true,
        });
    let (status, body) = get(&api, "/builds").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        deployed_of(&body, "shop@1.1.0+new"),
        true,
        "serving, always"
    );
    assert_eq!(deployed_of(&body, "shop@1.0.0+old"), Value::Null, "unknown");
    assert_eq!(
        deployed_of(&body, "shop@0.9.0+gone"),
        Value::Null,
        "unknown"
    );
}
