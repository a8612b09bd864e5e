//! `siesta demo`, the README's first command, run as a user runs it.

use std::process::Command;
use std::time::{Duration, Instant};

#[test]
fn the_demo_completes_the_order_through_a_signed_verified_webhook_and_ignores_the_retry() {
    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_siesta"))
        .arg("demo")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = |needle: &str| {
        stdout
            .lines()
            .find(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("no line with {needle:?} in:\n{stdout}"))
    };
    assert!(line("forged copy").contains("401"), "{stdout}");
    assert!(
        line("(delivery #1)").contains("200 OK, signature verified, recorded for the callback"),
        "{stdout}"
    );
    assert!(
        line("the provider's retry").contains("duplicate ignored"),
        "{stdout}"
    );
    let delivered = stdout
        .lines()
        .filter(|l| l.contains("CallbackDelivered"))
        .count();
    assert_eq!(delivered, 1, "{stdout}");
    assert!(line("is completed").contains("txn_8f2c41"), "{stdout}");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "the demo took {:?}",
        started.elapsed()
    );
}
