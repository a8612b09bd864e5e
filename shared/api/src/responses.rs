//! The error answers each route really gives, for the OpenAPI document: one named set
//! per kind of route, listed in its `#[utoipa::path(responses(...))]` beside its success
//! answers, so a client (or a fuzzer checking statuses against the document) meets no
//! undocumented status. Every error body is the `Error` schema; 429 and 503 carry
//! `Retry-After`. A 405 for a method a path does not have, and a 404 for a path that
//! does not exist, are the router's and belong to no operation.

use std::collections::BTreeMap;

use utoipa::IntoResponses;
use utoipa::openapi::header::HeaderBuilder;
use utoipa::openapi::{
    ContentBuilder, Ref, RefOr, Response, ResponseBuilder, Schema, Type, schema::ObjectBuilder,
};

/// The answers, by status, that an error set may list.
fn error(status: u16, description: &str) -> (String, RefOr<Response>) {
    let mut response = ResponseBuilder::new().description(description).content(
        "application/json",
        ContentBuilder::new()
            .schema(Some(Ref::from_schema_name("Error")))
            .build(),
    );
    if matches!(status, 429 | 503) {
        let seconds: RefOr<Schema> = ObjectBuilder::new().schema_type(Type::Integer).into();
        response = response.header(
            "Retry-After",
            HeaderBuilder::new()
                .schema(Some(seconds))
                .description(Some("Seconds to wait before trying again"))
                .build(),
        );
    }
    (status.to_string(), response.build().into())
}

/// Declares a set of error answers: a type that lists them for `responses(...)`.
macro_rules! error_set {
    ($(#[$doc:meta])* $name:ident { $($status:literal => $description:expr),+ $(,)? }) => {
        $(#[$doc])*
        pub(crate) struct $name;

        impl IntoResponses for $name {
            fn responses() -> BTreeMap<String, RefOr<Response>> {
                [$(error($status, $description)),+].into_iter().collect()
            }
        }
    };
}

const MALFORMED: &str = "`bad_request`: the body is not JSON of the documented shape, or a header or parameter \
     does not parse";
const UNAUTHORIZED: &str = "`unauthorized`: no bearer token, or not a valid one";
const TIMED_OUT: &str = "`request_timeout`: the body did not arrive in time";
const TOO_LARGE: &str = "`payload_too_large`: the body is over the size limit";
const INTERNAL: &str = "`internal`: a stored record could not be read";
const UNAVAILABLE: &str = "`unavailable`: storage is exhausted, failing or slow, or the state moved under this \
     request; retry after `Retry-After`";
const RUN_NOT_FOUND: &str = "`not_found`: this caller has no such run";
const CALLBACK_NOT_FOUND: &str = "`not_found`: this caller has no such callback";
const STALE: &str = "`version_mismatch`: `If-Match` names an older version of the run";
const CLOSED: &str = "`gone`: the callback is closed (completed, failed or timed out), or \
                      its run finished";
const OVER_QUOTA: &str = "`quota_exceeded`: the caller's tenant reached one of its quotas \
                          (the message names it); nothing was recorded; retry after \
                          `Retry-After`";
const REJECTED: &str = "`delivery_rejected`: the payload does not match what the waiting \
                        callback or event accepts (its JSON Schema); nothing was recorded \
                        and the wait stays open";

error_set!(
    /// `POST /runs`.
    StartErrors {
        400 => MALFORMED,
        401 => UNAUTHORIZED,
        408 => TIMED_OUT,
        413 => TOO_LARGE,
        422 => "`unknown_workflow`, `invalid_input` (the input does not match the \
                workflow's) or `idempotency_key_reused` (another body under the same key)",
        429 => OVER_QUOTA,
        500 => INTERNAL,
        503 => UNAVAILABLE,
    }
);

error_set!(
    /// `GET /limits`.
    LimitsErrors {
        401 => UNAUTHORIZED,
        500 => INTERNAL,
        503 => UNAVAILABLE,
    }
);

error_set!(
    /// `GET /builds`.
    BuildsErrors {
        401 => UNAUTHORIZED,
        500 => INTERNAL,
        501 => "`not_implemented`: this backend cannot list builds yet",
        503 => UNAVAILABLE,
    }
);

error_set!(
    /// `GET /runs`, `GET /dead-letters`.
    ListErrors {
        400 => "`bad_request`: an unknown status, a cursor that is not one of ours, or a \
                parameter that does not parse",
        401 => UNAUTHORIZED,
        500 => INTERNAL,
        503 => UNAVAILABLE,
    }
);

error_set!(
    /// Reading one run: its view, result, timeline.
    ReadRunErrors {
        400 => MALFORMED,
        401 => UNAUTHORIZED,
        404 => RUN_NOT_FOUND,
        500 => INTERNAL,
        503 => UNAVAILABLE,
    }
);

error_set!(
    /// `GET /runs/{id}/values/{sha256}`.
    ValueErrors {
        400 => "`bad_request`: the digest is not 64 lower-case hex digits",
        401 => UNAUTHORIZED,
        404 => "`not_found`: this caller has no such run, or the run refers to no value \
                with this digest",
        500 => "`internal`: a stored record could not be read, or the artifact store \
                holds other content under this digest",
        503 => UNAVAILABLE,
    }
);

error_set!(
    /// `POST /runs/{id}/operations/{position}/resolve`: the errors not listed beside it.
    ResolveErrors {
        401 => UNAUTHORIZED,
        408 => TIMED_OUT,
        413 => TOO_LARGE,
        500 => INTERNAL,
        503 => UNAVAILABLE,
    }
);

error_set!(
    /// `POST /dead-letters/{id}/redrive`.
    RedriveErrors {
        400 => MALFORMED,
        401 => UNAUTHORIZED,
        404 => "`not_found`: this caller has no run parked for a dead letter with this id",
        409 => "`not_parked`: the run is no longer parked",
        412 => STALE,
        500 => INTERNAL,
        503 => UNAVAILABLE,
    }
);

error_set!(
    /// `POST /dead-letters/redrive`.
    RedriveAllErrors {
        401 => UNAUTHORIZED,
        500 => INTERNAL,
        503 => UNAVAILABLE,
    }
);

error_set!(
    /// `POST /runs/{id}/cancel`.
    CancelErrors {
        400 => MALFORMED,
        401 => UNAUTHORIZED,
        404 => RUN_NOT_FOUND,
        409 => "`already_finished`: the run finished before",
        412 => STALE,
        500 => INTERNAL,
        503 => UNAVAILABLE,
    }
);

error_set!(
    /// `POST /runs/{id}/upgrade`.
    UpgradeErrors {
        400 => MALFORMED,
        401 => UNAUTHORIZED,
        404 => RUN_NOT_FOUND,
        409 => "`diverged`: the run's journal does not replay on this build (the error's \
                `divergence` says where; the run is left as it was), `already_finished`, \
                or `busy`: an invocation is working on the run right now",
        412 => STALE,
        422 => "`unknown_workflow`: this build has no workflow of the run's name",
        500 => INTERNAL,
        503 => UNAVAILABLE,
    }
);

error_set!(
    /// `POST /builds/{build}/upgrade`: runs that do not replay are reported in the
    /// answer, not refused.
    BuildUpgradeErrors {
        400 => MALFORMED,
        401 => UNAUTHORIZED,
        500 => INTERNAL,
        503 => UNAVAILABLE,
    }
);

error_set!(
    /// `POST /runs/{id}/pause`.
    PauseErrors {
        400 => MALFORMED,
        401 => UNAUTHORIZED,
        404 => RUN_NOT_FOUND,
        409 => "`already_finished`: a finished run is not paused",
        410 => "`gone`: a queued or parked run takes no turn already",
        412 => STALE,
        500 => INTERNAL,
        503 => UNAVAILABLE,
    }
);

error_set!(
    /// `POST /runs/{id}/restart`.
    RestartErrors {
        400 => MALFORMED,
        401 => UNAUTHORIZED,
        404 => RUN_NOT_FOUND,
        409 => "`diverged`: the journal before the point does not replay on this build (the \
                error's `divergence` says where; nothing changed), or `busy`: the run is \
                running and did not stop within seconds of the cancel asked of it",
        410 => "`gone`: a queued run has not begun",
        412 => STALE,
        422 => "`invalid_input`: no operation at `from`, or a restart the run's flow control \
                does not allow; `unknown_workflow`: this build has no workflow of the run's name",
        429 => OVER_QUOTA,
        500 => INTERNAL,
        503 => UNAVAILABLE,
    }
);

error_set!(
    /// `POST /workflows/{name}/pause`, `POST /workflows/{name}/resume`, `GET
    /// /workflows/{name}/pause`.
    WorkflowPauseErrors {
        400 => MALFORMED,
        401 => UNAUTHORIZED,
        404 => "`not_found`: this build registers no workflow of that name",
        500 => INTERNAL,
        503 => UNAVAILABLE,
    }
);

error_set!(
    /// `POST /runs/{id}/resume`.
    ResumeErrors {
        400 => MALFORMED,
        401 => UNAUTHORIZED,
        404 => RUN_NOT_FOUND,
        409 => "`not_parked`: only a parked or paused run can be resumed",
        412 => STALE,
        500 => INTERNAL,
        503 => UNAVAILABLE,
    }
);

error_set!(
    /// `POST /runs/{id}/events/{name}`: typed, so a payload can be rejected.
    EventErrors {
        400 => MALFORMED,
        401 => UNAUTHORIZED,
        404 => RUN_NOT_FOUND,
        408 => TIMED_OUT,
        410 => "`gone`: the run finished",
        413 => TOO_LARGE,
        422 => REJECTED,
        429 => OVER_QUOTA,
        500 => INTERNAL,
        503 => UNAVAILABLE,
    }
);

error_set!(
    /// `POST /runs/{id}/messages`: untyped.
    MessageErrors {
        400 => MALFORMED,
        401 => UNAUTHORIZED,
        404 => RUN_NOT_FOUND,
        408 => TIMED_OUT,
        410 => "`gone`: the run finished",
        413 => TOO_LARGE,
        429 => OVER_QUOTA,
        500 => INTERNAL,
        503 => UNAVAILABLE,
    }
);

error_set!(
    /// `POST /callbacks/{callback_id}/succeed`: typed, so a result can be rejected.
    SucceedCallbackErrors {
        400 => MALFORMED,
        401 => UNAUTHORIZED,
        404 => CALLBACK_NOT_FOUND,
        408 => TIMED_OUT,
        410 => CLOSED,
        413 => TOO_LARGE,
        422 => REJECTED,
        429 => OVER_QUOTA,
        500 => INTERNAL,
        503 => UNAVAILABLE,
    }
);

error_set!(
    /// `POST /callbacks/{callback_id}/fail`.
    FailCallbackErrors {
        400 => MALFORMED,
        401 => UNAUTHORIZED,
        404 => CALLBACK_NOT_FOUND,
        408 => TIMED_OUT,
        410 => CLOSED,
        413 => TOO_LARGE,
        429 => OVER_QUOTA,
        500 => INTERNAL,
        503 => UNAVAILABLE,
    }
);

error_set!(
    /// `POST /callbacks/{callback_id}/heartbeat`.
    HeartbeatErrors {
        400 => MALFORMED,
        401 => UNAUTHORIZED,
        404 => CALLBACK_NOT_FOUND,
        410 => CLOSED,
        429 => OVER_QUOTA,
        500 => INTERNAL,
        503 => UNAVAILABLE,
    }
);

error_set!(
    /// `POST /hooks/{token}`: public, the token is the credential.
    CallbackWebhookErrors {
        400 => "`bad_request`: the body is not JSON",
        404 => "`not_found`: no callback has this token",
        408 => TIMED_OUT,
        410 => CLOSED,
        413 => TOO_LARGE,
        422 => REJECTED,
        429 => OVER_QUOTA,
        500 => INTERNAL,
        503 => UNAVAILABLE,
    }
);

error_set!(
    /// `POST /hooks/sources/{source}`: public, the signature is the credential.
    SourceWebhookErrors {
        400 => "`bad_request`: the body is not JSON, or has no correlation id or callback \
                token where the source says",
        401 => "`bad_signature` or `timestamp_out_of_tolerance`: the signature does not \
                verify with any of the source's secrets",
        404 => "`not_found`: no such source, or no run or callback the body names",
        408 => TIMED_OUT,
        410 => CLOSED,
        413 => TOO_LARGE,
        422 => REJECTED,
        429 => OVER_QUOTA,
        500 => INTERNAL,
        503 => UNAVAILABLE,
    }
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_limits_and_unavailability_say_when_to_retry_and_others_do_not() {
        let responses = StartErrors::responses();
        for (status, response) in &responses {
            let RefOr::T(response) = response else {
                panic!("{status} is a reference")
            };
            let retry = response.headers.contains_key("Retry-After");
            assert_eq!(retry, status == "429" || status == "503", "{status}");
        }
    }
}

const SCHEDULE_NOT_FOUND: &str = "`not_found`: this caller has no such schedule";
const NO_SCHEDULES: &str = "`not_implemented`: this backend keeps no schedules yet";

error_set!(
    /// `GET /schedules`.
    ScheduleListErrors {
        401 => UNAUTHORIZED,
        500 => INTERNAL,
        501 => NO_SCHEDULES,
        503 => UNAVAILABLE,
    }
);

error_set!(
    /// `POST /schedules/{name}/pause`, `/resume`.
    ScheduleErrors {
        400 => MALFORMED,
        401 => UNAUTHORIZED,
        404 => SCHEDULE_NOT_FOUND,
        500 => INTERNAL,
        501 => NO_SCHEDULES,
        503 => UNAVAILABLE,
    }
);

error_set!(
    /// `POST /schedules/{name}/trigger`.
    TriggerErrors {
        400 => MALFORMED,
        401 => UNAUTHORIZED,
        404 => SCHEDULE_NOT_FOUND,
        422 => "`unknown_workflow` or `invalid_input`: the schedule's workflow or input \
                does not fit this build",
        429 => OVER_QUOTA,
        500 => INTERNAL,
        503 => UNAVAILABLE,
    }
);

const ACTION_NOT_FOUND: &str = "`not_found`: this caller has no such bulk action";

error_set!(
    /// `POST /runs/actions`.
    StartActionErrors {
        400 => MALFORMED,
        401 => UNAUTHORIZED,
        408 => TIMED_OUT,
        413 => TOO_LARGE,
        422 => "`invalid_input`: the filter names nothing (a job needs at least one \
                field), no run can match it, it names another tenant than the caller's, \
                or the rate is not 1 to 1 000",
        500 => INTERNAL,
        501 => "`not_implemented`: this backend keeps no bulk actions",
        503 => UNAVAILABLE,
    }
);

error_set!(
    /// `GET /runs/actions`.
    ListActionErrors {
        401 => UNAUTHORIZED,
        500 => INTERNAL,
        501 => "`not_implemented`: this backend keeps no bulk actions",
        503 => UNAVAILABLE,
    }
);

error_set!(
    /// `GET /runs/actions/{id}`, `POST /runs/actions/{id}/cancel`.
    ActionErrors {
        400 => MALFORMED,
        401 => UNAUTHORIZED,
        404 => ACTION_NOT_FOUND,
        500 => INTERNAL,
        501 => "`not_implemented`: this backend keeps no bulk actions",
        503 => UNAVAILABLE,
    }
);
