//! A log line written before a completed operation is not written again on replay.
//! Its own test binary: the capturing subscriber must be the only one in the process.

mod support;

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use siesta::*;
use support::{create, world};

#[tokio::test]
async fn logs_written_before_a_completed_operation_are_not_written_again_on_replay() {
    use std::io::Write;
    #[derive(Clone, Default)]
    struct Sink(Arc<std::sync::Mutex<Vec<u8>>>);
    impl Write for Sink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let sink = Sink::default();
    let writer = sink.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let mut reg = Registry::new();
    reg.register("logging", |ctx: Context, _: serde_json::Value| async move {
        ctx.log("before-step");
        ctx.step("work", |s| async move {
            s.log("inside-step");
            Ok(())
        })
        .await?;
        ctx.log("after-step");
        ctx.sleep(Duration::from_secs(1)).await?;
        ctx.log("after-sleep");
        Ok(())
    });
    let w = world(reg);
    let id = create(&w, "logging", json!(null)).await;
    w.run_until_idle().await;
    w.advance(Duration::from_secs(1)).await;
    assert_eq!(w.run(&id).await.status, RunStatus::Completed);
    let text = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
    for line in ["before-step", "inside-step", "after-step", "after-sleep"] {
        assert_eq!(
            text.matches(line).count(),
            1,
            "{line} logged once in:\n{text}"
        );
    }
    let inside = text.lines().find(|l| l.contains("inside-step")).unwrap();
    assert!(
        inside.contains("position=work#0") && inside.contains("attempt=1"),
        "a step's log line names its position and attempt: {inside}"
    );
}
