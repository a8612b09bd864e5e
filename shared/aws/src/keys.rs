//! Key derivation for the single table: which partition and sort key each item has.
//!
//! Every item of a run lives in the run's partition (`pk` = [`run_pk`]), so loading a
//! run's replay input is one `Query`. Ids are user-chosen strings, so each component is
//! escaped (`%` → `%25`, `#` → `%23`) before it is joined with `#`: two different
//! (tenant, run) pairs can never produce the same key.

use sha2::{Digest, Sha256};
use siesta::{CallbackId, DeliveryId, IdempotencyKey, Position, RunId, TenantId};

use crate::item::{RUN_ID, STATUS};

/// The table's partition key attribute.
pub const PK: &str = "pk";
/// The table's sort key attribute.
pub const SK: &str = "sk";
/// The sort key of a run's own item (metadata, status, lease).
pub const RUN_SK: &str = "RUN";
/// The sort-key prefix shared by checkpoint items and deliveries: what replay loads.
pub const REPLAY_INPUT_PREFIX: &str = "H#";
/// The sort-key prefix of checkpoint items: a checkpoint's journal entries and timeline
/// events together.
pub const CHECKPOINT_PREFIX: &str = "H#K#";
/// Above every sort key under [`CHECKPOINT_PREFIX`] (`$` follows `#`) and below the
/// next prefix: `sk BETWEEN CHECKPOINT_PREFIX AND CHECKPOINT_END` reads the whole
/// journal and no delivery.
pub const CHECKPOINT_END: &str = "H#K$";
/// The sort-key prefix of deliveries (callback outcomes, events, messages, child results).
pub const DELIVERY_PREFIX: &str = "H#D#";
/// The sort-key prefix of timeline events.
pub const TIMELINE_PREFIX: &str = "T#";
/// The sort-key prefix of stream chunks.
pub const STREAM_PREFIX: &str = "S#";
/// The sort key of a callback's index record and of a tool-call record.
pub const RECORD_SK: &str = "REC";

/// The sparse index of runs that fall due (timers, deadlines, lease expiries, runnable).
pub const DUE_INDEX: &str = "due";
/// The due index's partition key: one of [`DUE_SHARDS`] shards.
pub const DUE_SHARD: &str = "due_shard";
/// When the run falls due (ms since the epoch); projected into the due index.
pub const DUE_AT: &str = "due_at";
/// The due index's sort key: when the sweep looks at the run (ms since the epoch), its
/// due time or, while a wake-up sent for it may still arrive, its `resend_after`
/// ([`siesta::Run::sweep_at`]). Runs whose wake-up is on its way sort after the
/// present, so a backlog of them costs the sweep's query nothing.
pub const SWEEP_AT: &str = "sweep_at";
/// Until when a wake-up sent for the run may still arrive (ms since the epoch).
pub const RESEND_AFTER: &str = "resend_after";
/// How many partitions the due index is spread over, so that many runs with the same
/// deadline do not all land on one partition.
pub const DUE_SHARDS: u32 = 16;

/// The index of a tenant's runs, newest first.
pub const TENANT_INDEX: &str = "by_tenant";
/// The tenant index's partition key.
pub const TENANT: &str = "tenant";
/// The tenant index's sort key: creation time and run id ([`created_key`]).
pub const CREATED_KEY: &str = "created_key";

/// The sparse index of unfinished runs by tenant and build, keys only: a run is in it
/// from its creation until the checkpoint that finishes it, so a checkpoint that only
/// changes its status or body costs the index nothing.
pub const BUILD_INDEX: &str = "by_build";
/// The build index's partition key ([`build_key`]); its sort key is [`CREATED_KEY`].
pub const BUILD_KEY: &str = "build_key";
/// A build record's attribute: when the tenant's earliest run on the build was created.
pub const FIRST_SEEN: &str = "first_seen";
/// A build record's attribute: when the tenant's latest run on the build was created.
pub const LAST_SEEN: &str = "last_seen";

/// The TTL attribute (seconds since the epoch), set on closed callback records and
/// finished tool-call records.
pub const EXPIRES_AT: &str = "expires_at";

/// The sparse index of finished runs the reaper has not removed yet
/// ([`crate::retention`]): a run item enters it with the checkpoint that finishes it and
/// leaves it when the reaper removes the run (or finds it kept for ever).
pub const REAP_INDEX: &str = "reap";
/// The reap index's partition key: one of [`DUE_SHARDS`] shards ([`due_shard`]).
pub const REAP_SHARD: &str = "reap_shard";
/// The reap index's sort key: when the reaper looks at the finished run next (ms since
/// the epoch) — its finish plus the shortest retention the deployment has, then its own
/// retention's end, or a claimed run's claim expiry.
pub const REAP_AT: &str = "reap_at";

/// A global secondary index of the table: its name, keys and the attributes it projects
/// beside them. DynamoDB writes an index entry for a run item that has both keys, and
/// bills every change of it (docs/dynamodb.md, "Index writes").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexShape {
    /// The index's name.
    pub name: &'static str,
    /// Its partition key.
    pub hash: &'static str,
    /// Its sort key.
    pub range: &'static str,
    /// The attributes it projects beside the keys (none: keys only).
    pub include: &'static [&'static str],
}

/// The table's indexes, as `infra/template.yaml` and `siesta bootstrap` declare them.
pub const INDEXES: [IndexShape; 4] = [
    // Sparse and write-sharded: runs that fall due (docs/dynamodb.md); the sweep reads
    // what it needs to send a wake-up from the index alone.
    IndexShape {
        name: DUE_INDEX,
        hash: DUE_SHARD,
        range: SWEEP_AT,
        include: &[TENANT, RUN_ID, STATUS, DUE_AT],
    },
    // Keys only: their keys are set when a run is created (and `build_key` removed when
    // it finishes), so no other checkpoint writes to them.
    IndexShape {
        name: TENANT_INDEX,
        hash: TENANT,
        range: CREATED_KEY,
        include: &[],
    },
    IndexShape {
        name: BUILD_INDEX,
        hash: BUILD_KEY,
        range: CREATED_KEY,
        include: &[],
    },
    // Sparse: finished runs the reaper has not removed yet (docs/retention.md).
    IndexShape {
        name: REAP_INDEX,
        hash: REAP_SHARD,
        range: REAP_AT,
        include: &[],
    },
];

fn escape(component: &str) -> String {
    component.replace('%', "%25").replace('#', "%23")
}

/// The partition of a run and everything that belongs to it.
pub fn run_pk(tenant: &TenantId, run_id: &RunId) -> String {
    format!("R#{}#{}", escape(tenant.as_str()), escape(run_id.as_str()))
}

/// The sort key of part `part` of the checkpoint item written with the run at
/// `version` and its timeline at `timeline_seq` (its last event, or the last before it
/// when it has none). Fixed-width hex, so that the sort key orders checkpoint items as
/// they were written (versions rise; the timeline seq never falls) and a `Query` from
/// [`checkpoint_sk_from`] on finds every one holding an event at or after a `seq`.
pub fn checkpoint_sk(timeline_seq: u64, version: u64, part: u16) -> String {
    format!("{CHECKPOINT_PREFIX}{timeline_seq:016x}{version:016x}{part:04x}")
}

/// The run version a checkpoint item's sort key names (the version its checkpoint
/// committed), if `sk` is one.
pub fn checkpoint_version(sk: &str) -> Option<u64> {
    let hex = sk.strip_prefix(CHECKPOINT_PREFIX)?.get(16..32)?;
    u64::from_str_radix(hex, 16).ok()
}

/// The timeline seq a checkpoint item's sort key names (its last event's, or the last
/// before it), if `sk` is one.
pub fn checkpoint_seq(sk: &str) -> Option<u64> {
    let hex = sk.strip_prefix(CHECKPOINT_PREFIX)?.get(..16)?;
    u64::from_str_radix(hex, 16).ok()
}

/// The least sort key of a checkpoint item whose timeline ends at `timeline_seq` or
/// later.
pub fn checkpoint_sk_from(timeline_seq: u64) -> String {
    format!("{CHECKPOINT_PREFIX}{timeline_seq:016x}")
}

/// The sort key of a delivery; its id is the dedup key.
pub fn delivery_sk(id: &DeliveryId) -> String {
    format!("{DELIVERY_PREFIX}{}", id.as_str())
}

/// The sort key of the timeline event with sequence number `seq`; zero-padded so that
/// the sort key orders events by `seq`.
pub fn timeline_sk(seq: u64) -> String {
    format!("{TIMELINE_PREFIX}{seq:020}")
}

/// The sort-key prefix of stream `name`'s chunks (in the run's partition).
pub fn stream_prefix(name: &str) -> String {
    format!("{STREAM_PREFIX}{}#", escape(name))
}

/// The sort key of stream `name`'s chunk at `offset`; zero-padded so that the sort key
/// orders chunks by offset.
pub fn stream_sk(name: &str, offset: u64) -> String {
    format!("{}{offset:020}", stream_prefix(name))
}

/// The sort key of the record that stream `name` holds the keyed chunk `key` (in the
/// run's partition, with the chunk's offset); outside [`stream_prefix`], so neither a
/// read of the chunks nor the look for the stream's end meets it.
pub fn stream_key_sk(name: &str, key: &str) -> String {
    format!("SK#{}#{}", escape(name), escape(key))
}

/// The partition of a callback's index record (the callback id is the webhook token).
pub fn callback_pk(id: &CallbackId) -> String {
    format!("C#{}", escape(id.as_str()))
}

/// The partition of a tenant's count of unfinished runs (its item's sort key is
/// [`RECORD_SK`]), kept by the transactions that create and finish runs.
pub fn quota_pk(tenant: &TenantId) -> String {
    format!("Q#{}", escape(tenant.as_str()))
}

/// The partition of a tenant's build records, one per build its runs were on (its sort
/// key is the build id), with [`FIRST_SEEN`] and [`LAST_SEEN`].
pub fn builds_pk(tenant: &TenantId) -> String {
    format!("B#{}", escape(tenant.as_str()))
}

/// The build index's partition of the tenant's unfinished runs on `build`.
pub fn build_key(tenant: &TenantId, build: &str) -> String {
    format!("{}#{}", escape(tenant.as_str()), escape(build))
}

/// The build of a [`build_key`]: what follows the escaped tenant, unescaped; `None`
/// for a key not made by [`build_key`].
pub fn build_of_build_key(key: &str) -> Option<String> {
    // The escaped tenant holds no `#`: the first one ends it.
    let (_, build) = key.split_once('#')?;
    unescape(build)
}

/// The inverse of `escape`: `%23` → `#`, `%25` → `%`, read left to right; `None` for
/// anything `escape` cannot have made.
fn unescape(component: &str) -> Option<String> {
    let mut out = String::with_capacity(component.len());
    let mut rest = component;
    while let Some(i) = rest.find(['%', '#']) {
        out.push_str(&rest[..i]);
        let tail = &rest[i..];
        if tail.starts_with("%23") {
            out.push('#');
        } else if tail.starts_with("%25") {
            out.push('%');
        } else {
            return None;
        }
        rest = &tail[3..];
    }
    out.push_str(rest);
    Some(out)
}

/// The partition of a tenant's schedules' states, one item per schedule (its sort key
/// the schedule's name), written with a condition on its version.
pub fn schedules_pk(tenant: &TenantId) -> String {
    format!("SCH#{}", escape(tenant.as_str()))
}

/// The partition of a tenant's workflows' pauses, one item per workflow (its sort key
/// the workflow's name).
pub fn workflow_pauses_pk(tenant: &TenantId) -> String {
    format!("WFP#{}", escape(tenant.as_str()))
}

/// The partition of a tenant's bulk actions' jobs, one item per job (its sort key the
/// job's id, time-ordered: a `Query` backwards lists them newest first).
pub fn action_jobs_pk(tenant: &TenantId) -> String {
    format!("J#{}", escape(tenant.as_str()))
}

/// The partition of the deployment's active bulk-action jobs: one small item per
/// running job (sort key [`active_action_job_sk`]), put and deleted in the same
/// transaction as the job's start and end, so the sweep finds them with one `Query`
/// that costs what the active jobs number.
pub const ACTIVE_ACTION_JOBS_PK: &str = "AJ";

/// The sort key of `tenant`'s job `id` under [`ACTIVE_ACTION_JOBS_PK`].
pub fn active_action_job_sk(tenant: &TenantId, id: &str) -> String {
    format!("{}#{}", escape(tenant.as_str()), escape(id))
}

/// The partition of a tenant's debounces' entries, one item per debounce and key (sort
/// key [`debounce_entry_sk`]): which run the key's starts join now.
pub fn debounces_pk(tenant: &TenantId) -> String {
    format!("D#{}", escape(tenant.as_str()))
}

/// The sort key of `debounce`'s entry for `key` (under [`debounces_pk`]).
pub fn debounce_entry_sk(debounce: &str, key: &str) -> String {
    format!("{}#{}", escape(debounce), escape(key))
}

/// The partition of a tenant's concurrency-limit counters, one item per key of a limit
/// in use (sort key [`limit_counter_sk`]): `limit_usage` is one `Query` of it.
pub fn limits_pk(tenant: &TenantId) -> String {
    format!("L#{}", escape(tenant.as_str()))
}

/// The sort-key prefix of a tenant's limit counters (under [`limits_pk`]).
pub const LIMIT_COUNTER_PREFIX: &str = "C#";

/// The sort key of the counter of `limit`'s `key` (under [`limits_pk`]): how many hold
/// the key, how many wait, the line's last ticket.
pub fn limit_counter_sk(limit: &str, key: &str) -> String {
    format!("{LIMIT_COUNTER_PREFIX}{}#{}", escape(limit), escape(key))
}

/// The limit and key a [`limit_counter_sk`] names; `None` for another sort key.
pub fn limit_of_counter_sk(sk: &str) -> Option<(String, String)> {
    let rest = sk.strip_prefix(LIMIT_COUNTER_PREFIX)?;
    // An escaped component holds no `#`: the first one ends the limit's name.
    let (limit, key) = rest.split_once('#')?;
    Some((unescape(limit)?, unescape(key)?))
}

/// The partition of one key of one limit, a *line*: its holders (sort key
/// [`limit_holder_sk`]) and its waiters (sort key [`limit_waiter_sk`], in ticket order).
/// One partition per line, apart from the tenant's counters, so that a line's first
/// waiter is one `Query` with `Limit 1` and a long line weighs on no other key.
pub fn limit_line_pk(tenant: &TenantId, limit: &str, key: &str) -> String {
    format!(
        "L#{}#{}#{}",
        escape(tenant.as_str()),
        escape(limit),
        escape(key)
    )
}

/// The sort key of a run holding a slot of a line (under [`limit_line_pk`]).
pub fn limit_holder_sk(run_id: &RunId) -> String {
    format!("H#{}", escape(run_id.as_str()))
}

/// The sort-key prefix of a line's waiters (under [`limit_line_pk`]).
pub const LIMIT_WAITER_PREFIX: &str = "W#";

/// The sort key of the waiter with `ticket` in its line (under [`limit_line_pk`]):
/// zero-padded, so that the sort key orders the line.
pub fn limit_waiter_sk(ticket: u64) -> String {
    format!("{LIMIT_WAITER_PREFIX}{ticket:020}")
}

/// The ticket a [`limit_waiter_sk`] names.
pub fn ticket_of_waiter_sk(sk: &str) -> Option<u64> {
    sk.strip_prefix(LIMIT_WAITER_PREFIX)?.parse().ok()
}

/// The partition of a step rate limit's key (the key across the deployment, as the
/// engine names it): its last turn (sort key [`RECORD_SK`]) and the turns kept for
/// attempts that wait for theirs (sort key [`rate_turn_sk`]).
pub fn rate_key_pk(key: &str) -> String {
    format!("P#{}", escape(key))
}

/// The sort key of the turn kept for a run's step under a rate key (under
/// [`rate_key_pk`]).
pub fn rate_turn_sk(tenant: &TenantId, run_id: &RunId, position: &Position) -> String {
    format!(
        "T#{}#{}#{}",
        escape(tenant.as_str()),
        escape(run_id.as_str()),
        escape(position.0.as_str())
    )
}

/// The partition of a step limit's key (the key across the deployment, as the engine
/// names it): its line item (sort key [`RECORD_SK`]), its holders (sort key
/// [`step_holder_sk`]) and its waiters (sort key [`step_waiter_sk`], in ticket order).
pub fn step_slot_pk(key: &str) -> String {
    format!("G#{}", escape(key))
}

/// The sort key of a run's step holding a slot of a step limit's key (under
/// [`step_slot_pk`]).
pub fn step_holder_sk(tenant: &str, run_id: &str, position: &str) -> String {
    format!(
        "H#{}#{}#{}",
        escape(tenant),
        escape(run_id),
        escape(position)
    )
}

/// The sort key of the waiter with `ticket` in a step limit's line (under
/// [`step_slot_pk`]): zero-padded, so that the sort key orders the line.
pub fn step_waiter_sk(ticket: u64) -> String {
    format!("W#{ticket:020}")
}

/// The ticket a [`step_waiter_sk`] names; `None` for another sort key.
pub fn ticket_of_step_waiter_sk(sk: &str) -> Option<u64> {
    sk.strip_prefix("W#")?.parse().ok()
}

/// The counter item's attribute: the tenant's unfinished runs.
pub const UNFINISHED: &str = "unfinished";

/// The partition of a tool-call record.
pub fn tool_call_pk(tenant: &TenantId, key: &IdempotencyKey) -> String {
    format!("K#{}#{}", escape(tenant.as_str()), escape(key.0.as_str()))
}

/// The due-index shard of a run: a stable hash of its partition key, so a run always
/// lands on the same shard and runs spread evenly over all of them.
pub fn due_shard(tenant: &TenantId, run_id: &RunId) -> String {
    let digest = Sha256::digest(run_pk(tenant, run_id).as_bytes());
    let n = u32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]]) % DUE_SHARDS;
    shard_name(n)
}

/// The name of due-index shard `n`.
pub fn shard_name(n: u32) -> String {
    format!("{n:02}")
}

/// The tenant index's sort key: zero-padded creation time, then the id, so a
/// descending `Query` lists newest first with ties broken by id.
pub fn created_key(created_at_ms: i64, run_id: &RunId) -> String {
    format!("{:020}#{}", created_at_ms.max(0), run_id.as_str())
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_build_key_gives_back_its_build_whatever_the_tenant_and_build_hold() {
        for (tenant, build) in [
            ("acme", "shop@1.0.0+aaaa"),
            ("a#b%c", "x%23#y%25"),
            ("", "%"),
        ] {
            let key = super::build_key(&siesta::TenantId::from(tenant), build);
            assert_eq!(
                super::build_of_build_key(&key).as_deref(),
                Some(build),
                "{key}"
            );
        }
        assert_eq!(super::build_of_build_key("no-separator"), None);
    }

    use super::*;
    use proptest::prelude::*;

    #[test]
    fn escaping_keeps_distinct_tenant_run_pairs_apart() {
        let a = run_pk(&TenantId("a#b".into()), &RunId("c".into()));
        let b = run_pk(&TenantId("a".into()), &RunId("b#c".into()));
        assert_ne!(a, b);
    }

    #[test]
    fn timeline_keys_sort_by_sequence() {
        assert!(timeline_sk(9) < timeline_sk(10));
        assert!(timeline_sk(99_999) < timeline_sk(100_000));
    }

    #[test]
    fn stream_keys_sort_by_offset_and_streams_never_share_a_prefix() {
        assert!(stream_sk("tokens", 9) < stream_sk("tokens", 10));
        assert!(stream_sk("tokens", 10) < stream_sk("tokens", u64::MAX));
        assert!(!stream_sk("tokens.x", 0).starts_with(&stream_prefix("tokens")));
        assert!(!stream_sk("a#b", 0).starts_with(&stream_prefix("a")));
        assert!(!stream_key_sk("tokens", "#0").starts_with(&stream_prefix("tokens")));
        assert!(!stream_key_sk("tokens", "#0").starts_with(STREAM_PREFIX));
    }

    #[test]
    fn created_keys_sort_by_time_then_id() {
        let r = |s: &str| RunId(s.into());
        assert!(created_key(999, &r("z")) < created_key(1000, &r("a")));
        assert!(created_key(1000, &r("a")) < created_key(1000, &r("b")));
    }

    #[test]
    fn ten_thousand_runs_spread_over_every_due_shard() {
        let mut counts = vec![0u32; DUE_SHARDS as usize];
        let tenant = TenantId("t".into());
        for i in 0..10_000 {
            let shard: usize = due_shard(&tenant, &RunId(format!("run-{i}")))
                .parse()
                .unwrap();
            counts[shard] += 1;
        }
        let even = 10_000 / DUE_SHARDS;
        for (shard, n) in counts.iter().enumerate() {
            assert!(
                *n > even * 3 / 4 && *n < even * 5 / 4,
                "shard {shard} holds {n} of 10 000 (even would be {even})"
            );
        }
    }

    #[test]
    fn limit_keys_give_back_their_limit_and_key_and_waiters_sort_by_ticket() {
        for (limit, key) in [("per-customer", "acme"), ("a#b", "%23#"), ("total", "")] {
            let sk = limit_counter_sk(limit, key);
            assert_eq!(
                limit_of_counter_sk(&sk),
                Some((limit.to_owned(), key.to_owned())),
                "{sk}"
            );
        }
        assert!(limit_waiter_sk(9) < limit_waiter_sk(10));
        assert_eq!(ticket_of_waiter_sk(&limit_waiter_sk(42)), Some(42));
        let t = TenantId("t".into());
        // A line's partition is never a tenant's counters' partition.
        assert_ne!(limit_line_pk(&t, "", ""), limits_pk(&t));
    }

    proptest! {
        #[test]
        fn run_keys_are_injective(t1 in ".{0,8}", r1 in ".{0,8}", t2 in ".{0,8}", r2 in ".{0,8}") {
            prop_assume!((&t1, &r1) != (&t2, &r2));
            prop_assert_ne!(
                run_pk(&TenantId(t1), &RunId(r1)),
                run_pk(&TenantId(t2), &RunId(r2))
            );
        }

        #[test]
        fn limit_lines_are_injective(
            t1 in ".{0,6}", l1 in ".{0,6}", k1 in ".{0,6}",
            t2 in ".{0,6}", l2 in ".{0,6}", k2 in ".{0,6}",
        ) {
            prop_assume!((&t1, &l1, &k1) != (&t2, &l2, &k2));
            let (a, b) = (TenantId(t1.clone()), TenantId(t2.clone()));
            prop_assert_ne!(limit_line_pk(&a, &l1, &k1), limit_line_pk(&b, &l2, &k2));
            if t1 == t2 {
                prop_assert_ne!(limit_counter_sk(&l1, &k1), limit_counter_sk(&l2, &k2));
            }
            prop_assert_eq!(limit_of_counter_sk(&limit_counter_sk(&l1, &k1)), Some((l1, k1)));
        }

        #[test]
        fn a_run_always_lands_on_the_same_valid_shard(t in ".{0,16}", r in ".{0,16}") {
            let (tenant, run) = (TenantId(t), RunId(r));
            let shard = due_shard(&tenant, &run);
            prop_assert_eq!(&shard, &due_shard(&tenant, &run));
            prop_assert!(shard.parse::<u32>().unwrap() < DUE_SHARDS);
        }
    }
}
