//! Deliveries to a run over the authenticated API: named events, messages, and the
//! outcomes and heartbeats of callbacks.

use axum::Json;
use axum::extract::State;
use http::StatusCode;
use serde::Deserialize;
use siesta::ports::DeliverOutcome;
use siesta::*;
use siesta_api_types::{Accepted, CallbackFailure, FailureBody};
use utoipa::IntoParams;

use crate::auth::Tenant;
use crate::error::ApiError;
use crate::extract::{ApiPath, IdempotencyKey, JsonBody, JsonObject, object};
use crate::responses::*;
use crate::state::AppState;

/// The run's id and, for events, the event's name.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub(crate) struct EventPath {
    /// The run's id
    id: String,
    /// The event's name
    name: String,
}

fn accepted(outcome: DeliverOutcome) -> (StatusCode, Json<Accepted>) {
    (
        StatusCode::ACCEPTED,
        Json(Accepted {
            accepted: true,
            duplicate: outcome == DeliverOutcome::Duplicate,
        }),
    )
}

/// Deliver a named event (an approval, a signal); kept if the run does not wait for it
/// yet.
#[utoipa::path(
    post, path = "/runs/{id}/events/{name}", operation_id = "deliverEvent", tag = "runs",
    security(("bearer" = [])),
    params(
        EventPath,
        ("Idempotency-Key" = Option<String>, Header, description = "The delivery's id: a repeat is acknowledged as a duplicate"),
    ),
    request_body(content = Option<serde_json::Value>, content_type = "application/json", description = "The event's value (any JSON; empty: null)"),
    responses(
        (status = 202, description = "Recorded", body = Accepted),
        EventErrors,
    )
)]
pub(crate) async fn deliver_event(
    State(app): State<AppState>,
    Tenant(tenant): Tenant,
    ApiPath(path): ApiPath<EventPath>,
    IdempotencyKey(key): IdempotencyKey,
    JsonBody(value): JsonBody<serde_json::Value, true>,
) -> Result<(StatusCode, Json<Accepted>), ApiError> {
    let delivery = key.map(|k| DeliveryId(format!("event:{k}")));
    let outcome = app
        .engine
        .deliver_event(
            &tenant,
            &RunId::from(path.id.as_str()),
            &path.name,
            value,
            delivery,
        )
        .await?;
    Ok(accepted(outcome))
}

/// Inject a message, drained by the run at its next step boundary.
#[utoipa::path(
    post, path = "/runs/{id}/messages", operation_id = "injectMessage", tag = "runs",
    security(("bearer" = [])),
    params(
        ("id" = String, Path, description = "The run's id"),
        ("Idempotency-Key" = Option<String>, Header, description = "The delivery's id: a repeat is acknowledged as a duplicate"),
    ),
    request_body(content = serde_json::Value, content_type = "application/json", description = "The message (any JSON)"),
    responses(
        (status = 202, description = "Recorded", body = Accepted),
        MessageErrors,
    )
)]
pub(crate) async fn inject_message(
    State(app): State<AppState>,
    Tenant(tenant): Tenant,
    ApiPath(id): ApiPath<String>,
    IdempotencyKey(key): IdempotencyKey,
    JsonBody(value): JsonBody<serde_json::Value>,
) -> Result<(StatusCode, Json<Accepted>), ApiError> {
    let delivery = key.map(|k| DeliveryId(format!("message:{k}")));
    let outcome = app
        .engine
        .inject_message(&tenant, &RunId::from(id.as_str()), value, delivery)
        .await?;
    Ok(accepted(outcome))
}

fn callback_delivery(key: Option<String>) -> Option<DeliveryId> {
    key.map(|k| DeliveryId(format!("callback:{k}")))
}

fn callback_answer(
    outcome: Result<DeliverOutcome, EngineError>,
) -> Result<(StatusCode, Json<Accepted>), ApiError> {
    outcome.map(accepted).map_err(ApiError::on_callback)
}

/// Complete a callback with a result.
#[utoipa::path(
    post, path = "/callbacks/{callback_id}/succeed", operation_id = "succeedCallback", tag = "callbacks",
    security(("bearer" = [])),
    params(
        ("callback_id" = String, Path, description = "The callback's id"),
        ("Idempotency-Key" = Option<String>, Header, description = "The delivery's id: a repeat is acknowledged as a duplicate"),
    ),
    request_body(content = Option<serde_json::Value>, content_type = "application/json", description = "The result (any JSON; empty: null)"),
    responses(
        (status = 202, description = "Recorded", body = Accepted),
        SucceedCallbackErrors,
    )
)]
pub(crate) async fn succeed_callback(
    State(app): State<AppState>,
    Tenant(tenant): Tenant,
    ApiPath(id): ApiPath<String>,
    IdempotencyKey(key): IdempotencyKey,
    JsonBody(value): JsonBody<serde_json::Value, true>,
) -> Result<(StatusCode, Json<Accepted>), ApiError> {
    callback_answer(
        app.engine
            .complete_callback(
                &CallbackId::from(id.as_str()),
                Some(&tenant),
                Ok(value),
                callback_delivery(key),
            )
            .await,
    )
}

/// Fail a callback.
#[utoipa::path(
    post, path = "/callbacks/{callback_id}/fail", operation_id = "failCallback", tag = "callbacks",
    security(("bearer" = [])),
    params(
        ("callback_id" = String, Path, description = "The callback's id"),
        ("Idempotency-Key" = Option<String>, Header, description = "The delivery's id: a repeat is acknowledged as a duplicate"),
    ),
    request_body(content = Option<CallbackFailure>, content_type = "application/json", description = "The failure (empty: `CallbackFailed`)"),
    responses(
        (status = 202, description = "Recorded", body = Accepted),
        FailCallbackErrors,
    )
)]
pub(crate) async fn fail_callback(
    State(app): State<AppState>,
    Tenant(tenant): Tenant,
    ApiPath(id): ApiPath<String>,
    IdempotencyKey(key): IdempotencyKey,
    JsonObject(failure): JsonObject<CallbackFailure, true>,
) -> Result<(StatusCode, Json<Accepted>), ApiError> {
    let (code, message) = match failure.error {
        Some(nested) => {
            let FailureBody { code, message } = object(nested.into(), true)?;
            (code, message)
        }
        None => (failure.code, failure.message),
    };
    let error = ErrorInfo::new(
        code.unwrap_or_else(|| "CallbackFailed".into()),
        message.unwrap_or_else(|| "failed by the caller".into()),
        false,
    );
    callback_answer(
        app.engine
            .complete_callback(
                &CallbackId::from(id.as_str()),
                Some(&tenant),
                Err(error),
                callback_delivery(key),
            )
            .await,
    )
}

/// Keep a callback alive (resets its heartbeat timeout).
#[utoipa::path(
    post, path = "/callbacks/{callback_id}/heartbeat", operation_id = "heartbeatCallback", tag = "callbacks",
    security(("bearer" = [])),
    params(("callback_id" = String, Path, description = "The callback's id")),
    responses(
        (status = 202, description = "Recorded", body = Accepted),
        HeartbeatErrors,
    )
)]
pub(crate) async fn heartbeat_callback(
    State(app): State<AppState>,
    Tenant(tenant): Tenant,
    ApiPath(id): ApiPath<String>,
) -> Result<(StatusCode, Json<Accepted>), ApiError> {
    callback_answer(
        app.engine
            .heartbeat_callback(&CallbackId::from(id.as_str()), Some(&tenant))
            .await,
    )
}
