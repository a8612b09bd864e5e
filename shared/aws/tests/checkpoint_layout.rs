//! How a checkpoint lays out a run's journal and timeline on DynamoDB: the run's own build keeps a
//! step's checkpoint in the run item (its checkpoint tail), up to three in a row, and
//! archives them as one checkpoint item (`H#K#`) before the next; its other checkpoints
//! are checkpoint items. Code other than the run's build — the control plane — writes
//! checkpoint items too, and keeps the tail.
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
use siesta_aws::keys::{checkpoint_seq, checkpoint_sk, timeline_sk};

type Item = HashMap<String, AttributeValue>;

async fn items(env: &support::Emulators, run: &Run) -> Vec<Item> {
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
    out.items.unwrap_or_default()
}

async fn sort_keys(env: &support::Emulators, run: &Run) -> Vec<String> {
    items(env, run)
        .await
        .iter()
        .map(|i| i["sk"].as_s().unwrap().clone())
        .collect()
}

/// The sort key the run item's checkpoint tail would have archived, if it holds one.
async fn tail_sk(env: &support::Emulators, run: &Run) -> Option<String> {
    items(env, run)
        .await
        .iter()
        .find(|i| i["sk"].as_s().unwrap() == "RUN")
        .and_then(|i| i.get("tail_sk"))
        .map(|sk| sk.as_s().unwrap().clone())
}

/// An engine over `aws` with `reg`, and a tenant of its own.
fn engine_of(aws: &siesta_aws::AwsBackend, reg: Registry) -> (Engine, TenantId) {
    let engine = Engine::new(
        aws.backend(),
        std::sync::Arc::new(SystemClock),
        reg,
        EngineConfig::default(),
    );
    let tenant = TenantId(format!("layout-{}", uuid::Uuid::new_v4().simple()));
    (engine, tenant)
}

/// The run's journal, as a replay loads it.
async fn journal(backend: &Backend, run: &Run) -> Vec<JournalEntry> {
    backend
        .store
        .load_replay_input(&run.tenant, &run.id)
        .await
        .unwrap()
        .journal
}

/// The run's journal sorted by position.
async fn journal_by_position(backend: &Backend, run: &Run) -> Vec<JournalEntry> {
    let mut entries = journal(backend, run).await;
    entries.sort_by(|a, b| a.position.0.cmp(&b.position.0));
    entries
}

/// The seqs of the run's first ten timeline events.
async fn timeline_seqs(backend: &Backend, run: &Run) -> Vec<u64> {
    backend
        .store
        .timeline(&run.tenant, &run.id, 0, 10)
        .await
        .unwrap()
        .iter()
        .map(|e| e.seq)
        .collect()
}

/// How many checkpoint items the run has.
fn checkpoint_items(keys: &[String]) -> usize {
    keys.iter().filter(|k| k.starts_with("H#K#")).count()
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
        minted: Vec::new(),
        within: None,
        superseded: None,
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
    support::waiting::claimed_run(&*backend.store, "layout", at).await
}

#[tokio::test]
async fn the_control_plane_writes_checkpoint_items_and_keeps_the_runs_checkpoint_tail() {
    let Some(env) = support::emulators().await else {
        return;
    };
    let backend = env.backend(3).await.backend();
    let run = new_run(&backend).await;
    let own = checkpoint(&run, vec![entry("charge#0", 1, run.updated_at)], true);
    backend.store.checkpoint(&own).await.unwrap();
    assert!(
        tail_sk(&env, &run).await.is_some(),
        "a step's checkpoint in the run item"
    );
    let control = checkpoint(
        &own.run,
        vec![
            entry("charge#0", 2, run.updated_at),
            entry("ship#0", 1, run.updated_at),
        ],
        false,
    );
    backend.store.checkpoint(&control).await.unwrap();
    let keys = sort_keys(&env, &run).await;
    assert_eq!(checkpoint_items(&keys), 1, "the control plane's: {keys:?}");
    assert!(keys.iter().all(|k| !k.starts_with("H#J#")), "{keys:?}");
    assert!(tail_sk(&env, &run).await.is_some(), "the tail kept");
    assert_eq!(
        journal(&backend, &run).await,
        control.journal,
        "the later entry at the position"
    );
    assert_eq!(timeline_seqs(&backend, &run).await, vec![1, 2, 3]);
}

#[tokio::test]
async fn a_runs_steps_share_its_checkpoint_tail_three_at_a_time_and_read_back_whole() {
    let Some(env) = support::emulators().await else {
        return;
    };
    let backend = env.backend(3).await.backend();
    let run = new_run(&backend).await;
    let mut current = run.clone();
    let mut written = Vec::new();
    for step in 0..7 {
        let cp = checkpoint(
            &current,
            vec![entry(&format!("work#{step}"), 1, run.updated_at)],
            true,
        );
        backend.store.checkpoint(&cp).await.unwrap();
        written.extend(cp.journal.clone());
        current = cp.run;
        // Paged by twos, the timeline is whole after every step.
        let mut seqs = Vec::new();
        loop {
            let page = backend
                .store
                .timeline(&run.tenant, &run.id, seqs.last().copied().unwrap_or(0), 2)
                .await
                .unwrap();
            if page.is_empty() {
                break;
            }
            seqs.extend(page.iter().map(|e| e.seq));
        }
        assert_eq!(seqs, (1..=current.timeline_seq).collect::<Vec<_>>());
    }
    let keys = sort_keys(&env, &run).await;
    assert_eq!(
        checkpoint_items(&keys),
        2,
        "steps 0-2 and 3-5 archived: {keys:?}"
    );
    assert!(
        tail_sk(&env, &run).await.is_some(),
        "step 6 in the run item"
    );
    assert_eq!(journal(&backend, &run).await, written);
}

#[tokio::test]
async fn a_transaction_of_the_runs_own_build_takes_the_tail_out_of_the_run_item() {
    let Some(env) = support::emulators().await else {
        return;
    };
    let backend = env.backend(3).await.backend();
    let run = new_run(&backend).await;
    let step = checkpoint(&run, vec![entry("work#0", 1, run.updated_at)], true);
    backend.store.checkpoint(&step).await.unwrap();
    assert!(tail_sk(&env, &run).await.is_some());
    // A checkpoint that opens a callback writes a transaction: the step's entry and
    // event go into its checkpoint item, none is left in the run item.
    let mut open = checkpoint(
        &step.run,
        vec![entry("approval#0", 1, run.updated_at)],
        true,
    );
    open.callbacks.push(CallbackRecord {
        callback_id: CallbackId(format!("cb-{}", uuid::Uuid::new_v4().simple())),
        tenant: run.tenant.clone(),
        run_id: run.id.clone(),
        position: Position::from("approval#0"),
        status: CallbackStatus::Open,
        deadline: None,
        created_at: run.updated_at,
        accepts: None,
        heartbeat: None,
    });
    backend.store.checkpoint(&open).await.unwrap();
    assert_eq!(tail_sk(&env, &run).await, None);
    let keys = sort_keys(&env, &run).await;
    assert_eq!(
        checkpoint_items(&keys),
        1,
        "the two consecutive checkpoints in one item: {keys:?}"
    );
    assert_eq!(
        journal(&backend, &run).await,
        vec![step.journal[0].clone(), open.journal[0].clone()]
    );
    assert_eq!(timeline_seqs(&backend, &run).await, vec![1, 2, 3]);
}

#[tokio::test]
async fn a_tail_archived_by_a_writer_that_crashed_before_replacing_it_is_read_once() {
    let Some(env) = support::emulators().await else {
        return;
    };
    let backend = env.backend(3).await.backend();
    let run = new_run(&backend).await;
    let first = checkpoint(&run, vec![entry("work#0", 1, run.updated_at)], true);
    backend.store.checkpoint(&first).await.unwrap();
    // The archive's put landed, the update did not.
    let client = aws_sdk_dynamodb::Client::new(&env.sdk);
    let run_item = items(&env, &run)
        .await
        .into_iter()
        .find(|i| i["sk"].as_s().unwrap() == "RUN")
        .unwrap();
    client
        .put_item()
        .table_name(&env.table)
        .item("pk", run_item["pk"].clone())
        .item("sk", run_item["tail_sk"].clone())
        .item("z", run_item["tail"].clone())
        .send()
        .await
        .unwrap();
    // The next step joins the tail all the same (what it decides depends on its own
    // checkpoint, which a replay may compute otherwise).
    let second = checkpoint(&first.run, vec![entry("work#1", 1, run.updated_at)], true);
    backend.store.checkpoint(&second).await.unwrap();
    assert_eq!(timeline_seqs(&backend, &run).await, vec![1, 2, 3]);
    assert_eq!(
        journal(&backend, &run).await,
        vec![first.journal[0].clone(), second.journal[0].clone()]
    );
}

/// Text that deflate cannot shrink much: `len` letters and digits from a fixed
/// pseudo-random sequence.
fn incompressible(len: usize, seed: u64) -> String {
    const SYMBOLS: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    let mut state = seed;
    (0..len)
        .map(|_| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            SYMBOLS[(state >> 33) as usize % SYMBOLS.len()] as char
        })
        .collect()
}

/// The run item's size as DynamoDB bills it, near enough: each attribute's name and
/// value.
async fn run_item_bytes(env: &support::Emulators, run: &Run) -> usize {
    let items = items(env, run).await;
    let run_item = items
        .iter()
        .find(|i| i["sk"].as_s().unwrap() == "RUN")
        .unwrap();
    run_item
        .iter()
        .map(|(name, value)| {
            name.len()
                + match value {
                    AttributeValue::S(s) => s.len(),
                    // Numbers are stored as base-100 digits.
                    AttributeValue::N(n) => n.len().div_ceil(2) + 1,
                    AttributeValue::B(b) => b.as_ref().len(),
                    _ => 1,
                }
        })
        .sum()
}

#[tokio::test]
async fn a_new_runs_first_event_is_held_in_its_run_item_and_its_first_step_takes_it_along() {
    let Some(env) = support::emulators().await else {
        return;
    };
    let backend = env.backend(3).await.backend();
    let run = new_run(&backend).await;
    assert_eq!(
        sort_keys(&env, &run).await,
        vec!["RUN".to_owned()],
        "no timeline item for the run's first event"
    );
    let held = tail_sk(&env, &run).await.expect("held in the run item");
    assert_eq!(checkpoint_seq(&held), Some(1), "{held}");
    assert_eq!(timeline_seqs(&backend, &run).await, vec![1]);
    let step = checkpoint(&run, vec![entry("work#0", 1, run.updated_at)], true);
    backend.store.checkpoint(&step).await.unwrap();
    assert_eq!(sort_keys(&env, &run).await, vec!["RUN".to_owned()]);
    assert_eq!(timeline_seqs(&backend, &run).await, vec![1, 2]);
    assert_eq!(journal(&backend, &run).await, step.journal);
}

#[tokio::test]
async fn a_run_whose_first_event_would_fill_its_run_item_gets_a_timeline_item_for_it() {
    let Some(env) = support::emulators().await else {
        return;
    };
    let backend = env.backend(3).await.backend();
    let at = Timestamp(1_700_000_000_000);
    // The input is in the run item's body: with it, the run item has no room.
    let input = json!({ "note": incompressible(600, 1) });
    let mut run = Run::new(
        TenantId(format!("layout-{}", uuid::Uuid::new_v4().simple())),
        RunId("r".into()),
        "order",
        Payload::Inline(input),
        at,
    );
    run.timeline_seq = 1;
    let started = TimelineEvent::execution_started(at, "order", json!(null));
    backend.store.create_run(&run, &started).await.unwrap();
    assert_eq!(tail_sk(&env, &run).await, None);
    assert_eq!(
        sort_keys(&env, &run).await,
        vec!["RUN".to_owned(), timeline_sk(1)]
    );
    assert_eq!(timeline_seqs(&backend, &run).await, vec![1]);
}

#[tokio::test]
async fn the_control_plane_writing_before_a_new_runs_first_step_keeps_its_first_event() {
    let Some(env) = support::emulators().await else {
        return;
    };
    let backend = env.backend(3).await.backend();
    let run = new_run(&backend).await;
    let control = checkpoint(&run, vec![entry("charge#0", 1, run.updated_at)], false);
    backend.store.checkpoint(&control).await.unwrap();
    assert!(tail_sk(&env, &run).await.is_some(), "the first event kept");
    assert_eq!(timeline_seqs(&backend, &run).await, vec![1, 2]);
    let step = checkpoint(&control.run, vec![entry("ship#0", 1, run.updated_at)], true);
    backend.store.checkpoint(&step).await.unwrap();
    assert_eq!(timeline_seqs(&backend, &run).await, vec![1, 2, 3]);
    assert_eq!(
        journal_by_position(&backend, &run).await,
        vec![control.journal[0].clone(), step.journal[0].clone()]
    );
}

/// An event delivered to a run that has not begun joins its first event in the run
/// item; the run's first turn takes both along.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_delivered_before_a_new_runs_first_turn_joins_its_first_event() {
    let Some(env) = support::emulators().await else {
        return;
    };
    let aws = env.backend(5).await;
    let mut reg = Registry::new();
    reg.register("early", |ctx: Context, _: serde_json::Value| async move {
        let go: serde_json::Value = ctx.wait_for_event("go").await?;
        let doubled: u64 = ctx
            .step("double", move |_| async move {
                Ok(go.as_u64().unwrap_or_default() * 2)
            })
            .await?;
        Ok(json!(doubled))
    });
    let (engine, tenant) = engine_of(&aws, reg);
    let run = engine
        .start(&tenant, "early", json!(null), None)
        .await
        .unwrap();
    engine
        .deliver_event(&tenant, &run.id, "go", json!(7), None)
        .await
        .unwrap();
    let keys = sort_keys(&env, &run).await;
    assert!(
        keys.iter().all(|k| !k.starts_with("T#")),
        "both events in the run item: {keys:?}"
    );
    let backend = aws.backend();
    assert_eq!(timeline_seqs(&backend, &run).await, vec![1, 2]);
    engine.run_until_idle(100).await.unwrap();
    let done = engine.get_run(&tenant, &run.id).await.unwrap();
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(done.output, Some(Payload::Inline(json!(14))));
    let events = backend
        .store
        .timeline(&run.tenant, &run.id, 0, 1000)
        .await
        .unwrap();
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=done.timeline_seq).collect::<Vec<_>>(), "gapless");
    assert_eq!(events[0].event_type, EventType::ExecutionStarted);
    assert_eq!(events[1].event_type, EventType::EventDelivered);
}

#[tokio::test]
async fn a_step_that_would_take_the_run_item_past_a_write_unit_archives_the_tail_before_it() {
    let Some(env) = support::emulators().await else {
        return;
    };
    let backend = env.backend(3).await.backend();
    // A run whose first event, held in its run item, takes a few hundred bytes.
    let at = Timestamp(1_700_000_000_000);
    let input = json!({ "note": incompressible(120, 1) });
    let mut run = Run::new(
        TenantId(format!("layout-{}", uuid::Uuid::new_v4().simple())),
        RunId("r".into()),
        "order",
        Payload::Inline(input.clone()),
        at,
    );
    run.timeline_seq = 1;
    let started = TimelineEvent::execution_started(at, "order", input);
    backend.store.create_run(&run, &started).await.unwrap();
    let claim = Claim {
        owner: "engine".into(),
        now: at,
        expires_at: at.plus(Duration::from_secs(60)),
    };
    let run = backend
        .store
        .claim(&run.tenant, &run.id, &claim)
        .await
        .unwrap();
    // Alone, the step's entry fits in the run item; with the run's first event beside
    // it, it would not.
    let mut big = entry("work#0", 1, run.updated_at);
    big.name = incompressible(260, 2);
    let step = checkpoint(&run, vec![big], true);
    let held = tail_sk(&env, &run).await.expect("the first event held");
    backend.store.checkpoint(&step).await.unwrap();
    let keys = sort_keys(&env, &run).await;
    assert_eq!(
        keys,
        vec![held, "RUN".to_owned()],
        "the first event archived under the key it was held under"
    );
    assert_eq!(
        tail_sk(&env, &run).await,
        Some(checkpoint_sk(step.run.timeline_seq, step.run.version, 0))
    );
    let bytes = run_item_bytes(&env, &run).await;
    assert!(
        bytes <= 1024,
        "the run item stays within a write unit: {bytes} B"
    );
    assert_eq!(timeline_seqs(&backend, &run).await, vec![1, 2]);
    assert_eq!(journal(&backend, &run).await, step.journal);
}

#[tokio::test]
async fn the_control_planes_entries_give_way_to_later_ones_at_their_position() {
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
    assert_eq!(
        journal_by_position(&backend, &run).await,
        vec![new.journal[0].clone(), old.journal[1].clone()]
    );
}

/// A delivery's event joins the run item's checkpoint tail instead of a timeline item of
/// its own (the delivery's transaction writes one item fewer) while the run item stays
/// under a write unit: a run waiting after a transaction (a callback's opening) has no
/// tail, and the delivery starts one; the run's next checkpoint takes it along, and the
/// timeline stays whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deliverys_event_joins_the_checkpoint_tail_and_the_next_checkpoint_takes_it() {
    let Some(env) = support::emulators().await else {
        return;
    };
    let aws = env.backend(5).await;
    let mut reg = Registry::new();
    reg.register("approve", |ctx: Context, _: serde_json::Value| async move {
        let cb = ctx.create_callback::<serde_json::Value>("approval").await?;
        let approved = cb.wait().await?;
        let acted: u32 = ctx.step("act", |_| async { Ok(1) }).await?;
        let go = ctx.wait_for_event::<serde_json::Value>("go").await?;
        Ok(json!([approved, acted, go]))
    });
    let (engine, tenant) = engine_of(&aws, reg);
    let run = engine
        .start(&tenant, "approve", json!(null), None)
        .await
        .unwrap();
    engine.run_until_idle(100).await.unwrap();
    let timeline_items = |keys: &[String]| keys.iter().filter(|k| k.starts_with("T#")).count();
    let whole = |backend: Backend, run: Run| async move {
        let events = backend
            .store
            .timeline(&run.tenant, &run.id, 0, 1000)
            .await
            .unwrap();
        let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>(), "gapless");
        events
    };
    let keys = sort_keys(&env, &run).await;
    assert_eq!(
        timeline_items(&keys),
        0,
        "the run's first event was held in its run item, and the opening took it: {keys:?}"
    );

    let callback = support::waiting_callback(&*aws.backend().store, &tenant, &run.id)
        .await
        .expect("waiting on its callback");
    engine
        .complete_callback(&callback, None, Ok(json!("yes")), None)
        .await
        .unwrap();
    let keys = sort_keys(&env, &run).await;
    assert_eq!(
        timeline_items(&keys),
        0,
        "no timeline item for the delivery: {keys:?}"
    );
    assert!(tail_sk(&env, &run).await.is_some(), "held in the run item");
    let events = whole(aws.backend(), run.clone()).await;
    assert_eq!(
        events.last().map(|e| e.event_type),
        Some(EventType::CallbackDelivered),
        "{events:?}"
    );

    // The step's checkpoint and the event wait's opening leave a tail of their own
    // near a write unit: the event's delivery goes into it if the run item stays under
    // one, else into a timeline item of its own. Either way the timeline is whole.
    engine.run_until_idle(100).await.unwrap();
    engine
        .deliver_event(&tenant, &run.id, "go", json!(7), None)
        .await
        .unwrap();
    whole(aws.backend(), run.clone()).await;
    engine.run_until_idle(100).await.unwrap();
    let done = engine.get_run(&tenant, &run.id).await.unwrap();
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(done.output, Some(Payload::Inline(json!(["yes", 1, 7]))));
    let events = whole(aws.backend(), done.clone()).await;
    assert_eq!(events.len() as u64, done.timeline_seq);
    for delivered in [EventType::CallbackDelivered, EventType::EventDelivered] {
        assert_eq!(
            events.iter().filter(|e| e.event_type == delivered).count(),
            1,
            "{delivered:?} once: {events:?}"
        );
    }
    assert!(timeline_items(&sort_keys(&env, &run).await) <= 2);
}

/// A checkpoint over `current` that opens a callback, as a workflow's suspension on it
/// does: the callback's record, open, and its event.
fn opening(current: &Run, callback: &str) -> Checkpoint {
    let mut cp = checkpoint(
        current,
        vec![entry("approval#0", 1, current.updated_at)],
        true,
    );
    cp.callbacks.push(CallbackRecord {
        callback_id: CallbackId(callback.into()),
        tenant: current.tenant.clone(),
        run_id: current.id.clone(),
        position: Position::from("approval#0"),
        status: CallbackStatus::Open,
        deadline: None,
        created_at: current.updated_at,
        accepts: None,
        heartbeat: None,
    });
    cp
}

/// Whether the store holds a record of `callback`.
async fn has_record(backend: &Backend, callback: &str) -> bool {
    backend
        .store
        .get_callback(&CallbackId(callback.to_owned()))
        .await
        .unwrap()
        .is_some()
}

#[tokio::test]
async fn a_checkpoint_refused_for_a_lost_lease_leaves_no_record_of_the_callback_it_opened() {
    let Some(env) = support::emulators().await else {
        return;
    };
    let backend = env.backend(3).await.backend();
    let run = new_run(&backend).await;
    // Its lease lapsed, another engine claims the run: the first is fenced off.
    let later = run.updated_at.plus(Duration::from_secs(120));
    let claim = Claim {
        owner: "another engine".into(),
        now: later,
        expires_at: later.plus(Duration::from_secs(60)),
    };
    backend
        .store
        .claim(&run.tenant, &run.id, &claim)
        .await
        .unwrap();
    let callback = format!("cb_{}", uuid::Uuid::new_v4().simple());
    let fenced = opening(&run, &callback);
    let refused = backend.store.checkpoint(&fenced).await;
    assert!(
        matches!(refused, Err(siesta::ports::StoreError::Conflict(_))),
        "{refused:?}"
    );
    assert!(
        !has_record(&backend, &callback).await,
        "the record put before the checkpoint is deleted"
    );
}

#[tokio::test]
async fn a_checkpoint_retried_after_its_answer_was_lost_keeps_the_record_of_the_callback_it_opened()
{
    let Some(env) = support::emulators().await else {
        return;
    };
    let backend = env.backend(3).await.backend();
    let run = new_run(&backend).await;
    let callback = format!("cb_{}", uuid::Uuid::new_v4().simple());
    let cp = opening(&run, &callback);
    backend.store.checkpoint(&cp).await.unwrap();
    // The same write again, as after a lost answer: refused, since the first committed,
    // but the record is the committed checkpoint's and stays.
    let retried = backend.store.checkpoint(&cp).await;
    assert!(
        matches!(retried, Err(siesta::ports::StoreError::Conflict(_))),
        "{retried:?}"
    );
    let record = backend
        .store
        .get_callback(&CallbackId(callback))
        .await
        .unwrap()
        .expect("the record kept");
    assert_eq!(record.status, CallbackStatus::Open);
    assert_eq!(record, cp.callbacks[0]);
}
