//! An optional profile of the writer, to find where a write's latency goes under load:
//! with `SIESTA_WRITER_PROFILE=<file>` set when the backend is opened, the writer notes
//! for every write how long it waited in the channel before its group began, how long
//! its own operation ran, how long its group ran (and how many writes it held), and for
//! a durable write how long it waited for the fsync after its group's `COMMIT`. Every
//! [`EVERY`] with writes, one block of p50 / p99 / max lines is appended to the file.
//!
//! Off (the default), the writer pays one `Instant::now()` per write. On, it pays a few
//! more per write and one uncontended lock per group; the sorting and writing happen on
//! a thread of their own.

use std::collections::HashMap;
use std::io::Write as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How often a summary is written.
const EVERY: Duration = Duration::from_secs(2);

/// Samples of one summary window, in microseconds.
#[derive(Default)]
struct Samples {
    /// Per write: queued → the writer took it into a group.
    queue_wait: Vec<u32>,
    /// Per write: taken into its group → its group's `COMMIT` returned.
    in_group: Vec<u32>,
    /// Per durable write: its group's `COMMIT` returned → answered after the fsync.
    sync_wait: Vec<u32>,
    /// Per group: `BEGIN` → `COMMIT` returned.
    group_run: Vec<u32>,
    /// Per group: writes in it.
    group_size: Vec<u32>,
    /// Per group: the `COMMIT` statement alone.
    commit: Vec<u32>,
    /// Per fsync: its duration.
    fsync: Vec<u32>,
    /// Per write, by operation: its own operation's run time.
    run_by_kind: HashMap<&'static str, Vec<u32>>,
}

/// The writer's and the syncer's handle on the profile; `None` when it is off.
#[derive(Clone)]
pub(crate) struct Profile {
    samples: Arc<Mutex<Samples>>,
}

fn micros(d: Duration) -> u32 {
    u32::try_from(d.as_micros()).unwrap_or(u32::MAX)
}

impl Profile {
    /// The profile `SIESTA_WRITER_PROFILE` asks for, with its summary thread started.
    pub(crate) fn from_env() -> Option<Profile> {
        let path = std::env::var_os("SIESTA_WRITER_PROFILE")?;
        let profile = Profile {
            samples: Arc::new(Mutex::new(Samples::default())),
        };
        let samples = profile.samples.clone();
        std::thread::Builder::new()
            .name("siesta-writer-profile".to_owned())
            .spawn(move || {
                let started = Instant::now();
                loop {
                    std::thread::sleep(EVERY);
                    let window = std::mem::take(&mut *lock(&samples));
                    if window.queue_wait.is_empty() {
                        continue;
                    }
                    let text = summary(started.elapsed(), window);
                    if let Ok(mut f) = std::fs::OpenOptions::new()
                        .create(true)
                        .append(true)
                        .open(&path)
                    {
                        let _ = f.write_all(text.as_bytes());
                    }
                }
            })
            .ok()?;
        Some(profile)
    }

    /// A group began at `began`, ran until `committed` (its `COMMIT` took `commit`),
    /// holding writes (queued at, taken at, operation, own run time).
    pub(crate) fn group(
        &self,
        began: Instant,
        commit: Duration,
        committed: Instant,
        writes: &[(Instant, Instant, &'static str, Duration)],
    ) {
        let mut s = lock(&self.samples);
        s.group_run.push(micros(committed - began));
        s.group_size.push(writes.len() as u32);
        s.commit.push(micros(commit));
        for (queued, taken, kind, run) in writes {
            s.queue_wait
                .push(micros(taken.saturating_duration_since(*queued)));
            s.in_group
                .push(micros(committed.saturating_duration_since(*taken)));
            s.run_by_kind.entry(kind).or_default().push(micros(*run));
        }
    }

    /// An fsync took `took`; it answered durable writes whose groups committed at
    /// `committed`, at `answered`.
    pub(crate) fn fsync(&self, took: Duration, committed: &[Instant], answered: Instant) {
        let mut s = lock(&self.samples);
        s.fsync.push(micros(took));
        for at in committed {
            s.sync_wait
                .push(micros(answered.saturating_duration_since(*at)));
        }
    }
}

fn lock(samples: &Mutex<Samples>) -> std::sync::MutexGuard<'_, Samples> {
    samples.lock().unwrap_or_else(|e| e.into_inner())
}

/// `n p50 p99 max` of `v` (µs), sorted in place.
fn figures(v: &mut [u32]) -> String {
    if v.is_empty() {
        return "n 0".to_owned();
    }
    v.sort_unstable();
    let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    format!(
        "n {:>7}  p50 {:>6}  p99 {:>6}  max {:>6}",
        v.len(),
        at(0.5),
        at(0.99),
        v[v.len() - 1]
    )
}

fn summary(at: Duration, mut s: Samples) -> String {
    let mut out = format!(
        "--- writer at {:.1} s (µs; sizes in writes)\n",
        at.as_secs_f64()
    );
    for (name, v) in [
        ("queue wait (queued → taken)", &mut s.queue_wait),
        ("in group (taken → committed)", &mut s.in_group),
        ("sync wait (committed → fsynced)", &mut s.sync_wait),
        ("group run", &mut s.group_run),
        ("group size", &mut s.group_size),
        ("commit statement", &mut s.commit),
        ("fsync", &mut s.fsync),
    ] {
        out.push_str(&format!("{name:<40} {}\n", figures(v)));
    }
    let mut kinds: Vec<_> = s.run_by_kind.into_iter().collect();
    kinds.sort_by_key(|(_, v)| std::cmp::Reverse(v.iter().map(|&x| u64::from(x)).sum::<u64>()));
    for (kind, mut v) in kinds {
        let total: u64 = v.iter().map(|&x| u64::from(x)).sum();
        out.push_str(&format!(
            "  run {kind:<34} {}  total {} ms\n",
            figures(&mut v),
            total / 1000
        ));
    }
    out
}

/// The operation a write's closure belongs to, from its type name
/// (`…::checkpoint::{{closure}}` → `checkpoint`).
pub(crate) fn kind_of(type_name: &'static str) -> &'static str {
    let path = type_name.split("::{{closure}}").next().unwrap_or(type_name);
    path.rsplit("::").next().unwrap_or(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_closure_is_named_by_the_function_it_is_written_in() {
        assert_eq!(
            kind_of(
                "siesta_embedded::<impl siesta::ports::RunStore for siesta_embedded::EmbeddedBackend>::checkpoint::{{closure}}::{{closure}}"
            ),
            "checkpoint"
        );
        assert_eq!(kind_of("plain"), "plain");
    }

    #[test]
    fn figures_give_the_median_and_the_tail() {
        let mut v: Vec<u32> = (1..=100).rev().collect();
        assert_eq!(
            figures(&mut v),
            format!("n {:>7}  p50 {:>6}  p99 {:>6}  max {:>6}", 100, 51, 99, 100)
        );
    }
}
