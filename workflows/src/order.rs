//! The `order` workflow: create an order, hand a callback URL to a payment provider,
//! wait up to an hour for its webhook, then ship — or fail.

use siesta::prelude::*;

/// The input of the `order` workflow.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OrderInput {
    /// What is ordered.
    pub item: String,
    /// How much it costs.
    pub amount: f64,
}

/// What the payment provider calls back with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PaymentEvent {
    /// `COMPLETED` or `FAILED`.
    pub status: String,
    /// The provider's transaction id.
    pub transaction_id: String,
}

/// The outcome of a shipped order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OrderOutcome {
    /// The order's id.
    pub order_id: String,
    /// The payment's transaction id.
    pub transaction_id: String,
    /// The shipment's tracking number.
    pub tracking: String,
}

/// Create an order, ask the payment provider to charge it with a callback URL, wait up
/// to an hour for the provider's webhook, then ship — or fail on a failed payment or a
/// timeout.
pub async fn order(ctx: Context, input: OrderInput) -> Result<OrderOutcome, Error> {
    if input.amount <= 0.0 || input.item.trim().is_empty() {
        return Err(Error::msg("an order needs an item and a positive amount"));
    }
    let run = ctx.run_id().as_str().to_owned();
    let order_id: String = ctx
        .step("create_order", move |_| async move {
            // A real service would insert the order here; its id comes from the run.
            Ok(format!("ord-{}", &run[run.len().saturating_sub(12)..]))
        })
        .await?;
    let payment = ctx
        .create_callback::<PaymentEvent>("payment")
        .timeout(Duration::from_secs(3600))
        .await?;
    let url = payment.url();
    let amount = input.amount;
    let oid = order_id.clone();
    ctx.tool_call("request_payment", &(&order_id, amount), move |call| async move {
        // A real provider gets the callback URL and the idempotency key here.
        let key = call.idempotency_key().map(|k| k.to_string()).unwrap_or_default();
        Ok(serde_json::json!({"order": oid, "amount": amount, "callback_url": url, "idempotency_key": key}))
    })
    .await?;
    ctx.log(format!("order {order_id}: waiting for payment"));
    let event = payment.wait().await?;
    if event.status != "COMPLETED" {
        return Err(Error::msg(format!(
            "payment {} for order {order_id} {}",
            event.transaction_id,
            event.status.to_lowercase()
        )));
    }
    let oid = order_id.clone();
    let tracking: String = ctx
        .step("ship", move |_| async move {
            if oid.is_empty() {
                return Err(StepError::fatal("no order to ship"));
            }
            Ok(format!("TRK-{}", oid.len() * 7919))
        })
        .await?;
    Ok(OrderOutcome {
        order_id,
        transaction_id: event.transaction_id,
        tracking,
    })
}
