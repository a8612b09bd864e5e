//! Whether a process's background loops (a queue worker, a sweep ticker) still run, for
//! a health check to report.
//!
//! Each loop holds a [`LoopGuard`] for as long as it runs. The guard lives inside the
//! loop's task, so however the task ends — it returned, it was aborted, or it panicked
//! (its future is dropped while unwinding) — the guard is dropped and the loop is marked
//! stopped. A health route reads [`Liveness::is_alive`] and answers 503 when any loop
//! stopped, rather than "ok" from a process that no longer works its queue.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use serde::Serialize;

/// The loops of one process, shared by the loops and the health route.
#[derive(Debug, Clone, Default)]
pub struct Liveness {
    loops: Arc<Mutex<Vec<Arc<Loop>>>>,
}

#[derive(Debug)]
struct Loop {
    name: String,
    running: AtomicBool,
}

/// Held by a running loop; dropping it marks the loop stopped.
#[derive(Debug)]
#[must_use = "the loop counts as stopped as soon as its guard is dropped"]
pub struct LoopGuard(Arc<Loop>);

impl Drop for LoopGuard {
    fn drop(&mut self) {
        self.0.running.store(false, Ordering::SeqCst);
    }
}

/// One loop as a health check reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LoopStatus {
    /// The loop's name (`worker`, `sweep`).
    pub name: String,
    /// Whether it still runs.
    pub running: bool,
}

impl Liveness {
    /// No loops yet: alive (a process without background loops, such as a Lambda
    /// function, is alive while it answers).
    pub fn new() -> Self {
        Liveness::default()
    }

    /// Register a loop named `name` as running; keep the guard inside the loop's task.
    pub fn register(&self, name: &str) -> LoopGuard {
        let entry = Arc::new(Loop {
            name: name.to_owned(),
            running: AtomicBool::new(true),
        });
        self.loops
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(entry.clone());
        LoopGuard(entry)
    }

    /// Whether every registered loop still runs.
    pub fn is_alive(&self) -> bool {
        self.loops().iter().all(|l| l.running)
    }

    /// Every registered loop and whether it runs, in registration order.
    pub fn loops(&self) -> Vec<LoopStatus> {
        self.loops
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|l| LoopStatus {
                name: l.name.clone(),
                running: l.running.load(Ordering::SeqCst),
            })
            .collect()
    }

    /// The names of the loops that stopped.
    pub fn stopped(&self) -> Vec<String> {
        self.loops()
            .into_iter()
            .filter(|l| !l.running)
            .map(|l| l.name)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_loops_is_alive() {
        assert!(Liveness::new().is_alive());
    }

    #[test]
    fn a_dropped_guard_marks_its_loop_stopped() {
        let liveness = Liveness::new();
        let worker = liveness.register("worker");
        let _sweep = liveness.register("sweep");
        assert!(liveness.is_alive());
        drop(worker);
        assert!(!liveness.is_alive());
        assert_eq!(liveness.stopped(), vec!["worker".to_owned()]);
        assert_eq!(
            liveness.loops(),
            vec![
                LoopStatus {
                    name: "worker".into(),
                    running: false
                },
                LoopStatus {
                    name: "sweep".into(),
                    running: true
                },
            ]
        );
    }

    #[tokio::test]
    async fn a_loop_task_that_panics_is_reported_stopped() {
        let liveness = Liveness::new();
        let guard = liveness.register("worker");
        let task = tokio::spawn(async move {
            let _guard = guard;
            panic!("the worker died");
        });
        assert!(task.await.unwrap_err().is_panic());
        assert_eq!(liveness.stopped(), vec!["worker".to_owned()]);
    }

    #[tokio::test]
    async fn an_aborted_loop_task_is_reported_stopped() {
        let liveness = Liveness::new();
        let guard = liveness.register("sweep");
        let task = tokio::spawn(async move {
            let _guard = guard;
            std::future::pending::<()>().await;
        });
        assert!(liveness.is_alive());
        task.abort();
        assert!(task.await.unwrap_err().is_cancelled());
        assert!(!liveness.is_alive());
    }
}
