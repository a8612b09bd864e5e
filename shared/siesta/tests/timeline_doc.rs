//! `docs/timeline.md` is held to [`EventDetails`]: its table of details keys names
//! every event type, with exactly the keys the type declares for it, so the document
//! and the type cannot drift apart.

use std::collections::BTreeSet;

use siesta::timeline::{EVENT_TYPES, EventDetails};

/// The names between backticks in `text`.
fn quoted(text: &str) -> BTreeSet<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_timeline_doc_lists_every_event_type_with_the_keys_its_details_type_declares() {
    let doc = include_str!("../../../docs/timeline.md");
    let section = doc
        .split("## The details of each event type")
        .nth(1)
        .expect("docs/timeline.md has a section on the details of each event type");
    let section = section.split("\n## ").next().unwrap_or(section);
    for event_type in EVENT_TYPES {
        let name = format!("{event_type:?}");
        let row = section
            .lines()
            .find(|line| line.starts_with(&format!("| `{name}` |")))
            .unwrap_or_else(|| panic!("docs/timeline.md has no row for {name}"));
        let keys_cell = row.split('|').nth(2).unwrap_or_default();
        let documented = quoted(keys_cell);
        let declared: BTreeSet<String> = EventDetails::fields(event_type)
            .iter()
            .map(|f| f.to_string())
            .collect();
        assert_eq!(documented, declared, "the details keys of {name}");
    }
}

#[test]
fn every_key_in_an_example_of_the_timeline_doc_is_declared_by_its_event_type() {
    // The examples (`StepFailed  Step  charge#0  {"Attempt": 1, …}`) show keys too.
    let doc = include_str!("../../../docs/timeline.md");
    for line in doc.lines() {
        let Some(event_type) = EVENT_TYPES
            .into_iter()
            .find(|t| line.starts_with(&format!("{t:?} ")))
        else {
            continue;
        };
        let Some(brace) = line.find('{') else {
            continue;
        };
        let declared = EventDetails::fields(event_type);
        let parts: Vec<&str> = line[brace..].split('"').collect();
        // A quoted name followed by `:` is a key; only the top-level keys are the
        // type's, and nested ones (an error's `kind`) start in lower case.
        let keys = parts
            .iter()
            .enumerate()
            .filter(|(i, _)| i % 2 == 1)
            .filter(|(i, _)| parts.get(i + 1).is_some_and(|next| next.starts_with(':')))
            .map(|(_, key)| *key);
        for key in keys {
            if key.starts_with(char::is_uppercase) {
                assert!(
                    declared.contains(&key),
                    "docs/timeline.md shows {key} in {event_type:?}: {line}"
                );
            }
        }
    }
}
