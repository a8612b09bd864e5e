//! How a checkpoint lays out a run's history on DynamoDB: the run's own build writes
//! checkpoint items (`H#K#`); code other than the run's build — the control plane, which
//! may be newer — writes them only where the history has them already, so that a run
//! whose build predates them stays readable by that build (which reads `H#J#` entries
//! and `T#` events only).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

mod support;

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use serde_json::json;
use siesta::ports::{Backend, Checkpoint, Claim};
use siesta::*;

type Item = HashMap<String, AttributeValue>;

async fn sort_keys(env: &support::Emulators, run: &Run) -> Vec<String> {
    let client = aws_sdk_dynamodb::Client::new(&env.sdk);
    let pk = siesta_aws::keys::run_pk(&run.tenant, &run.id);
    let out = client
        .query()
        .table_name(&env.table)
        .key_condition_expression("pk = :pk")
        .expression_attribute_values(":pk", AttributeValue::S(pk))
        .consistent_read(true)
        .send()
        .await
        .unwrap();
    let items: Vec<Item> = out.items.unwrap_or_default();
    items
        .iter()
        .map(|i| i["sk"].as_s().unwrap().clone())
        .collect()
}

fn entry(position: &str, attempt: u32, at: Timestamp) -> JournalEntry {
    JournalEntry {
        position: Position::from(position),
        index: 0,
        kind: OperationKind::Step,
        name: position.into(),
        state: EntryState::Started { attempt, key: None },
        consumed: Vec::new(),
        handle: None,
        updated_at: at,
    }
}

/// A checkpoint over `current` with `journal` and one event, by the run's own build or
/// not.
fn checkpoint(current: &Run, journal: Vec<JournalEntry>, by_own_build: bool) -> Checkpoint {
    let mut run = current.clone();
    run.version += 1;
    run.timeline_seq += 1;
    let mut cp = Checkpoint::new(run, current.version, by_own_build.then_some(current.epoch));
    let mut event = TimelineEvent::execution_started(current.updated_at, "order", json!(null));
    event.event_type = EventType::StepStarted;
    event.seq = cp.run.timeline_seq;
    cp.timeline.push(event);
    cp.journal = journal;
    cp.by_own_build = by_own_build;
    cp
}

async fn new_run(backend: &Backend) -> Run {
    let at = Timestamp(1_700_000_000_000);
    let mut run = Run::new(
        TenantId(format!("layout-{}", uuid::Uuid::new_v4().simple())),
        RunId("r".into()),
        "order",
        Payload::Inline(json!(null)),
        at,
    );
    run.timeline_seq = 1;
    let mut started = TimelineEvent::execution_started(at, "order", json!(null));
    started.seq = 1;
    backend.store.create_run(&run, &started).await.unwrap();
    let claim = Claim {
        owner: "engine".into(),
        now: at,
        expires_at: at.plus(Duration::from_secs(60)),
    };
    backend
        .store
        .claim(&run.tenant, &run.id, &claim)
        .await
        .unwrap()
}

#[tokio::test]
async fn the_control_plane_keeps_a_history_without_checkpoint_items_without_them() {
    let Some(env) = support::emulators().await else {
        return;
    };
    let backend = env.backend(3).await.backend();
    let run = new_run(&backend).await;
    // The control plane (say, a resolution) writes for a run whose build wrote no
    // checkpoint item: entries and events in items of their own, as that build reads.
    let cp = checkpoint(&run, vec![entry("charge#0", 1, run.updated_at)], false);
    backend.store.checkpoint(&cp).await.unwrap();
    let keys = sort_keys(&env, &run).await;
    assert!(
        keys.iter().all(|k| !k.starts_with("H#K#")),
        "no checkpoint item: {keys:?}"
    );
    assert!(keys.contains(&"H#J#charge#0".to_owned()), "{keys:?}");
    let history = backend
        .store
        .load_history(&run.tenant, &run.id)
        .await
        .unwrap();
    assert_eq!(history.journal, cp.journal);
    let timeline = backend
        .store
        .timeline(&run.tenant, &run.id, 0, 10)
        .await
        .unwrap();
    assert_eq!(
        timeline.len(),
        2,
        "the run's first event and the checkpoint's"
    );
}

#[tokio::test]
async fn once_the_runs_build_wrote_checkpoint_items_the_control_plane_writes_them_too() {
    let Some(env) = support::emulators().await else {
        return;
    };
    let backend = env.backend(3).await.backend();
    let run = new_run(&backend).await;
    let own = checkpoint(&run, vec![entry("charge#0", 1, run.updated_at)], true);
    backend.store.checkpoint(&own).await.unwrap();
    let control = checkpoint(&own.run, vec![entry("charge#0", 2, run.updated_at)], false);
    backend.store.checkpoint(&control).await.unwrap();
    let keys = sort_keys(&env, &run).await;
    assert_eq!(
        keys.iter().filter(|k| k.starts_with("H#K#")).count(),
        2,
        "{keys:?}"
    );
    assert!(keys.iter().all(|k| !k.starts_with("H#J#")), "{keys:?}");
    let history = backend
        .store
        .load_history(&run.tenant, &run.id)
        .await
        .unwrap();
    assert_eq!(
        history.journal, control.journal,
        "the later entry at the position"
    );
    let timeline = backend
        .store
        .timeline(&run.tenant, &run.id, 0, 10)
        .await
        .unwrap();
    assert_eq!(
        timeline.iter().map(|e| e.seq).collect::<Vec<_>>(),
        vec![1, 2, 3]
    );
}

#[tokio::test]
async fn entries_written_before_checkpoint_items_give_way_to_later_ones_at_their_position() {
    let Some(env) = support::emulators().await else {
        return;
    };
    let backend = env.backend(3).await.backend();
    let run = new_run(&backend).await;
    let old = checkpoint(
        &run,
        vec![
            entry("charge#0", 1, run.updated_at),
            entry("ship#0", 1, run.updated_at),
        ],
        false,
    );
    backend.store.checkpoint(&old).await.unwrap();
    let new = checkpoint(&old.run, vec![entry("charge#0", 2, run.updated_at)], true);
    backend.store.checkpoint(&new).await.unwrap();
    let mut journal = backend
        .store
        .load_history(&run.tenant, &run.id)
        .await
        .unwrap()
        .journal;
    journal.sort_by(|a, b| a.position.0.cmp(&b.position.0));
    assert_eq!(
        journal,
        vec![new.journal[0].clone(), old.journal[1].clone()]
    );
}
