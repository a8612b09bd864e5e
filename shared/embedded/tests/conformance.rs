//! The backend conformance suite against the embedded backend: a fresh SQLite file in a
//! temporary directory per case, read with a manual clock.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

use std::sync::Arc;

use siesta::ManualClock;
use siesta_conformance::{Harness, conformance_suite};
use siesta_embedded::EmbeddedBackend;

/// How many receptions the queue allows before dead-lettering, in these tests.
const MAX_RECEIVES: u32 = 3;

async fn embedded() -> Harness {
    let dir = tempfile::tempdir().expect("temporary directory");
    let clock = Arc::new(ManualClock::default());
    let backend =
        EmbeddedBackend::open_with(dir.path().join("siesta.db"), clock.clone(), MAX_RECEIVES)
            .expect("open the embedded backend")
            .backend();
    Harness::manual(backend, clock, MAX_RECEIVES).hold(dir)
}

conformance_suite!(embedded());
