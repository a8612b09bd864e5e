//! The instants inside a timeline event's details, shown as RFC 3339 like every other
//! time of the API ([`Rfc3339`], defined with the views in `siesta-api-types`).

use siesta::EventType;
use siesta::timeline::EventDetails;
use siesta_api_types::Rfc3339;

/// Shows the instants among the `details` of an event of `event_type` (the ones its
/// [`EventDetails`] type holds, kept as milliseconds by the engine) as [`Rfc3339`],
/// like every other time of the API.
pub(crate) fn show_detail_times(event_type: EventType, details: &mut serde_json::Value) {
    let instants = EventDetails::parse(event_type, details).instants();
    let Some(fields) = details.as_object_mut() else {
        return;
    };
    for (key, at) in instants {
        if let Some(value) = fields.get_mut(key) {
            *value = Rfc3339(at).to_string().into();
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn only_the_instants_of_the_details_type_are_rewritten() {
        let mut callback = json!({
            "CallbackId": "cb_1",
            "Timeout": 1_800_000_000_123_i64,
            "HeartbeatTimeoutMs": 60_000,
        });
        show_detail_times(EventType::CallbackStarted, &mut callback);
        assert_eq!(
            callback,
            json!({
                "CallbackId": "cb_1",
                "Timeout": "2027-01-15T08:00:00.123Z",
                "HeartbeatTimeoutMs": 60_000,
            })
        );
        let mut retry = json!({
            "Attempt": 2,
            "Error": {"kind": "Boom", "message": "boom", "retryable": true},
            "NextAttemptAt": 0,
            "NextAttemptDelayMs": 1000,
            "Retrying": true,
        });
        show_detail_times(EventType::StepFailed, &mut retry);
        assert_eq!(retry["NextAttemptAt"], "1970-01-01T00:00:00.000Z");
        assert_eq!(retry["NextAttemptDelayMs"], 1000);
        let mut idle = json!({"Status": "waiting", "NextWakeAt": null, "Epoch": 1});
        show_detail_times(EventType::InvocationCompleted, &mut idle);
        assert_eq!(idle["NextWakeAt"], json!(null));
        // A number under a key that is no instant of its event type stays a number.
        let mut result = json!({"Attempt": 1, "Result": {"Timeout": 5}});
        show_detail_times(EventType::StepSucceeded, &mut result);
        assert_eq!(result["Result"]["Timeout"], 5);
        let mut not_an_object = json!([1_800_000_000_123_i64]);
        show_detail_times(EventType::StepSucceeded, &mut not_an_object);
        assert_eq!(not_an_object, json!([1_800_000_000_123_i64]));
    }
}
