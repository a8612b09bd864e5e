//! The spans a tracing backend sees of a run: one `durable_execution` per wake-up, all
//! carrying the run's trace id, and one `durable_operation` per attempt that ran —
//! none for a replayed one. Its own test binary: the capturing subscriber must be the
//! only one in the process.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

mod support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use siesta::*;
use support::{create, world};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::layer::{Context as LayerContext, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

#[derive(Debug, Clone)]
struct Captured {
    name: &'static str,
    parent: Option<&'static str>,
    fields: BTreeMap<String, String>,
}

#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<(Id, Captured)>>>);

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

impl<S> tracing_subscriber::Layer<S> for Capture
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: LayerContext<'_, S>) {
        let mut fields = BTreeMap::new();
        attrs.record(&mut Fields(&mut fields));
        let parent = ctx
            .span(id)
            .and_then(|s| s.parent())
            .map(|p| p.metadata().name());
        let span = Captured {
            name: attrs.metadata().name(),
            parent,
            fields,
        };
        self.0.lock().unwrap().push((id.clone(), span));
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, _: LayerContext<'_, S>) {
        let mut spans = self.0.lock().unwrap();
        // Ids are reused once a span closes: the latest span with this id is the one.
        if let Some((_, span)) = spans.iter_mut().rev().find(|(i, _)| i == id) {
            values.record(&mut Fields(&mut span.fields));
        }
    }
}

impl Capture {
    fn named(&self, name: &str) -> Vec<Captured> {
        let spans = self.0.lock().unwrap();
        spans
            .iter()
            .filter(|(_, s)| s.name == name)
            .map(|(_, s)| s.clone())
            .collect()
    }
}

#[tokio::test]
async fn every_wake_up_of_a_run_shares_its_trace_id_and_only_attempts_that_ran_get_a_span() {
    let capture = Capture::default();
    let subscriber = tracing_subscriber::registry().with(capture.clone());
    let _guard = tracing::subscriber::set_default(subscriber);
    let mut reg = Registry::new();
    reg.register(
        "two_wakes",
        |ctx: Context, _: serde_json::Value| async move {
            let a: u32 = ctx.step("first", |_| async { Ok(1) }).await?;
            let b: u32 = ctx
                .wait_for_event("go")
                .timeout(Duration::from_secs(86400))
                .await?;
            let c: u32 = ctx
                .step("second", |s| async move {
                    if s.attempt() == 1 {
                        Err(StepError::new("Flaky", "not yet", true))
                    } else {
                        Ok(3)
                    }
                })
                .retry(RetryStrategy::fixed(3, Duration::from_secs(1)))
                .await?;
            Ok(a + b + c)
        },
    );
    let w = world(reg);
    let id = create(&w, "two_wakes", json!(null)).await;
    w.run_until_idle().await;
    w.engine()
        .deliver_event(w.tenant(), &id, "go", json!(2), None)
        .await
        .unwrap();
    w.run_until_idle().await;
    w.advance(Duration::from_secs(1)).await;
    let run = w.run(&id).await;
    assert_eq!(run.status, RunStatus::Completed, "{run:?}");

    let executions = capture.named("durable_execution");
    assert!(executions.len() >= 3, "a span per wake-up: {executions:#?}");
    let expected = siesta::telemetry::trace_id_hex(w.tenant(), &id);
    for e in &executions {
        assert_eq!(e.fields["siesta.trace_id"], expected, "{e:?}");
        assert_eq!(e.fields["run_id"], id.as_str(), "{e:?}");
    }

    let operations = capture.named("durable_operation");
    let attempts: Vec<(String, String, String)> = operations
        .iter()
        .map(|o| {
            (
                o.fields["operationId"].clone(),
                o.fields["attempt"].clone(),
                o.fields["outcome"].clone(),
            )
        })
        .collect();
    assert_eq!(
        attempts,
        vec![
            ("first#0".into(), "1".into(), "succeeded".into()),
            ("second#0".into(), "1".into(), "failed".into()),
            ("second#0".into(), "2".into(), "succeeded".into()),
        ],
        "one span per attempt that ran, none for the replayed `first`: {operations:#?}"
    );
    for o in &operations {
        assert_eq!(o.parent, Some("durable_execution"), "{o:?}");
        assert_eq!(o.fields["isReplay"], "false");
        assert_eq!(o.fields["kind"], "step");
    }
    assert_eq!(operations[1].fields["error.kind"], "Flaky");
}
