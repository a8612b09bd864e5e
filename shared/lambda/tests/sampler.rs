//! `OTEL_TRACES_SAMPLER` is honoured (the SDK reads it when the provider is built): a
//! run exported with `traceidratio` at 0 sends no span, with `always_on` it sends its
//! spans. The environment is the process's, so each case runs in a child process: this
//! test binary again, with the case's settings.

mod common;

use serde_json::json;
use siesta::*;
use siesta_testing::TestEnv;
use tracing_subscriber::Layer;
use tracing_subscriber::layer::SubscriberExt;

const CHILD: &str = "SIESTA_SAMPLER_TEST_EXPECTS_SPANS";
const TEST: &str = "the_sampler_is_read_from_the_environment";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sampler_is_read_from_the_environment() {
    let Ok(expects) = std::env::var(CHILD) else {
        for (sampler, arg, expects) in [("traceidratio", "0", "false"), ("always_on", "", "true")] {
            let out = std::process::Command::new(std::env::current_exe().unwrap())
                .args(["--exact", TEST, "--nocapture"])
                .env(CHILD, expects)
                .env("OTEL_TRACES_SAMPLER", sampler)
                .env("OTEL_TRACES_SAMPLER_ARG", arg)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{sampler}: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        return;
    };
    let (url, received) = common::receiver().await;
    let subscriber = tracing_subscriber::registry().with(
        siesta_lambda::otel::layer_to(&url, "siesta-test")
            .with_filter(tracing_subscriber::filter::LevelFilter::INFO),
    );
    tracing::subscriber::set_global_default(subscriber).unwrap();
    let mut reg = Registry::new();
    reg.register("one", |ctx: Context, _: serde_json::Value| async move {
        ctx.step("only", |_| async { Ok(1) }).await
    });
    let w = TestEnv::new(reg);
    let id = w.start("one", json!(null)).await;
    w.run_until_idle().await;
    assert_eq!(w.status(&id).await, RunStatus::Completed);
    siesta_lambda::otel::flush().await;
    let sent = !received.lock().unwrap().is_empty();
    assert_eq!(sent.to_string(), expects, "spans sent");
}
