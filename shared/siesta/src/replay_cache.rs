//! The replay cache: a long-lived process keeps what it has of the runs it suspended —
//! the suspended workflow itself (a [`Continuation`]) or at least the decoded journal —
//! so that their next wake-up continues where the run stopped, or replays from memory,
//! instead of reading and decoding the whole journal from the store again.
//!
//! Invariants this module keeps, and why:
//! - **The store stays the truth.** An entry is used only when the claim that starts the
//!   next invocation proves that nothing was written to the run since the entry was
//!   taken: the claim's fencing epoch is the entry's + 1 (nobody else held the run in
//!   between) and the run's version is the entry's + 1 (the claim is the only write
//!   since: no delivery, cancellation, operator resolution or other holder's
//!   checkpoint). Anything else is a miss, and the invocation loads the journal from the
//!   store as it always did — as after a restart, when the cache is empty.
//! - **Taken, not shared.** An invocation takes its run's entry out (a hit or a miss
//!   both empty it) and puts back what it ends with, only after its final checkpoint
//!   was written: an aborted or failed invocation leaves nothing behind.
//! - **Bounded.** At most [`ReplayCache::capacity`] journal entries in all (a
//!   continuation counts its journal), and at most `max_continuations` continuations;
//!   the least recently kept runs make way for newer ones. A continuation that makes
//!   way for a newer one is not dropped but downgraded to its journal, so its run
//!   still replays from memory.
//! - **A continuation is the journal plus the held workflow.** Its `Shared` holds the
//!   journal exactly as its checkpoints wrote it, so the rule that makes a cached
//!   journal valid makes the continuation valid too: the store holds nothing it lacks.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::context::Replayed;
use crate::model::{FencingEpoch, Run, RunId, TenantId};
use crate::time::Timestamp;

/// A suspended invocation's workflow, kept whole for the run's next claim: the pass
/// state (journal, deliveries, minting counters) and the workflow future, every branch
/// of it held (see `Context::hold`).
pub(crate) struct Continuation {
    /// The pass's shared state; re-armed by the next invocation.
    pub shared: std::sync::Arc<crate::context::Shared>,
    /// The workflow, as it was when every branch was held.
    pub future: futures::future::BoxFuture<'static, Result<serde_json::Value, crate::Error>>,
}

/// What the cache keeps of a suspended run.
pub(crate) enum Kept {
    /// The decoded journal only: the next invocation replays from the top.
    Journal(Replayed),
    /// The held workflow: the next invocation continues it.
    Continuation(Continuation),
}

impl Kept {
    /// Journal entries held, the cache's measure of size.
    fn size(&self) -> usize {
        match self {
            Kept::Journal(r) => r.journal.len(),
            Kept::Continuation(c) => c.shared.state().journal.len() + 1,
        }
    }
}

struct Entry {
    epoch: FencingEpoch,
    version: u64,
    /// Which incarnation of the run id: a run id reused after the old run expired
    /// starts again at low epochs and versions, which alone could match.
    created_at: Timestamp,
    kept: Kept,
    size: usize,
}

type Key = (TenantId, RunId);

/// Suspended runs' decoded replay inputs (and continuations), keyed by run, valid for one claim.
pub(crate) struct ReplayCache {
    capacity: usize,
    max_continuations: usize,
    state: Mutex<CacheState>,
    hits: AtomicU64,
    continued: AtomicU64,
    misses: AtomicU64,
}

#[derive(Default)]
struct CacheState {
    entries: HashMap<Key, Entry>,
    /// Keys in the order they were put (a key may appear again after a newer put; the
    /// stale mention is skipped when evicting).
    order: VecDeque<(Key, u64)>,
    /// Journal entries held in all.
    held: usize,
    /// Numbers the puts, to tell a key's latest mention in `order`.
    puts: u64,
    generation: HashMap<Key, u64>,
    /// Keys put with a continuation, oldest first (stale mentions skipped as in
    /// `order`), and how many continuations are held.
    continued: VecDeque<(Key, u64)>,
    continuations: usize,
}

/// What a wake-up found in the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lookup {
    /// The entry matched the claimed run.
    Hit,
    /// A continuation matched the claimed run.
    Continued,
    /// No entry, or one the claimed run proves stale.
    Miss,
}

/// How often the replay cache served a wake-up, since the engine was made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReplayCacheStats {
    /// Invocations that replayed from the cached journal or continued the suspended
    /// workflow.
    pub hits: u64,
    /// Of the hits, invocations that continued the suspended workflow where it stopped.
    pub continued: u64,
    /// Invocations that loaded the journal from the store (the cache on or off).
    pub misses: u64,
}

impl ReplayCache {
    /// A cache holding at most `capacity` journal entries, `max_continuations` of them
    /// with their workflow; a `capacity` of 0 turns it off.
    pub(crate) fn new(capacity: usize, max_continuations: usize) -> Self {
        ReplayCache {
            capacity,
            max_continuations,
            state: Mutex::new(CacheState::default()),
            hits: AtomicU64::new(0),
            continued: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    /// Whether a suspended workflow may be kept at all.
    pub(crate) fn keeps_continuations(&self) -> bool {
        self.capacity > 0 && self.max_continuations > 0
    }

    /// Hits and misses so far.
    pub(crate) fn stats(&self) -> ReplayCacheStats {
        ReplayCacheStats {
            hits: self.hits.load(Ordering::Relaxed),
            continued: self.continued.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, CacheState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Take the run's entry; it is returned only if `claimed` (the run as the claim
    /// left it) proves nothing else was written since it was put.
    pub(crate) fn take(&self, claimed: &Run) -> (Option<Kept>, Lookup) {
        let (got, lookup) = self.lookup(claimed);
        match lookup {
            Lookup::Hit => self.hits.fetch_add(1, Ordering::Relaxed),
            Lookup::Continued => {
                self.continued.fetch_add(1, Ordering::Relaxed);
                self.hits.fetch_add(1, Ordering::Relaxed)
            }
            Lookup::Miss => self.misses.fetch_add(1, Ordering::Relaxed),
        };
        (got, lookup)
    }

    fn lookup(&self, claimed: &Run) -> (Option<Kept>, Lookup) {
        if self.capacity == 0 {
            return (None, Lookup::Miss);
        }
        let key = (claimed.tenant.clone(), claimed.id.clone());
        let entry = {
            let mut st = self.state();
            let Some(entry) = st.entries.remove(&key) else {
                return (None, Lookup::Miss);
            };
            st.generation.remove(&key);
            st.held -= entry.size;
            if matches!(entry.kept, Kept::Continuation(_)) {
                st.continuations -= 1;
            }
            entry
        };
        let fresh = claimed.created_at == entry.created_at
            && claimed.epoch.0 == entry.epoch.0 + 1
            && claimed.version == entry.version + 1;
        match (fresh, entry.kept) {
            (true, kept @ Kept::Journal(_)) => (Some(kept), Lookup::Hit),
            (true, kept @ Kept::Continuation(_)) => (Some(kept), Lookup::Continued),
            // A stale continuation is dropped here, outside the cache's lock.
            (false, _) => (None, Lookup::Miss),
        }
    }

    /// Keep `replayed` for the run's next claim: `run` is the run as the invocation's
    /// final checkpoint wrote it, under the lease of `epoch`.
    pub(crate) fn put(&self, run: &Run, epoch: FencingEpoch, kept: Kept) {
        let size = kept.size();
        let continuation = matches!(kept, Kept::Continuation(_));
        if self.capacity == 0
            || size > self.capacity
            || (continuation && self.max_continuations == 0)
        {
            return;
        }
        let key = (run.tenant.clone(), run.id.clone());
        // What leaves the cache is dropped after its lock is released: dropping a
        // workflow runs its branches' guards.
        let mut evicted = Vec::new();
        let mut st = self.state();
        if let Some(old) = st.entries.remove(&key) {
            st.held -= old.size;
            if matches!(old.kept, Kept::Continuation(_)) {
                st.continuations -= 1;
            }
            evicted.push(old.kept);
        }
        while st.held + size > self.capacity {
            let Some((oldest, n)) = st.order.pop_front() else {
                break;
            };
            if st.generation.get(&oldest) == Some(&n) {
                st.generation.remove(&oldest);
                if let Some(old) = st.entries.remove(&oldest) {
                    st.held -= old.size;
                    if matches!(old.kept, Kept::Continuation(_)) {
                        st.continuations -= 1;
                    }
                    evicted.push(old.kept);
                }
            }
        }
        // Too many workflows kept: the oldest continuations keep only their journal.
        while continuation && st.continuations >= self.max_continuations {
            let Some((oldest, n)) = st.continued.pop_front() else {
                break;
            };
            if st.generation.get(&oldest) != Some(&n) {
                continue;
            }
            let Some(entry) = st.entries.get_mut(&oldest) else {
                continue;
            };
            if let Kept::Continuation(c) = &entry.kept {
                let journal = Kept::Journal(c.shared.take_replayed());
                let Kept::Continuation(c) = std::mem::replace(&mut entry.kept, journal) else {
                    unreachable!("matched above")
                };
                st.continuations -= 1;
                evicted.push(Kept::Continuation(c));
            }
        }
        st.puts += 1;
        let n = st.puts;
        st.order.push_back((key.clone(), n));
        if continuation {
            st.continued.push_back((key.clone(), n));
            st.continuations += 1;
        }
        st.generation.insert(key.clone(), n);
        st.held += size;
        st.entries.insert(
            key,
            Entry {
                epoch,
                version: run.version,
                created_at: run.created_at,
                kept,
                size,
            },
        );
        // Stale mentions of re-put keys pile up in `order`; drop them once they
        // outnumber the live ones.
        if st.order.len() > 2 * st.entries.len() + 64 {
            let CacheState {
                order, generation, ..
            } = &mut *st;
            order.retain(|(k, n)| generation.get(k) == Some(n));
        }
        if st.continued.len() > 2 * st.continuations + 64 {
            let CacheState {
                continued,
                generation,
                ..
            } = &mut *st;
            continued.retain(|(k, n)| generation.get(k) == Some(n));
        }
        drop(st);
        drop(evicted);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{EntryState, JournalEntry, OperationKind, Payload, Position};

    fn run(id: &str, epoch: u64, version: u64) -> Run {
        let mut run = Run::new(
            TenantId("t".into()),
            RunId(id.into()),
            "w",
            Payload::Inline(serde_json::Value::Null),
            Timestamp(0),
        );
        run.epoch = FencingEpoch(epoch);
        run.version = version;
        run
    }

    fn replayed(entries: usize) -> Replayed {
        let journal = (0..entries)
            .map(|i| {
                let position = Position(format!("step#{i}"));
                let entry = JournalEntry {
                    position: position.clone(),
                    index: i as u32,
                    kind: OperationKind::Step,
                    name: "step".into(),
                    state: EntryState::Succeeded {
                        value: Payload::Inline(serde_json::json!(i)),
                        attempt: 1,
                    },
                    consumed: Vec::new(),
                    handle: None,
                    minted: Vec::new(),
                    within: None,
                    superseded: None,
                    updated_at: Timestamp(0),
                };
                (position, entry)
            })
            .collect();
        Replayed {
            journal,
            superseded: Default::default(),
            deliveries: Vec::new(),
        }
    }

    #[test]
    fn an_entry_serves_only_the_claim_that_follows_it() {
        let cache = ReplayCache::new(100, 4);
        cache.put(
            &run("a", 3, 10),
            FencingEpoch(3),
            Kept::Journal(replayed(2)),
        );
        let (got, lookup) = cache.take(&run("a", 4, 11));
        assert_eq!(lookup, Lookup::Hit);
        assert!(matches!(got, Some(Kept::Journal(r)) if r.journal.len() == 2));
        // Taken: the next claim misses until the invocation puts it back.
        assert_eq!(cache.take(&run("a", 5, 12)).1, Lookup::Miss);
        assert_eq!(
            cache.stats(),
            ReplayCacheStats {
                hits: 1,
                continued: 0,
                misses: 1
            }
        );
    }

    #[test]
    fn a_write_by_anyone_else_makes_the_entry_stale() {
        let cache = ReplayCache::new(100, 4);
        // A delivery or cancellation moved the version before the claim.
        cache.put(
            &run("a", 3, 10),
            FencingEpoch(3),
            Kept::Journal(replayed(2)),
        );
        assert_eq!(cache.take(&run("a", 4, 12)).1, Lookup::Miss);
        // Another holder claimed (and maybe wrote) in between.
        cache.put(
            &run("a", 3, 10),
            FencingEpoch(3),
            Kept::Journal(replayed(2)),
        );
        assert_eq!(cache.take(&run("a", 5, 11)).1, Lookup::Miss);
    }

    #[test]
    fn a_new_run_under_a_reused_id_does_not_get_the_old_run_s_entry() {
        let cache = ReplayCache::new(100, 4);
        cache.put(
            &run("a", 3, 10),
            FencingEpoch(3),
            Kept::Journal(replayed(2)),
        );
        // The old run expired and a new one took its id, reaching the same epoch and
        // version by chance.
        let mut reused = run("a", 4, 11);
        reused.created_at = Timestamp(1);
        assert_eq!(cache.take(&reused).1, Lookup::Miss);
    }

    #[test]
    fn the_oldest_runs_make_way_within_the_capacity() {
        let cache = ReplayCache::new(5, 4);
        cache.put(&run("a", 1, 1), FencingEpoch(1), Kept::Journal(replayed(2)));
        cache.put(&run("b", 1, 1), FencingEpoch(1), Kept::Journal(replayed(2)));
        cache.put(&run("a", 1, 1), FencingEpoch(1), Kept::Journal(replayed(2)));
        cache.put(&run("c", 1, 1), FencingEpoch(1), Kept::Journal(replayed(3)));
        // b was the oldest put still held; a was put again after it.
        assert_eq!(cache.take(&run("b", 2, 2)).1, Lookup::Miss);
        assert_eq!(cache.take(&run("a", 2, 2)).1, Lookup::Hit);
        assert_eq!(cache.take(&run("c", 2, 2)).1, Lookup::Hit);
        // Larger than the whole cache: not kept.
        cache.put(&run("d", 1, 1), FencingEpoch(1), Kept::Journal(replayed(6)));
        assert_eq!(cache.take(&run("d", 2, 2)).1, Lookup::Miss);
    }

    #[test]
    fn a_zero_capacity_cache_keeps_nothing() {
        let cache = ReplayCache::new(0, 4);
        cache.put(&run("a", 1, 1), FencingEpoch(1), Kept::Journal(replayed(1)));
        assert_eq!(cache.take(&run("a", 2, 2)).1, Lookup::Miss);
    }
}
