//! The backend conformance suite, unchanged, against the AWS backend on the emulators
//! (DynamoDB Local, LocalStack's S3 and SQS): one table and bucket for the whole run,
//! a fresh queue and dead-letter queue per case, the system clock.

mod support;

use siesta_conformance::{Harness, conformance_suite};

/// How many receptions the queue allows before dead-lettering, in these tests.
const MAX_RECEIVES: u32 = 3;

async fn aws() -> Option<Harness> {
    let env = support::emulators().await?;
    let backend = env.backend(MAX_RECEIVES).await;
    Some(Harness::system(backend.backend(), MAX_RECEIVES))
}

conformance_suite!(optional aws());
