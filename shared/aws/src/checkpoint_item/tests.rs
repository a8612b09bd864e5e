//! Unit tests of the checkpoint items' layout, the checkpoint tail, packing and reading back.

use super::*;
use serde_json::json;

use crate::item::{TAIL, TAIL_SK, get_s, to_json};
use crate::layout::WRITE_UNIT_BYTES;

fn run(timeline_seq: u64, version: u64) -> Run {
    let mut run = Run::new(
        TenantId("t".into()),
        RunId("r".into()),
        "order",
        Payload::Inline(json!(null)),
        Timestamp(0),
    );
    run.timeline_seq = timeline_seq;
    run.version = version;
    run
}

fn entry(position: &str, attempt: u32) -> JournalEntry {
    JournalEntry {
        position: Position(position.into()),
        index: 0,
        kind: OperationKind::Step,
        name: position.into(),
        state: EntryState::Started { attempt, key: None },
        consumed: Vec::new(),
        handle: None,
        minted: Vec::new(),
        within: None,
        superseded: None,
        updated_at: Timestamp(0),
    }
}

fn event(seq: u64, details: serde_json::Value) -> TimelineEvent {
    let mut e = TimelineEvent::execution_started(Timestamp(1_000), "order", details);
    e.seq = seq;
    e
}

fn ids() -> (TenantId, RunId) {
    (TenantId("t".into()), RunId("r".into()))
}

fn journal_of(items: &[Item]) -> Vec<JournalEntry> {
    let mut journal = Journal::default();
    for item in items {
        assert!(journal.take(replay_item(item).unwrap()).is_none());
    }
    journal.into_entries()
}

#[test]
fn a_steps_entry_and_events_share_one_item() {
    let (tenant, run_id) = ids();
    let entries = vec![entry("charge#1", 1)];
    let events = vec![event(4, json!(null)), event(5, json!({"a": 1}))];
    let items = checkpoint_items(&tenant, &run_id, &run(5, 9), &entries, &events).unwrap();
    assert_eq!(items.len(), 1);
    assert_eq!(items[0].get(SK), Some(&s(checkpoint_sk(5, 9, 0))));
    assert!(
        !items[0].contains_key(PACKED),
        "under a write unit as JSON: kept readable"
    );
    assert_eq!(timeline_from_item(&items[0]).unwrap(), events);
    assert_eq!(journal_of(&items), entries);
}

#[test]
fn a_checkpoint_item_over_a_write_unit_as_json_is_deflated_under_it() {
    let (tenant, run_id) = ids();
    let entries = vec![entry("approval#3", 2), entry("approval#4", 1)];
    let events: Vec<_> = (10..16)
        .map(|seq| event(seq, json!({"Result": {"approved": true, "by": "ada"}})))
        .collect();
    let items = checkpoint_items(&tenant, &run_id, &run(15, 30), &entries, &events).unwrap();
    assert_eq!(items.len(), 1);
    let mut plain = key(run_pk(&tenant, &run_id), checkpoint_sk(15, 30, 0));
    let entry_json: Vec<_> = entries.iter().map(|e| to_json(e).unwrap()).collect();
    let event_json: Vec<_> = events.iter().map(|e| to_json(e).unwrap()).collect();
    plain.insert(JOURNAL.into(), s(format!("[{}]", entry_json.join(","))));
    plain.insert(EVENTS.into(), s(format!("[{}]", event_json.join(","))));
    assert!(
        item_size(&plain) > WRITE_UNIT_BYTES,
        "{} B as JSON",
        item_size(&plain)
    );
    assert!(items[0].contains_key(PACKED));
    assert!(!items[0].contains_key(JOURNAL) && !items[0].contains_key(EVENTS));
    assert!(
        item_size(&items[0]) <= WRITE_UNIT_BYTES,
        "{} B deflated",
        item_size(&items[0])
    );
    assert_eq!(timeline_from_item(&items[0]).unwrap(), events);
    assert_eq!(journal_of(&items), entries);
}

#[test]
fn a_packed_item_that_does_not_inflate_is_an_error_not_a_panic() {
    let (tenant, run_id) = ids();
    let mut item = key(run_pk(&tenant, &run_id), checkpoint_sk(1, 1, 0));
    item.insert(PACKED.into(), AttributeValue::B(Blob::new(vec![0xff; 8])));
    assert!(matches!(
        timeline_from_item(&item),
        Err(StoreError::Invalid(_))
    ));
    assert!(matches!(replay_item(&item), Err(StoreError::Invalid(_))));
}

#[test]
fn a_checkpoint_without_entries_or_events_writes_no_item() {
    let (tenant, run_id) = ids();
    assert!(
        checkpoint_items(&tenant, &run_id, &run(5, 9), &[], &[])
            .unwrap()
            .is_empty()
    );
}

#[test]
fn an_item_without_events_has_an_empty_timeline() {
    let (tenant, run_id) = ids();
    let items = checkpoint_items(&tenant, &run_id, &run(5, 9), &[entry("a#1", 1)], &[]).unwrap();
    assert!(!items[0].contains_key(EVENTS));
    assert_eq!(timeline_from_item(&items[0]).unwrap(), Vec::new());
}

#[test]
fn a_checkpoint_too_large_for_one_item_goes_in_several_in_order() {
    let (tenant, run_id) = ids();
    let big = "x".repeat(CHECKPOINT_ITEM_BYTES / 3);
    let entries: Vec<_> = (1..=4)
        .map(|i| {
            let mut e = entry(&format!("s#{i}"), 1);
            e.name = big.clone();
            e
        })
        .collect();
    let events: Vec<_> = (1..=5).map(|i| event(i, json!(big))).collect();
    let items = checkpoint_items(&tenant, &run_id, &run(5, 2), &entries, &events).unwrap();
    assert!(items.len() > 2, "{} items", items.len());
    let mut back = Vec::new();
    for (i, item) in items.iter().enumerate() {
        assert!(crate::item::item_size(item) < 400 * 1024);
        assert_eq!(item.get(SK), Some(&s(checkpoint_sk(5, 2, i as u16))));
        back.extend(timeline_from_item(item).unwrap());
    }
    assert_eq!(back, events);
    assert_eq!(journal_of(&items), entries);
}

#[test]
fn a_later_checkpoints_entry_replaces_an_earlier_one_at_its_position() {
    let (tenant, run_id) = ids();
    let first = checkpoint_items(&tenant, &run_id, &run(3, 4), &[entry("a#1", 2)], &[]).unwrap();
    let second = checkpoint_items(
        &tenant,
        &run_id,
        &run(3, 5),
        &[entry("a#1", 3), entry("b#1", 1)],
        &[],
    )
    .unwrap();
    let mut items = vec![second[0].clone(), first[0].clone()];
    items.sort_by_key(|item| get_s(item, SK, "test").unwrap().to_owned());
    assert_eq!(journal_of(&items), vec![entry("a#1", 3), entry("b#1", 1)]);
}

/// The tail a checkpoint starts: its sort key and content.
fn checkpoint_tail(
    run: &Run,
    journal: &[JournalEntry],
    events: &[TimelineEvent],
) -> Result<Option<(String, Vec<u8>)>, StoreError> {
    Ok(next_tail(run, 0, journal, events, None)?.map(|t| (t.sk, t.packed)))
}

#[test]
fn consecutive_checkpoints_share_a_tail_which_the_one_past_its_limit_archives() {
    let (tenant, run_id) = ids();
    let mut current = run(1, 1);
    current.tenant = tenant.clone();
    current.id = run_id.clone();
    let mut tail: Option<Item> = None;
    let mut archived = Vec::new();
    let mut written = Vec::new();
    for step in 0..7u64 {
        let expected = current.version;
        current.version += 1;
        current.timeline_seq += 1;
        let e = entry(&format!("s#{step}"), 1);
        let ev = event(current.timeline_seq, json!({"Result": step}));
        written.push((e.clone(), ev.clone()));
        let mut write = next_tail(&current, expected, &[e], &[ev], tail.take())
            .unwrap()
            .unwrap();
        assert_eq!(
            write.sk,
            checkpoint_sk(current.timeline_seq, current.version, 0)
        );
        archived.extend(write.archive.take());
        let mut run_item = crate::item::run_item(&current, std::time::Duration::ZERO).unwrap();
        write.put_in(&mut run_item);
        tail = archived_tail(&run_item).unwrap();
    }
    // Three checkpoints to a tail: steps 0-2 and 3-5 archived, 6 in the tail.
    assert_eq!(archived.len(), 2);
    assert_eq!(archived[0].get(SK), Some(&s(checkpoint_sk(4, 4, 0))));
    assert_eq!(archived[1].get(SK), Some(&s(checkpoint_sk(7, 7, 0))));
    let mut items = archived.clone();
    items.extend(tail);
    let events: Vec<_> = items
        .iter()
        .flat_map(|i| timeline_from_item(i).unwrap())
        .collect();
    assert_eq!(
        events,
        written.iter().map(|(_, ev)| ev.clone()).collect::<Vec<_>>()
    );
    assert_eq!(
        journal_of(&items),
        written.iter().map(|(e, _)| e.clone()).collect::<Vec<_>>()
    );
}

#[test]
fn a_checkpoint_after_another_write_archives_the_tail_instead_of_joining_it() {
    let first = next_tail(&run(2, 2), 1, &[entry("a#1", 1)], &[], None)
        .unwrap()
        .unwrap();
    let (tenant, run_id) = ids();
    let mut previous = key(run_pk(&tenant, &run_id), first.sk.clone());
    previous.insert(PACKED.into(), AttributeValue::B(Blob::new(first.packed)));
    // A delivery made version 3: the next checkpoint is conditioned on it.
    let next = next_tail(
        &run(3, 4),
        3,
        &[entry("b#1", 1)],
        &[],
        Some(previous.clone()),
    )
    .unwrap()
    .unwrap();
    assert_eq!(next.archive, Some(previous.clone()));
    // Without it, the two share the tail.
    let joined = next_tail(&run(3, 3), 2, &[entry("b#1", 1)], &[], Some(previous))
        .unwrap()
        .unwrap();
    assert!(joined.archive.is_none());
}

#[test]
fn a_tail_is_taken_into_the_next_checkpoint_only_when_it_came_right_before() {
    let (tenant, run_id) = ids();
    let events = vec![event(3, json!(null))];
    let first = next_tail(&run(3, 5), 4, &[entry("a#1", 1)], &events, None)
        .unwrap()
        .unwrap();
    let mut tail = key(run_pk(&tenant, &run_id), first.sk);
    tail.insert(PACKED.into(), AttributeValue::B(Blob::new(first.packed)));
    assert_eq!(
        tail_before(&tail, 5, 3).unwrap(),
        Some(TailContents {
            journal: vec![entry("a#1", 1)],
            events
        })
    );
    assert_eq!(
        tail_before(&tail, 6, 3).unwrap(),
        None,
        "a write came between"
    );
}

/// A tail as the run item holds it after `write`, as the item it is archived as.
fn tail_item(write: TailWrite) -> Item {
    let (tenant, run_id) = ids();
    let mut tail = key(run_pk(&tenant, &run_id), write.sk);
    tail.insert(PACKED.into(), AttributeValue::B(Blob::new(write.packed)));
    tail
}

#[test]
fn a_deliverys_event_joins_the_tail_under_its_own_key_and_a_later_checkpoint_takes_it() {
    // A run waiting after a transaction (no tail): the delivery starts one.
    let delivered = event(4, json!({"callback": "cb"}));
    let alone = tail_with_event(&run(4, 7), 6, None, &delivered)
        .unwrap()
        .unwrap();
    assert_eq!(alone.sk, checkpoint_sk(4, 7, 0));
    let alone = tail_item(alone);
    assert_eq!(timeline_from_item(&alone).unwrap(), vec![delivered.clone()]);
    assert_eq!(journal_of(std::slice::from_ref(&alone)), vec![]);
    // A claim came between (version 8): a transaction's checkpoint takes it all
    // the same, and a step joins it — it holds no entry whose place could move.
    assert_eq!(
        tail_before(&alone, 8, 4).unwrap(),
        Some(TailContents {
            journal: vec![],
            events: vec![delivered.clone()]
        })
    );
    // But not once an event came between (the control plane's): the item it would
    // join would hold seqs around another item's, which the timeline's paging
    // cannot read in order.
    assert_eq!(tail_before(&alone, 9, 5).unwrap(), None);
    let after_another = next_tail(
        &run(6, 10),
        9,
        &[entry("s#1", 1)],
        &[event(6, json!(null))],
        Some(alone.clone()),
    )
    .unwrap()
    .unwrap();
    assert_eq!(
        after_another.archive,
        Some(alone.clone()),
        "archived, not joined"
    );
    let step = event(5, json!({"Result": 1}));
    let joined = next_tail(
        &run(5, 9),
        8,
        &[entry("s#1", 1)],
        std::slice::from_ref(&step),
        Some(alone),
    )
    .unwrap()
    .unwrap();
    assert!(joined.archive.is_none(), "joined, not archived");
    let joined = tail_item(joined);
    assert_eq!(timeline_from_item(&joined).unwrap(), vec![delivered, step]);
    assert_eq!(journal_of(&[joined]), vec![entry("s#1", 1)]);
}

#[test]
fn a_deliverys_event_after_a_steps_tail_keeps_its_entries_and_a_retry_knows_its_write() {
    let mine = next_tail(
        &run(3, 5),
        4,
        &[entry("a#1", 1)],
        &[event(3, json!(null))],
        None,
    )
    .unwrap()
    .unwrap();
    // The run item the step's write wrote.
    let mut written = crate::item::run_item(&run(3, 5), std::time::Duration::ZERO).unwrap();
    TailWrite {
        sk: mine.sk.clone(),
        packed: mine.packed.clone(),
        archive: None,
    }
    .put_in(&mut written);
    let tail = tail_item(mine);
    let delivered = event(4, json!({"go": true}));
    // Entries are joined only right after their checkpoint: moved under the
    // delivery's key, they would sort after what came between.
    assert!(
        tail_with_event(&run(4, 7), 6, Some(&tail), &delivered)
            .unwrap()
            .is_none()
    );
    let grown = tail_with_event(&run(4, 6), 5, Some(&tail), &delivered)
        .unwrap()
        .unwrap();
    assert_eq!(grown.sk, checkpoint_sk(4, 6, 0));
    let mut run_item = crate::item::run_item(&run(4, 6), std::time::Duration::ZERO).unwrap();
    grown.put_in(&mut run_item);
    let held = archived_tail(&run_item).unwrap().unwrap();
    assert_eq!(
        journal_of(std::slice::from_ref(&held)),
        vec![entry("a#1", 1)]
    );
    assert_eq!(
        timeline_from_item(&held).unwrap(),
        vec![event(3, json!(null)), delivered]
    );
    // The step's write, retried after its answer was lost, finds its own tail grown
    // by the delivery: applied. Another tail is not its.
    assert!(tail_grew_from(&run_item, &written).unwrap());
    let other = next_tail(&run(3, 5), 4, &[entry("b#1", 1)], &[], None)
        .unwrap()
        .unwrap();
    let mut not_written = crate::item::run_item(&run(3, 5), std::time::Duration::ZERO).unwrap();
    other.put_in(&mut not_written);
    assert!(!tail_grew_from(&run_item, &not_written).unwrap());
    // A tail with entries is still taken by a transaction only right after it.
    assert_eq!(tail_before(&held, 7, 4).unwrap(), None);
    assert!(tail_before(&held, 6, 4).unwrap().is_some());
}

#[test]
fn a_checkpoint_or_a_delivery_that_would_take_the_tail_past_its_bytes_leaves_it() {
    // Text deflate cannot shrink much: pseudo-random hex (xorshift), each half a
    // tail deflated.
    let noise = |n: usize| {
        let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ n as u64;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                format!("{:x}", x % 16)
            })
            .collect::<String>()
    };
    assert!(
        tail_with_event(&run(4, 7), 6, None, &event(4, json!(noise(TAIL_BYTES * 3))))
            .unwrap()
            .is_none(),
        "a delivery's event past the bytes: a timeline item of its own"
    );
    let mut big = entry("a#1", 1);
    big.name = noise(TAIL_BYTES * 3);
    assert!(
        next_tail(&run(2, 2), 1, &[big.clone()], &[], None)
            .unwrap()
            .is_none(),
        "alone past the bytes: a checkpoint item of its own"
    );
    big.name = noise(TAIL_BYTES);
    let first = next_tail(&run(2, 2), 1, &[big], &[], None)
        .unwrap()
        .unwrap();
    let (tenant, run_id) = ids();
    let mut previous = key(run_pk(&tenant, &run_id), first.sk);
    previous.insert(PACKED.into(), AttributeValue::B(Blob::new(first.packed)));
    let mut next_big = entry("b#1", 1);
    next_big.name = noise(TAIL_BYTES + 7);
    let next = next_tail(&run(3, 3), 2, &[next_big], &[], Some(previous.clone()))
        .unwrap()
        .unwrap();
    assert_eq!(next.archive, Some(previous));
}

/// The run item of `run` holding the tail `tail` (a checkpoint's, from
/// [`checkpoint_tail`]).
fn run_with_tail(run: &Run, tail: Option<(String, Vec<u8>)>) -> Item {
    let mut item = crate::item::run_item(run, std::time::Duration::ZERO).unwrap();
    if let Some((sk, packed)) = tail {
        item.insert(TAIL_SK.into(), s(sk));
        item.insert(TAIL.into(), AttributeValue::B(Blob::new(packed)));
    }
    item
}

#[test]
fn a_tail_archived_is_the_checkpoint_item_it_stands_for() {
    let (tenant, run_id) = ids();
    let mut step = run(5, 9);
    step.tenant = tenant.clone();
    step.id = run_id.clone();
    let entries = vec![entry("charge#1", 1)];
    let events = vec![event(4, json!(null)), event(5, json!({"a": 1}))];
    let tail = checkpoint_tail(&step, &entries, &events).unwrap().unwrap();
    assert_eq!(tail.0, checkpoint_sk(5, 9, 0));
    let archived = archived_tail(&run_with_tail(&step, Some(tail)))
        .unwrap()
        .unwrap();
    assert_eq!(archived.get(SK), Some(&s(checkpoint_sk(5, 9, 0))));
    assert_eq!(archived.get(PK), Some(&s(run_pk(&tenant, &run_id))));
    assert_eq!(timeline_from_item(&archived).unwrap(), events);
    assert_eq!(journal_of(&[archived]), entries);
    assert!(
        archived_tail(&run_with_tail(&step, None))
            .unwrap()
            .is_none()
    );
}

#[test]
fn a_checkpoint_of_more_than_one_item_or_of_nothing_has_no_tail() {
    let big = "x".repeat(CHECKPOINT_ITEM_BYTES / 2);
    let events: Vec<_> = (1..=3).map(|i| event(i, json!(big))).collect();
    assert!(checkpoint_tail(&run(3, 2), &[], &events).unwrap().is_none());
    assert!(checkpoint_tail(&run(3, 2), &[], &[]).unwrap().is_none());
}

#[test]
fn the_items_read_after_the_run_item_has_its_tail_once_in_its_place() {
    let (tenant, run_id) = ids();
    let at = |seq, version| {
        let mut r = run(seq, version);
        r.tenant = tenant.clone();
        r.id = run_id.clone();
        r
    };
    let item = |r: &Run, e: JournalEntry| {
        checkpoint_items(&tenant, &run_id, r, &[e], &[])
            .unwrap()
            .remove(0)
    };
    // Checkpoints at versions 3 and 5 in items, 6 in the tail (a delivery made 4,
    // then 7 moved the run on, keeping the tail).
    let mut current = at(7, 7);
    let tail = checkpoint_tail(&at(6, 6), &[entry("a#1", 3)], &[]).unwrap();
    let first = item(&at(3, 3), entry("a#1", 1));
    let second = item(&at(5, 5), entry("b#1", 1));
    let run_item = run_with_tail(&current, tail);
    let archived = archived_tail(&run_item).unwrap().unwrap();
    let sks = |items: &[Item]| {
        items
            .iter()
            .map(|i| get_s(i, SK, "test").unwrap().to_owned())
            .collect::<Vec<_>>()
    };
    // Not archived yet: the tail joins in its place, last here.
    let items = with_tail(vec![first.clone(), second.clone()], Some(&run_item)).unwrap();
    assert_eq!(
        sks(&items),
        sks(&[first.clone(), second.clone(), archived.clone()])
    );
    assert_eq!(journal_of(&items), vec![entry("a#1", 3), entry("b#1", 1)]);
    // Archived between the two reads, and a checkpoint of version 8 committed (as a
    // checkpoint item): the tail once, the later checkpoint not at all.
    let later = item(&at(8, 8), entry("a#1", 9));
    let read = vec![first.clone(), second.clone(), archived.clone(), later];
    let items = with_tail(read, Some(&run_item)).unwrap();
    assert_eq!(
        sks(&items),
        sks(&[first.clone(), second.clone(), archived.clone()])
    );
    assert_eq!(journal_of(&items), vec![entry("a#1", 3), entry("b#1", 1)]);
    // A tail older than a checkpoint item (a transaction's, which keeps the tail):
    // the later item's entry wins.
    current.version = 9;
    let tx_item = item(&at(8, 8), entry("a#1", 4));
    let run_item = run_with_tail(
        &current,
        checkpoint_tail(&at(6, 6), &[entry("a#1", 3)], &[]).unwrap(),
    );
    let items = with_tail(vec![first, tx_item], Some(&run_item)).unwrap();
    assert_eq!(journal_of(&items), vec![entry("a#1", 4)]);
    // No run item, nothing to add.
    assert!(with_tail(Vec::new(), None).unwrap().is_empty());
}

#[test]
fn checkpoint_sort_keys_order_by_timeline_seq_then_version() {
    // (timeline seq, version) of successive checkpoints: events or none, and
    // deliveries' events between them (that writers produce such pairs, the
    // conformance suite's replacing checkpoints check through the store).
    let written = [(3, 4), (3, 5), (5, 6), (9, 7), (9, 8), (12, 9)];
    let keys: Vec<_> = written
        .iter()
        .map(|&(seq, version)| checkpoint_sk(seq, version, 0))
        .collect();
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(keys, sorted);
}
