//! Large values on demand. A value over the engine's inline limit (a run's input or
//! output, a step's result, a delivery, a condition's state) is kept in the artifact
//! store; the run view and the timeline show a [`ValueRef`] in its place (its digest,
//! size and media type, and where to fetch it), and `GET /runs/{id}/values/{sha256}`
//! serves its bytes to the run's own tenant.
//!
//! A digest is served only when the run refers to it (in the run, its journal, its
//! deliveries or its timeline): knowing a digest is not enough to read another run's
//! content, and another tenant's run is not found at all.

use siesta::*;
use siesta_api_types::{ValueRef, value_path};

/// The reference to `artifact`, kept for run `run_id`, as the API shows it.
pub(crate) fn value_ref(run_id: &str, artifact: &ArtifactRef) -> ValueRef {
    ValueRef {
        sha256: artifact.sha256.clone(),
        size: artifact.size,
        media_type: artifact.media_type.clone(),
        href: value_path(run_id, &artifact.sha256),
    }
}

/// The artifact reference `v` is, as the stores and the engine write it: an object
/// with exactly `sha256`, `size`, `media_type` and `location`.
pub(crate) fn as_artifact(v: &serde_json::Value) -> Option<ArtifactRef> {
    let o = v.as_object()?;
    if o.len() != 4
        || !["sha256", "size", "media_type", "location"]
            .iter()
            .all(|k| o.contains_key(*k))
    {
        return None;
    }
    serde_json::from_value(v.clone()).ok()
}

/// Replaces every artifact reference inside `details` (a timeline event's) with its
/// [`ValueRef`]: a bare reference, or one wrapped alone as `{"Artifact": ...}` /
/// `{"artifact": ...}`, becomes `{"value_ref": ...}`. The store's `location` is not
/// shown: it is the store's business.
pub(crate) fn show_refs(run_id: &str, details: &mut serde_json::Value) {
    if let Some(artifact) = as_artifact(details) {
        *details = value_ref(run_id, &artifact).to_json();
        return;
    }
    match details {
        serde_json::Value::Object(o) => {
            if o.len() == 1
                && let Some(artifact) = o
                    .get("Artifact")
                    .or_else(|| o.get("artifact"))
                    .and_then(as_artifact)
            {
                *details = value_ref(run_id, &artifact).to_json();
                return;
            }
            for v in o.values_mut() {
                show_refs(run_id, v);
            }
        }
        serde_json::Value::Array(a) => {
            for v in a {
                show_refs(run_id, v);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn artifact(sha: &str) -> serde_json::Value {
        json!({"sha256": sha, "size": 40000, "media_type": "application/json", "location": "t/r/x"})
    }

    #[test]
    fn references_in_details_are_shown_as_value_refs_without_the_store_location() {
        let mut details = json!({
            "Attempt": 1,
            "ResultArtifact": artifact("aa"),
            "Result": {"Artifact": artifact("bb")},
            "Other": {"Artifact": artifact("cc"), "Name": "kept as is around it"},
            "List": [artifact("dd")],
        });
        show_refs("run 1", &mut details);
        let href = |sha: &str| format!("/runs/run%201/values/{sha}");
        assert_eq!(details["ResultArtifact"]["value_ref"]["href"], href("aa"));
        assert_eq!(details["Result"]["value_ref"]["href"], href("bb"));
        assert_eq!(details["Other"]["Artifact"]["value_ref"]["size"], 40000);
        assert_eq!(details["Other"]["Name"], "kept as is around it");
        assert_eq!(details["List"][0]["value_ref"]["sha256"], "dd");
        assert_eq!(details["Attempt"], 1);
        assert!(!details.to_string().contains("location"), "{details}");
    }
}
