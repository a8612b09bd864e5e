//! Artifacts: content addressing, round trips, missing blobs.

use bytes::Bytes;
use siesta::ports::*;
use siesta::*;

use crate::Harness;
use crate::support::*;

/// `sha256("hello, siesta")`.
const HELLO_SHA256: &str = "1eada4fdd49cb9c8c186c38a22de6f96c411a40519e43e37998086bf41df0e9d";
/// `sha256("")`.
const EMPTY_SHA256: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
/// `sha256` of the mebibyte whose byte `i` is `(i * 31 + 7) % 251`.
const MEBIBYTE_SHA256: &str = "1c59b8670027384143781a8a8bff2f3b44bd8818d0f53b13b064c2375a1afe38";

/// Put `bytes`, asserting the reference describes them, and read them back.
async fn put_and_check(
    h: &Harness,
    tenant: &TenantId,
    run_id: &RunId,
    media_type: &str,
    bytes: Bytes,
    sha256: &str,
) -> ArtifactRef {
    let artifact = h
        .backend
        .artifacts
        .put(tenant, run_id, media_type, bytes.clone())
        .await
        .expect("put");
    assert_eq!(
        artifact.sha256, sha256,
        "the reference carries the content's SHA-256"
    );
    assert_eq!(
        artifact.size,
        bytes.len() as u64,
        "the reference carries the size"
    );
    assert_eq!(
        artifact.media_type, media_type,
        "the reference carries the media type"
    );
    assert!(
        artifact.location.starts_with(&format!("{tenant}/")),
        "the location starts with the tenant, got {}",
        artifact.location
    );
    let back = h.backend.artifacts.get(&artifact).await.expect("get");
    assert!(back == bytes, "the content round-trips");
    artifact
}

/// `put` stores content under its SHA-256 and returns a reference that `get` reads
/// back; putting the same content again is fine and returns the same reference.
pub async fn artifact_put_get_round_trip(h: Harness) {
    let tenant = tenant();
    let run = run_id();
    let hello = Bytes::from_static(b"hello, siesta");
    let first = put_and_check(&h, &tenant, &run, "text/plain", hello.clone(), HELLO_SHA256).await;
    let again = put_and_check(&h, &tenant, &run, "text/plain", hello.clone(), HELLO_SHA256).await;
    assert_eq!(again, first, "the same content twice: the same reference");

    let empty = put_and_check(
        &h,
        &tenant,
        &run,
        "application/octet-stream",
        Bytes::new(),
        EMPTY_SHA256,
    )
    .await;
    assert_ne!(
        empty.location, first.location,
        "other content, another location"
    );

    let json = Bytes::from_static(br#"{"big":"value"}"#);
    let artifact = h
        .backend
        .artifacts
        .put(&tenant, &run, "application/json", json.clone())
        .await
        .expect("put");
    assert_eq!(h.backend.artifacts.get(&artifact).await.expect("get"), json);
    assert_eq!(
        h.backend.artifacts.get(&first).await.expect("get"),
        hello,
        "storing other content leaves the first alone"
    );
}

/// A mebibyte of content round-trips unchanged.
pub async fn artifact_of_one_mebibyte_round_trips(h: Harness) {
    let content: Vec<u8> = (0..1u32 << 20)
        .map(|i| ((i * 31 + 7) % 251) as u8)
        .collect();
    put_and_check(
        &h,
        &tenant(),
        &run_id(),
        "application/octet-stream",
        Bytes::from(content),
        MEBIBYTE_SHA256,
    )
    .await;
}

/// Reading an artifact that was never stored (or another tenant's address for stored
/// content) is `NotFound`.
pub async fn artifact_missing_is_not_found(h: Harness) {
    let stranger = tenant();
    let tenant = tenant();
    let run = run_id();
    let never = ArtifactRef {
        sha256: HELLO_SHA256.into(),
        size: 13,
        media_type: "text/plain".into(),
        location: format!("{tenant}/{run}/{HELLO_SHA256}"),
    };
    let got = h.backend.artifacts.get(&never).await;
    assert!(
        matches!(got, Err(StoreError::NotFound)),
        "an artifact never stored: expected NotFound, got {got:?}"
    );

    let stored = h
        .backend
        .artifacts
        .put(
            &tenant,
            &run,
            "text/plain",
            Bytes::from_static(b"hello, siesta"),
        )
        .await
        .expect("put");
    let elsewhere = ArtifactRef {
        location: stored
            .location
            .replacen(tenant.as_str(), stranger.as_str(), 1),
        ..stored
    };
    let got = h.backend.artifacts.get(&elsewhere).await;
    assert!(
        matches!(got, Err(StoreError::NotFound)),
        "another tenant's address for stored content: expected NotFound, got {got:?}"
    );
}
