//! The dev server's background runtime: the queue worker and the sweep run on their own
//! Tokio threads at a lower OS priority (a higher niceness), so on a busy machine the
//! HTTP side — starts, events, webhooks, reads — gets a CPU before the worker draining
//! another tenant's backlog. The embedded backend's writer is its own thread and keeps
//! the normal priority.
//!
//! No lock the HTTP side needs is held across a wait here: the engine's shared state
//! (the replay cache, the wake-up notifier, quotas, the read-connection pool) sits
//! behind `std` mutexes held for a few map or heap operations, never across an
//! `.await` or I/O, and the writer is reached through a channel.

use tokio::runtime::Runtime;

/// The niceness the dev server's background threads run at unless told otherwise: 0,
/// off (they share the server's threads), because measured paired on two cores a
/// niced worker made tenant B slower during A's burst, not faster
/// (docs/performance-wakeups.md, "Cross-tenant").
pub const DEFAULT_WORKER_NICE: i32 = 0;

/// A Tokio runtime whose threads run at a niceness; shut down without blocking when
/// dropped (it may be dropped inside another runtime, where blocking is not allowed).
pub(crate) struct BackgroundRuntime {
    runtime: Option<Runtime>,
}

impl BackgroundRuntime {
    /// A multi-threaded runtime of `threads` threads named `siesta-background`, each of
    /// which sets its own niceness to `nice` when it starts (a warning if it cannot).
    pub(crate) fn new(threads: usize, nice: i32) -> std::io::Result<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads.max(1))
            .thread_name("siesta-background")
            .enable_all()
            .on_thread_start(move || {
                if let Err(e) = set_thread_nice(nice) {
                    tracing::warn!(
                        nice,
                        error = %e,
                        "could not lower the background thread's priority; it runs at the normal one"
                    );
                }
            })
            .build()?;
        Ok(BackgroundRuntime {
            runtime: Some(runtime),
        })
    }

    /// Where tasks are spawned.
    #[allow(clippy::expect_used, reason = "the runtime is only taken when dropped")]
    pub(crate) fn handle(&self) -> &tokio::runtime::Handle {
        self.runtime
            .as_ref()
            .expect("the runtime is only taken when dropped")
            .handle()
    }
}

impl Drop for BackgroundRuntime {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            // Drops every task (the worker's and the sweep's loops) without waiting
            // for the threads to exit.
            runtime.shutdown_background();
        }
    }
}

/// Set the calling thread's niceness (Linux: `setpriority` on its thread id, which
/// affects this thread only).
#[cfg(target_os = "linux")]
fn set_thread_nice(nice: i32) -> std::io::Result<()> {
    let tid = rustix::thread::gettid();
    rustix::process::setpriority_process(Some(tid), nice).map_err(std::io::Error::from)
}

/// Elsewhere a thread's own niceness is not available.
#[cfg(not(target_os = "linux"))]
fn set_thread_nice(_nice: i32) -> std::io::Result<()> {
    Err(std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        "per-thread niceness is only set on Linux",
    ))
}

/// The calling thread's niceness.
#[cfg(all(test, target_os = "linux"))]
fn thread_nice() -> std::io::Result<i32> {
    let tid = rustix::thread::gettid();
    rustix::process::getpriority_process(Some(tid)).map_err(std::io::Error::from)
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[tokio::test]
    async fn tasks_on_the_background_runtime_run_at_the_niceness_asked() {
        let here = thread_nice().unwrap();
        let runtime = BackgroundRuntime::new(2, 7).unwrap();
        // Several tasks, so more than one of the runtime's threads is likely asked.
        let mut seen = Vec::new();
        for _ in 0..8 {
            seen.push(runtime.handle().spawn(async { thread_nice().unwrap() }));
        }
        for task in seen {
            // Niceness only goes up without privileges: 7 above 0, or unchanged if the
            // test already runs at 7 or more.
            assert_eq!(task.await.unwrap(), here.max(7));
        }
        assert_eq!(
            thread_nice().unwrap(),
            here,
            "the caller's thread is untouched"
        );
    }

    #[tokio::test]
    async fn dropping_the_runtime_inside_another_runtime_stops_its_tasks() {
        let runtime = BackgroundRuntime::new(1, 0).unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = runtime.handle().spawn(async move {
            let _tx = tx;
            std::future::pending::<()>().await
        });
        drop(runtime);
        // The task was dropped, so its sender was too.
        assert!(rx.await.is_err());
        assert!(task.await.unwrap_err().is_cancelled());
    }
}
